"""Gymnasium / MiniGrid worlds (issue 13): checked against Gymnasium's own `step`.

Skipped when the optional extra `[gym]` (gymnasium + minigrid) is not installed; CI installs it with `[test]`.
"""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="the [gym] extra is not installed: pip install -e '.[gym]'")
pytest.importorskip("minigrid", reason="the [gym] extra is not installed: pip install -e '.[gym]'")

from hmmmerge import random_walk  # noqa: E402
from hmmmerge.gym_worlds import ObservationVocabulary, Recording, from_gymnasium  # noqa: E402

MINIGRIDS = [("MiniGrid-Empty-8x8-v0", 0, None), ("MiniGrid-FourRooms-v0", 3, None), ("MiniGrid-Empty-6x6-v0", 0, 5)]


def gym_env_without_terminals(env_id, seed, view):
    """The MiniGrid env as Gymnasium builds it, reset with `seed`, goals and lava turned into floor (by hand)."""
    env = gym.make(env_id) if view is None else gym.make(env_id, agent_view_size=view)
    env.reset(seed=seed)
    grid = env.unwrapped.grid
    for x in range(grid.width):
        for y in range(grid.height):
            cell = grid.get(x, y)
            if cell is not None and cell.type in ("goal", "lava"):
                grid.set(x, y, None)
    return env


@pytest.mark.parametrize("env_id, seed, view", MINIGRIDS)
def test_minigrid_states_and_turns(env_id, seed, view):
    world = from_gymnasium(env_id, seed=seed, agent_view_size=view)
    grid = gym_env_without_terminals(env_id, seed, view).unwrapped.grid
    free = sum(grid.get(x, y) is None for x in range(grid.width) for y in range(grid.height))
    assert world.n_states == 4 * free
    assert world.n_actions == 3
    left, right, forward = world.next_state
    assert (left[left] == right[right]).all()  # turning twice left equals turning twice right
    assert (left[right] == np.arange(world.n_states)).all()
    assert (left[left[left[left]]] == np.arange(world.n_states)).all()
    moved = forward != np.arange(world.n_states)
    assert moved.any() and (~moved).any()  # some moves are blocked by walls
    if "Empty" in env_id:  # in an empty room only the cells facing the border wall block
        assert (~moved).sum() == 4 * (int(np.sqrt(free)))


@pytest.mark.parametrize("env_id, seed, view", MINIGRIDS)
def test_random_walk_matches_gymnasium_step(env_id, seed, view):
    world, vocab = from_gymnasium(env_id, seed=seed, agent_view_size=view, return_vocabulary=True)
    traj = random_walk(world, n_episodes=3, episode_length=120, seed=7)
    env = gym_env_without_terminals(env_id, seed, view)
    grid_env = env.unwrapped
    start = world.start_node
    assert (int(grid_env.agent_pos[0]), int(grid_env.agent_pos[1]), int(grid_env.agent_dir)) == start
    for e in range(traj.n_episodes):
        grid_env.agent_pos, grid_env.agent_dir = start[:2], start[2]
        obs = grid_env.gen_obs()
        for t in range(traj.episode_length + 1):
            if t:
                obs, *_ = env.step(int(traj.actions[e, t]))  # MiniGrid's actions 0, 1, 2: left, right, forward
            assert vocab.id_of(obs["image"]) == traj.obs[e, t], (e, t)
            pose = (int(grid_env.agent_pos[0]), int(grid_env.agent_pos[1]), int(grid_env.agent_dir))
            assert world.nodes[traj.states[e, t]] == pose, (e, t)


def test_view_size_changes_the_alphabet():
    small = from_gymnasium("MiniGrid-FourRooms-v0", agent_view_size=3)
    large = from_gymnasium("MiniGrid-FourRooms-v0", agent_view_size=7)
    assert small.n_states == large.n_states
    assert small.n_obs < large.n_obs
    with pytest.raises(ValueError, match="agent_view_size must be an odd integer >= 3"):
        from_gymnasium("MiniGrid-FourRooms-v0", agent_view_size=4)


def test_the_env_passed_in_is_not_modified():
    env = gym.make("MiniGrid-Empty-5x5-v0")
    env.reset(seed=0)
    before = env.unwrapped.grid.encode().copy()
    world = from_gymnasium(env)
    assert world.n_states == 4 * 9
    assert (env.unwrapped.grid.encode() == before).all()  # the goal is still there


