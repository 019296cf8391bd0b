"""Best-first model merging (Stolcke & Omohundro 1994): bookkeeping, search, textbook languages."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmmmerge import Trajectories, gridworld, random_walk
from hmmmerge.baselines.bfmm import (
    BestFirstMerging,
    _representatives,
    path_log_posterior,
    _Workspace,
    prefix_tree,
    sequence_model,
    sf_candidates,
    viterbi_log_posterior,
)

# ----------------------------------------------------------------- helpers


def random_traj(rng, n_ep, length, n_obs, n_act):
    obs = rng.integers(0, n_obs, size=(n_ep, length + 1))
    acts = rng.integers(0, n_act, size=(n_ep, length + 1))
    acts[:, 0] = -1
    obs[:, 0] = 0
    return Trajectories(obs, acts)


def full_log_posterior(model, rep, prior_weight=1.0, structure_prior=1.0):
    """From scratch: relabel every initial edge by its representative and recount."""
    H = model.n_states
    lab = np.concatenate([rep, [H, H + 1]])
    q = len(np.unique(rep))
    return viterbi_log_posterior(lab[model.src], model.act, lab[model.dst], model.count, q, model.n_obs,
                                 prior_weight, structure_prior)


def recount_edges(model, rep):
    H = model.n_states
    lab = np.concatenate([rep, [H, H + 1]])
    out = {}
    for s, a, d, c in zip(lab[model.src], model.act, lab[model.dst], model.count):
        out[(int(s), int(a), int(d))] = out.get((int(s), int(a), int(d)), 0.0) + c
    return out


def prior_gain(lam, n_trans, q, r, n_obs):
    return lam * (n_trans * np.log((q + 1) / q) + r * np.log(q) + np.log(n_obs + 1))


def language(gen, n_ep, length, rng):
    """Episodes that concatenate strings of a language (each ending in the marker 2), cut to ``length``."""
    obs = []
    for _ in range(n_ep):
        s = []
        while len(s) < length:
            s += gen(rng)
        obs.append(s[:length])
    obs = np.array(obs)
    acts = np.zeros_like(obs)
    acts[:, 0] = -1
    return Trajectories(obs, acts)


def ab_plus(rng, p=0.6):  # (ab)+ $ with a geometric number of repeats
    s = [0, 1]
    while rng.random() < p:
        s += [0, 1]
    return s + [2]


def a_star_b_star(rng):  # a* b* $
    return [0] * int(rng.integers(0, 4)) + [1] * int(rng.integers(0, 4)) + [2]


def an_bn(rng):  # a^n b^n $
    n = int(rng.integers(1, 5))
    return [0] * n + [1] * n + [2]


def structure(bf):
    """Emission per state and the set of (emission -> emission) transitions of the merged model."""
    hmm = bf.to_hmm()
    em = hmm.E.argmax(1)
    T = hmm.T[0].toarray()
    edges = {(int(em[i]), int(em[j])) for i, j in zip(*np.nonzero(T))}
    return em, edges, hmm


# ------------------------------------------------------------ initial models


def brute_trie(traj):
    children, emission, counts = {}, [], {}
    for e in range(traj.n_episodes):
        node = -1
        for t in range(traj.obs.shape[1]):
            key = (node, int(traj.actions[e, t]), int(traj.obs[e, t]))
            if key not in children:
                children[key] = len(emission)
                emission.append(key[2])
            counts[key] = counts.get(key, 0) + 1
            node = children[key]
    return emission, counts


@given(st.integers(0, 10_000))
@settings(max_examples=15, deadline=None)
def test_prefix_tree_matches_a_dict_trie(seed):
    rng = np.random.default_rng(seed)
    traj = random_traj(rng, int(rng.integers(1, 8)), int(rng.integers(0, 6)), 3, 2)
    m = prefix_tree(traj, end_state=False)
    emission, counts = brute_trie(traj)
    assert m.n_states == len(emission)
    assert sorted(m.count.tolist()) == sorted(float(c) for c in counts.values())
    assert (m.emission[m.path] == traj.obs).all()
    # every episode's path follows tree edges
    edges = set(zip(m.src.tolist(), m.act.tolist(), m.dst.tolist()))
    for e in range(traj.n_episodes):
        for t in range(1, traj.obs.shape[1]):
            assert (m.path[e, t - 1], traj.actions[e, t], m.path[e, t]) in edges


def test_sequence_model_and_end_state():
    traj = Trajectories([[0, 1, 1], [0, 0, 1]], [[-1, 0, 1], [-1, 1, 1]])
    m = sequence_model(traj)
    assert m.n_states == 6 and m.count.sum() == 2 + 4 + 2
    assert ((m.act == 3) == (m.dst == m.final)).all()  # the end action leads to the final state
    t = prefix_tree(traj)
    assert t.n_states == 5  # the first observation is shared


# ------------------------------------------------------------ bookkeeping


@given(st.integers(0, 10_000), st.sampled_from(["tree", "sequences"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_incremental_bookkeeping_matches_recount(seed, initial):
    rng = np.random.default_rng(seed)
    traj = random_traj(rng, int(rng.integers(2, 6)), int(rng.integers(2, 7)), 2, 2)
    build = prefix_tree if initial == "tree" else sequence_model
    model = build(traj)
    alpha, lam = float(rng.choice([0.5, 1.0, 3.0])), float(rng.choice([0.0, 1.0, 2.5]))
    ws = _Workspace(model, alpha)
    merges = []
    n_trans = len(model.src)
    for _ in range(int(rng.integers(1, model.n_states))):
        rep = _representatives(model.n_states, np.array(merges, dtype=np.int64).reshape(-1, 2))
        alive = np.unique(rep)
        q = len(alive)
        same = [(x, y) for i, x in enumerate(alive) for y in alive[i + 1:] if model.emission[x] == model.emission[y]]
        if not same:
            break
        x, y = same[int(rng.integers(len(same)))]
        dl, r = ws.delta(x, y)
        before = full_log_posterior(model, rep, alpha, lam)
        removed = ws.merge(x, y)
        merges.append((x, y))
        rep = _representatives(model.n_states, np.array(merges, dtype=np.int64))
        after = full_log_posterior(model, rep, alpha, lam)
        # the incremental delta equals the difference of two full recomputations
        assert r == removed
        assert dl + prior_gain(lam, n_trans, q, r, model.n_obs) == pytest.approx(after - before, abs=1e-9)
        n_trans -= removed
        # the counts kept incrementally equal a recount of the relabelled initial edges
        s, a, d, c = ws.edges()
        got = {(int(s_), int(a_), int(d_)): c_ for s_, a_, d_, c_ in zip(s, a, d, c)}
        assert got == pytest.approx(recount_edges(model, rep))
        assert ws.evidence() == pytest.approx(full_log_posterior(model, rep, alpha, 0.0), abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_first_takes_the_best_merge_and_traces_the_posterior(seed):
    rng = np.random.default_rng(seed)
    traj = random_traj(rng, 6, 6, 3, 2)
    lam = 1.5
    bf = BestFirstMerging(structure_prior=lam, incremental=False, seed=seed).fit(traj)
    model = bf.initial_model_
    ws = _Workspace(model, 1.0)
    n_trans = len(model.src)
    merges = np.zeros((0, 2), np.int64)
    for k, (x, y) in enumerate(bf.merges_):
        rep = _representatives(model.n_states, merges)
        assert bf.log_posterior_trace_[k] == pytest.approx(full_log_posterior(model, rep, 1.0, lam), abs=1e-8)
        alive = np.unique(rep)
        q = len(alive)
        gains = [ws.delta(u, v)[0] + prior_gain(lam, n_trans, q, ws.delta(u, v)[1], model.n_obs)
                 for i, u in enumerate(alive) for v in alive[i + 1:] if model.emission[u] == model.emission[v]]
        dl, r = ws.delta(x, y)
        chosen = dl + prior_gain(lam, n_trans, q, r, model.n_obs)
        assert chosen == pytest.approx(max(gains), abs=1e-9) and chosen > 0
        n_trans -= ws.merge(x, y)
        merges = bf.merges_[: k + 1]
    # it stopped because no merge raises the posterior
    rep = _representatives(model.n_states, bf.merges_)
    alive = np.unique(rep)
    q = len(alive)
    for i, u in enumerate(alive):
        for v in alive[i + 1:]:
            if model.emission[u] == model.emission[v]:
                dl, r = ws.delta(u, v)
                assert dl + prior_gain(lam, n_trans, q, r, model.n_obs) <= 1e-9
    assert bf.log_posterior_trace_[-1] == pytest.approx(full_log_posterior(model, rep, 1.0, lam), abs=1e-8)
    assert bf.log_posterior_ == pytest.approx(bf.log_posterior_trace_[-1], abs=1e-8)
    assert (np.diff(bf.log_posterior_trace_) > 0).all()


def best_gain(ws, model, alive, n_trans, lam):
    """Brute force: the largest log posterior gain over all same-emission pairs of alive states."""
    q = len(alive)
    best = -np.inf
    for i, u in enumerate(alive):
        for v in alive[i + 1:]:
            if model.emission[u] == model.emission[v]:
                dl, r = ws.delta(u, v)
                best = max(best, dl + prior_gain(lam, n_trans, q, r, model.n_obs))
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_merges_each_episode_to_a_local_optimum(seed):
    """Replay Stolcke & Omohundro's schedule from scratch: episode e's path is added, then every merge
    is the best of all same-emission pairs, the posterior after it equals a full recount (1e-9), and no
    merge is left that would raise it before episode e + 1 comes."""
    rng = np.random.default_rng(seed)
    traj = random_traj(rng, 5, 6, 3, 2)
    lam = 1.5
    bf = BestFirstMerging(structure_prior=lam, seed=seed).fit(traj)
    assert bf.merges_per_episode_.sum() == bf.n_merges_ == len(bf.merge_gains_)
    assert (bf.merge_gains_ > 0).all()
    L1 = traj.obs.shape[1]
    done = 0
    for e in range(traj.n_episodes):
        model = sequence_model(traj[: e + 1], traj.obs.max() + 1, 2)  # numbering = the first (e + 1) * L1 states
        ws = _Workspace(model, 1.0)
        n_trans = len(model.src)
        for x, y in bf.merges_[:done]:
            n_trans -= ws.merge(x, y)
        lp = full_log_posterior(model, _representatives(model.n_states, bf.merges_[:done]), 1.0, lam)
        for k in range(done, done + bf.merges_per_episode_[e]):
            x, y = bf.merges_[k]
            assert max(x, y) < (e + 1) * L1
            alive = np.unique(_representatives(model.n_states, bf.merges_[:k]))
            dl, r = ws.delta(x, y)
            gain = dl + prior_gain(lam, n_trans, len(alive), r, model.n_obs)
            assert gain == pytest.approx(bf.merge_gains_[k], abs=1e-9)
            assert gain == pytest.approx(best_gain(ws, model, alive, n_trans, lam), abs=1e-9)
            n_trans -= ws.merge(x, y)
            lp += gain
            rep = _representatives(model.n_states, bf.merges_[: k + 1])
            assert lp == pytest.approx(full_log_posterior(model, rep, 1.0, lam), abs=1e-9)
        done += bf.merges_per_episode_[e]
        alive = np.unique(_representatives(model.n_states, bf.merges_[:done]))
        assert best_gain(ws, model, alive, n_trans, lam) <= 1e-9
        assert bf.log_posterior_trace_[e] == pytest.approx(lp, abs=1e-9)
    assert bf.log_posterior_ == pytest.approx(bf.log_posterior_trace_[-1], abs=1e-9)


# ------------------------------------------------------------ textbook languages


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ab_plus_recovers_two_alternating_states(seed):
    rng = np.random.default_rng(seed)
    bf = BestFirstMerging(structure_prior=16.0, seed=seed).fit(language(ab_plus, 10, 25, rng))
    em, edges, hmm = structure(bf)
    # a and b alternate: one a-state, one b-state (plus the end marker $)
    assert sorted(em.tolist()) == [0, 1, 2]
    assert edges == {(0, 1), (1, 0), (1, 2), (2, 0)}
    test = language(ab_plus, 100, 25, rng)
    lp = hmm.run_filter(test.obs, test.actions).log_probs[:, 1:]
    steps_after_a_or_end = np.isin(test.obs[:, :-1], [0, 2])
    # deterministic steps are predicted with near certainty; the others cost about the true entropy
    assert -lp[steps_after_a_or_end].mean() < 0.05
    p = 0.6
    h_b = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    assert -lp[~steps_after_a_or_end].mean() == pytest.approx(h_b, abs=0.08)


def test_a_star_b_star_recovers_a_loop_then_b_loop():
    rng = np.random.default_rng(5)
    bf = BestFirstMerging(structure_prior=4.0).fit(language(a_star_b_star, 10, 30, rng))
    em, edges, hmm = structure(bf)
    assert sorted(em.tolist()) == [0, 1, 2]
    assert (0, 0) in edges and (1, 1) in edges and (0, 1) in edges
    assert (1, 0) not in edges  # no a after b within a string
    assert np.isfinite(hmm.log_likelihood(language(a_star_b_star, 20, 30, rng)))


def test_an_bn_generalises_to_a_plus_b_plus():
    rng = np.random.default_rng(3)
    bf = BestFirstMerging(structure_prior=16.0).fit(language(an_bn, 10, 30, rng))
    em, edges, _ = structure(bf)
    # the counting language is not regular: the merged model is a+ b+ $ (Stolcke & Omohundro's finding)
    assert sorted(em.tolist()) == [0, 1, 2]
    assert edges == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 0)}


# ------------------------------------------------------------ estimator behaviour


def test_same_seed_same_result_and_training_data_explained(small_walk):
    traj = small_walk
    a = BestFirstMerging(seed=7).fit(traj)
    b = BestFirstMerging(seed=7).fit(traj)
    assert np.array_equal(a.merges_, b.merges_) and np.array_equal(a.log_posterior_, b.log_posterior_)
    c = BestFirstMerging(seed=8).fit(traj)
    assert c.n_states_ >= 1
    for bf in (a, c):
        hmm = bf.to_hmm()
        # the union-of-paths counts contain every training path: the data keep a positive likelihood
        assert np.isfinite(hmm.run_filter(traj.obs, traj.actions).log_probs).all()
        assert bf.n_states_ == bf.n_initial_states_ - bf.n_merges_ == hmm.n_states
        sums = [np.asarray(T.sum(axis=1)).ravel() for T in hmm.T]
        assert all(np.allclose(s[s > 0], 1.0) for s in sums)
    assert a.to_hmm("map").n_states == a.n_states_


def test_candidates_restrict_merges(small_walk):
    traj = small_walk
    for incremental in (True, False):
        none = BestFirstMerging(incremental=incremental, candidates=lambda m: np.zeros((0, 2), np.int64)).fit(traj)
        assert none.n_merges_ == 0 and none.n_states_ == none.n_initial_states_
    allowed = set()

    def rule(m):
        pairs = sf_candidates(k=2)(m)
        allowed.update(map(tuple, pairs.tolist()))
        return pairs

    bf = BestFirstMerging(incremental=False, candidates=rule).fit(traj)
    assert 0 < bf.n_merges_ and allowed
    # every merged group is connected by allowed pairs (a merged state inherits its parts' candidates)
    for group in np.unique(bf.labels_):
        members = set(np.flatnonzero(bf.labels_ == group).tolist())
        seen, todo = set(), [min(members)]
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            todo += [v for v in members if (min(u, v), max(u, v)) in allowed]
        assert seen == members


def test_bad_inputs_raise():
    traj = Trajectories([[0, 1, 0]], [[-1, 0, 0]])
    for params, error, field in [({"prior_weight": 0}, ValueError, "prior_weight"),
                                 ({"structure_prior": -1}, ValueError, "structure_prior"),
                                 ({"max_merges": -2}, ValueError, "max_merges"), ({"initial": "dag"}, ValueError, "initial"),
                                 ({"incremental": "yes"}, TypeError, "incremental"),
                                 ({"candidates": [(0, 1)]}, TypeError, "candidates"),
                                 ({"search": "fold"}, ValueError, "incremental=False")]:
        bad = BestFirstMerging(**params)   # accepted by the constructor, refused by fit
        with pytest.raises(error, match=field):
            bad.fit(traj)
    with pytest.raises(TypeError, match="data must be"):
        BestFirstMerging().fit(np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="n_obs"):
        BestFirstMerging().fit(traj, n_obs=1)
    with pytest.raises(ValueError, match="n_actions"):
        BestFirstMerging().fit(traj, n_actions=0)
    with pytest.raises(ValueError, match="different emissions"):
        BestFirstMerging(candidates=lambda m: np.array([[0, 1]])).fit(traj)
    with pytest.raises(ValueError, match="outside"):
        BestFirstMerging(candidates=lambda m: np.array([[0, 99]])).fit(traj)
    with pytest.raises(ValueError, match="not fitted"):
        BestFirstMerging().to_hmm()
    with pytest.raises(ValueError, match="estimate"):
        BestFirstMerging().fit(traj).to_hmm("median")


# ------------------------------------------------------------ incremental vs batch, diagnosis


def count_graph(bf):
    """The merged model as a networkx graph: states with their emission, edges with (action, count)."""
    g = nx.MultiDiGraph()
    s, a, d, c = bf.edges_
    for i, o in enumerate(bf.emission_):
        g.add_node(i, o=int(o))
    g.add_node(bf.n_states_, o=-1)  # start
    g.add_node(bf.n_states_ + 1, o=-2)  # final
    for s_, a_, d_, c_ in zip(s, a, d, c):
        g.add_edge(int(s_), int(d_), a=int(a_), c=float(c_))
    return g


def same_model(b1, b2):
    def edges(p):
        return sorted((e["a"], e["c"]) for e in p.values())

    return nx.is_isomorphic(count_graph(b1), count_graph(b2), node_match=lambda p, q: p["o"] == q["o"],
                            edge_match=lambda p, q: edges(p) == edges(q))


@pytest.mark.parametrize("case", ["ab+", "a*b*", "grid 3x3, 5 colours"])
@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_finds_the_batch_model(case, seed):
    """Stolcke & Omohundro's incremental schedule ends with the model batch merging finds on the same data."""
    rng = np.random.default_rng(seed)
    if case == "ab+":
        traj, lam = language(ab_plus, 10, 25, rng), 16.0
    elif case == "a*b*":
        traj, lam = language(a_star_b_star, 10, 30, rng), 4.0
    else:
        traj, lam = random_walk(gridworld(3, 3, n_colours=5, seed=seed), 10, 20, seed=seed), 1.0
    inc = BestFirstMerging(structure_prior=lam, seed=seed).fit(traj)
    for initial in ("sequences", "tree"):
        batch = BestFirstMerging(structure_prior=lam, incremental=False, initial=initial, seed=seed).fit(traj)
        assert same_model(inc, batch)
        assert inc.log_posterior_ == pytest.approx(batch.log_posterior_, abs=1e-9)
    # the isomorphism check is not vacuous: one merge fewer is another model
    fewer = BestFirstMerging(structure_prior=lam, incremental=False, max_merges=batch.n_merges_ - 1).fit(traj)
    assert not same_model(inc, fewer)


