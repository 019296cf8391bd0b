"""The cost paths of the sleep-replay learner give what the direct computations give: C and purity from
per-clone counts kept as level-1 states take clones (not a pass over level 1 at every sleep) equal the
recount from level 1; the lumping's sparse refinement equals the dense one."""

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.clusters import Clusters
from hmmmerge.replay import ReplayMerger


def c_from_scratch(merger, n):
    """C as the merger wrote it before the per-clone counts: the blocks holding a state found by counting
    every state's clone, clusters numbered in block order, renumbered by ``Clusters`` (compact)."""
    cs = np.full(n, -1, dtype=np.int64)
    m = min(n, len(merger._clone_state))
    cs[:m] = merger._clone_state[:m]
    counts = np.bincount(cs[cs >= 0], minlength=merger._H)
    held = np.zeros(int(merger._block.max()) + 1, dtype=bool)
    held[merger._block[counts > 0]] = True
    used = np.flatnonzero(held)
    cluster_of_block = np.full(len(held), -1, dtype=np.int64)
    cluster_of_block[used] = np.arange(len(used))
    return Clusters(np.where(cs >= 0, cluster_of_block[merger._block[np.maximum(cs, 0)]], -1))


def purity_from_level1(agent):
    """The agent's purity counted from level 1 (its path for mergers without a ``purity`` hook)."""
    own = agent.merger_.purity
    agent.merger_.purity = lambda memory, clusters: None
    try:
        return agent._current_purity()
    finally:
        agent.merger_.purity = own


def check_counts(agent):
    """The per-clone counts equal a recount of the states' clones and labels; purity equals level 1's."""
    m, mem = agent.merger_, agent.memory_
    got = m.purity(mem, agent.clusters_)   # first: a loaded merger counts its clones at its first use
    n = m._n_seen
    cs = m._clone_state[:n]
    assert np.array_equal(m._clone_n, np.bincount(cs[cs >= 0], minlength=m._H))
    labels = mem.labels[:n]
    lab = np.zeros_like(m._clone_lab)
    ok = (cs >= 0) & (labels >= 0)
    np.add.at(lab, (cs[ok], labels[ok]), 1)
    assert np.array_equal(m._clone_lab, lab)
    assert np.array_equal(m._clone_unlab, np.bincount(cs[(cs >= 0) & (labels < 0)], minlength=m._H))
    # C is the map state -> clone -> block -> cluster everywhere, also between sleeps (states placed online)
    a = agent.clusters_.assignment
    want = np.where(cs >= 0, m._cluster_of[m._block[np.maximum(cs, 0)]], -1)
    assert np.array_equal(a[:n], want)
    assert (a[n:] == -1).all()
    full = purity_from_level1(agent)
    assert got is not None
    np.testing.assert_array_equal(np.array(got), np.array(full))


def spy_on_writes(merger, log):
    """After every sleep's write of C, compare it with C written from scratch."""
    write = merger._write_clusters

    def checked(clusters, n):
        write(clusters, n)
        ref = c_from_scratch(merger, n)
        assert np.array_equal(clusters.assignment[:n], ref.assignment[:n])
        assert clusters.n_clusters == ref.n_clusters
        assert np.array_equal(clusters._rep, ref._rep)
        log.append(n)

    merger._write_clusters = checked


@pytest.mark.parametrize("seed, slip, labelled", [(0, 0.1, True), (1, 0.0, True), (2, 0.05, False)])
def test_c_and_purity_from_the_kept_counts_equal_the_recount_from_level1(seed, slip, labelled):
    env = gridworld().with_noise(slip=slip) if slip else gridworld()
    traj = random_walk(env, 150, 20, seed=seed)
    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False, min_new=3), sleep_every=60, seed=seed)
    writes = []
    for b in range(0, 150, 10):
        part = traj[b:b + 10] if labelled else (traj.obs[b:b + 10], traj.actions[b:b + 10])
        agent.partial_fit(part)
        if b == 0:
            spy_on_writes(agent.merger_, writes)
        check_counts(agent)
    assert len(writes) >= 10   # many sleeps were checked, some postponed in between
    hist = agent.history()["purity"]
    assert np.isnan(hist[-1]) != labelled


def test_a_loaded_agent_recounts_the_clones_and_continues_as_the_uninterrupted_one(tmp_path):
    env = gridworld().with_noise(slip=0.05)
    first, second = random_walk(env, 40, 20, seed=0), random_walk(env, 30, 20, seed=1)
    whole = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), sleep_every=100, seed=3).fit(first).partial_fit(second)
    part = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), sleep_every=100, seed=3).fit(first)
    part.save(tmp_path / "a.npz")
    back = TwoLevelMemory.load(tmp_path / "a.npz")
    check_counts(back)
    back.partial_fit(second)
    check_counts(back)
    h1, h2 = whole.history(), back.history()
    assert all(np.array_equal(h1[k], h2[k], equal_nan=True) for k in h1)


def test_a_state_given_twice_in_a_batch_keeps_its_last_clone_and_is_counted_once():
    from hmmmerge._replay_kernels import move_states

    cs = np.full(4, -1, dtype=np.int64)
    count, lab, unlab = np.zeros(3, dtype=np.int64), np.zeros((3, 2), dtype=np.int64), np.zeros(3, dtype=np.int64)
    move_states(cs, np.array([0, 1, 0, 2]), np.array([2, 1, 0, 0]), np.array([1, -1, 1, 0]), count, lab, unlab)
    assert cs.tolist() == [0, 1, 0, -1]
    assert count.tolist() == [2, 1, 0] and unlab.tolist() == [0, 1, 0]
    assert lab.tolist() == [[1, 1], [0, 0], [0, 0]]


def test_near_the_label_table_limit_the_table_widens_only_as_far_as_the_limit(monkeypatch):
    import hmmmerge.replay as replay

    monkeypatch.setattr(replay, "CLONE_LABEL_TABLE_MAX", 300 * 110)   # 300 clones; doubling 64 -> 128 would pass it
    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 30, seed=0))
    assert agent.merger_._label_width > 64 and agent.merger_._clone_lab.shape == (300, 110)
    check_counts(agent)


def test_beyond_the_label_table_limit_purity_is_left_to_the_agent(monkeypatch):
    import hmmmerge.replay as replay

    monkeypatch.setattr(replay, "CLONE_LABEL_TABLE_MAX", 10)
    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 30, seed=0))
    assert agent.merger_.purity(agent.memory_, agent.clusters_) is None
    assert 0 < agent.history()["purity"][-1] <= 1   # counted from level 1


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rewritten_equals_compact_after_a_dense_rewrite(data):
    n = data.draw(st.integers(1, 30))
    before = np.array(data.draw(st.lists(st.integers(-1, 6), min_size=n, max_size=n)))
    k = data.draw(st.integers(0, n))
    after = np.array(data.draw(st.lists(st.integers(-1, k - 1) if k else st.just(-1), min_size=n, max_size=n)))
    ids = np.unique(after[after >= 0])
    after = np.where(after >= 0, np.searchsorted(ids, after), -1)   # dense ids 0..k-1
    k = len(ids)
    a, b = Clusters(before), Clusters(before)
    for cl in (a, b):
        valid, counts = cl.depth_counts("f", 1, 2)
        valid[:] = True
        counts[:] = 1
        cl.assignment[:] = after
    a.compact()
    rep = np.full(k, -1, dtype=np.int64)
    rep[after[after >= 0]] = np.flatnonzero(after >= 0)
    b.rewritten(k, rep)
    assert a.n_clusters == b.n_clusters == k
    assert np.array_equal(a._rep, b._rep)
    emission = np.arange(n) % 3
    assert np.array_equal(a.cluster_emission(emission), b.cluster_emission(emission))
    for (va, ca), (vb, cb) in zip(a.kept_depth_counts(), b.kept_depth_counts()):
        assert np.array_equal(va, vb) and np.array_equal(ca, cb)


