"""The numba kernels of the fold merger against the pure-Python reference (decision for decision, and
reading its files), Clusters.relabel, and the single_evidence rule.  The O(level 2) shortcuts
(level-2 transitions, purity) are checked against a recount in ``test_fold.py``."""

import importlib.util
import os

import numpy as np
import pytest

from hmmmerge.agent import TwoLevelMemory
from hmmmerge.clusters import Clusters
from hmmmerge.fold import FoldMerger
from hmmmerge.reproduce.beyond import bench_walks, bench_world


def _reference():
    """The pure-Python merger of ``tests/fold_reference.py`` (loaded by path: the tests are not a package)."""
    path = os.path.join(os.path.dirname(__file__), "fold_reference.py")
    spec = importlib.util.spec_from_file_location("fold_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FoldMerger


Reference = _reference()


def fit(env, traj, reference=False, merge_params=None):
    """An agent with the fold merger fitted to ``traj``: the pure-Python one (``reference``) or the kernels
    with the first version's rule (``single_evidence`` off)."""
    extra = merge_params or {}
    merger = Reference(**extra) if reference else FoldMerger(**{"single_evidence": 10**6, **extra})
    return TwoLevelMemory(env.n_obs, env.n_actions, merge="fold", merger=merger, seed=0).fit(traj)


def assert_same_run(a, b):
    """Same history, clusters and counters; the same predictions over the episodes of ``a``'s last call."""
    ha, hb = a.history(), b.history()
    assert all(np.array_equal(ha[k], hb[k], equal_nan=True) for k in ha)
    for k in a.last_predictions_:
        tail = len(a.last_predictions_[k])
        np.testing.assert_array_equal(a.last_predictions_[k], b.last_predictions_[k][-tail:])
    n = a.memory_.n_states
    np.testing.assert_array_equal(a.clusters_.assignment[:n], b.clusters_.assignment[:n])
    assert a.merger_.stats == b.merger_.stats


CASES = {
    "paper-undo": dict(world="grid", colouring=0, seed=0, episodes=300),   # one contradiction, one undo
    "grid4": dict(world="grid", colours=4, colouring=1, seed=1, episodes=120),
    "maze": dict(world="maze", colouring=0, seed=0, episodes=120),
    "noise": dict(world="grid", colouring=0, seed=0, noise=0.05, episodes=80),   # undos everywhere
    "slip": dict(world="maze", colouring=1, seed=1, slip=0.1, episodes=80),
    "no-start": dict(world="grid", colouring=1, seed=1, start="random", episodes=50),
    # the provisional pass off, and with a lead of 2 (the other cases run the default, 1)
    "no-provisional": dict(world="grid", colouring=2, seed=1, episodes=200, merge_params={"provisional_lead": None}),
    "provisional-2": dict(world="grid", colours=4, colouring=2, seed=2, episodes=150,
                          merge_params={"provisional_lead": 2}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernels_reproduce_the_python_reference(name):
    config = CASES[name]
    env = bench_world(config)
    traj, _ = bench_walks(env, config)
    params = config.get("merge_params")
    new, ref = fit(env, traj, merge_params=params), fit(env, traj, reference=True, merge_params=params)
    assert_same_run(new, ref)
    got, want = new.merger_.state_dict(), ref.merger_.state_dict()
    assert sorted(got) == sorted(want)
    for key in set(want) - {"fold_reds", "fold_cid"}:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # red blocks: the same per colour, in the same order (the reference groups them by colour)
    for c in np.unique(want["fold_reds"][:, 0]):
        np.testing.assert_array_equal(got["fold_reds"][got["fold_reds"][:, 0] == c],
                                      want["fold_reds"][want["fold_reds"][:, 0] == c])
    # cluster ids of the current blocks
    roots = got["fold_cid"][:, 0]
    assert dict(map(tuple, want["fold_cid"][np.isin(want["fold_cid"][:, 0], roots)].tolist())) == \
        dict(map(tuple, got["fold_cid"].tolist()))


def test_a_file_written_by_the_reference_resumes_with_the_kernels(tmp_path):
    config = dict(world="grid", colouring=2, seed=3, episodes=160)
    env = bench_world(config)
    traj, _ = bench_walks(env, config)
    first = type(traj)(traj.obs[:70], traj.actions[:70], traj.states[:70])
    rest = type(traj)(traj.obs[70:], traj.actions[70:], traj.states[70:])
    whole = fit(env, traj, reference=True)
    path = os.path.join(tmp_path, "agent.npz")
    fit(env, first, reference=True).save(path)
    back = TwoLevelMemory.load(path)   # the file names the mode, "fold": the kernels resume it
    assert type(back.merger_) is FoldMerger
    assert_same_run(back.partial_fit(rest), whole)


def test_relabel_renumbers_merges_and_keeps_counts_with_their_clusters():
    cl = Clusters(np.array([0, 1, 2, 3, -1, 2]))
    valid, counts = cl.depth_counts("f", 1, 1)
    valid[:] = True
    counts[:, 0, 0] = [10, 11, 12, 13]
    cl.relabel([0, 1, 1, 2])                    # clusters 1 and 2 merge, 3 becomes 2
    assert cl.assignment.tolist() == [0, 1, 1, 2, -1, 1] and cl.n_clusters == 3
    valid, counts = cl.depth_counts("f", 1, 1)
    assert valid[:3].tolist() == [True, True, True] and counts[:3, 0, 0].tolist() == [10, 23, 13]
    assert not valid[3:].any() and not counts[3:].any()  # spare rows
    assert cl.cluster_emission(np.array([5, 6, 6, 7, 9, 6])).tolist() == [5, 6, 7]
    for bad in ([0, 1], [0, 2, 2], [0, -1, 1]):
        with pytest.raises(ValueError, match="new_of_old"):
            cl.relabel(bad)


def test_single_evidence_merges_into_the_only_consistent_red_block():
    # root 9; actions 0 and 1 both lead to colour 1, then 2, 3, 4: the only pair of colour-1 blocks agrees on
    # three blocks, below min_evidence=4; single_evidence=3 accepts it (no other red block of colour 1)
    from hmmmerge.episodic import EpisodicMemory

    def run(**params):
        mem = EpisodicMemory(n_obs=10, n_actions=2)
        st = [[mem.observe(o, a) for o, a in path] for path in ([(9, -1), (1, 0), (2, 0), (3, 0), (4, 0)],
                                                               [(9, -1), (1, 1), (2, 0), (3, 0), (4, 0)])]
        fold, cl = FoldMerger(min_evidence=4, provisional_lead=None, **params), Clusters(n_states=0)
        fold.observe(mem, st, [[-1, 0, 0, 0, 0], [-1, 1, 0, 0, 0]])
        fold.sleep(mem, cl)
        return cl.assignment[st[0][1]] == cl.assignment[st[1][1]]

    assert not run() and not run(single_evidence=4) and run(single_evidence=3)
    with pytest.raises(ValueError, match="single_evidence"):
        FoldMerger(single_evidence=-1).observe_tree(EpisodicMemory(2, 1))   # checked at first use


@pytest.mark.parametrize("past", [0, 1, 3])
def test_kernels_reproduce_the_reference_when_colours_fold(past):
    # long episodes in a world with colours seen in one cell only: the colour fold opens every provisional
    # pass (gridworld(6, 6, 20 colours): 3 episodes of 600 moves; the consolidated automaton stays small)
    from hmmmerge import gridworld, random_walk

    env = gridworld(6, 6, n_colours=20, seed=1)
    traj = random_walk(env, 3, 600, seed=3)
    params = {"colour_past": past, "colour_evidence": 10}
    new, ref = fit(env, traj, merge_params=params), fit(env, traj, reference=True, merge_params=params)
    assert_same_run(new, ref)
    off = fit(env, traj, merge_params={"colour_evidence": None})
    assert off.n_clusters_ != new.n_clusters_    # the colour fold changed level 2