def test_path_log_posterior_scores_any_labelling(small_world):
    env = small_world
    traj = random_walk(env, 6, 15, seed=3)
    for incremental in (True, False):
        bf = BestFirstMerging(incremental=incremental, structure_prior=0.5).fit(traj)
        labels = bf.labels_[bf.initial_model_.path]
        assert path_log_posterior(traj, labels, structure_prior=0.5) == pytest.approx(bf.log_posterior_, abs=1e-9)
    # the true world: deterministic rows have zero log evidence, so only the structure prior remains
    Q = len(np.unique(traj.states))
    model = sequence_model(traj)
    lab = np.concatenate([traj.states.ravel(), [99, 100]])
    n_trans = len({(int(s), int(a), int(d)) for s, a, d in zip(lab[model.src], model.act, lab[model.dst])})
    expected = -(n_trans * np.log(Q + 1) + Q * np.log(env.n_obs + 1))
    assert path_log_posterior(traj, traj.states) == pytest.approx(expected, abs=1e-9)
    # names of states do not matter
    assert path_log_posterior(traj, 7 * traj.states + 3) == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ValueError, match="one observation"):
        path_log_posterior(traj, np.zeros_like(traj.obs))
    with pytest.raises(ValueError, match="shaped like obs"):
        path_log_posterior(traj, traj.states[:, 1:])


