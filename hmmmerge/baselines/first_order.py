"""The paper's "first order" baseline: observations as hidden states.

Hidden state = the last observation; transitions are action-conditioned
counts ``n[a, o, o']`` of seeing ``o'`` after doing ``a`` on ``o``, normalised
per row (plus an optional pseudocount).  A row ``(o, a)`` never seen in the
data with ``pseudocount=0`` stays zero: the model makes no prediction there.
"""

from __future__ import annotations

import numpy as np

from .._estimator import ModelLearner
from .._validation import Float, alphabet_sizes, as_trajectories
from ..hmm import ActionHMM

__all__ = ["FirstOrderModel"]


class FirstOrderModel(ModelLearner):
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

    See Also
    --------
    hmmmerge.models.build_model : builds this model by the name ``"first-order"``.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(5, 5, n_colours=5, seed=0)
    >>> fo = FirstOrderModel().fit(random_walk(env, 200, seed=0), n_obs=5, n_actions=4)
    >>> hmm = fo.to_hmm()
    >>> hmm.n_states, hmm.n_actions, hmm.n_obs
    (5, 4, 5)
    """

    _parameter_constraints = {"pseudocount": Float(0)}

    def __init__(self, pseudocount: float = 0.0):
        self.pseudocount = pseudocount

    def fit(self, traj, n_obs: int | None = None, n_actions: int | None = None) -> "FirstOrderModel":
        """Count transitions in ``traj``; alphabet sizes default to the largest value seen + 1.

        ``traj``: a :class:`~hmmmerge.trajectories.Trajectories` or a pair
        ``(obs, actions)`` (see :func:`hmmmerge._validation.as_trajectories`).
        A new fit starts afresh.

        Returns
        -------
        self

        >>> fo = FirstOrderModel().fit(([[0, 1, 0]], [[-1, 0, 0]]))
        >>> fo.counts_[0].tolist()
        [[0.0, 1.0], [1.0, 0.0]]
        """
        self._validate_params()
        traj = as_trajectories(traj)
        obs, act = traj.obs, traj.actions
        O, A = alphabet_sizes(obs, act, n_obs, n_actions)
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

    def to_hmm(self) -> ActionHMM:
        """The model as an :class:`~hmmmerge.hmm.ActionHMM` with one hidden state per observation.

        Returns
        -------
        ActionHMM

        >>> from hmmmerge import Trajectories
        >>> hmm = FirstOrderModel().fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]), n_actions=2).to_hmm()
        >>> hmm.T[1].tolist()          # action 1 never seen: no prediction
        [[0.0, 0.0], [0.0, 0.0]]
        """
        self._check_fitted("counts_")
        if self._hmm is None:
            c = self.counts_ + self.pseudocount
            sums = c.sum(axis=2, keepdims=True)
            T = np.divide(c, sums, out=np.zeros_like(c), where=sums > 0)
            b = self.start_counts_ + self.pseudocount
            B = b / b.sum()
            self._hmm = ActionHMM(T, np.eye(self.n_obs_), B)
        return self._hmm