def test_recording_matches_a_manual_loop_and_round_trips(tmp_path):
    moves = [0, 1, 2, 3, 2, 2, 1, 1, 0]

    def policy(obs, rng):
        policy.t += 1
        return moves[policy.t % len(moves)]

    policy.t = -1
    rec = from_gymnasium("CliffWalking-v1", n_episodes=4, episode_length=12, policy=policy, seed=5)
    assert rec.trajectories.states is None and rec.dropped == 0
    # the same seeds and actions, stepped by hand
    env = gym.make("CliffWalking-v1")
    rng = np.random.default_rng(5)
    k = 0
    for e in range(4):
        o, _ = env.reset(seed=int(rng.integers(2**31)))
        seen = [o]
        for t in range(12):
            o, *_ = env.step(moves[k % len(moves)])
            k += 1
            seen.append(o)
        assert [rec.vocabulary.observations[i] for i in rec.trajectories.obs[e]] == seen
        assert rec.trajectories.actions[e, 1:].tolist() == [moves[(k - 12 + t) % len(moves)] for t in range(12)]
    rec.save(tmp_path / "cliff.npz")
    back = Recording.load(tmp_path / "cliff.npz")
    assert (back.trajectories.obs == rec.trajectories.obs).all()
    assert back.vocabulary.observations == rec.vocabulary.observations and back.n_actions == 4


def test_recording_fits_and_scores_without_true_states():
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.gym_worlds import score_recording

    rec = from_gymnasium("CliffWalking-v1", n_episodes=60, episode_length=20, seed=0)
    train, test = rec.trajectories[:50], rec.trajectories[50:]
    agent = TwoLevelMemory(rec.n_obs, rec.n_actions, merge="sf", initial_size=3, seed=0).fit(train)
    report = score_recording(agent.level2_hmm(), test, smoothing=1e-3)
    assert report["purity"] is None and "unknown" in report["purity_note"]
    assert 0.5 < report["accuracy"] <= 1 and np.isfinite(report["surprise"])


def test_recording_drops_terminated_episodes_and_refuses_truncation():
    rec = from_gymnasium("FrozenLake-v1", n_episodes=5, episode_length=3, seed=0)
    assert rec.trajectories.obs.shape == (5, 4) and rec.dropped > 0
    with pytest.raises(ValueError, match="truncated an episode after 100 moves"):
        from_gymnasium("MiniGrid-Empty-5x5-v0", n_episodes=1, episode_length=300,
                       policy=lambda obs, rng: 0, seed=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="not a MiniGrid environment.*n_episodes"):
        from_gymnasium("CliffWalking-v1")
    with pytest.raises(ValueError, match="action space must be Discrete"):
        from_gymnasium("Pendulum-v1", n_episodes=1)
    with pytest.raises(ValueError, match="gymnasium cannot make 'NoSuchEnv-v0'"):
        from_gymnasium("NoSuchEnv-v0")
    with pytest.raises(ValueError, match="policy returned action 9"):
        from_gymnasium("CliffWalking-v1", n_episodes=1, episode_length=2, policy=lambda o, r: 9)
    with pytest.raises(TypeError, match="not hashable"):
        ObservationVocabulary().add(object.__new__(type("U", (), {"__hash__": None})))


def test_notebook_06_fourrooms_results():
    """The results notebooks/06_minigrid_cognitive_map.ipynb states, on the same world, seeds and settings."""
    from hmmmerge import TwoLevelMemory
    from hmmmerge.episodic import EpisodicMemory
    from hmmmerge.evaluate import evaluate_model, weighted_purity
    from hmmmerge.structure import markov_radius

    env = from_gymnasium("MiniGrid-FourRooms-v0", seed=0)
    assert env.n_states == 4 * 260 and env.n_obs == 360
    assert markov_radius(env) == 0
    counts = env.clone_counts()
    assert 0.75 < (counts[env.obs] > 1).mean() < 0.8  # 77.8% of the poses share their view
    train, test = random_walk(env, 20, 1000, seed=0), random_walk(env, 10, 200, seed=1)
    level1 = EpisodicMemory(env.n_obs, env.n_actions)
    level1.observe_trajectories(train)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", initial_size=10, seed=0).fit(train)
    r1 = evaluate_model(env, level1.to_hmm(), trajectories=test, smoothing=1e-3)
    r2 = evaluate_model(env, agent.level2_hmm(), trajectories=test, smoothing=1e-3)
    assert evaluate_model(env, env.to_hmm(), trajectories=test, smoothing=1e-3).accuracy == 1.0
    assert r2.accuracy > r1.accuracy and r2.surprise < r1.surprise and r2.n_states < r1.n_states
    n = agent.memory_.n_states
    assert 0.5 < weighted_purity(agent.clusters_.assignment[:n], agent.memory_.labels) < 0.8