def test_batch_refuses_a_pair_cache_beyond_the_limit(monkeypatch, small_walk):
    import hmmmerge.baselines.bfmm as bfmm

    traj = small_walk
    monkeypatch.setattr(bfmm, "MAX_PAIR_CACHE", 500)
    with pytest.raises(ValueError, match="pair scores"):
        BestFirstMerging(incremental=False).fit(traj)
    assert BestFirstMerging().fit(traj).n_states_ >= 1  # incremental keeps the working model small


def test_estimator_conventions(small_world):
    traj = random_walk(small_world, 6, 10, seed=2)
    bf = BestFirstMerging(structure_prior=0.5)
    assert repr(bf) == "BestFirstMerging(structure_prior=0.5)"
    assert BestFirstMerging(**bf.get_params()).get_params() == bf.get_params()
    # the same data as a pair (obs, actions) give the same model
    a = BestFirstMerging().fit(traj)
    b = BestFirstMerging().fit((traj.obs, traj.actions))
    assert np.array_equal(a.merges_, b.merges_) and a.log_posterior_ == b.log_posterior_
    # fit starts afresh: refitting after set_params equals a new estimator's fit
    other = random_walk(small_world, 4, 10, seed=9)
    a.fit(other).set_params(incremental=False).fit(traj)
    fresh = BestFirstMerging(incremental=False).fit(traj)
    assert a.merges_per_episode_ is None
    assert np.array_equal(a.merges_, fresh.merges_) and a.log_posterior_ == fresh.log_posterior_
    # parameters are checked again by fit
    with pytest.raises(ValueError, match="structure_prior"):
        a.set_params(structure_prior=-1.0).fit(traj)


