"""The paper's "first order" baseline: observations as hidden states.

Hidden state = the last observation; transitions are action-conditioned
counts ``n[a, o, o']`` of seeing ``o'`` after doing ``a`` on ``o``, normalised
per row (plus an optional pseudocount).  A row ``(o, a)`` never seen in the
data with ``pseudocount=0`` stays zero: the model makes no prediction there.
"""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..hmm import ActionHMM
from ..trajectories import Trajectories

__all__ = ["FirstOrderModel"]


class FirstOrderModel:
    """Action-conditioned first-order Markov model of the observations.

    Parameters
    ----------
    pseudocount : float >= 0, added to every transition count and to the
        counts of first observations before normalising.

    Attributes (after :meth:`fit`)
    -------------------------------
    counts_ : (A, O, O) transition counts.
    start_counts_ : (O,) counts of first observations.
    n_obs_, n_actions_ : alphabet sizes.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(5, 5, n_colours=5, seed=0)
    >>> fo = FirstOrderModel().fit(random_walk(env, 200, seed=0), n_obs=5, n_actions=4)
    >>> hmm = fo.to_hmm()
    >>> hmm.n_states, hmm.n_actions, hmm.n_obs
    (5, 4, 5)
    """

    def __init__(self, pseudocount: float = 0.0):
        if isinstance(pseudocount, bool) or not isinstance(pseudocount, Real) or not (
            np.isfinite(pseudocount) and pseudocount >= 0
        ):
            raise ValueError(f"pseudocount must be a finite number >= 0, got {pseudocount!r}")
        self.pseudocount = float(pseudocount)
        self._hmm = None

    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None) -> "FirstOrderModel":
        """Count transitions in ``traj``; alphabet sizes default to the largest value seen + 1.

        >>> from hmmmerge import Trajectories
        >>> fo = FirstOrderModel().fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]))
        >>> fo.counts_[0].tolist()
        [[0.0, 1.0], [1.0, 0.0]]
        """
        if not isinstance(traj, Trajectories):
            raise TypeError(f"traj must be a Trajectories, got {type(traj).__name__}")
        if traj.n_episodes == 0:
            raise ValueError("traj holds no episodes: nothing to fit")
        obs, act = traj.obs, traj.actions
        seen_o = int(obs.max()) + 1
        seen_a = int(act[:, 1:].max()) + 1 if traj.episode_length else 1
        n_obs = seen_o if n_obs is None else n_obs
        n_actions = seen_a if n_actions is None else n_actions
        for name, v, low in (("n_obs", n_obs, seen_o), ("n_actions", n_actions, seen_a)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                what = "observation" if name == "n_obs" else "action"
                raise ValueError(f"{name}={v!r} must be an integer covering every {what} in traj (>= {low})")
        A, O = int(n_actions), int(n_obs)
        from .._limits import check_memory

        check_memory(f"first-order counts of {O} observations x {A} actions", 3 * 8 * A * O * O)
        counts = np.zeros((A, O, O))
        if traj.episode_length:
            np.add.at(counts, (act[:, 1:].ravel(), obs[:, :-1].ravel(), obs[:, 1:].ravel()), 1.0)
        self.counts_ = counts
        self.start_counts_ = np.bincount(obs[:, 0], minlength=O).astype(np.float64)
        self.n_obs_, self.n_actions_ = O, A
        self._hmm = None
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "counts_"):
            raise ValueError("FirstOrderModel is not fitted: call fit(traj) first")

    def to_hmm(self):
        """The model as an :class:`~hmmmerge.hmm.ActionHMM` with one hidden state per observation.

        >>> from hmmmerge import Trajectories
        >>> hmm = FirstOrderModel().fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]), n_actions=2).to_hmm()
        >>> hmm.T[1].tolist()          # action 1 never seen: no prediction
        [[0.0, 0.0], [0.0, 0.0]]
        """
        self._check_fitted()
        if self._hmm is None:
            c = self.counts_ + self.pseudocount
            sums = c.sum(axis=2, keepdims=True)
            T = np.divide(c, sums, out=np.zeros_like(c), where=sums > 0)
            b = self.start_counts_ + self.pseudocount
            B = b / b.sum()
            self._hmm = ActionHMM(T, np.eye(self.n_obs_), B)
        return self._hmm

    def score(self, traj: Trajectories) -> float:
        """Total log-likelihood (nats) of ``traj``, each episode restarting from ``B``.

        >>> from hmmmerge import Trajectories
        >>> t = Trajectories([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
        >>> FirstOrderModel().fit(t).score(t)
        0.0
        """
        return self.to_hmm().log_likelihood(traj)
