"""Trajectories: a batch of recorded episodes, the data every model learns from.

A dependency-free module (numpy only): models import it without importing
the environment, which keeps the package free of import cycles.

Protocol (the paper's): the first observation of an episode comes with no
move (``actions[:, 0] == -1``); ``actions[:, t]`` is the move that led to
``obs[:, t]`` and ``states[:, t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Trajectories"]


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
    if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:  # would wrap to negative
        raise ValueError(f"{name} holds {int(arr.max())}, more than the largest index {np.iinfo(np.int64).max}")
    return np.ascontiguousarray(arr, dtype=np.int64)
