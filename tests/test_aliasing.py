"""Aliasing depth and observation-sequence counts against brute-force enumeration."""

from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, gridworld
from hmmmerge.structure import aliasing_depths, aliasing_partitions, observation_sequence_counts


@st.composite
def small_envs(draw, max_states=6, max_actions=3, max_obs=3):
    n = draw(st.integers(1, max_states))
    a = draw(st.integers(1, max_actions))
    o = draw(st.integers(1, max_obs))
    nxt = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=n, max_size=n), min_size=a, max_size=a))
    obs = draw(st.lists(st.integers(0, o - 1), min_size=n, max_size=n))
    return Environment.from_arrays(np.array(nxt), np.array(obs), n_obs=o)


def walk(env, v, actions):
    seen = [int(env.obs[v])]
    for a in actions:
        v = int(env.next_state[a, v])
        seen.append(int(env.obs[v]))
    return tuple(seen)


def behaviour(env, v, k):
    """The map action sequence -> observation sequence, as a tuple in a fixed order."""
    return tuple(walk(env, v, seq) for seq in product(range(env.n_actions), repeat=k))


def brute_depths(env):
    n = env.n_states
    depth = np.full(n, -1)
    # the refinement is stable after at most n - 1 rounds, so k <= n - 1 suffices
    for k in range(n):
        beh = [behaviour(env, v, k) for v in range(n)]
        for v in range(n):
            if depth[v] < 0 and all(beh[u] != beh[v] for u in range(n) if u != v):
                depth[v] = k
    return depth


@settings(max_examples=60, deadline=None)
@given(small_envs())
def test_aliasing_depth_matches_brute_force(env):
    assert aliasing_depths(env).tolist() == brute_depths(env).tolist()


@settings(max_examples=40, deadline=None)
@given(small_envs(), st.integers(0, 3))
def test_partition_rows_are_behaviour_classes(env, k):
    parts = aliasing_partitions(env)
    row = parts[min(k, parts.shape[0] - 1)]  # past the last row the partition is stable
    beh = [behaviour(env, v, k) for v in range(env.n_states)]
    for u in range(env.n_states):
        for v in range(env.n_states):
            assert (row[u] == row[v]) == (beh[u] == beh[v])


@settings(max_examples=40, deadline=None)
@given(small_envs(), st.integers(0, 4))
def test_max_depth_truncates(env, m):
    full = aliasing_depths(env)
    cut = aliasing_depths(env, max_depth=m)
    assert cut.tolist() == np.where(full <= m, full, -1).tolist()


@settings(max_examples=60, deadline=None)
@given(small_envs(), st.integers(0, 4))
def test_sequence_counts_match_brute_force(env, k):
    expected = [len(set(behaviour(env, v, k))) for v in range(env.n_states)]
    assert observation_sequence_counts(env, k).tolist() == expected


def test_sequence_counts_on_a_grid():
    env = gridworld(3, 4, n_colours=2, seed=5)
    for k in (0, 1, 4):
        expected = [len(set(behaviour(env, v, k))) for v in range(env.n_states)]
        assert observation_sequence_counts(env, k).tolist() == expected
    assert observation_sequence_counts(env, 0).tolist() == [1] * env.n_states


def test_distinct_colours_are_identified_at_once():
    env = gridworld(4, 4, n_colours=16, seed=1)
    assert aliasing_depths(env).tolist() == [0] * 16


def test_symmetric_worlds_are_never_identified():
    # one colour: every action sequence shows the same observations from every cell
    env = gridworld(3, 3, n_colours=1)
    assert (aliasing_depths(env) == -1).all()
    assert observation_sequence_counts(env, 3).tolist() == [1] * 9


def test_counts_bounded_and_monotone_in_k():
    env = gridworld(5, 5, n_colours=3, seed=2)
    prev = observation_sequence_counts(env, 0)
    for k in range(1, 5):
        cur = observation_sequence_counts(env, k)
        assert (cur >= prev).all()
        assert (cur <= min(env.n_actions ** k, env.n_obs ** k)).all()
        prev = cur


def test_validation():
    env = gridworld(2, 2, n_colours=2)
    with pytest.raises(ValueError, match="k must"):
        observation_sequence_counts(env, -1)
    with pytest.raises(ValueError, match="max_depth"):
        aliasing_depths(env, max_depth=-2)
    with pytest.raises(TypeError, match="env"):
        aliasing_depths("grid")


def test_sequence_count_guard():
    env = gridworld(4, 4, n_colours=4, seed=0)
    full = observation_sequence_counts(env, 3)
    assert full.sum() > 100
    with pytest.raises(ValueError, match="max_nodes"):
        observation_sequence_counts(env, 3, max_nodes=100)
