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
    _, indptr, indices, data = agent.level2_.arrays[:4]
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


def _random_edits(cl, rng, n_ops, emission, joins=False):
    """Random changes of C through the Clusters methods a sleep uses (and a few more); ``joins``: also
    connect states by writing C directly and announcing them (the agent's online joins)."""
    for _ in range(n_ops):
        k, a = cl.n_clusters, cl.assignment
        op = rng.integers(9 if joins else 8)
        free, used = np.flatnonzero(a < 0), np.flatnonzero(a >= 0)
        if op == 0 and len(free):
            cl.add_clusters([rng.choice(free, size=min(len(free), rng.integers(1, 4)), replace=False)])
        elif op == 1 and k >= 2:
            cl.merge(rng.integers(0, k, size=(rng.integers(1, 3), 2)))
        elif op == 2 and k and len(used):
            cl.assign(rng.choice(used, size=rng.integers(1, 4)), int(rng.integers(k)))
            cl.compact_assigned()
        elif op == 3 and k:
            members = cl.members(int(rng.integers(k)))
            cl.split(members[:max(1, len(members) // 2)])
        elif op == 4 and k:
            cl.relabel(rng.permutation(k))
        elif op == 5 and len(used) and rng.random() < 0.3:
            cl.disconnect(rng.choice(used, size=1))
        elif op == 6:
            cl.partition_unassigned(emission, size=2, seed=int(rng.integers(1000)))
        elif op == 7 and k >= 2:  # pool two clusters and deal their states out again (a merge with split)
            x, y = rng.choice(k, size=2, replace=False)
            pooled = np.concatenate([cl.members(x), cl.members(y)])
            to = np.where(rng.random(len(pooled)) < rng.random(), x, y)
            change = cl.assignment[pooled] != to
            cl.assign_each(pooled[change], to[change], whole=[x, y])
            cl.compact_assigned()
        elif op == 8 and k and len(free):
            joined = rng.choice(free, size=min(len(free), 2), replace=False)
            a[joined] = rng.integers(0, k)
            cl.note_joined(joined)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 30), n_ops=st.integers(0, 12))
def test_changes_match_a_comparison_of_c_before_and_after(seed, n, n_ops):
    """What the journal reports equals comparing C before and after: every state not ``moved`` is in
    ``relabel`` of its old cluster, a moved one is not (``was`` = that image), relabel maps old ids
    consistently, emptied ids get ghosts; ok is False iff a connected state lost its cluster."""
    rng = np.random.default_rng(seed)
    emission = rng.integers(0, 2, n)
    cl = Clusters(np.where(rng.random(n) < 0.5, rng.integers(0, 4, n), -1))
    _random_edits(cl, rng, 3, emission)
    old, k_old = cl.assignment.copy(), cl.n_clusters
    cl.record_changes()
    _random_edits(cl, rng, n_ops, emission)
    ch = cl.changes()
    new, k = cl.assignment, cl.n_clusters
    assert ch.relabel.shape == (k_old,) and (ch.relabel >= 0).all() and (ch.relabel < k + ch.n_ghosts).all()
    image = np.append(ch.relabel, -1)[old]  # -1 (not connected) picks the appended -1
    moved = np.zeros(n, dtype=bool)
    moved[ch.moved] = True
    assert np.array_equal(ch.moved, np.sort(ch.moved))
    assert np.array_equal(ch.was, image[ch.moved])
    assert np.array_equal(moved, (new >= 0) & (new != image))
    assert ch.ok == (not ((old >= 0) & (new < 0)).any())
    for g in range(k, k + ch.n_ghosts):  # a ghost holds no state now
        assert not (new == g).any()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 30))
def test_partition_of_the_states_left_over_equals_a_partition_of_all(seed, n):
    """partition_unassigned looks only at states left over last time and new ones: the same clusters
    as a fresh Clusters that scans every state."""
    rng = np.random.default_rng(seed)
    emission = rng.integers(0, 3, n)
    cl = Clusters(np.full(n // 2, -1))
    _random_edits(cl, rng, 4, emission[:n // 2])
    cl.grow(n)
    twin = Clusters(cl.assignment)
    assert cl.partition_unassigned(emission, 2, seed=seed) == twin.partition_unassigned(emission, 2, seed=seed)
    assert np.array_equal(cl.assignment, twin.assignment)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 30), n_ops=st.integers(0, 15))
def test_kept_member_lists_equal_a_scan(seed, n, n_ops):
    """With keep_members on, every change (methods, announced direct joins) keeps members(c) equal to
    the states a scan of C finds, in increasing order."""
    rng = np.random.default_rng(seed)
    emission = rng.integers(0, 2, n)
    cl = Clusters(np.where(rng.random(n) < 0.5, rng.integers(0, 4, n), -1))
    cl.keep_members()
    _random_edits(cl, rng, n_ops, emission, joins=True)
    for c in range(cl.n_clusters):
        assert np.array_equal(cl.members(c), np.flatnonzero(cl.assignment == c))
