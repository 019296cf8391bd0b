"""Algorithm 3: acceptance statistics, threshold, pairing rules, one merge iteration."""

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from hmmmerge import random_walk
from hmmmerge.clusters import Clusters
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.merging import (RandomMerger, SFMerger, cluster_sets, merge_iteration, merge_with_split,
                              split_by_next_observation)


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
def memory(paper_world):
    env = paper_world
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, 200, seed=0))
    return mem


@pytest.mark.parametrize("merger", [SFMerger(), RandomMerger(), SFMerger(split_contradictions=False)])
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
    if not merger.split_contradictions:
        # plain unions: clusters only ever grow
        for c in np.unique(before[before >= 0]):
            assert len(np.unique(cl.assignment[before == c])) == 1


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


def test_bad_configuration(paper_world):
    """Checked at first use (a sleep, or the agent's fit), not by the constructor; every error names its field."""
    from hmmmerge.clusters import Clusters
    from hmmmerge.merging import NoMerger, RandomMerger

    mem = EpisodicMemory(10, 4)
    mem.observe_trajectories(random_walk(paper_world, 2, seed=0))
    for bad, field in [(SFMerger(horizon=3, min_depth=5), "min_depth"), (SFMerger(gamma=0), "gamma"),
                       (SFMerger(threshold=float("nan")), "threshold"), (SFMerger(horizon=0), "horizon"),
                       (SFMerger(similarity="manhattan"), "similarity"), (RandomMerger(gamma="0.8"), "gamma"),
                       (SFMerger(split_contradictions=1), "split_contradictions"),
                       (NoMerger(initial_size=0), "initial_size"), (SFMerger(merge_iterations=-1), "merge_iterations")]:
        with pytest.raises((ValueError, TypeError), match=field):
            bad.sleep(mem, Clusters(n_states=mem.n_states), np.random.default_rng(0))


class _Arrays:
    def __init__(self, next_state, emission, n_obs):
        self.next_state, self.emission, self.n_obs = np.asarray(next_state), np.asarray(emission), n_obs

    def kernel_arrays(self):
        return self.next_state, self.emission, self.n_obs


def test_split_by_next_observation_picks_best_known_action():
    # action 1 knows the successors of all four states; action 0 of only one
    mem = _Arrays([[4, -1, -1, -1, -1, -1, -1],
                   [4, 5, 6, 4, -1, -1, -1]], [0, 0, 0, 0, 1, 2, 1], 3)
    assert split_by_next_observation(mem, np.array([0, 1, 2, 3])).tolist() == [True, False, True, True]
    # no known successor at all: everyone agrees
    assert split_by_next_observation(mem, np.array([4, 5])).tolist() == [True, True]


def test_merge_with_split_pools_and_splits():
    # states 0-3 emit 0; successors under the only action: 0->4 (1), 1->5 (2), 2->6 (1), 3 unknown
    mem = _Arrays([[4, 5, 6, -1, -1, -1, -1]], [0, 0, 0, 0, 1, 2, 1], 3)
    cl = Clusters(np.array([0, 0, 1, 1, 2, 3, 2]))
    merge_with_split(mem, cl, [(0, 1)])
    a = cl.assignment
    assert a[0] == a[2] == a[3] != a[1]          # state 1 contradicts the majority (1) and is split off
    assert cl.n_clusters == 4
    # a candidate emptied by a merge is redirected to its probe
    cl = Clusters(np.array([0, 1, 2, -1, 3, 3, 3]))
    merge_with_split(mem, cl, [(0, 2), (1, 2)])   # 0 absorbs 2; (1, 2) becomes (1, 0)
    a = cl.assignment
    # pooling {1} with {0, 2}: 0 and 2 see colour 1 next, 1 sees colour 2 and stays behind alone
    assert a[0] == a[2] != a[1] and a[3] == -1
    assert cl.n_clusters == 3


@pytest.mark.parametrize("seed", range(3))
def test_merge_with_split_invariants(memory, seed):
    cl = Clusters(n_states=memory.n_states)
    cl.partition_unassigned(memory.emission, 10, seed=seed)
    before = cl.assignment.copy()
    rng = np.random.default_rng(seed)
    colour = cl.cluster_emission(memory.emission)
    ids = np.flatnonzero(colour == 3)
    perm = rng.permutation(ids)
    half = len(perm) // 2
    pairs = np.column_stack([perm[:half], rng.choice(perm[half:], half)])
    k = cl.n_clusters
    merge_with_split(memory, cl, pairs)
    assert np.array_equal(before < 0, cl.assignment < 0)           # nobody (dis)connected
    assert cl.n_clusters <= k
    for c in range(cl.n_clusters):                                  # clusters stay single-colour
        assert len(np.unique(memory.emission[cl.members(c)])) == 1
    untouched = ~np.isin(before, pairs.ravel())
    assert np.array_equal(_canonical(before)[untouched], _canonical(cl.assignment)[untouched])


def test_sf_scale_changes_similarities(memory):
    """Features scaled up make every similarity tiny, so the threshold blocks every merge."""
    for scale, expect_merges in ((100.0, False), (1.0, True)):
        cl = Clusters(n_states=memory.n_states)
        cl.partition_unassigned(memory.emission, 10, seed=5)
        report = merge_iteration(memory, cl, SFMerger(sf_scale=scale), seed=6)
        assert (report["merges"] > 0) == expect_merges


