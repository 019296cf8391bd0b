"""The oracle: the true world as a model, the physical limit every learner is measured against."""

from __future__ import annotations

from .._estimator import Estimator
from .._validation import as_trajectories, check_symbols

__all__ = ["Oracle"]


def _check_env(env, name: str) -> None:
    if env is None:
        raise ValueError(f"the oracle is the true world: pass {name}=")
    if not hasattr(env, "to_hmm") or not hasattr(env, "n_obs"):
        raise TypeError(f"{name} must be an Environment, got {type(env).__name__}")


class Oracle(Estimator):
    """The true world's :class:`~hmmmerge.hmm.ActionHMM` (``env.to_hmm()``); ``fit`` learns nothing.

    Parameters
    ----------
    env : the :class:`~hmmmerge.environment.Environment`.

    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(3, 3, n_colours=3, seed=0)
    >>> Oracle(env).fit(random_walk(env, 2, 5, seed=0)).to_hmm().n_states
    9
    """

    _parameter_constraints = {"env": _check_env}

    def __init__(self, env):
        self.env = env

    def fit(self, traj=None, n_obs: int | None = None, n_actions: int | None = None) -> "Oracle":
        """Check that ``traj`` (optional) is in the world's alphabet; the model is the world itself."""
        self._validate_params()
        if traj is not None:
            traj = as_trajectories(traj)
            check_symbols(traj.obs, traj.actions, self.env.n_obs, self.env.n_actions)
        self.n_states_ = int(self.env.n_states)
        return self

    def partial_fit(self, traj=None, n_obs: int | None = None, n_actions: int | None = None) -> "Oracle":
        """The same as :meth:`fit`: there is nothing to learn."""
        return self.fit(traj, n_obs, n_actions)

    def to_hmm(self):
        """``env.to_hmm()``."""
        self._check_fitted("n_states_")
        return self.env.to_hmm()