# ------------------------------------------------------------ determinising folds (search="fold")


def emission_deterministic(bf):
    """No row (state, action) of the merged model has two successors with the same emission."""
    s, a, d, _ = bf.edges_
    em = np.concatenate([bf.emission_, [-1, -2]])
    keys = list(zip(s.tolist(), a.tolist(), em[d].tolist()))
    return len(keys) == len(set(keys))


@given(st.integers(0, 10_000))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fold_search_tracks_the_posterior_exactly(seed):
    """The folds' incremental scores (with every rejected fold undone from its journal) add up to the
    posterior recomputed from scratch, and every accepted fold raises it."""
    rng = np.random.default_rng(seed)
    traj = random_traj(rng, int(rng.integers(2, 8)), int(rng.integers(2, 9)), int(rng.integers(2, 4)), 2)
    lam = float(rng.choice([0.1, 0.5, 1.0, 3.0]))
    alpha = float(rng.choice([0.5, 1.0, 2.0]))
    bf = BestFirstMerging(incremental=False, search="fold", structure_prior=lam, prior_weight=alpha,
                          seed=seed).fit(traj)
    assert bf.log_posterior_trace_[-1] == pytest.approx(bf.log_posterior_, abs=1e-9)
    assert bf.log_posterior_trace_[0] == pytest.approx(
        full_log_posterior(bf.initial_model_, np.arange(bf.n_initial_states_), alpha, lam), abs=1e-9)
    assert (bf.merge_gains_ > 0).all()
    assert emission_deterministic(bf)
    assert np.isfinite(bf.to_hmm().run_filter(traj.obs, traj.actions).log_probs).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_fold_search_recovers_a_small_deterministic_world(seed):
    """With enough data and a light structure prior the folds find the true world: the merged states are
    the true cells (oracle: the walk's true states) and the posterior equals the true world's."""
    env = gridworld(4, 4, n_colours=4, seed=seed)
    traj = random_walk(env, 200, 30, seed=seed)
    bf = BestFirstMerging(incremental=False, search="fold", structure_prior=0.1, seed=seed).fit(traj)
    labels = bf.labels_[bf.initial_model_.path]
    pairs = set(zip(labels.ravel().tolist(), traj.states.ravel().tolist()))
    assert len(pairs) == bf.n_states_ == len(np.unique(traj.states))  # a bijection between states and cells
    assert bf.log_posterior_ == pytest.approx(path_log_posterior(traj, traj.states, structure_prior=0.1), abs=1e-9)


