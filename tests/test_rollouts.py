"""Rollouts: the episode protocol, uniform and custom policies, Trajectories."""

import numpy as np
import pytest
from scipy import stats

from hmmmerge import Environment, Trajectories, gridworld, random_walk

MOVES = {0: (0, -1), 1: (0, 1), 2: (-1, 0), 3: (1, 0)}


@pytest.fixture(scope="module")
def grid():
    return gridworld(6, 7, n_colours=5, seed=3, obstacles=[(2, 2), (3, 4)])


def test_shapes_and_protocol(grid):
    traj = random_walk(grid, n_episodes=40, episode_length=25, seed=1)
    for arr in (traj.obs, traj.actions, traj.states):
        assert arr.shape == (40, 26) and arr.dtype == np.int64
    assert traj.n_episodes == 40 and traj.episode_length == 25 and traj.n_steps == 40 * 26
    assert (traj.actions[:, 0] == -1).all()
    assert ((traj.actions[:, 1:] >= 0) & (traj.actions[:, 1:] < 4)).all()
    assert (traj.states[:, 0] == grid.start).all()  # every episode starts at env.start
    # states follow next_state exactly; obs is the emission of the state
    assert np.array_equal(traj.states[:, 1:], grid.next_state[traj.actions[:, 1:], traj.states[:, :-1]])
    assert np.array_equal(traj.obs, grid.obs[traj.states])


def test_moves_follow_the_grid_geometry_and_stay_at_walls(grid):
    """Independent of next_state: recompute each move from the (row, col) labels."""
    traj = random_walk(grid, n_episodes=60, episode_length=40, seed=2)
    cells = set(grid.nodes)
    stays = 0
    for e in range(traj.n_episodes):
        for t in range(1, traj.episode_length + 1):
            r, c = grid.nodes[traj.states[e, t - 1]]
            dr, dc = MOVES[int(traj.actions[e, t])]
            target = (r + dr, c + dc)
            expected = target if target in cells else (r, c)
            assert grid.nodes[traj.states[e, t]] == expected
            stays += expected == (r, c)
    assert stays > 0  # walls and obstacles were hit


def test_default_start_and_custom_start():
    env = gridworld(5, 5, n_colours=5, seed=0, start=(2, 3))
    traj = random_walk(env, 10, 3, seed=0)
    assert {env.nodes[s] for s in traj.states[:, 0]} == {(2, 3)}
    assert (traj.obs[:, 0] == env.obs[env.start]).all()


def test_uniform_action_frequencies(paper_world):
    env = paper_world
    traj = random_walk(env, 1000, 50, seed=123)
    moves = traj.actions[:, 1:].ravel()
    counts = np.bincount(moves, minlength=4)
    assert counts.sum() == 50_000
    assert stats.chisquare(counts).pvalue > 1e-3
    # uniform in every state too (the policy ignores the state): contingency table state x action
    table = np.zeros((env.n_states, 4))
    np.add.at(table, (traj.states[:, :-1].ravel(), moves), 1)
    rows = table.sum(1) > 50
    assert stats.chi2_contingency(table[rows]).pvalue > 1e-3
    # and independent of the previous move
    pairs = np.zeros((4, 4))
    np.add.at(pairs, (traj.actions[:, 1:-1].ravel(), traj.actions[:, 2:].ravel()), 1)
    assert stats.chi2_contingency(pairs).pvalue > 1e-3


def test_custom_policy_frequencies(small_world):
    env = small_world
    rng = np.random.default_rng(0)
    policy = rng.dirichlet(np.ones(4), size=env.n_states)
    policy[3] = [0.0, 1.0, 0.0, 0.0]  # deterministic in one state
    policy[5] = [0.5, 0.0, 0.0, 0.5]  # zero-probability actions elsewhere
    traj = random_walk(env, 600, 30, seed=4, policy=policy)
    s = traj.states[:, :-1].ravel()
    a = traj.actions[:, 1:].ravel()
    table = np.zeros((env.n_states, 4))
    np.add.at(table, (s, a), 1)
    assert (table[policy == 0] == 0).all()  # impossible actions never happen
    visits = table.sum(1, keepdims=True)
    expected = visits * policy
    mask = expected > 0
    chi2 = (((table - expected) ** 2)[mask] / expected[mask]).sum()
    dof = int(sum(max((policy[i] > 0).sum() - 1, 0) for i in range(env.n_states) if visits[i, 0] > 0))
    assert stats.chi2.sf(chi2, dof) > 1e-3
    # states still follow the transitions
    assert np.array_equal(traj.states[:, 1:], env.next_state[traj.actions[:, 1:], traj.states[:, :-1]])


def test_policy_that_always_moves_right():
    env = gridworld(3, 5, n_colours=3, seed=0)
    policy = np.tile([0.0, 1.0, 0.0, 0.0], (env.n_states, 1))
    traj = random_walk(env, 2, 6, seed=0, policy=policy)
    assert (traj.actions[:, 1:] == 1).all()
    cols = [[env.nodes[s][1] for s in row] for row in traj.states]
    assert cols == [[0, 1, 2, 3, 4, 4, 4]] * 2  # walks to the east wall, then stays


