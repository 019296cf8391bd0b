"""Algorithm 2 against a literal loop, the oracle memory, the expected form and similarities."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, gridworld, random_walk
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.successor import pairwise_similarity, successor_features, true_successor_features


def literal_algorithm_2(next_state, emission, n_obs, initial, gamma, horizon):
    """Algorithm 2 line by line with Python sets."""
    sf = np.zeros(n_obs)
    ps = set(initial)
    for l in range(1, horizon + 1):
        ps = {int(next_state[a, h]) for h in ps for a in range(next_state.shape[0]) if next_state[a, h] >= 0}
        counts = np.zeros(n_obs)
        for h in ps:
            counts[emission[h]] += 1
        if counts.sum():
            sf += gamma ** (l - 1) * counts / counts.sum()
    return sf


@st.composite
def memories(draw):
    n = draw(st.integers(1, 12))
    A = draw(st.integers(1, 3))
    O = draw(st.integers(1, 4))
    ns = np.array(draw(st.lists(st.integers(-1, n - 1), min_size=A * n, max_size=A * n))).reshape(A, n)
    em = np.array(draw(st.lists(st.integers(0, O - 1), min_size=n, max_size=n)))
    sets = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=4), min_size=1, max_size=4))
    return ns, em, O, sets


class _Arrays:
    def __init__(self, ns, em, O):
        self.next_state, self.emission, self.n_obs = ns, em, O


@settings(max_examples=60, deadline=None)
@given(memories(), st.floats(0.05, 0.95), st.integers(1, 8))
def test_matches_literal_loop(mem, gamma, horizon):
    ns, em, O, sets = mem
    sf, depth = successor_features(_Arrays(ns, em, O), sets, gamma=gamma, horizon=horizon, return_depth=True)
    for i, s in enumerate(sets):
        assert np.allclose(sf[i], literal_algorithm_2(ns, em, O, s, gamma, horizon), atol=1e-12)
        # depth reached: the last depth with a non-empty frontier
        ps, reached = set(s), 0
        for l in range(1, horizon + 1):
            ps = {int(ns[a, h]) for h in ps for a in range(ns.shape[0]) if ns[a, h] >= 0}
            if not ps:
                break
            reached = l
        assert depth[i] == reached


def test_bfs_that_dies_out():
    # chain 0 -> 1 -> 2, then nothing: depth 2, later depths add nothing
    ns = np.array([[1, 2, -1]])
    sf, depth = successor_features(_Arrays(ns, np.array([0, 1, 0]), 2), [[0]], gamma=0.5, horizon=10,
                                   return_depth=True)
    assert depth.tolist() == [2]
    assert sf.tolist() == [[0.5, 1.0]]
    sf0, depth0 = successor_features(_Arrays(ns, np.array([0, 1, 0]), 2), [[2]], return_depth=True)
    assert depth0.tolist() == [0] and sf0.tolist() == [[0.0, 0.0]]


def test_sparse_indicator_input_equals_lists():
    env = gridworld(5, 5, n_colours=3, seed=0)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, 30, seed=0))
    import scipy.sparse as sp

    sets = [[0, 5, 9], [3], [1, 2, 40]]
    rows = np.repeat(np.arange(3), [3, 1, 3])
    ind = sp.csr_matrix((np.ones(7), (rows, np.concatenate(sets))), shape=(3, mem.n_states))
    assert np.array_equal(successor_features(mem, sets), successor_features(mem, ind))


def test_oracle_memory_equals_set_form_on_environment():
    """Algorithm 2 on a memory whose states are exactly the true states = the set form on the world."""
    env = gridworld(6, 6, n_colours=4, seed=5)
    oracle = _Arrays(np.asarray(env.next_state), np.asarray(env.obs), env.n_obs)
    states = [[s] for s in range(env.n_states)]
    assert np.allclose(successor_features(oracle, states), true_successor_features(env, states, form="set"))
    assert np.allclose(successor_features(env, states), true_successor_features(env, states, form="set"))


def test_expected_form_against_enumeration_of_action_sequences():
    env = gridworld(3, 3, n_colours=3, seed=1)
    gamma, horizon = 0.7, 4
    for s in range(env.n_states):
        brute = np.zeros(env.n_obs)
        for l in range(horizon):
            # P(o_{t+l+1}): average over all action sequences of length l+1
            for seq in itertools.product(range(env.n_actions), repeat=l + 1):
                x = s
                for a in seq:
                    x = env.next_state[a, x]
                brute[env.obs[x]] += gamma**l / env.n_actions ** (l + 1)
        assert np.allclose(true_successor_features(env, [s], gamma, horizon), brute)


def test_memory_sf_approaches_true_sf_with_cluster_size(paper_world, paper_walk_1000):
    """The paper's Figure true_sim in miniature: bigger pure clusters, closer to the true SF."""
    env = paper_world
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(paper_walk_1000)
    rng = np.random.default_rng(0)
    cells = [c for c in range(env.n_states) if (mem.labels == c).sum() >= 80]
    gaps = {}
    for size in (1, 10, 80):
        d = []
        for c in cells:
            members = rng.choice(np.flatnonzero(mem.labels == c), size, replace=False)
            d.append(np.linalg.norm(successor_features(mem, [members]) - true_successor_features(env, [c])))
        gaps[size] = np.mean(d)
    assert gaps[1] > gaps[10] > gaps[80]


def test_similarities():
    X = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    Y = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [2.0, 0.0, 2.0]])
    eu = pairwise_similarity(X, Y)
    assert eu[0, 0] == pytest.approx(1.0) and eu[0, 2] == pytest.approx(np.exp(-np.sqrt(2)))
    cos = pairwise_similarity(X, Y, "cosine")
    assert cos[0, 2] == pytest.approx(1.0) and cos[0, 1] == pytest.approx(0.0)
    kl = pairwise_similarity(X, Y, "kl")
    assert kl[0, 2] == pytest.approx(1.0)       # same distribution after normalising
    assert kl[0, 1] == 0.0                       # Y misses X's support: KL is infinite
    custom = pairwise_similarity(X, Y, lambda a, b: -np.abs(a[:, None, 0] - b[None, :, 0]))
    assert custom.shape == (2, 3)
    with pytest.raises(ValueError, match="unknown similarity"):
        pairwise_similarity(X, Y, "manhattan")
    with pytest.raises(ValueError, match="columns"):
        pairwise_similarity(X, Y[:, :2])


def test_bad_arguments():
    env = Environment.from_arrays([[1, 0]], [0, 1])
    with pytest.raises(ValueError, match="gamma"):
        successor_features(env, [[0]], gamma=1.0)
    with pytest.raises(ValueError, match="horizon"):
        successor_features(env, [[0]], horizon=0)
    with pytest.raises(ValueError, match="outside"):
        successor_features(env, [[5]])
    with pytest.raises(TypeError):
        successor_features(np.zeros(3), [[0]])
    with pytest.raises(ValueError, match="form"):
        true_successor_features(env, [0], form="other")
