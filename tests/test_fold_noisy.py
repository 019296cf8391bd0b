"""Tests of the statistical fold for noisy observations (``merge="fold-noisy"``)."""

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import gridworld
from hmmmerge.agent import TwoLevelMemory
from hmmmerge import build_model
from hmmmerge.clusters import Clusters, level2_hmm
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.evaluate import score_trajectories
from hmmmerge.fold_noisy import StatisticalFoldMerger, pair_llr
from hmmmerge.reproduce.beyond import _walk


def noisy_walks(env, n_train, length, seed, noise=0.05):
    rng = np.random.default_rng([seed, 5])
    return _walk(env, n_train, length, rng, "fixed", noise), _walk(env, 100, length, rng, "fixed", noise)


# ---------------------------------------------------------------- the test statistic
def brute_llr(x, y, noise, pi):
    """log P(x, y | one cell) - log P(x, y | two cells), every factor written out."""
    K = len(x)
    p = np.full((K, K), noise / K) + (1 - noise) * np.eye(K)    # p[k, j]: cell colour k shows j

    def lik(c):
        return sum(pi[k] * np.prod(p[k] ** np.asarray(c)) for k in range(K))

    xy = np.asarray(x) + np.asarray(y)
    return math.log(lik(xy)) - math.log(lik(x)) - math.log(lik(y))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5).flatmap(lambda K: st.tuples(
    st.lists(st.integers(0, 6), min_size=K, max_size=K), st.lists(st.integers(0, 6), min_size=K, max_size=K),
    st.floats(0.01, 0.5), st.lists(st.floats(0.05, 1.0), min_size=K, max_size=K))))
def test_pair_llr_is_the_bayes_factor_of_the_noise_model(case):
    x, y, noise, w = case
    pi = np.asarray(w) / np.sum(w)
    assert pair_llr(x, y, noise, pi) == pytest.approx(brute_llr(x, y, noise, pi), rel=1e-7, abs=1e-7)


def test_pair_llr_signs():
    assert pair_llr([5, 0, 0], [4, 1, 0], 0.05) > 0       # one colour, one noisy visit: one cell
    assert pair_llr([5, 0, 0], [0, 5, 0], 0.05) < -15     # two colours seen often: two cells
    assert pair_llr([1, 0], [0, 1], 1e-4) < pair_llr([1, 0], [0, 1], 0.1)   # a clash weighs more without noise


@pytest.mark.parametrize("kw", [{"risk": 0}, {"risk": 1.0}, {"risk": "x"}, {"noise": 0}, {"noise": 1.5},
                                {"noise": True}, {"min_visits": 0}, {"provisional_lead": -1},
                                {"provisional_lead": True}, {"patience": 0}, {"patience": 1.5},
                                {"retest_growth": 1}, {"retest_growth": True}])
def test_bad_parameters_are_refused(kw):
    fold = StatisticalFoldMerger(**kw)     # checked at first use, not in __init__ (the Estimator convention)
    with pytest.raises((ValueError, TypeError), match="risk|noise|min_visits|provisional_lead|patience|retest_growth"):
        fold.observe_tree(EpisodicMemory(2, 1))
    with pytest.raises((ValueError, TypeError), match="risk|noise|min_visits|provisional_lead|patience|retest_growth"):
        TwoLevelMemory(4, 4, merger=StatisticalFoldMerger(**kw))._validate_params()


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="one length"):
        pair_llr([1, 0], [1], 0.05)
    with pytest.raises(ValueError, match="non-negative"):
        pair_llr([1, -1], [1, 0], 0.05)


# ---------------------------------------------------------------- structure
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.0, 0.05, 0.2]), st.integers(1, 4))
def test_every_state_in_one_cluster_and_level2_deterministic(seed, noise, every):
    env = gridworld(3, 4, n_colours=3, seed=seed % 7)
    train, _ = noisy_walks(env, 12, 15, seed, noise)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    fold, cl = StatisticalFoldMerger(), Clusters(n_states=0)
    for e in range(0, 12, every):
        part = train[e:e + every]
        states, _ = mem.observe_trajectories(part)
        fold.observe(mem, states, part.actions)
        fold.sleep(mem, cl)
        a = cl.assignment[:mem.n_states]
        assert (a >= 0).all() and cl.n_clusters == len(np.unique(a))
        hmm = level2_hmm(mem, cl)
        for T in hmm.T:   # moves are deterministic: one successor per (cluster, action)
            assert (np.diff(T.tocsr().indptr) <= 1).all()