def test_fold_search_on_ab_plus():
    rng = np.random.default_rng(0)
    bf = BestFirstMerging(incremental=False, search="fold", structure_prior=16.0).fit(language(ab_plus, 10, 25, rng))
    em, edges, _ = structure(bf)
    assert sorted(em.tolist()) == [0, 1, 2]
    assert edges == {(0, 1), (1, 0), (1, 2), (2, 0)}


def test_fold_search_needs_batch_and_the_tree():
    for kw in (dict(), dict(incremental=False, initial="sequences"), dict(incremental=False, max_merges=3),
               dict(incremental=False, candidates=sf_candidates())):
        with pytest.raises(ValueError, match="search='fold'"):
            BestFirstMerging(search="fold", **kw).fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]))
    with pytest.raises(ValueError, match="search must be"):
        BestFirstMerging(search="greedy").fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]))


def test_cli_baseline_bfmm_uses_all_episodes_and_the_fold_option(capsys):
    import json

    from hmmmerge.cli import main

    common = ["baseline", "bfmm", "--grid", "4x4", "--colours", "4", "--episodes", "200", "--episode-length",
              "30", "--eval-episodes", "20", "--seed", "1", "--json"]
    assert main(common) == 0
    pairs = json.loads(capsys.readouterr().out)
    assert pairs["episodes"] == 200 and pairs["model"] == "bfmm"
    assert main(common + ["--bfmm-search", "fold", "--bfmm-structure-prior", "0.1"]) == 0
    fold = json.loads(capsys.readouterr().out)
    # on this small deterministic world the folds recover the world (cf. the oracle test above)
    assert fold["n_states"] == 16 and fold["accuracy"] == 1.0 and fold["accuracy"] > pairs["accuracy"]
    with pytest.raises(SystemExit) as refused:  # checked when the flags are parsed, like every model option
        main(common + ["--bfmm-structure-prior", "-1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "structure_prior" in err[0]