def test_rewritten_refuses_a_missing_representative():
    cl = Clusters(np.array([0, 1]))
    with pytest.raises(ValueError, match="rep must hold one state"):
        cl.rewritten(2, [0, -1])


def _log_bf_dense(x, y, alpha, floor):
    """Log Bayes factor of (A, nb) next-block counts: Dirichlet-multinomial marginals, two against one, per
    action both took where some frequency differs by ``floor`` or more, on the blocks either side saw
    (scipy's gammaln)."""
    from scipy.special import gammaln

    out = 0.0
    for a in range(x.shape[0]):
        if x[a].sum() <= 0 or y[a].sum() <= 0:
            continue
        if not (np.abs(x[a] / x[a].sum() - y[a] / y[a].sum()) >= floor).any():
            continue
        seen = (x[a] > 0) | (y[a] > 0)
        c = seen.sum() * alpha
        for v, sign in ((x[a], 1), (y[a], 1), (x[a] + y[a], -1)):
            out += sign * (gammaln(c) - gammaln(v.sum() + c) + (gammaln(v[seen] + alpha) - gammaln(alpha)).sum())
    return out


def lump_dense(counts, colour, bound, floor, max_rounds=50, alpha=0.0, threshold=0.0):
    """The lumping as defined (module docstring of ``_replay_kernels``), with clones x blocks tables."""
    A, H, _ = counts.shape
    c = np.where(counts >= 1e-3, counts, 0.0)   # entries under a thousandth of a transition left out
    n_out, occ = np.zeros((H, A)), np.zeros(H)
    for a in range(A):   # sums in the kernel's order (action, clone, next clone): the same floats
        for i in range(H):
            for j in range(H):
                if c[a, i, j] > 0:
                    n_out[i, a] += c[a, i, j]
                    occ[i] += c[a, i, j]
    order = np.argsort(-occ, kind="mergesort")
    _, block = np.unique(colour, return_inverse=True)
    first = {}
    block = np.array([first.setdefault(b, len(first)) for b in block])
    for _ in range(max_rounds):
        nb = block.max() + 1
        succ = np.zeros((H, A, nb))
        for a in range(A):
            for i in range(H):
                for j in range(H):
                    if c[a, i, j] > 0:
                        succ[i, a, block[j]] += c[a, i, j]
        groups = {}   # old block -> list of [pool, n, id]
        new = np.empty(H, dtype=np.int64)
        ng = 0
        for i in order:
            for g in groups.setdefault(block[i], []):
                pool, n, gid = g
                ok = True
                for a in range(A):
                    if n_out[i, a] <= 0 or n[a] <= 0:
                        continue
                    tol = max(bound * (1 / np.sqrt(n_out[i, a]) + 1 / np.sqrt(n[a])), floor)
                    if (np.abs(succ[i, a] / n_out[i, a] - pool[a] / n[a]) >= tol).any():
                        ok = False
                        break
                if ok and alpha > 0:
                    ok = _log_bf_dense(succ[i], pool, alpha, floor) <= threshold
                if ok:
                    break
            else:
                g = [np.zeros((A, nb)), np.zeros(A), ng]
                ng += 1
                groups[block[i]].append(g)
            g[0] += succ[i]
            g[1] += n_out[i]
            new[i] = g[2]
        _, firsts = np.unique(new, return_index=True)
        rank = np.empty(ng, dtype=np.int64)
        rank[new[np.sort(firsts)]] = np.arange(ng)
        new = rank[new]
        if new.max() + 1 == nb:
            return new
        block = new
    return block


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sparse_lumping_equals_the_dense_refinement(data):
    from hmmmerge._replay_kernels import lump_clones

    A = data.draw(st.integers(1, 3))
    K = data.draw(st.integers(1, 3))
    per = data.draw(st.integers(1, 4))
    H = K * per
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # clones of one colour copy the futures of a few true states, scaled and perturbed: blocks worth finding
    base = rng.gamma(0.3, 5.0, (A, H, H)) * (rng.random((A, H, H)) < 0.4)
    proto = np.arange(H) // per * per + rng.integers(0, data.draw(st.integers(1, per)), H)
    counts = base[:, proto] * rng.uniform(0.5, 2.0, (1, H, 1)) * rng.uniform(0.9, 1.1, (A, H, H))
    colour = np.repeat(np.arange(K), per)
    bound, floor = data.draw(st.sampled_from([(1.36, 0.2), (0.5, 0.05), (0.1, 0.0)]))
    alpha = data.draw(st.sampled_from([0.0, 0.01, 0.3]))   # 0: Hoeffding alone; else the Bayes factor too
    got = lump_clones(counts, colour, bound, floor, 50, alpha, 3.0)
    want = lump_dense(counts, colour, bound, floor, alpha=alpha, threshold=3.0)
    assert got.tolist() == want.tolist()


def test_a_next_block_only_the_group_goes_to_splits_even_when_every_shared_one_agrees():
    from hmmmerge._replay_kernels import lump_clones

    # colour 0: clones 0 (heavier) and 1; colours 1..8: one clone each, a block each.  Clone 0 goes to
    # clone 2 with 0.3 and to 3..9 with 0.1 each; clone 1 never to 2 and to 3..9 with 1/7 each: every
    # shared next block differs by 0.043 (< the 0.2 floor), the one clone 1 never takes by 0.3
    counts = np.zeros((1, 10, 10))
    counts[0, 0, 2:] = 3000.0 * np.r_[0.3, np.full(7, 0.1)]
    counts[0, 1, 3:] = 2000.0 / 7
    colour = np.r_[0, 0, np.arange(1, 9)]
    got = lump_clones(counts, colour, 0.01, 0.2, 50)
    assert got[0] != got[1]
    assert got.tolist() == lump_dense(counts, colour, 0.01, 0.2).tolist()


def _predictions(pred, colour, n_obs, q):
    """(touched, total, prediction, touched order) of the agent's ``_predict`` from a belief on cluster 0
    whose T2 row gives ``pred``, with replay's emission rows (``q / n_obs`` off the own colour): with the
    floor stated and without it (the full sum over observations)."""
    from hmmmerge._agent_kernels import Level2, _argmax_or_none, _predict, new_belief, new_scratch

    k = len(pred)
    ptr = np.r_[0, np.full(k, k)].astype(np.int64)
    soft = np.full((k, n_obs), q / n_obs)
    soft[np.arange(k), colour] += 1.0 - q
    em_ptr = np.r_[0, np.cumsum(np.bincount(colour, minlength=n_obs))].astype(np.int64)
    out = []
    for floor in (np.full(k, q / n_obs), np.zeros(0)):
        l2 = Level2(k, ptr, np.arange(k, dtype=np.int64), np.asarray(pred, dtype=float), np.zeros(0, dtype=np.int64),
                    np.asarray(colour, dtype=np.int64), em_ptr, np.argsort(colour, kind="stable").astype(np.int64),
                    soft, floor)
        bel, s = new_belief(k), new_scratch(k, n_obs)
        bel.p[0], bel.support[0], bel.size[0] = 1.0, 0, 1
        mt, total = _predict(bel, 0, l2, s)
        out.append((mt, total, _argmax_or_none(s.obs_dist, total), s.tlist[:mt].tolist()))
    return out


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.integers(1, 12), st.sampled_from([0.0, 0.05, 0.2, 0.3]), st.integers(0, 2**32 - 1),
       st.sampled_from(["random", "tie", "one ulp"]))