@pytest.mark.parametrize("seed", [0, 3])
def test_provisional_decisions_never_change_the_committed_ones(seed):
    """Provisional folds are rolled back exactly: sleep by sleep, the committed blocks, counts and red
    blocks are those of a merger without them; C differs only by the provisional merges (coarser)."""
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, _ = noisy_walks(env, 120, 30, seed)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    runs = [(StatisticalFoldMerger(), Clusters(n_states=0)), (StatisticalFoldMerger(provisional_lead=None),
                                                              Clusters(n_states=0))]
    provisional, coarser = 0, False
    for e in range(0, 120, 10):
        part = train[e:e + 10]
        states, _ = mem.observe_trajectories(part)
        for fold, cl in runs:
            fold.observe(mem, states, part.actions)
            report = fold.sleep(mem, cl)[0]
        provisional += runs[0][0]._provisional
        (a, ca), (b, cb) = runs
        da, db = a.state_dict(), b.state_dict()
        for key in da:
            if key not in ("foldnoisy_cid", "foldnoisy_next_cid"):   # C (and its transitions) differ
                np.testing.assert_array_equal(da[key], db[key], err_msg=key)
        n = mem.n_states
        pairs = np.unique(np.stack([cb.assignment[:n], ca.assignment[:n]]), axis=1)
        assert len(np.unique(pairs[0])) == pairs.shape[1]       # each committed block in one cluster of C
        coarser |= ca.n_clusters < cb.n_clusters
    assert provisional > 0 and coarser


def test_noisy_siblings_join_one_block():
    """Children of one block under one action are one cell whatever colour they showed."""
    mem = EpisodicMemory(3, 1)
    episodes = [[0, 1, 2], [0, 2, 2], [0, 1, 0]]   # the second observation is 1, once 2 (noise); third 2, once 0
    rows = [[mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate(ep)] for ep in episodes]
    fold = StatisticalFoldMerger()
    fold.observe(mem, rows, [[-1, 0, 0]] * 3)
    blocks = fold.block_of(mem.n_states)
    by_depth = [{int(blocks[r[t]]) for r in rows} for t in range(3)]
    assert [len(b) for b in by_depth] == [1, 1, 1]
    assert mem.n_states == 7   # Algorithm 1 made a state per replaced link


def test_blocks_seen_less_than_min_visits_wait():
    """A two-state loop walked once: every block has one visit; only min_visits=1 may fold it."""
    mem = EpisodicMemory(2, 1)
    states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 10)]
    out = {}
    for t0, lead in ((1, None), (3, None), (3, 0.5)):
        fold, cl = StatisticalFoldMerger(min_visits=t0, provisional_lead=lead), Clusters(n_states=0)
        fold.observe(mem, [states], [[-1] + [0] * 19])
        report = fold.sleep(mem, cl)[0]
        out[t0, lead] = cl.n_clusters, report["merges"], report["provisional"] > 0
    # a provisional decision shapes C but is not committed: the blocks still wait
    assert out == {(1, None): (2, 1, False), (3, None): (mem.n_states, 0, False), (3, 0.5): (2, 0, True)}
    assert fold.n_red == 0 and len(np.unique(fold.block_of(mem.n_states))) == mem.n_states
    # walked three times, the same loop folds with the default
    for _ in range(2):
        rows = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 10)]
        fold.observe(mem, [rows], [[-1] + [0] * 19])
    fold.sleep(mem, cl)
    assert cl.n_clusters == 2


def test_agent_place_recovers_parents_and_actions():
    """The agent's hook sees states only: it must record what observe() records from the actions."""
    env = gridworld(4, 4, n_colours=3, seed=1)
    train, _ = noisy_walks(env, 60, 25, seed=3, noise=0.2)   # much noise: many replaced links
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", refresh_every=7, sleep_every=10**6,
                           seed=0).fit(train)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    states, _ = mem.observe_trajectories(train)
    ref = StatisticalFoldMerger()
    ref.observe(mem, states, train.actions)
    got, want = agent.merger_.state_dict(), ref.state_dict()
    assert agent.merger_.stats["ambiguous"] == 0
    for key in ("foldnoisy_parent", "foldnoisy_action", "foldnoisy_colour", "foldnoisy_counts"):
        np.testing.assert_array_equal(got[key], want[key])


