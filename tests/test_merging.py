"""Algorithm 3: acceptance statistics, threshold, pairing rules, one merge iteration."""

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from hmmmerge import gridworld, random_walk
from hmmmerge.clusters import Clusters
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.merging import RandomMerger, SFMerger, cluster_sets, merge_iteration


def test_acceptance_is_phi_of_z():
    sim = np.array([[0.9, 0.5, 0.4, 0.6], [0.7, 0.7, 0.7, 0.7]])
    best, top, p = SFMerger().acceptance(sim)
    row = sim[0]
    assert best.tolist() == [0, 0]
    assert p[0] == pytest.approx(norm.cdf((row.max() - row.mean()) / row.std()))
    assert p[1] == pytest.approx(0.5)  # std 0: z = 0


def test_acceptance_frequency_matches_phi():
    """Bernoulli draws accept each probe with probability Phi((max - mean) / std)."""
    probes = np.array([[1.0, 0.0]])
    cands = np.array([[1.0, 0.1], [0.0, 1.0], [0.5, 0.5], [0.9, 0.3]])
    m = SFMerger(threshold=0.0)
    _, _, p = m.acceptance(np.exp(-np.linalg.norm(probes[:, None] - cands[None], axis=2)))
    rng = np.random.default_rng(0)
    n = 4000
    accepted = sum(len(m.select_pairs(probes, cands, rng)[0]) for _ in range(n))
    assert binomtest(accepted, n, p[0]).pvalue > 1e-4


def test_threshold_blocks_weak_pairs():
    probes = np.array([[0.0, 0.0], [10.0, 10.0]])
    cands = np.array([[0.1, 0.0], [5.0, 5.0], [6.0, 6.0]])
    m = SFMerger(threshold=0.5)
    for seed in range(20):
        pi, ci = m.select_pairs(probes, cands, seed)
        assert 1 not in pi.tolist()  # best similarity of probe 1 is exp(-4*sqrt 2) < 0.5


def test_random_merger_pairs_uniformly():
    rng = np.random.default_rng(0)
    picks = np.concatenate([RandomMerger().select_pairs(np.zeros((50, 2)), np.zeros((5, 2)), rng)[1]
                            for _ in range(200)])
    counts = np.bincount(picks, minlength=5)
    assert counts.min() > 0.8 * len(picks) / 5 and counts.max() < 1.2 * len(picks) / 5


def test_cluster_sets():
    assign = np.array([2, 0, 2, -1, 1, 0])
    ptr, idx = cluster_sets(assign, np.array([2, 1]))
    assert ptr.tolist() == [0, 2, 3]
    assert sorted(idx[:2].tolist()) == [0, 2] and idx[2:].tolist() == [4]


@pytest.fixture(scope="module")
def memory():
    env = gridworld(seed=0)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, 200, seed=0))
    return mem


@pytest.mark.parametrize("merger", [SFMerger(), RandomMerger(), SFMerger(one_merge_per_candidate=False)])
def test_merge_iteration_invariants(memory, merger):
    cl = Clusters(n_states=memory.n_states)
    cl.partition_unassigned(memory.emission, 10, seed=1)
    before = cl.assignment.copy()
    snapshot = memory.next_state.copy()
    report = merge_iteration(memory, cl, merger, seed=2)
    assert report["probes"] == report["eligible"] // 2
    assert cl.n_clusters == len(np.unique(before[before >= 0])) - report["merges"]
    # one colour only, states never change colour or become unassigned, level 1 untouched
    changed = np.flatnonzero(_canonical(before) != _canonical(cl.assignment))
    assert len(np.unique(memory.emission[changed])) <= 1
    assert np.array_equal(before < 0, cl.assignment < 0)
    assert np.array_equal(snapshot, memory.next_state)
    if merger.one_merge_per_candidate:
        # each candidate absorbs at most one probe: merged clusters hold at most two old ones
        for c in range(cl.n_clusters):
            assert len(np.unique(before[cl.assignment == c])) <= 2


def _canonical(assign):
    """Relabel clusters by their first member, to compare partitions."""
    out = np.full_like(assign, -1)
    first = {}
    for i, c in enumerate(assign.tolist()):
        if c >= 0:
            out[i] = first.setdefault(c, i)
    return out


def test_merge_iteration_deterministic(memory):
    results = []
    for _ in range(2):
        cl = Clusters(n_states=memory.n_states)
        cl.partition_unassigned(memory.emission, 10, seed=3)
        merge_iteration(memory, cl, SFMerger(), seed=4)
        results.append(cl.assignment.copy())
    assert np.array_equal(*results)


def test_bad_configuration():
    with pytest.raises(ValueError, match="min_depth"):
        SFMerger(horizon=3, min_depth=5)