def test_determinism_under_seed(grid):
    a = random_walk(grid, 20, 15, seed=7)
    b = random_walk(grid, 20, 15, seed=7)
    c = random_walk(grid, 20, 15, seed=8)
    g = random_walk(grid, 20, 15, seed=np.random.default_rng(7))
    for x, y in ((a, b), (a, g)):
        assert np.array_equal(x.actions, y.actions) and np.array_equal(x.states, y.states)
    assert not np.array_equal(a.actions, c.actions)
    pol = np.full((grid.n_states, 4), 0.25)
    p1 = random_walk(grid, 20, 15, seed=7, policy=pol)
    p2 = random_walk(grid, 20, 15, seed=7, policy=pol)
    assert np.array_equal(p1.actions, p2.actions)


def test_episode_length_zero_and_single_state_world():
    env = Environment.from_arrays([[0], [0]], [2])
    traj = random_walk(env, 3, 0)
    assert traj.obs.shape == (3, 1) and (traj.obs == 2).all() and (traj.actions == -1).all()
    traj = random_walk(env, 2, 5, seed=0)
    assert (traj.states == 0).all()


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(n_episodes=0), ValueError, "n_episodes"),
        (dict(n_episodes=-3), ValueError, "n_episodes"),
        (dict(n_episodes=2.0), ValueError, "n_episodes"),
        (dict(n_episodes=True), ValueError, "n_episodes"),
        (dict(episode_length=-1), ValueError, "episode_length"),
        (dict(policy=np.full((3, 4), 0.25)), ValueError, "policy must have shape"),
        (dict(policy=np.full((40, 3), 1 / 3)), ValueError, "policy must have shape"),
        (dict(policy=np.full((40, 4), 0.3)), ValueError, "policy rows"),
        (dict(policy=np.tile([1.5, -0.5, 0, 0], (40, 1))), ValueError, "policy rows"),
        (dict(policy=np.full((40, 4), np.nan)), ValueError, "policy rows"),
        (dict(seed=-1), TypeError, "seed"),
    ],
)
def test_bad_inputs(grid, kwargs, exc, words):
    assert grid.n_states == 40  # 6 x 7 minus two obstacles
    args = dict(n_episodes=2, episode_length=3) | kwargs
    with pytest.raises(exc, match=words):
        random_walk(grid, **args)


def test_env_must_be_an_environment():
    with pytest.raises(TypeError, match="env"):
        random_walk("grid", 2)


# ---------------------------------------------------------------- Trajectories


def test_trajectories_validation():
    ok = dict(obs=[[0, 1, 2]], actions=[[-1, 0, 1]])
    Trajectories(**ok)
    cases = [
        (dict(obs=[[0, 1]], actions=[[-1, 0, 1]]), "actions has shape"),
        (dict(obs=[[0, 1]], actions=[[0, 0]]), r"actions\[:, 0\] must be -1"),
        (dict(obs=[[0, -1]], actions=[[-1, 0]]), "negative"),
        (dict(obs=[[0, 1]], actions=[[-1, -2]]), "negative action"),
        (dict(obs=[[0.0, 1.0]], actions=[[-1, 0]]), "obs must hold integers"),
        (dict(obs=[[0, 1]], actions=[[-1.0, 0.5]]), "actions must hold integers"),
        (dict(obs=np.zeros((1, 2, 2), int), actions=np.zeros((1, 2, 2), int)), "2-D"),
        (dict(obs=np.zeros((2, 0), int), actions=np.zeros((2, 0), int)), "empty"),
        (dict(obs=[[0, 1]], actions=[[-1, 0]], states=[[0, 1, 2]]), "states has shape"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ValueError, match=words):
            Trajectories(**kwargs)


def test_trajectories_one_dimensional_input_is_one_episode():
    t = Trajectories(obs=[3, 1, 4], actions=[-1, 2, 0], states=[5, 6, 7])
    assert t.obs.shape == (1, 3) and t.states.tolist() == [[5, 6, 7]]
    assert t.n_episodes == 1 == len(t) and t.episode_length == 2


def test_trajectories_slicing(grid):
    traj = random_walk(grid, 6, 4, seed=0)
    head = traj[:2]
    assert isinstance(head, Trajectories) and len(head) == 2
    assert np.array_equal(head.obs, traj.obs[:2]) and np.array_equal(head.states, traj.states[:2])
    picked = traj[[0, 5]]
    assert np.array_equal(picked.actions, traj.actions[[0, 5]])
    for i in (0, 3, -1, -2, np.int64(4)):
        one = traj[i]
        assert one.obs.shape == (1, 5)
        assert np.array_equal(one.states[0], traj.states[i])
    mask = np.array([True, False, True, False, False, True])
    assert np.array_equal(traj[mask].obs, traj.obs[mask])
    no_states = Trajectories(traj.obs, traj.actions)
    assert no_states.states is None and no_states[1:3].states is None


def test_trajectories_are_frozen(grid):
    traj = random_walk(grid, 2, 2)
    with pytest.raises(AttributeError):
        traj.obs = None


def test_negative_states_and_bool_sizes_rejected():
    from hmmmerge import Trajectories, gridworld

    with pytest.raises(ValueError, match="negative state"):
        Trajectories([[0, 1]], [[-1, 0]], states=[[0, -3]])
    with pytest.raises(ValueError, match="rows"):
        gridworld(True, 3)
    with pytest.raises(ValueError, match="n_colours"):
        gridworld(3, 3, n_colours=0)