# ---------------------------------------------------------------- the noise target, small case
@pytest.mark.parametrize("seed", [0, 1])
def test_small_noisy_world_within_the_noise_target(seed):
    """5x5 grid, 5 colours, 5% noise: held-out within 0.02 of EM on the same data, clusters <= 2x cells."""
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, fresh = noisy_walks(env, 300, 30, seed)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", seed=seed).fit(train)
    ours = score_trajectories(agent.level2_hmm(), fresh).accuracy
    em = score_trajectories(build_model("em", train, env=env, seed=seed, n_clones=8, n_iter=50), fresh).accuracy
    assert ours >= em - 0.02
    assert agent.n_clusters_ <= 2 * env.n_states
    own = score_trajectories(agent.merger_.level2_hmm(agent.memory_, agent.clusters_), fresh).accuracy
    assert own >= ours - 1e-9 or own >= em - 0.02


# ---------------------------------------------------------------- the agent with noise-aware emissions
@pytest.mark.parametrize("seed", [0, 1])
def test_online_predictor_uses_the_noise_aware_emissions(seed):
    """5x5 grid, 5 colours, 5% noise: a noisy observation no longer loses the online belief, so online
    accuracy comes near the ceiling of a perfect map (0.95 + 0.05 / 5); one colour per cluster gave ~0.3."""
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, _ = noisy_walks(env, 300, 30, seed)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", seed=seed).fit(train)
    h = agent.history()
    assert h["l2_accuracy"][-50:].mean() >= 0.90 and h["l2_no_prediction"][-50:].max() == 0
    # the emission counts behind it are every visit of the walk, by the cluster of its level-1 state
    k, states = agent.n_clusters_, agent.last_states_.ravel()
    counts = np.zeros((k, env.n_obs), dtype=np.int64)
    np.add.at(counts, (agent.clusters_.assignment[states], agent.memory_.emission[states]), 1)
    np.testing.assert_array_equal(agent.merger_._cid_counts[:k], counts)
    # the agent's level 2 is the merger's model: T2 of C, noise-aware emissions
    ours, base = agent.level2_hmm(), level2_hmm(agent.memory_, agent.clusters_)
    assert all((a != b).nnz == 0 for a, b in zip(ours.T, base.T))
    np.testing.assert_allclose(ours.E, agent.merger_.emission(agent.clusters_, agent.memory_.n_states))
    assert (ours.E > 0).all() and np.allclose(ours.E.sum(axis=1), 1)


# ---------------------------------------------------------------- files, CLI
def test_save_load_resumes_exactly(tmp_path):
    env = gridworld(4, 4, n_colours=4, seed=0)
    train, _ = noisy_walks(env, 80, 20, seed=0)
    first, second = train[:40], train[40:]
    whole = TwoLevelMemory(4, 4, merge="fold-noisy", seed=0).fit(first).partial_fit(second)
    part = TwoLevelMemory(4, 4, merge="fold-noisy", seed=0).fit(first)
    path = os.path.join(tmp_path, "agent.npz")
    part.save(path)
    back = TwoLevelMemory.load(path).partial_fit(second)
    a, b = whole.history(), back.history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    np.testing.assert_array_equal(whole.clusters_.assignment[:whole.memory_.n_states],
                                  back.clusters_.assignment[:back.memory_.n_states])


def test_damaged_merger_arrays_are_refused():
    mem = EpisodicMemory(2, 1)
    _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 0, 1])]
    fold = StatisticalFoldMerger()
    fold.observe_tree(mem)
    d = fold.state_dict()
    d["foldnoisy_delta"] = d["foldnoisy_delta"][:, :1]
    with pytest.raises(ValueError, match=r"^x.npz: foldnoisy_delta has shape \(5, 1\), expected \(5, 2\)$"):
        StatisticalFoldMerger().load_state_dict(d, source="x.npz")
    d = fold.state_dict()
    del d["foldnoisy_uf"]
    with pytest.raises(ValueError, match="^x.npz: missing array 'foldnoisy_uf'$"):
        StatisticalFoldMerger().load_state_dict(d, source="x.npz")
    d = fold.state_dict()
    d["foldnoisy_log"] = np.array([[0, 1, 99]])     # a decision about a state that does not exist
    with pytest.raises(ValueError, match="^x.npz: foldnoisy_log .*holds 99, outside -1..4$"):
        StatisticalFoldMerger().load_state_dict(d, source="x.npz")