def test_the_prediction_with_a_floor_is_the_prediction_of_the_full_sum(k, n_obs, q, seed, case):
    rng = np.random.default_rng(seed)
    pred = rng.random(k) * (rng.random(k) < 0.7)
    colour = rng.integers(0, n_obs, k)
    if case != "random" and k >= 3 and n_obs >= 3:
        # clusters 0 and 1 alone in colours 0 and 1 hold most of the mass, equal or one ulp apart: the
        # floor's shortcut cannot rank them, the full sum's round-off decides
        pred[2:] *= 0.1
        pred[0] = rng.random()
        pred[1] = pred[0] if case == "tie" else np.nextafter(pred[0], 2 * rng.integers(0, 2) - 1.0)
        colour = np.r_[0, 1, rng.integers(2, n_obs, k - 2)]
    with_floor, full = _predictions(pred, colour, n_obs, q)
    assert with_floor == full


def test_near_ties_fall_back_to_the_full_sum():
    # clusters 0 and 1 one ulp apart: the full sums' round-off orders them one way or the other (about one
    # case in ten differs from the order of the masses above the floor), and the prediction must follow it
    rng = np.random.default_rng(0)
    for _ in range(300):
        k, n_obs, q = int(rng.integers(3, 30)), int(rng.integers(3, 12)), float(rng.choice([0.05, 0.2, 0.3]))
        pred = rng.random(k) * (rng.random(k) < 0.7) * 0.1
        pred[0] = rng.random()
        pred[1] = np.nextafter(pred[0], 2 * rng.integers(0, 2) - 1.0)
        colour = np.r_[0, 1, rng.integers(2, n_obs, k - 2)]
        with_floor, full = _predictions(pred, colour, n_obs, q)
        assert with_floor == full


def test_replay_emission_rows_hold_the_stated_floor_off_each_cluster_colour():
    env = gridworld().with_noise(obs_noise=0.1)
    # 200 episodes: past the first 20 updates, before which no view is read as noise
    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(env, 200, seed=0))
    arrays = agent.level2_.arrays
    assert agent.merger_._noise > 0 and len(arrays.soft_floor) == agent.n_clusters_ > 0
    off = np.ones_like(arrays.soft, dtype=bool)
    off[np.arange(agent.n_clusters_), arrays.cluster_obs] = False
    assert np.array_equal(np.where(off, arrays.soft, arrays.soft_floor[:, None]),
                          np.broadcast_to(arrays.soft_floor[:, None], arrays.soft.shape))
    assert (arrays.soft[np.arange(agent.n_clusters_), arrays.cluster_obs] > arrays.soft_floor).all()


def _absorb_dense(S, C, Q, T, inside, slip, keep, add):
    """absorb_counts in whole-array numpy: the counts of the recorded action split by Bayes' rule between the
    actions that could have made each move, folded into ``keep * S``."""
    A = S.shape[0]
    r = np.divide(C, T, out=np.zeros_like(C), where=T > 0)
    executed = Q * ((1.0 - slip) * r + slip / A * r.sum(axis=0)) if slip > 0 else C
    slipped = (slip / A * r.sum(axis=0) * Q.sum(axis=0)).sum() if slip > 0 else 0.0
    return (keep * S + add * executed) * inside, slipped


def _dense_m_step(S, inside, scale, pc, slip):
    """The M-step as defined: ``Q ~ scale * S + pc`` on the pairs' blocks, ``T = (1 - slip) Q + slip mean_b Q_b``."""
    Q = (scale * S + pc) * inside
    Q = np.divide(Q, Q.sum(axis=2, keepdims=True), out=np.zeros_like(Q), where=Q.sum(axis=2, keepdims=True) > 0)
    return Q, (1.0 - slip) * Q + slip * Q.mean(axis=0)


def _pair_blocks(rng, K, n):
    starts, sizes = np.arange(0, K * n, n, dtype=np.int64), np.full(K, n, dtype=np.int64)
    has = rng.random((K, K)) < 0.7
    has[:, 0] = True
    pairs = np.argwhere(has).astype(np.int64)
    rng.shuffle(pairs)                                     # pairs come in the order they were first seen
    inside = np.repeat(np.repeat(has, n, axis=0), n, axis=1)[None]
    return starts, sizes, pairs, inside


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 10**6),
       st.sampled_from([0.0, 0.05, 0.3]), st.sampled_from([1e-3, 0.4, 1.0]), st.floats(0.0, 1.0))
def test_absorb_on_the_batch_pairs_with_a_scale_is_the_dense_stepwise_update(K, n, A, seed, slip, keep, empty):
    """The update ``keep * S + add * executed`` kept as a scale ``g = keep`` times ``S + add / g * executed``,
    on the blocks of the batch's pairs only: blocks off them and rows of them without a count are left
    bit for bit as they were (they only decay, through ``g``), the rest follows the dense formula; the
    kept row sums follow ``S``; the M-step from them is the dense M-step; an M-step on some pairs writes
    their blocks bit for bit as the full one does."""
    from hmmmerge._replay_kernels import absorb_counts, m_step_pairs, row_sums

    rng = np.random.default_rng(seed)
    H = K * n
    starts, sizes, pairs, inside = _pair_blocks(rng, K, n)
    S = rng.random((A, H, H)) * inside
    Q, T = np.zeros_like(S), np.zeros_like(S)
    redo = np.ones(K, dtype=np.bool_)
    m_step_pairs(S, Q, T, pairs, starts, sizes, 3.0, 0.01, slip, redo)
    on = rng.random(len(pairs)) < 0.6
    mark = np.zeros((K, K), dtype=bool)
    mark[pairs[on, 0], pairs[on, 1]] = True
    mark = np.broadcast_to(np.repeat(np.repeat(mark, n, axis=0), n, axis=1)[None], S.shape)
    C = rng.random((A, H, H)) * mark                       # the batch's counts: on its pairs' blocks only
    for o, o2 in pairs.tolist():                           # some rows of some blocks: no count for any action
        rows = starts[o] + np.flatnonzero(rng.random(n) < empty)
        C[:, rows, starts[o2]:starts[o2] + n] = 0.0
    blank = np.broadcast_to((C == 0).all(axis=0)[None], S.shape)
    want, want_slipped = _absorb_dense(S, C, Q, T, inside, slip, keep, 0.7)
    kept, buf, Z = S.copy(), C.copy(), row_sums(S, pairs, starts, sizes)
    slipped = absorb_counts(kept, buf, Q, Z, pairs, on, starts, sizes, slip, 0.7 / keep)
    assert np.array_equal(kept[blank], S[blank])           # untouched: no write at all
    np.testing.assert_allclose(keep * kept, want, rtol=1e-12, atol=1e-12)
    assert np.isclose(slipped, want_slipped, rtol=1e-12, atol=1e-12) and (buf == 0).all()
    np.testing.assert_allclose(Z, kept.sum(axis=2), rtol=1e-12)
    Q1, T1, Q2, T2 = (np.zeros_like(S) for _ in range(4))
    m_step_pairs(kept, Q1, T1, pairs, starts, sizes, 200.0 * keep, 1e-3, slip, redo)
    m_step_pairs(kept, Q2, T2, pairs, starts, sizes, 200.0 * keep, 1e-3, slip, redo, Z)
    Qd, Td = _dense_m_step(want, inside, 200.0, 1e-3, slip)
    for got in (Q1, Q2):
        np.testing.assert_allclose(got, Qd, rtol=1e-9, atol=1e-15)
    for got in (T1, T2):
        np.testing.assert_allclose(got, Td, rtol=1e-9, atol=1e-15)
    # the M-step of an iteration before the last writes the marked pairs' blocks only, bit for bit the full one's
    Q3, T3 = np.full_like(S, -1.0), np.full_like(S, -1.0)
    m_step_pairs(kept, Q3, T3, pairs, starts, sizes, 200.0 * keep, 1e-3, slip, redo, Z, on)
    assert np.array_equal(Q3[mark], Q2[mark]) and np.array_equal(T3[mark], T2[mark]) and (T3[~mark] == -1).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 4), st.integers(1, 3), st.integers(0, 10**6), st.sampled_from([0.0, 0.2]))
