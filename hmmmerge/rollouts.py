"""Rollouts: batches of episodes in an environment under a policy.

Protocol (the paper's): every episode starts at ``env.start`` (or where
``start=`` says); the first observation comes with no move
(``actions[:, 0] == -1``); ``actions[:, t]`` is the move the agent chose
before ``obs[:, t]`` and ``states[:, t]``.  In a stochastic world the state
reached is drawn from the transition probabilities (a slipping move records
the intended action) and each observation from the state's emission
(observation noise included); ``states`` holds the true states.
"""

from __future__ import annotations

import numpy as np

from ._limits import check_memory
from ._random import as_generator
from ._validation import check_int
from .environment import Environment
from .trajectories import Trajectories

__all__ = ["Trajectories", "random_walk"]


def random_walk(
    env: Environment, n_episodes: int, episode_length: int = 50, seed=0, policy=None, *, start=None
) -> Trajectories:
    """Episodes of random moves from ``env.start`` (or ``start``).

    Parameters
    ----------
    env : the world.
    n_episodes, episode_length : batch shape; each episode has ``episode_length`` moves.
    seed : int or numpy Generator.
    policy : optional (S x A) array of action probabilities per state; uniform if omitted.
    start : where each episode starts: ``None`` (``env.start``), a node, ``"random"``
        (uniform over the states) or a distribution over the states (see
        :meth:`~hmmmerge.environment.Environment.start_distribution`).

    The draws come from one generator in a fixed order: the moves, then the
    start states (only when they are random), then the outcomes of the moves
    (only in a world with stochastic moves), then the observations (only with
    stochastic views).  A deterministic world from ``env.start`` draws the
    moves alone, so its walks are the same as before stochastic worlds existed.

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> traj = random_walk(gridworld(), n_episodes=3, episode_length=5, seed=1)
    >>> traj.obs.shape, traj.actions[:, 0].tolist()
    ((3, 6), [-1, -1, -1])
    >>> random_walk(gridworld(slip=0.1), n_episodes=4, episode_length=0, seed=1, start="random").states[:, 0].tolist()
    [51, 95, 14, 94]
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    check_int(n_episodes, "n_episodes", low=1)
    check_int(episode_length, "episode_length", low=0)
    # states, actions and observations (int64), the draws and their temporaries (a stochastic world draws
    # the outcome of each move and each view as well)
    per_step = 48 if env.is_deterministic else 80
    check_memory(f"a random walk of {n_episodes} episodes x {episode_length} moves",
                 per_step * int(n_episodes) * (int(episode_length) + 1))
    rng = as_generator(seed)
    n_actions = env.n_actions
    if policy is None:
        moves = rng.integers(0, n_actions, size=(n_episodes, episode_length))
        cum = None
    else:
        pol = np.asarray(policy, dtype=float)
        if pol.shape != (env.n_states, n_actions):
            raise ValueError(f"policy must have shape ({env.n_states}, {n_actions}), got {pol.shape}")
        if (pol < 0).any() or not np.allclose(pol.sum(1), 1.0, atol=1e-9):
            raise ValueError("policy rows must be probability distributions (non-negative, summing to 1)")
        cum = np.cumsum(pol, axis=1)
        cum[:, -1] = np.inf  # guard against round-off at the top end
        draws = rng.random((n_episodes, episode_length))

    states = np.empty((n_episodes, episode_length + 1), dtype=np.int64)
    actions = np.empty_like(states)
    states[:, 0] = _start_states(env, start, n_episodes, rng)
    actions[:, 0] = -1
    outcome = None if env.deterministic_moves else rng.random((n_episodes, episode_length))
    for t in range(episode_length):
        s = states[:, t]
        if cum is None:
            a = moves[:, t]
        else:
            a = (draws[:, t, None] >= cum[s]).sum(axis=1)
        actions[:, t + 1] = a
        states[:, t + 1] = env._sample_successors(s, a, None if outcome is None else outcome[:, t])
    return Trajectories(obs=env._sample_observations(states, rng), actions=actions, states=states)


def _start_states(env: Environment, start, n_episodes: int, rng) -> np.ndarray:
    """The first state of each episode: fixed (no draw) or drawn from the start distribution."""
    if start is None:
        return np.full(n_episodes, env.start, dtype=np.int64)
    dist = env.start_distribution(start)
    support = np.flatnonzero(dist > 0)
    if len(support) == 1:
        return np.full(n_episodes, support[0], dtype=np.int64)
    cum = np.cumsum(dist)
    cum[support[-1]:] = np.inf  # guard against round-off at the top end
    return np.searchsorted(cum, rng.random(n_episodes), side="right").astype(np.int64)