def test_memory_of_other_sizes_is_refused():
    mem = EpisodicMemory(2, 1)
    _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1])]
    fold = StatisticalFoldMerger()
    fold.observe_tree(mem)
    with pytest.raises(ValueError, match="observations / .* actions"):
        fold.sleep(EpisodicMemory(3, 1), Clusters(n_states=0))


def test_cli_run_fold_noisy(capsys):
    import json

    from hmmmerge.cli import main

    assert main(["run", "--json", "--grid", "4x4", "--colours", "4",
                 "--episodes", "30", "--episode-length", "20", "--eval-episodes", "5", "--merge", "fold-noisy"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["n_clusters"] <= out["n_first_level_states"]


# ---------------------------------------------------------------- the provisional automaton
@pytest.mark.parametrize("seed", [0, 2])
def test_provisional_pass_leaves_no_blue_block_and_rolls_back_exactly(seed):
    """After the provisional pass every block hanging from a red block is red or folded (no block
    waits), and rolling it back restores the merger's arrays exactly."""
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, _ = noisy_walks(env, 60, 30, seed)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    states, _ = mem.observe_trajectories(train)
    fold = StatisticalFoldMerger()
    fold.observe(mem, states, train.actions)
    fold.sleep(mem, Clusters(n_states=0))
    before = fold.state_dict()
    fold._set_noise()
    fold._blue_fringe()                 # nothing new to commit: the sleep above did it
    fold._provisional_folds()
    assert fold._provisional > 0 and fold._blues() == []
    fold._end_provisional()
    after = fold.state_dict()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)


@pytest.mark.parametrize("seed", [0, 1])
def test_new_states_follow_the_transitions_of_c_between_sleeps(seed):
    """A level-1 state recorded after a sleep gets the cluster that C's automaton leads to from its
    parent's cluster under its action (a new cluster only where C has no such transition), so level 2
    stays deterministic between sleeps too."""
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, _ = noisy_walks(env, 200, 30, seed)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", sleep_every=10**6, seed=seed)
    agent.fit(train[:150])
    agent.sleep()
    n0, k0 = agent.memory_.n_states, agent.n_clusters_
    mem, a = agent.memory_, agent.clusters_.assignment
    nxt = {}
    for act in range(env.n_actions):
        src = np.flatnonzero(mem.next_state[act, :n0] >= 0)
        for s in src:
            nxt[int(a[s]), act] = int(a[mem.next_state[act, s]])
    agent.partial_fit(train[150:])
    mem, a = agent.memory_, agent.clusters_.assignment
    n1 = mem.n_states
    followed = 0
    for act in range(env.n_actions):
        src = np.flatnonzero(mem.next_state[act, :n1] >= 0)
        for s in src:
            t = int(mem.next_state[act, s])
            if t >= n0 and s < n1 and (int(a[s]), act) in nxt:
                assert a[t] == nxt[int(a[s]), act]
                followed += 1
    assert followed > 0 and agent.n_clusters_ < k0 + (n1 - n0) // 2
    hmm = level2_hmm(agent.memory_, agent.clusters_)
    for T in hmm.T:
        assert (np.diff(T.tocsr().indptr) <= 1).all()


# ---------------------------------------------------------------- undo of committed merges
def _partition(fold, n):
    """Blocks as a canonical partition of level-1 states, with each block's colour counts and red flag."""
    roots = fold.block_of(n)
    out = {}
    for r in np.unique(roots):
        members = tuple(np.flatnonzero(roots == r).tolist())
        out[members] = (tuple(fold._cnt[r]), fold._red[r])
    return out


def _fed(seed, episodes, noise=0.05):
    env = gridworld(5, 5, n_colours=5, seed=seed)
    train, _ = noisy_walks(env, episodes, 30, seed, noise)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    return env, train, mem


@pytest.mark.parametrize("seed, noise", [(1, 0.05), (3, 0.05), (0, 0.0)])
def test_rebuilt_blocks_equal_the_current_ones_when_nothing_is_refuted(seed, noise):
    """Placing along merged blocks and folding closed under determinisation commute: replaying the
    logged decisions on level 1 gives exactly the blocks, counts and red blocks the merger has."""
    env, train, mem = _fed(seed, 150, noise)
    fold, cl = StatisticalFoldMerger(retest_growth=None), Clusters(n_states=0)
    for e in range(0, 150, 15):
        part = train[e:e + 15]
        states, _ = mem.observe_trajectories(part)
        fold.observe(mem, states, part.actions)
        fold.sleep(mem, cl)
    assert fold.stats["merges"] > 5 and fold.stats["promotions"] > 5
    before = _partition(fold, mem.n_states)
    fold._set_noise()
    assert fold._retest(keep=True) == 0
    assert _partition(fold, mem.n_states) == before


@pytest.mark.parametrize("seed", [1, 3])
def test_an_undo_restores_the_blocks_without_the_wrong_merge(seed):
    """A wrong merge committed early (two cells of one colour, folded by hand) is refuted by the
    experience that follows, and undoing it gives exactly the blocks of the same merger that never
    made it; level 1 is untouched and every state stays in one block."""
    env, train, mem = _fed(seed, 300)
    fold = StatisticalFoldMerger(retest_growth=None)
    states, _ = mem.observe_trajectories(train[:40])
    fold.observe(mem, states, train[:40].actions)
    fold.sleep(mem, Clusters(n_states=0))
    clean = StatisticalFoldMerger(retest_growth=None)
    clean.load_state_dict(fold.state_dict())
    # plant a wrong merge: two red blocks of different cells whose visits show one colour
    roots, labels = fold.block_of(mem.n_states), mem.labels[:mem.n_states]
    reds = [r for r in fold._reds if fold._uf[r] == r]
    cell = {r: np.bincount(labels[roots == r]).argmax() for r in reds}
    colour = {r: int(np.argmax(fold._cnt[r])) for r in reds}
    pairs = [(r, b) for r in reds for b in reds if r < b and colour[r] == colour[b] and cell[r] != cell[b]]
    fold._set_noise()
    for r, b in pairs:
        if fold._fold(r, b) is not None:
            break
        fold._rollback(0)
    else:
        raise AssertionError("no wrong merge passes the test on this walk")
    fold._journal.clear()
    fold._log.append((0, r, b))
    assert len(np.unique(fold.block_of(mem.n_states))) < len(np.unique(clean.block_of(mem.n_states)))
    states, _ = mem.observe_trajectories(train[40:])
    for f in (fold, clean):
        f.observe(mem, states, train[40:].actions)
        f._set_noise()
    n_before = mem.n_states
    assert fold._retest() >= 1
    clean._retest(keep=True)
    assert _partition(fold, mem.n_states) == _partition(clean, mem.n_states)
    assert (fold.block_of(mem.n_states) >= 0).all() and mem.n_states == n_before


def test_save_load_resumes_exactly_through_an_undo(tmp_path):
    """The decision log and the visits per state are saved: a run resumed from a file undoes the same
    merges at its next re-test as the uninterrupted run, and ends identical."""
    env = gridworld(5, 5, n_colours=5, seed=4)
    train, _ = noisy_walks(env, 200, 30, seed=4)
    first, second = train[:100], train[100:]
    whole = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", seed=0).fit(first).partial_fit(second)
    part = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold-noisy", seed=0).fit(first)
    assert part.merger_.stats["undone"] == 0
    path = os.path.join(tmp_path, "agent.npz")
    part.save(path)
    back = TwoLevelMemory.load(path).partial_fit(second)
    assert back.merger_.stats == whole.merger_.stats and back.merger_.stats["undone"] > 0
    a, b = whole.history(), back.history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    np.testing.assert_array_equal(whole.clusters_.assignment[:whole.memory_.n_states],
                                  back.clusters_.assignment[:back.memory_.n_states])


def test_files_without_the_decision_log_still_load():
    """Arrays written before decisions were logged: the merger loads, with nothing to re-test."""
    env = gridworld(4, 4, n_colours=4, seed=0)
    train, _ = noisy_walks(env, 40, 20, seed=0)
    agent = TwoLevelMemory(4, 4, merge="fold-noisy", seed=0).fit(train)
    d = agent.merger_.state_dict()
    for key in ("foldnoisy_log", "foldnoisy_visits", "foldnoisy_retested", "foldnoisy_next_cid"):
        del d[key]
    d["foldnoisy_stats"] = d["foldnoisy_stats"][:4]
    back = StatisticalFoldMerger()
    back.load_state_dict(d, source="old.npz")
    assert back._log == [] and back.stats["undone"] == 0
    np.testing.assert_array_equal(back.block_of(agent.memory_.n_states), agent.merger_.block_of(agent.memory_.n_states))