def test_the_m_step_of_the_lines_after_moves_within_a_view_is_the_full_m_step(K, n, A, seed, slip):
    """Kept counts moved between clones of one view (as a split does: a column into another, a row shared
    between two) change the M-step on those clones' rows and columns only: m_step_lines there gives the
    full M-step of the moved counts."""
    from hmmmerge._replay_kernels import m_step_lines, m_step_pairs, row_sums

    rng = np.random.default_rng(seed)
    H = K * n
    starts, sizes, pairs, inside = _pair_blocks(rng, K, n)
    colour = np.repeat(np.arange(K), n).astype(np.int64)
    S = rng.random((A, H, H)) * inside
    Z = row_sums(S, pairs, starts, sizes)
    Q, T = np.zeros_like(S), np.zeros_like(S)
    m_step_pairs(S, Q, T, pairs, starts, sizes, 5.0, 0.01, slip, np.ones(K, dtype=np.bool_), Z)
    v = int(rng.integers(0, K))
    h, j = starts[v] + rng.choice(n, 2, replace=False)
    S[:, :, j] += S[:, :, h]                               # a column into another of its view
    S[:, :, h] = 0.0
    share = rng.random((A, H))
    S[:, h, :] = S[:, j, :] * share                        # a row shared between two
    S[:, j, :] -= S[:, h, :]

    def csr(first, second):
        order = np.lexsort((pairs[:, second], pairs[:, first]))
        ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, first], minlength=K))].astype(np.int64)
        return ptr, np.ascontiguousarray(pairs[order, second])

    m_step_lines(S, Q, T, Z, np.array([h, j], dtype=np.int64), colour, starts, sizes, *csr(0, 1), *csr(1, 0),
                 5.0, 0.01, slip)
    np.testing.assert_allclose(Z, S.sum(axis=2), rtol=1e-12, atol=1e-15)
    Qd, Td = _dense_m_step(S, inside, 5.0, 0.01, slip)
    np.testing.assert_allclose(Q, Qd, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(T, Td, rtol=1e-9, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(0, 10**6), st.booleans())
def test_folding_blocks_of_the_lumped_model_is_the_lumped_model_of_the_folded_blocks(K, n, A, seed, zero):
    """_folded_model (joined blocks from the blocks' lumped model, no pass over T) equals lumped_model of the
    joined blocks, also where a block or a joined block weighs nothing (the plain mean of its clones)."""
    from hmmmerge._replay_kernels import dense_lumped
    from hmmmerge.replay import _folded_model

    rng = np.random.default_rng(seed)
    H = K * n
    starts, sizes, pairs, inside = _pair_blocks(rng, K, n)
    T = rng.random((A, H, H)) * inside
    B = rng.random(H)
    weight = rng.random(H) * (rng.random(H) < 0.6) if zero else rng.random(H)
    colour = np.repeat(np.arange(K), n)
    block = np.unique(colour * n + rng.integers(0, n, H), return_inverse=True)[1].astype(np.int64)
    nb = int(block.max()) + 1
    W = np.bincount(block, weights=weight, minlength=nb)
    cnt = np.bincount(block, minlength=nb).astype(float)
    target = np.unique(colour[np.argmax(block[None] == np.arange(nb)[:, None], axis=1)] * n
                       + rng.integers(0, 2, nb), return_inverse=True)[1]   # blocks of one colour joined
    ids, fold = np.unique(target, return_inverse=True)
    lumped = _lumped(T, B, weight, block, nb, pairs, starts, sizes, colour)
    got = _folded_model(lumped, (W, cnt), fold, len(ids))
    want = _lumped(T, B, weight, fold[block].astype(np.int64), len(ids), pairs, starts, sizes, colour)
    np.testing.assert_allclose(dense_lumped(*got[:3], A, len(ids)), dense_lumped(*want[:3], A, len(ids)),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12, atol=1e-15)


def _lumped(T, B, weight, block, nb, pairs, starts, sizes, colour):
    """lumped_model with the pairs as successor lists by view."""
    from hmmmerge._replay_kernels import lumped_model

    K = len(sizes)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=K))].astype(np.int64)
    return lumped_model(T, B, weight, block, nb, ptr, np.ascontiguousarray(pairs[order, 1]), starts, sizes,
                        colour.astype(np.int64))


