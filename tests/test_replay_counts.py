"""The sleep-replay learner writes C and counts purity from per-clone counts kept as level-1 states take
clones, not from a pass over level 1 at every sleep: both must equal the recount from level 1."""

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
    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(min_new=3), sleep_every=60, seed=seed)
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
    whole = TwoLevelMemory(10, 4, merge="replay", sleep_every=100, seed=3).fit(first).partial_fit(second)
    part = TwoLevelMemory(10, 4, merge="replay", sleep_every=100, seed=3).fit(first)
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


def test_beyond_the_label_table_limit_purity_is_left_to_the_agent(monkeypatch):
    import hmmmerge.replay as replay

    monkeypatch.setattr(replay, "CLONE_LABEL_TABLE_MAX", 10)
    agent = TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld(), 30, seed=0))
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