def _split_reference(memory, states):
    """split_by_next_observation in plain numpy (the oracle of the kernel)."""
    nxt, emission, _ = memory.kernel_arrays()
    succ = nxt[:, states]
    action = int(np.argmin((succ < 0).sum(axis=1)))
    known = succ[action] >= 0
    agree = np.ones(len(states), dtype=bool)
    if known.any():
        seen = emission[succ[action, known]]
        agree[known] = seen == int(np.bincount(seen).argmax())
    return agree


def _merge_with_split_reference(memory, clusters, pairs, count_horizon):
    """merge_with_split pair by pair with Python sets and fresh counts (the oracle of the kernel):
    assignment, kept counts (valid rows) and the emptied ids."""
    from hmmmerge.merging import depth_counts

    valid, counts = clusters.depth_counts(("depth-counts", count_horizon), count_horizon, memory.n_obs)
    members, absorbed, rows, touched = {}, {}, {}, set()

    def resolve(c):
        while c in absorbed:
            c = absorbed[c]
        return c

    for probe, cand in pairs:
        probe, cand = resolve(probe), resolve(cand)
        if probe == cand:
            continue
        for c in (probe, cand):
            members.setdefault(c, clusters.members(c))
            rows.setdefault(c, counts[c].copy() if valid[c] else None)
        pooled = np.concatenate([members[probe], members[cand]])
        agree = _split_reference(memory, pooled)
        members[probe], members[cand] = pooled[agree], pooled[~agree]
        touched.update((probe, cand))
        if not len(members[cand]):
            absorbed[cand] = probe
        if rows[probe] is not None and rows[cand] is not None:
            fresh = depth_counts(memory, [members[cand]], count_horizon)[0]
            rows[probe], rows[cand] = rows[probe] + rows[cand] - fresh, fresh
        else:
            rows[probe] = rows[cand] = None
    for c in touched:
        clusters.assignment[members[c]] = c
        valid[c] = rows[c] is not None and len(members[c]) > 0
        if valid[c]:
            counts[c] = rows[c]
    return sorted(c for c in touched if not len(members[c]))


@pytest.mark.parametrize("seed", range(6))
def test_merge_with_split_kernel_equals_reference(memory, seed):
    """The one-call kernel gives the assignment, kept counts and emptied clusters of the pair-by-pair
    reference, with chains (a candidate chosen twice, probes absorbed later) and partly stale counts."""
    from hmmmerge.merging import depth_counts

    horizon = 6
    runs = []
    for apply in (merge_with_split, _merge_with_split_reference):
        cl = Clusters(n_states=memory.n_states)
        cl.partition_unassigned(memory.emission, 1 + seed, seed=seed)
        valid, counts = cl.depth_counts(("depth-counts", horizon), horizon, memory.n_obs)
        k = cl.n_clusters
        counts[:k] = depth_counts(memory, [cl.members(c) for c in range(k)], horizon)
        valid[:k] = np.random.default_rng(seed).random(k) < 0.8
        ids = np.flatnonzero(cl.cluster_emission(memory.emission) == seed % memory.n_obs)
        pairs = np.random.default_rng(seed).choice(ids, size=(3 * len(ids) // 4, 2))  # chains, absorbed probes
        before = cl.assignment.copy()
        if apply is merge_with_split:
            gone = merge_with_split(memory, cl, pairs, count_horizon=horizon, compact=False)
        else:
            gone = apply(memory, cl, pairs.tolist(), horizon)
        runs.append((cl.assignment.copy(), valid[:k].copy(), counts[:k][valid[:k]].copy(), gone))
    (a, v, c, g), (ra, rv, rc, rg) = runs
    assert np.array_equal(a, ra) and np.array_equal(v, rv) and np.array_equal(c, rc) and g == rg
    assert len(g) > 0 and v.sum() > 0 and not np.array_equal(a, before)  # the case is not trivial


@pytest.mark.parametrize("seed", range(4))
def test_split_by_next_observation_equals_numpy(memory, seed):
    rng = np.random.default_rng(seed)
    for size in (0, 1, 2, 5, 40, 400):
        states = rng.choice(memory.n_states, size=size, replace=False)
        assert np.array_equal(split_by_next_observation(memory, states), _split_reference(memory, states))


def test_acceptance_statistics_equal_numpy_mean_and_std():
    """acceptance computes the row means and deviations as numpy's mean and std do, bit for bit."""
    from scipy.special import ndtr

    rng = np.random.default_rng(3)
    for _ in range(300):
        n, k = rng.integers(1, 40), rng.integers(1, 300)
        sim = np.exp(-rng.random((n, k)) * rng.choice([0.1, 1.0, 10.0, 100.0]))
        best, top, p = SFMerger().acceptance(sim)
        mean, std = sim.mean(axis=1), sim.std(axis=1)
        z = np.divide(top - mean, std, out=np.zeros_like(top), where=std > 0)
        assert np.array_equal(best, sim.argmax(axis=1)) and np.array_equal(p, ndtr(z))