@pytest.mark.parametrize("slip, noise", [(0.0, 0.0), (0.1, 0.0), (0.05, 0.05)])
def test_the_model_is_the_m_step_of_the_scaled_counts_and_the_scale_is_only_a_representation(monkeypatch, slip,
                                                                                                noise):
    """After a life, ``T`` is the dense M-step of ``g * S`` (``g`` the scale), the kept row sums are the row
    sums of ``S``; folding the scale into the counts at every update (the floor raised to 1) learns the
    same model."""
    import hmmmerge.replay as replay
    from hmmmerge.replay import ReplayMerger

    env = gridworld(6, 6, n_colours=9, seed=1, slip=slip, obs_noise=noise)
    walk = random_walk(env, 300, 30, seed=4)

    def fit():   # uniform draws: the rarity draw reads the blocks, where a near tie of the lumping test may
        # go either way at rounding level, and the two lives then replay other episodes
        return TwoLevelMemory(9, 4, merger=ReplayMerger(exact=False, min_new=5, priority=False), seed=2).fit(walk)

    lazy = fit()
    m = lazy.merger_
    assert m._g < 1e-3 and m._updates > 20
    inside = m._has_pair[m._colour][:, m._colour][None]
    np.testing.assert_allclose(m._Z, m._S.sum(axis=2), rtol=1e-10, atol=1e-300)
    Qd, Td = _dense_m_step(m._g * m._S, inside, float(m.window), float(m.pseudocount), m._slip)
    np.testing.assert_allclose(m._Q, Qd, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(m._T, Td, rtol=1e-9, atol=1e-15)
    monkeypatch.setattr(replay, "SCALE_FLOOR", 1.0)
    folded = fit()
    assert folded.merger_._g == 1.0
    np.testing.assert_allclose(folded.merger_._g * folded.merger_._S, m._g * m._S, rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(folded.merger_._T, m._T, rtol=1e-8, atol=1e-14)
    assert np.array_equal(folded.clusters_.assignment, lazy.clusters_.assignment)


def test_sleeps_with_m_steps_on_the_batch_pairs_equal_sleeps_with_full_m_steps(monkeypatch):
    """Writing T and Q on the batch's pairs only before the last EM iteration of a sleep changes nothing:
    the same model, counts and C, bit for bit, as full M-steps at every iteration (3 iterations, slips)."""
    env = gridworld(6, 6, n_colours=9, seed=1, slip=0.1)
    walk = random_walk(env, 60, 30, seed=4)

    def fit():
        return TwoLevelMemory(9, 4, merger=ReplayMerger(exact=False, n_iter=3), seed=2).fit(walk)

    fast = fit()
    monkeypatch.setattr(ReplayMerger, "_pairs_in", lambda self, d: np.ones(len(self._pairs), dtype=bool))
    full = fit()
    a, b = fast.merger_, full.merger_
    assert 0 < len(a._pairs) < 81   # some pairs of views never seen: the model is not one dense block
    for name in ("_T", "_Q", "_S", "_B", "_block"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(fast.clusters_.assignment, full.clusters_.assignment)


# ----------------------------------------------------------------- many clones: the kernels' fast paths
sys.path.insert(0, os.path.dirname(__file__))
from test_replay import _dense_lumped_model, _dense_transitions  # noqa: E402  (the dense formulas)


def _uneven_pairs(rng, K, max_size, p_pair):
    """Views of 1..max_size clones and a random set of pairs (every view followed by some), shuffled."""
    sizes = rng.integers(1, max_size + 1, K).astype(np.int64)
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    has = rng.random((K, K)) < p_pair
    has[np.arange(K), rng.integers(0, K, K)] = True
    pairs = np.argwhere(has).astype(np.int64)
    rng.shuffle(pairs)
    colour = np.repeat(np.arange(K), sizes).astype(np.int64)
    return starts, sizes, pairs, has, colour


def _absorb_inputs(rng, K, max_size, A):
    """Random inputs of absorb_counts on uneven views: kept counts ``S``, the model ``Q`` and the batch's
    counts ``C`` (half the cells empty) inside the pairs' blocks, pairs switched on, row sums ``Z``."""
    starts, sizes, pairs, has, colour = _uneven_pairs(rng, K, max_size, 0.6)
    H = int(sizes.sum())
    inside = has[colour][:, colour][None]
    S, Q = rng.random((A, H, H)) * inside, rng.random((A, H, H)) * inside
    C = rng.random((A, H, H)) * inside * (rng.random((A, H, H)) < 0.5)
    return starts, sizes, pairs, H, S, Q, C, rng.random(len(pairs)) < 0.7, rng.random((A, H))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 8), st.integers(1, 3), st.floats(0.1, 1.0), st.floats(0.0, 1.0),
       st.booleans(), st.integers(0, 10**6))
def test_lumped_model_of_many_blocks_is_the_dense_formula_bit_for_bit(K, max_size, A, p_pair, p_alone, mixed, seed):
    """lumped_model (each view's reached blocks listed once, no per-row sort) equals the dense formula
    entry by entry and bit for bit, on uneven views, pairs in any order and blocks from one per view to one
    per clone (rows that reach nearly every block), and blocks of several views (``mixed``; the learner's
    never are); its CSR holds exactly the blocks each row reaches, columns increasing."""
    from hmmmerge._replay_kernels import dense_lumped, lumped_model

    rng = np.random.default_rng(seed)
    starts, sizes, pairs, has, colour = _uneven_pairs(rng, K, max_size, p_pair)
    H = int(sizes.sum())
    inside = has[colour][:, colour]
    T = rng.random((A, H, H)) * inside * (rng.random((A, H, H)) < 0.8)   # zeros inside the blocks too
    B, weight = rng.random(H), rng.random(H) * (rng.random(H) < 0.8)
    alone = rng.random(H) < p_alone   # a clone alone in its block, or in its view's shared block
    block = np.where(alone, H + np.arange(H), rng.integers(0, max(K // 2, 1), H) if mixed else colour)
    block = np.unique(block, return_inverse=True)[1].astype(np.int64)
    nb = int(block.max()) + 1
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    succ_ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=K))].astype(np.int64)
    ptr, col, val, BL = lumped_model(T, B, weight, block, nb, succ_ptr, np.ascontiguousarray(pairs[order, 1]),
                                     starts, sizes, colour)
    TL, BLd = _dense_lumped_model(T, B, weight, block, nb, pairs, starts, sizes)
    if mixed:   # clones of several views in a block share entries: summed one by one, in another order
        w = np.bincount(block, weights=weight, minlength=nb)
        wi = np.where(w[block] > 0, weight / np.where(w[block] > 0, w[block], 1.0),
                      1.0 / np.bincount(block, minlength=nb)[block])
        a, i, j = np.nonzero(np.broadcast_to(inside, T.shape))
        TL = np.zeros((A, nb, nb))
        np.add.at(TL, (a, block[i], block[j]), wi[i] * T[a, i, j])
        np.testing.assert_allclose(dense_lumped(ptr, col, val, A, nb), TL, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(BL, BLd, rtol=1e-12)
    else:
        assert np.array_equal(dense_lumped(ptr, col, val, A, nb), TL) and np.array_equal(BL, BLd)
    member = np.eye(nb, dtype=int)[block]   # block x reaches block y: some pair of their clones' views
    reach = member.T @ inside.astype(int) @ member > 0
    rows = np.repeat(np.arange(A * nb), np.diff(ptr))
    assert np.array_equal(np.diff(ptr), np.tile(reach.sum(axis=1), A))
    assert reach[rows % nb, col].all() and (np.diff(col)[np.diff(rows) == 0] > 0).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 130), st.integers(2, 4), st.sampled_from([0.0, 1e-3, 0.05]), st.floats(0.0, 1.0),
       st.floats(0.0, 1.0), st.integers(0, 10**6))
def test_restricted_transitions_of_long_shuffled_rows_is_the_dense_one_bit_for_bit(nb, A, prune, p_entry, p_keep,
                                                                                   seed):
    """restricted_transitions equals the dense steps bit for bit where clusters are blocks in any order: rows
    longer than 48 entries placed by position (no sort), short ones sorted, rows already in order kept.
    (Two actions or more, as in every world: with one, numpy lays ``T[:, ids][:, :, ids]`` out otherwise
    and sums its rows in another order.)"""
    from hmmmerge._replay_kernels import restricted_transitions

    rng = np.random.default_rng(seed)
    reached = rng.random((A * nb, nb)) < p_entry           # the CSR's entries, zero or not
    dense = np.where(reached & (rng.random((A * nb, nb)) < 0.9), rng.random((A * nb, nb)), 0.0)
    ptr = np.r_[0, np.cumsum(reached.sum(axis=1))].astype(np.int64)
    r, col = np.nonzero(reached)
    ids = rng.permutation(nb)[:max(1, int(round(p_keep * nb)))].astype(np.int64)
    if rng.random() < 0.3:
        ids = np.sort(ids)
    got = restricted_transitions(ptr, col.astype(np.int64), dense[r, col], nb, ids, prune)
    want = _dense_transitions(dense.reshape(A, nb, nb), ids, prune)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def _noise_odds_plain(T, starts, sizes, obs, acts, alpha, off, scale, horizon, n_obs, above):
    """noise_odds step by step with numpy products (its docstring's definition)."""
    K = len(sizes)
    log_odds, expected = np.full(len(obs), -np.inf), np.full(len(obs), -1)

    def blk(o):
        return slice(starts[o], starts[o] + sizes[o])

    for t in range(1, len(obs)):
        if acts[t] < 0:
            continue
        if scale[t] >= above:
            log_odds[t], expected[t] = -np.log(n_obs * scale[t]), obs[t]
            continue
        e = t
        while e + 1 < len(obs) and acts[e + 1] >= 0 and e - t < horizon:
            e += 1
        m = alpha[off[t - 1]:off[t]] @ T[acts[t]][blk(obs[t - 1])]
        expected[t] = int(np.argmax([m[blk(o)].sum() for o in range(K)]))
        skip = -np.log(n_obs)
        if e > t:
            b = m @ T[acts[t + 1]][:, blk(obs[t + 1])]
            if not b.sum() > 0:
                continue
            skip, b = skip + np.log(b.sum()), b / b.sum()
            for s in range(t + 2, e + 1):
                b = b @ T[acts[s]][blk(obs[s - 1]), blk(obs[s])]
                if not b.sum() > 0:
                    skip = -np.inf
                    break
                skip, b = skip + np.log(b.sum()), b / b.sum()
        log_odds[t] = skip - np.log(scale[t:e + 1]).sum()
    return log_odds, expected


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(1, 6), st.integers(1, 3), st.floats(0.2, 1.0), st.integers(1, 3),
       st.integers(0, 10**6))
