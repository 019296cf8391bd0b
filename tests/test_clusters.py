"""Level 2: the connection matrix, the level-2 model against explicit loops, partitions, purity."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.clusters import Clusters, level2_hmm
from hmmmerge.evaluate import weighted_purity
from hmmmerge.episodic import EpisodicMemory


def small_memory(seed, episodes=15, length=8, n_colours=3):
    env = gridworld(4, 4, n_colours=n_colours, seed=seed)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, episodes, length, seed=seed))
    return env, mem


def explicit_level2(mem, C):
    """T2[a][c, d] ∝ sum_{i, j} C[i, c] T1[a][i, j] C[j, d] by loops over states."""
    n, k = C.shape
    T2 = np.zeros((mem.n_actions, k, k))
    for a in range(mem.n_actions):
        for i in range(n):
            j = mem.next_state[a, i]
            if j >= 0:
                T2[a] += np.outer(C[i], C[j])
    sums = T2.sum(axis=2, keepdims=True)
    T2 = np.divide(T2, sums, out=np.zeros_like(T2), where=sums > 0)
    E2 = np.zeros((k, mem.n_obs))
    for i in range(n):
        E2[:, mem.emission[i]] += C[i]
    return T2, E2 / E2.sum(1, keepdims=True)


@pytest.mark.parametrize("seed", range(4))
def test_level2_matches_explicit_loop_hard_and_soft(seed):
    _, mem = small_memory(seed)
    rng = np.random.default_rng(seed)
    # hard assignment: random same-colour groups, some states unassigned
    assign = np.full(mem.n_states, -1)
    for o in range(mem.n_obs):
        states = rng.permutation(np.flatnonzero(mem.emission == o))
        assign[states[: len(states) * 3 // 4]] = o * 100 + rng.integers(0, 3, size=len(states[: len(states) * 3 // 4]))
    cl = Clusters(assign)
    T2, E2 = explicit_level2(mem, cl.connection_matrix().toarray())
    hmm = level2_hmm(mem, cl)
    assert np.allclose(np.stack([m.toarray() for m in hmm.T]), T2)
    assert np.allclose(hmm.E, E2)
    # real-valued C (the paper's generalisation)
    C = rng.random((mem.n_states, 5)) * (rng.random((mem.n_states, 1)) < 0.8)
    T2s, E2s = explicit_level2(mem, C)
    soft = level2_hmm(mem, C)
    assert np.allclose(np.stack([m.toarray() for m in soft.T]), T2s)
    assert np.allclose(soft.E, E2s)


@pytest.mark.parametrize("seed", range(3))
def test_agent_t2_equals_level2_hmm(seed):
    env = gridworld(5, 5, n_colours=3, seed=seed)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", initial_size=3, seed=seed)
    agent.fit(random_walk(env, 40, 12, seed=seed))
    agent.sleep()
    ref = agent.level2_hmm()
    _, indptr, indices, data = agent._level2[:4]
    import scipy.sparse as sp

    k = agent.n_clusters_
    stacked = sp.csr_matrix((data, indices, indptr), shape=(env.n_actions * k, k)).toarray()
    assert np.allclose(stacked, np.vstack([m.toarray() for m in ref.T]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-1, 6), min_size=1, max_size=30), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=6))
def test_merge_invariants(assign, pairs):
    cl = Clusters(np.array(assign))
    before = cl.assignment.copy()
    k = cl.n_clusters
    pairs = [(a % k, b % k) for a, b in pairs] if k else []
    cl.merge(pairs)
    after = cl.assignment
    # unassigned states stay unassigned, nothing else becomes unassigned
    assert np.array_equal(before < 0, after < 0)
    # ids are compact
    if (after >= 0).any():
        assert set(np.unique(after[after >= 0])) == set(range(cl.n_clusters))
    # states together before stay together; merged pairs end up together
    for i in range(len(before)):
        for j in range(len(before)):
            if before[i] >= 0 and before[i] == before[j]:
                assert after[i] == after[j]
    for a, b in pairs:
        ia, ib = np.flatnonzero(before == a), np.flatnonzero(before == b)
        if len(ia) and len(ib):
            assert after[ia[0]] == after[ib[0]]
    # C stays a valid hard assignment: each row sums to 0 or 1
    rows = np.asarray(cl.connection_matrix().sum(axis=1)).ravel()
    assert set(rows.tolist()) <= {0.0, 1.0}
    assert cl.sizes().sum() == (after >= 0).sum()


def test_split_and_disconnect_leave_level1_untouched():
    env, mem = small_memory(0)
    snapshot = (mem.next_state.copy(), mem.emission.copy())
    cl = Clusters(n_states=mem.n_states)
    cl.partition_unassigned(mem.emission, 4, seed=0)
    c = int(cl.assignment[cl.assignment >= 0][0])
    members = cl.members(c)
    new = cl.split(members[:2])
    assert set(cl.members(new)) == set(members[:2])
    cl.disconnect(members[2:3])
    assert cl.assignment[members[2]] == -1
    assert np.array_equal(mem.next_state, snapshot[0]) and np.array_equal(mem.emission, snapshot[1])
    with pytest.raises(ValueError, match="one cluster"):
        cl.split(np.flatnonzero(cl.assignment >= 0))


def test_partition_sizes_and_remainder():
    emission = np.repeat(np.arange(3), [7, 10, 3])
    cl = Clusters(n_states=len(emission))
    added = cl.partition_unassigned(emission, 3, seed=1)
    assert added == 2 + 3 + 1
    assert set(cl.sizes().tolist()) == {3}
    colours = cl.cluster_emission(emission)
    for c in range(cl.n_clusters):
        assert (emission[cl.members(c)] == colours[c]).all()
    assert (cl.assignment == -1).sum() == 1 + 1 + 0
    # a later call only partitions the states still waiting
    cl.grow(len(emission) + 2)
    assert cl.partition_unassigned(np.concatenate([emission, [0, 0]]), 3, seed=1) == 1
    with pytest.raises(ValueError, match="size"):
        cl.partition_unassigned(emission, 0)


def test_merges_never_raise_weighted_purity():
    """sum(top label count) can only drop when clusters are united: purity is monotone under merges."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 6, size=200)
    cl = Clusters(rng.integers(0, 40, size=200))
    p = weighted_purity(cl.assignment, labels, include_singletons=True)
    for _ in range(10):
        k = cl.n_clusters
        cl.merge(rng.integers(0, k, size=(3, 2)))
        q = weighted_purity(cl.assignment, labels, include_singletons=True)
        assert q <= p + 1e-12
        p = q


def test_level2_bad_inputs():
    _, mem = small_memory(0)
    with pytest.raises(ValueError, match="no clusters"):
        level2_hmm(mem, Clusters(n_states=mem.n_states))
    with pytest.raises(ValueError, match="rows"):
        level2_hmm(mem, np.ones((3, 2)))
    with pytest.raises(ValueError, match="negative"):
        level2_hmm(mem, -np.ones((mem.n_states, 2)))
    with pytest.raises(ValueError, match="cluster ids"):
        Clusters(np.array([0, -2]))
