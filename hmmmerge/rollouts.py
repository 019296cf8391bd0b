"""Rollouts: batches of episodes in an environment under a policy.

Protocol (the paper's): every episode starts at ``env.start``; the first
observation comes with no move (``actions[:, 0] == -1``); ``actions[:, t]`` is
the move that led to ``obs[:, t]`` and ``states[:, t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._random import as_generator
from .environment import Environment

__all__ = ["Trajectories", "random_walk"]


@dataclass(frozen=True)
class Trajectories:
    """A batch of episodes: int arrays ``obs``, ``actions``, ``states`` of shape (E, L+1).

    ``states`` may be ``None`` for data without ground truth.

    >>> t = Trajectories(obs=[[0, 1]], actions=[[-1, 0]])
    >>> t.n_episodes, t.episode_length, t.n_steps
    (1, 1, 2)
    """

    obs: np.ndarray
    actions: np.ndarray
    states: np.ndarray | None = None

    def __post_init__(self):
        obs = _as_int_2d(self.obs, "obs")
        actions = _as_int_2d(self.actions, "actions")
        if actions.shape != obs.shape:
            raise ValueError(f"actions has shape {actions.shape} but obs has {obs.shape}")
        if obs.shape[1] == 0:
            raise ValueError("trajectories are empty: each episode needs at least its first observation")
        if (obs < 0).any():
            raise ValueError(f"obs holds a negative value ({int(obs.min())})")
        if (actions[:, 0] != -1).any():
            raise ValueError("actions[:, 0] must be -1 (the first observation comes with no move)")
        if obs.shape[1] > 1 and (actions[:, 1:] < 0).any():
            raise ValueError("actions[:, 1:] holds a negative action")
        object.__setattr__(self, "obs", obs)
        object.__setattr__(self, "actions", actions)
        if self.states is not None:
            states = _as_int_2d(self.states, "states")
            if states.shape != obs.shape:
                raise ValueError(f"states has shape {states.shape} but obs has {obs.shape}")
            if states.size and states.min() < 0:
                raise ValueError(f"states holds a negative state index ({int(states.min())})")
            object.__setattr__(self, "states", states)

    @property
    def n_episodes(self) -> int:
        return self.obs.shape[0]

    @property
    def episode_length(self) -> int:
        """Moves per episode (observations per episode minus one)."""
        return self.obs.shape[1] - 1

    @property
    def n_steps(self) -> int:
        """Total number of observations."""
        return self.obs.size

    def __getitem__(self, item) -> "Trajectories":
        """Select episodes: ``traj[:100]`` or ``traj[[0, 5]]``."""
        if isinstance(item, (int, np.integer)):
            item = slice(int(item), int(item) + 1) if item != -1 else slice(-1, None)
        states = None if self.states is None else self.states[item]
        return Trajectories(self.obs[item], self.actions[item], states)

    def __len__(self) -> int:
        return self.n_episodes


def _as_int_2d(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (episodes x steps), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


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
    for name, v, low in (("n_episodes", n_episodes, 1), ("episode_length", episode_length, 0)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
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