def test_noise_odds_is_its_definition_step_by_step(K, max_size, A, p_pair, horizon, seed):
    """noise_odds (steps taken by action and previous view, loops over runs of adjoining blocks) gives every
    step the log odds and the expected view of its definition, on uneven views and pairs in any order."""
    from hmmmerge._replay_kernels import noise_odds
    from hmmmerge.baselines import _em_kernels as EK

    rng = np.random.default_rng(seed)
    starts, sizes, pairs, has, colour = _uneven_pairs(rng, K, max_size, p_pair)
    H = int(sizes.sum())
    T = rng.random((A, H, H)) ** 3 * has[colour][:, colour]
    T /= T.sum(axis=2, keepdims=True)
    obs, acts = [], []
    for _ in range(4):   # episodes along the pairs, some steps off them (probability 0 is avoided below)
        o = int(rng.integers(K))
        obs.append(o), acts.append(-1)
        for _ in range(int(rng.integers(1, 12))):
            o = int(rng.choice(np.flatnonzero(has[o])))
            obs.append(o), acts.append(int(rng.integers(A)))
    obs, acts = np.array(obs, dtype=np.int64), np.array(acts, dtype=np.int64)
    off = EK.step_offsets(obs, sizes)
    alpha, scale = np.empty(off[-1]), np.empty(len(obs))
    B = np.full(H, 1.0 / H)
    assert np.isfinite(EK.forward(T, B, starts, sizes, obs, acts, off, alpha, scale, int(sizes.max())))
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    succ_ptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=K))].astype(np.int64)
    got = noise_odds(T, starts, sizes, obs, acts, off, alpha, scale, horizon, K, 0.5, succ_ptr,
                     np.ascontiguousarray(pairs[order, 1]))
    want = _noise_odds_plain(T, starts, sizes, obs, acts, alpha, off, scale, horizon, K, 0.5)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)
    assert np.array_equal(got[1], want[1])


def test_place_filters_under_the_pairs_registered_for_good_and_puts_the_model_back(monkeypatch):
    """The temporary registration of place (the M-step of the new pairs' rows on the episode's own blocks,
    only those saved and restored) filters the episode as a copy of the merger with the pairs registered
    for good (full rows) does, and leaves T and Q as they were."""
    import copy

    from hmmmerge.replay import _block_argmax

    env = gridworld(6, 6, n_colours=9, seed=1, obs_noise=0.1)
    walk = random_walk(env, 120, 30, seed=4)
    own, own_data = ReplayMerger._filtered_clones, ReplayMerger._data
    checked, last = [], []

    def recorded_data(self, obs, acts):
        last[:] = [own_data(self, obs, acts)]
        return last[0]

    def checked_filter(self, obs, acts):
        before = None if self._S is None else (self._T.copy(), self._Q.copy(), copy.deepcopy(self))
        got = own(self, obs, acts)
        if before is not None:
            T, Q, twin = before
            assert np.array_equal(self._T, T) and np.array_equal(self._Q, Q)
            new = ~twin._has_pair[obs[np.flatnonzero(acts >= 0) - 1], obs[acts >= 0]]
            twin._add_pairs(obs, acts)
            d = own_data(twin, obs, acts)
            d.log_likelihood(twin._T, twin._B)
            # the same filter, bit for bit (not only its most probable clones)
            assert np.array_equal(last[0].alpha, d.alpha) and np.array_equal(last[0].scale, d.scale)
            assert np.array_equal(got, twin._starts[obs] + _block_argmax(d.alpha, d.off))
            checked.append(bool(new.any()))
        return got

    monkeypatch.setattr(ReplayMerger, "_filtered_clones", checked_filter)
    monkeypatch.setattr(ReplayMerger, "_data", recorded_data)
    TwoLevelMemory(9, 4, merger=ReplayMerger(exact=False, n_clones=6), seed=2).fit(walk)
    assert sum(checked) >= 5, checked


def _absorb_pair_by_pair(S, C, Q, Z, pairs, on, starts, sizes, slip, add, floor):
    """absorb_counts as a plain pass pair by pair (pair, row, action, column): the order of every sum."""
    A = S.shape[0]
    slipped = 0.0
    for p in np.flatnonzero(on).tolist():
        s0, n0, s1, n1 = starts[pairs[p, 0]], sizes[pairs[p, 0]], starts[pairs[p, 1]], sizes[pairs[p, 1]]
        for i in range(s0, s0 + n0):
            cols = slice(s1, s1 + n1)
            if not (C[:, i, cols] > floor).any():
                if floor > 0.0:
                    C[:, i, cols] = 0.0
                continue
            if slip > 0.0:
                qsum, rsum = np.zeros(n1), np.zeros(n1)
                for a in range(A):
                    qsum = qsum + Q[a, i, cols]
                for a in range(A):
                    t = (1.0 - slip) * Q[a, i, cols] + slip / A * qsum
                    C[a, i, cols] = np.where(t > 0.0, C[a, i, cols] / np.where(t > 0.0, t, 1.0), 0.0)
                    rsum = rsum + C[a, i, cols]
                for x in (slip / A * rsum * qsum).tolist():
                    slipped += x
            for a in range(A):
                c = C[a, i, cols] if slip == 0.0 else Q[a, i, cols] * ((1.0 - slip) * C[a, i, cols] + slip / A * rsum)
                S[a, i, cols] += add * c
                acc = 0.0
                for x in c.tolist():
                    acc += x
                Z[a, i] += add * acc
                C[a, i, cols] = 0.0
    return slipped


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 3), st.sampled_from([0.0, 0.05, 0.3]),
       st.sampled_from([0.0, 0.3]), st.integers(0, 10**6))
def test_absorb_row_by_row_is_the_pass_pair_by_pair_bit_for_bit(K, max_size, A, slip, floor, seed):
    """absorb_counts (row by row, each row's blocks in the order of the pairs, slipped moves summed at the
    end) gives S, the row sums, the buffer and the slipped moves of a pass pair by pair, bit for bit."""
    from hmmmerge._replay_kernels import absorb_counts

    starts, sizes, pairs, H, S, Q, C, on, Z = _absorb_inputs(np.random.default_rng(seed), K, max_size, A)
    got = [S.copy(), C.copy(), Z.copy()]
    want = [S.copy(), C.copy(), Z.copy()]
    s_got = absorb_counts(got[0], got[1], Q, got[2], pairs, on, starts, sizes, slip, 0.37, floor)
    s_want = _absorb_pair_by_pair(want[0], want[1], Q, want[2], pairs, on, starts, sizes, slip, 0.37, floor)
    assert s_got == s_want and all(np.array_equal(g, w) for g, w in zip(got, want))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 3), st.sampled_from([0.0, 0.2]), st.booleans(),
       st.booleans(), st.integers(0, 10**6))
def test_the_m_step_row_by_row_is_the_cellwise_formula_bit_for_bit(K, max_size, A, slip, given_sums, some, seed):
    """_m_step_pairs (row by row over runs of adjoining blocks) writes every cell of the redone rows on the
    chosen pairs as the formula cell by cell does (``Q = (scale S + pc) / (scale Z + pc width)``, ``T``
    from ``Q`` and the mean over actions summed in turn), bit for bit, and nothing else."""
    from hmmmerge._replay_kernels import m_step_pairs, row_sums

    rng = np.random.default_rng(seed)
    starts, sizes, pairs, has, colour = _uneven_pairs(rng, K, max_size, 0.6)
    H = int(sizes.sum())
    S = rng.random((A, H, H)) * has[colour][:, colour][None]
    redo = rng.random(K) < 0.7
    on = rng.random(len(pairs)) < 0.6 if some else np.ones(len(pairs), dtype=bool)
    Z = row_sums(S, pairs, starts, sizes)
    Q, T = np.full_like(S, -1.0), np.full_like(S, -1.0)
    m_step_pairs(S, Q, T, pairs, starts, sizes, 3.0, 0.01, slip, redo, Z if given_sums else None,
                 on if some else None)
    width = np.zeros(K)
    np.add.at(width, pairs[:, 0], sizes[pairs[:, 1]])
    Qw, Tw = np.full_like(S, -1.0), np.full_like(S, -1.0)
    for p in np.flatnonzero(on & redo[pairs[:, 0]]).tolist():
        rows, cols = np.arange(starts[pairs[p, 0]], starts[pairs[p, 0]] + sizes[pairs[p, 0]]), \
            slice(starts[pairs[p, 1]], starts[pairs[p, 1]] + sizes[pairs[p, 1]])
        z = 3.0 * Z[:, rows] + 0.01 * width[pairs[p, 0]]
        Qw[:, rows, cols] = (3.0 * S[:, rows, cols] + 0.01) / z[:, :, None]
        mean = 0.0
        for a in range(A):
            mean = mean + Qw[a, rows, cols]
        Tw[:, rows, cols] = (1.0 - slip) * Qw[:, rows, cols] + slip / A * mean
    assert np.array_equal(Q, Qw) and np.array_equal(T, Tw)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.floats(0.0, 0.05), st.integers(0, 10**6))
