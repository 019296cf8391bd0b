"""Rollouts: batches of episodes in an environment under a policy.

Protocol (the paper's): every episode starts at ``env.start``; the first
observation comes with no move (``actions[:, 0] == -1``); ``actions[:, t]`` is
the move that led to ``obs[:, t]`` and ``states[:, t]``.
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
    env: Environment, n_episodes: int, episode_length: int = 50, seed=0, policy=None
) -> Trajectories:
    """Episodes of random moves from ``env.start``.

    Parameters
    ----------
    env : the world.
    n_episodes, episode_length : batch shape; each episode has ``episode_length`` moves.
    seed : int or numpy Generator.
    policy : optional (S x A) array of action probabilities per state; uniform if omitted.

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> traj = random_walk(gridworld(), n_episodes=3, episode_length=5, seed=1)
    >>> traj.obs.shape, traj.actions[:, 0].tolist()
    ((3, 6), [-1, -1, -1])
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    check_int(n_episodes, "n_episodes", low=1)
    check_int(episode_length, "episode_length", low=0)
    # states, actions and observations (int64), the draws and their temporaries
    check_memory(f"a random walk of {n_episodes} episodes x {episode_length} moves",
                 48 * int(n_episodes) * (int(episode_length) + 1))
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
    states[:, 0] = env.start
    actions[:, 0] = -1
    next_state = env.next_state
    for t in range(episode_length):
        s = states[:, t]
        if cum is None:
            a = moves[:, t]
        else:
            a = (draws[:, t, None] >= cum[s]).sum(axis=1)
        actions[:, t + 1] = a
        states[:, t + 1] = next_state[a, s]
    return Trajectories(obs=env.obs[states], actions=actions, states=states)