def test_lumping_row_by_row_is_the_lumping_of_the_pass_pair_by_pair(K, max_size, A, alpha, seed):
    """lump_clones_pairs (entries listed row by row, each row's blocks in the order of the pairs) gives the
    blocks of the refinement run on the entries of a pass pair by pair (pair, action, row, column)."""
    from hmmmerge._replay_kernels import _refine, lump_clones_pairs

    rng = np.random.default_rng(seed)
    starts, sizes, pairs, has, colour = _uneven_pairs(rng, K, max_size, 0.6)
    H = int(sizes.sum())
    counts = rng.random((A, H, H)) ** 4 * 3 * has[colour][:, colour][None]
    bound, floor, threshold = 1.36, 0.2, 3.0
    got = lump_clones_pairs(counts, 1.7, pairs, starts, sizes, colour, bound, floor, 50, alpha, threshold)
    e = [(a, i, j, 1.7 * counts[a, i, j]) for p in range(len(pairs)) for a in range(A)
         for i in range(starts[pairs[p, 0]], starts[pairs[p, 0]] + sizes[pairs[p, 0]])
         for j in range(starts[pairs[p, 1]], starts[pairs[p, 1]] + sizes[pairs[p, 1]]) if 1.7 * counts[a, i, j] >= 1e-3]
    e_a, e_i, e_j = (np.array([x[k] for x in e], dtype=np.int64).reshape(-1) for k in range(3))
    e_c = np.array([x[3] for x in e], dtype=float).reshape(-1)
    n_out, occ = np.zeros((H, A)), np.zeros(H)
    for a, i, _, c in e:
        n_out[i, a] += c
        occ[i] += c
    by_clone = np.argsort(e_i, kind="stable").astype(np.int64)
    ptr = np.r_[0, np.cumsum(np.bincount(e_i, minlength=H))].astype(np.int64)
    order = np.argsort(-occ, kind="stable").astype(np.int64)
    block = np.unique(colour, return_inverse=True)[1].astype(np.int64)
    for _ in range(50):
        nb = int(block.max()) + 1   # every block tested in every round (lump_clones_pairs skips unchanged ones)
        new = _refine(block, nb, order, ptr, by_clone, e_a, e_j, e_c, n_out, A, bound, floor, alpha, threshold,
                      np.ones(nb, dtype=np.bool_))
        new = np.unique(new, return_index=True)[1].argsort().argsort()[np.unique(new, return_inverse=True)[1]]
        stable = new.max() == block.max()
        block = new.astype(np.int64)
        if stable:
            break
    assert np.array_equal(got, block)


@pytest.mark.parametrize("noise, start", [(0.1, None), (0.0, "random")])
def test_the_first_e_step_reuses_the_noise_look_aheads_forward_pass_bit_for_bit(noise, start):
    """The first E-step of a sleep (and of a deep sleep) takes the forward pass the noise look-ahead ran on
    the same batch under the same model, unless views were replaced: the life is the one that runs it again."""
    env = gridworld(5, 5, 4, seed=2, obs_noise=noise)
    traj = random_walk(env, 160, 30, seed=4, start=start)
    lives, reused = [], []
    for again in (False, True):
        agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(exact=False), sleep_every=300, seed=1)
        agent._start()
        m = agent.merger_
        original = m._expected_counts

        def expected_counts(d, start_weight=None, ll=None, original=original):
            reused.append(ll is not None)
            return original(d, start_weight, None if again else ll)

        m._expected_counts = expected_counts
        agent.partial_fit(traj)
        lives.append(agent)
    a, b = lives
    assert any(reused) and not all(reused)
    for name in ("_T", "_Q", "_S", "_Z", "_B", "_Sb"):
        assert np.array_equal(getattr(a.merger_, name), getattr(b.merger_, name)), name
    assert a.merger_._noise == b.merger_._noise and a.merger_._g == b.merger_._g
    assert np.array_equal(a.clusters_.assignment, b.clusters_.assignment)
    for name in a.last_predictions_:
        assert np.array_equal(a.last_predictions_[name], b.last_predictions_[name])


def _conditioned(pred, colour, n_obs, q, o, cut):
    """The agent's belief after ``_predict`` from cluster 0 (whose T2 row gives ``pred``) and ``_condition`` on
    view ``o``, with replay's emission rows and floor and the online belief cut ``cut``: (support, values)."""
    from hmmmerge._agent_kernels import Level2, _condition, _predict, new_belief, new_scratch

    k = len(pred)
    ptr = np.r_[0, np.full(k, k)].astype(np.int64)
    soft = np.full((k, n_obs), q / n_obs)
    soft[np.arange(k), colour] += 1.0 - q
    em_ptr = np.r_[0, np.cumsum(np.bincount(colour, minlength=n_obs))].astype(np.int64)
    l2 = Level2(k, ptr, np.arange(k, dtype=np.int64), np.asarray(pred, dtype=float), np.zeros(0, dtype=np.int64),
                np.asarray(colour, dtype=np.int64), em_ptr, np.argsort(colour, kind="stable").astype(np.int64),
                soft, np.full(k, q / n_obs), cut)
    bel, s = new_belief(k), new_scratch(k, n_obs)
    bel.p[0], bel.support[0], bel.size[0] = 1.0, 0, 1
    mt, total = _predict(bel, 0, l2, s)
    _condition(bel, mt, total, o, l2, s)
    assert not s.touched.any() and not s.pred.any()   # the scratch is left clear
    return bel.support[:bel.size[0]].tolist(), bel.p.copy()


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 30), st.integers(2, 12), st.sampled_from([0.01, 0.05, 0.2]), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-6, 1e-3, 0.05]))
def test_the_online_belief_cut_drops_the_clusters_below_it_and_keeps_the_others_bit_for_bit(k, n_obs, q, seed, cut):
    rng = np.random.default_rng(seed)
    pred = rng.random(k) * (rng.random(k) < 0.8) * 10.0 ** -rng.integers(0, 9, k)
    pred[0] = 1.0
    colour = rng.integers(0, n_obs, k)
    o = int(colour[0])
    full, p_full = _conditioned(pred, colour, n_obs, q, o, 0.0)
    kept, p_kept = _conditioned(pred, colour, n_obs, q, o, cut)
    assert kept == [j for j in full if p_full[j] >= cut]          # in order, the clusters at or above the cut
    assert np.array_equal(p_kept[kept], p_full[kept])             # the same numbers as without the cut
    assert not p_kept[np.setdiff1d(np.arange(k), kept)].any()      # zero off the support
    assert 0 in kept


def test_replay_cuts_its_online_beliefs_and_its_model_does_not_read_them(monkeypatch):
    import hmmmerge.replay as replay_module

    # a noisy world (replay's emissions hold the noise floor: without the cut no cluster leaves a belief)
    walk = random_walk(gridworld().with_noise(obs_noise=0.1), 120, seed=0)
    small = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(walk[:40])
    assert small.merger_._H <= replay_module.ONLINE_BELIEF_CUT_CLONES and small.level2_.arrays.belief_cut == 0.0
    monkeypatch.setattr(replay_module, "ONLINE_BELIEF_CUT_CLONES", 0)   # this small model as a big one
    agents = {}
    for value in (replay_module.ONLINE_BELIEF_CUT, 0.0):
        monkeypatch.setattr(replay_module, "ONLINE_BELIEF_CUT", value)
        agents[value] = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(walk)
        assert agents[value].level2_.arrays.belief_cut == value
    cut, full = agents[1e-6], agents[0.0]
    assert len(cut.level2_.arrays.soft_floor) == cut.n_clusters_ > 0
    # level 2's model and the clusters do not read the online beliefs
    m_cut, m_full = (a.merger_.level2_hmm(a.memory_, a.clusters_) for a in (cut, full))
    assert np.array_equal(m_cut.T, m_full.T) and np.array_equal(m_cut.B, m_full.B)
    assert np.array_equal(cut.clusters_.assignment[:cut.memory_.n_states],
                          full.clusters_.assignment[:full.memory_.n_states])
    # from random starts too: a cluster cut from an episode's first belief comes back through the lost mass
    monkeypatch.setattr(replay_module, "ONLINE_BELIEF_CUT", 1e-6)
    spread = random_walk(gridworld().with_noise(obs_noise=0.1), 120, seed=0, start="random")
    assert TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(spread).level2_.arrays.belief_cut == 1e-6


def test_a_model_of_few_views_cuts_its_online_beliefs_and_its_model_does_not_read_them(monkeypatch):
    import hmmmerge.replay as replay_module

    # 3 views (FEW_VIEWS: 45 clones each, 135 in all, below ONLINE_BELIEF_CUT_CLONES): cut; 6 views (180): not
    walk = random_walk(gridworld(6, 6, n_colours=3, seed=0).with_noise(obs_noise=0.1), 60, seed=0)
    few = TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False), seed=0).fit(walk)
    assert few.merger_._H <= replay_module.ONLINE_BELIEF_CUT_CLONES
    assert few.level2_.arrays.belief_cut == replay_module.ONLINE_BELIEF_CUT > 0.0
    six = random_walk(gridworld(6, 6, n_colours=6, seed=0).with_noise(obs_noise=0.1), 20, seed=0)
    assert TwoLevelMemory(6, 4, merger=ReplayMerger(exact=False), seed=0).fit(six).level2_.arrays.belief_cut == 0.0
    # the same life uncut: the same level 2 and clusters, online predictions within the cut's mass
    monkeypatch.setattr(replay_module, "ONLINE_BELIEF_CUT", 0.0)
    full = TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False), seed=0).fit(walk)
    assert full.level2_.arrays.belief_cut == 0.0
    m_cut, m_full = (a.merger_.level2_hmm(a.memory_, a.clusters_) for a in (few, full))
    assert np.array_equal(m_cut.T, m_full.T) and np.array_equal(m_cut.B, m_full.B)
    assert np.array_equal(few.clusters_.assignment[:few.memory_.n_states],
                          full.clusters_.assignment[:full.memory_.n_states])


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 30), st.integers(2, 12), st.sampled_from([0.01, 0.05, 0.2]), st.integers(0, 2**32 - 1),
       st.sampled_from([1e-6, 1e-3, 0.05]), st.sampled_from([0.0, 1e-7, 1e-4, 0.5]))
def test_the_mass_the_cut_dropped_comes_back_on_the_clusters_of_a_view_the_belief_does_not_explain(k, n_obs, q, seed,
                                                                                                  cut, lost):
    """The cut's mass (``lost``) is read as spread evenly over the clusters: conditioned on view ``o`` it comes
    back on every cluster of ``o`` whose share reaches the cut; the belief and the lost mass still sum to 1."""
    from hmmmerge._agent_kernels import Level2, _condition, _predict, new_belief, new_scratch

    rng = np.random.default_rng(seed)
    pred = rng.random(k) * (rng.random(k) < 0.8) * 10.0 ** -rng.integers(0, 9, k)
    pred[0] = 1.0
    pred /= pred.sum()
    colour = rng.integers(0, n_obs, k)
    o = int(rng.integers(0, n_obs))          # any view, also one the belief hardly explains
    soft = np.full((k, n_obs), q / n_obs)
    soft[np.arange(k), colour] += 1.0 - q
    em_ptr = np.r_[0, np.cumsum(np.bincount(colour, minlength=n_obs))].astype(np.int64)
    l2 = Level2(k, np.r_[0, np.full(k, k)].astype(np.int64), np.arange(k, dtype=np.int64), pred,
                np.zeros(0, dtype=np.int64), np.asarray(colour, dtype=np.int64), em_ptr,
                np.argsort(colour, kind="stable").astype(np.int64), soft, np.full(k, q / n_obs), cut)
    bel, s = new_belief(k), new_scratch(k, n_obs)
    bel.p[0], bel.support[0], bel.size[0], bel.lost[0] = 1.0 - lost, 0, 1, lost
    mt, total = _predict(bel, 0, l2, s)
    _condition(bel, mt, total, o, l2, s)
    kept = bel.support[:bel.size[0]]
    # the same posterior as the belief with its lost mass spread evenly, then cut: the lost mass on the clusters
    # of o comes back (when one of them could reach the cut), the floor's part of it off them stays lost
    mine = colour == o
    rest = lost * q / n_obs * (k - mine.sum()) / k
    back = lost / k * soft[:, o] * mine
    z = (pred * (1.0 - lost) * soft[:, o]).sum() + back.sum() + rest
    w = pred * (1.0 - lost) * soft[:, o] + (back if lost / k >= cut * z else 0.0)
    share = w / z
    assert sorted(kept.tolist()) == np.flatnonzero(share >= cut).tolist()
    assert np.allclose(bel.p[kept], share[kept], rtol=1e-12, atol=0)
    assert not bel.p[np.setdiff1d(np.arange(k), kept)].any()
    assert abs(bel.p.sum() + bel.lost[0] - 1.0) < 1e-12


def test_a_belief_the_views_contradict_re_localises_on_the_clusters_of_the_view():
    """From cluster 0 the belief moves to cluster 1 of view 0, almost never to 2 of view 1: the cut drops 2; when
    view 1 keeps coming, the belief moves onto 2 as the uncut belief does (without the lost mass it never would:
    2 is out of the support for good)."""
    from hmmmerge._agent_kernels import Level2, _condition, _predict, new_belief, new_scratch

    k, n_obs, q = 3, 2, 0.01
    colour = np.array([0, 0, 1])
    # T2 (one action): 0 -> 1 (1 - 1e-5) or 2 (1e-5); 1 -> 1; 2 -> 2; after view 0, 2 holds 5e-8: cut
    ptr, idx, val = np.array([0, 2, 3, 4]), np.array([1, 2, 1, 2]), np.array([1 - 1e-5, 1e-5, 1.0, 1.0])
    soft = np.full((k, n_obs), q / n_obs)
    soft[np.arange(k), colour] += 1.0 - q
    em_ptr = np.r_[0, np.cumsum(np.bincount(colour, minlength=n_obs))].astype(np.int64)
    preds = {}
    for cut in (0.0, 1e-6):
        l2 = Level2(k, ptr, idx, val, np.zeros(0, dtype=np.int64), colour, em_ptr,
                    np.argsort(colour, kind="stable").astype(np.int64), soft, np.full(k, q / n_obs), cut)
        bel, s = new_belief(k), new_scratch(k, n_obs)
        bel.p[0], bel.support[0], bel.size[0] = 1.0, 0, 1
        seen = []
        for o in (0, 1, 1, 1, 1, 1, 1):
            mt, total = _predict(bel, 0, l2, s)
            seen.append(int(np.argmax(s.obs_dist)))
            _condition(bel, mt, total, o, l2, s)
        preds[cut] = seen, bel.p.argmax()
    assert preds[0.0] == preds[1e-6] == ([0, 0, 0, 0, 0, 1, 1], 2)
