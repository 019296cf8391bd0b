"""ActionHMM: the one model type of hmmmerge.

A world model ``M = <H, A, O, T, E, B>`` (the paper's Definition 2.2) with
action-conditioned transitions ``T[a][i, j] = P(h' = j | h = i, a)``,
emissions ``E[i, o] = P(o | h = i)`` and initial distribution ``B``.  The true
world, level 1, level 2 and every baseline produce one, and one scaled forward
filter scores them all.

Rows of ``T[a]`` may sum to 0: the model knows no successor of that state
under that action.  The filter then predicts from the states of the belief
that have a successor (renormalising), and when none has, it makes *no
prediction* at that step: the step is flagged and its probability is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._random import as_generator
from ._validation import as_trajectories, check_int, check_symbols
from .trajectories import Trajectories

__all__ = ["ActionHMM", "FilterResult"]


@dataclass(frozen=True)
class FilterResult:
    """Output of :meth:`ActionHMM.run_filter`.

    Attributes
    ----------
    log_probs : (N, L) array, ``log P(o_t | o_<t, a_<=t)``; ``-inf`` where the
        observation had probability 0 (including no-prediction steps).
    no_prediction : (N, L) bool array, steps where the model predicted nothing.
    predictions : (N, L, O) predictive distributions or ``None``; all-zero rows
        where there was no prediction.
    posteriors : (N, L, H) filtered beliefs or ``None``.

    See Also
    --------
    hmmmerge.evaluate.score_trajectories : accuracy and surprise from one filter run.

    Examples
    --------
    A model that knows no successor of state 1 predicts nothing at the third step:

    >>> hmm = ActionHMM.from_deterministic([[1, -1]], [0, 1], n_obs=2)
    >>> r = hmm.run_filter([[0, 1, 0]], [[-1, 0, 0]])
    >>> r.log_probs.tolist(), r.no_prediction.tolist(), r.log_likelihood
    ([[0.0, 0.0, -inf]], [[False, False, True]], -inf)
    """

    log_probs: np.ndarray
    no_prediction: np.ndarray
    predictions: np.ndarray | None = None
    posteriors: np.ndarray | None = None

    @property
    def log_likelihood(self) -> float:
        """Total ``log P(o | a)`` in nats of all episodes."""
        return float(self.log_probs.sum())

    def as_dict(self) -> dict:
        """Plain Python values (nested lists; ``-inf`` stays a float), ready for JSON.

        >>> hmm = ActionHMM.from_deterministic([[1, 0]], [0, 1], n_obs=2)
        >>> hmm.run_filter([[0, 1]], [[-1, 0]]).as_dict()
        {'log_probs': [[0.0, 0.0]], 'no_prediction': [[False, False]], 'predictions': None, \
'posteriors': None, 'log_likelihood': 0.0}
        """
        return {
            "log_probs": self.log_probs.tolist(),
            "no_prediction": self.no_prediction.tolist(),
            "predictions": None if self.predictions is None else self.predictions.tolist(),
            "posteriors": None if self.posteriors is None else self.posteriors.tolist(),
            "log_likelihood": self.log_likelihood,
        }


class ActionHMM:
    """An action-conditioned HMM with dense or sparse transitions.

    Parameters
    ----------
    T : array (A, H, H), or a sequence of A matrices (H, H), dense or scipy.sparse.
        If any matrix is sparse the model is stored sparse (CSR).
    E : array (H, O), rows are distributions.
    B : array (H,), a distribution.

    Examples
    --------
    >>> import numpy as np
    >>> T = np.array([[[0., 1.], [1., 0.]]])          # one action: swap
    >>> hmm = ActionHMM(T, np.eye(2), [1.0, 0.0])
    >>> hmm.log_likelihood([0, 1, 0], [-1, 0, 0])
    0.0
    >>> hmm.predict_obs([0, 1], [-1, 0])[1].tolist()
    [0.0, 1.0]
    """

    def __init__(self, T, E, B, *, atol: float = 1e-9):
        E = _real_array(E.toarray() if sp.issparse(E) else E, "E")
        B = _real_array(B, "B")
        if E.ndim != 2:
            raise ValueError(f"E must be 2-D (n_states x n_obs), got shape {E.shape}")
        H, O = E.shape
        if H == 0 or O == 0:
            raise ValueError(f"E has shape {E.shape}: a model needs at least one state and one observation")
        if B.shape != (H,):
            raise ValueError(f"B must have shape ({H},) to match E {E.shape}, got {B.shape}")
        _check_distribution_rows(E, "E", atol)
        _check_distribution_rows(B[None, :], "B", atol)

        if isinstance(T, np.ndarray) and T.ndim == 3 and not sp.issparse(T):
            mats = [T[a] for a in range(T.shape[0])]
        elif isinstance(T, (list, tuple)):
            mats = list(T)
        else:
            raise TypeError("T must be an array (A, H, H) or a list of A matrices (H, H)")
        if not mats:
            raise ValueError("T has no actions")
        self.is_sparse = any(sp.issparse(m) for m in mats)
        for a, m in enumerate(mats):
            _real_array(m.data if sp.issparse(m) else m, f"T[{a}]")
        if self.is_sparse:
            mats = [sp.csr_matrix(m, dtype=np.float64) for m in mats]
        else:
            mats = [np.asarray(m, dtype=np.float64) for m in mats]
        for a, m in enumerate(mats):
            if m.shape != (H, H):
                raise ValueError(f"T[{a}] has shape {m.shape}, expected ({H}, {H}) to match E")
            vals = m.data if self.is_sparse else m
            if not np.isfinite(vals).all():
                raise ValueError(f"T[{a}] holds NaN or inf")
            if (vals < 0).any():
                raise ValueError(f"T[{a}] holds a negative probability")
            sums = np.asarray(m.sum(axis=1)).ravel()
            bad = np.flatnonzero((np.abs(sums) > atol) & (np.abs(sums - 1.0) > atol))
            if len(bad):
                raise ValueError(
                    f"T[{a}] row {bad[0]} sums to {sums[bad[0]]:.12g}; rows must sum to 1 "
                    "(or to 0 for an unknown transition)"
                )
        self.T = mats if self.is_sparse else np.stack(mats)
        self.E = E
        self.B = B
        self._csr = None

    # ---------------------------------------------------------------- sizes
    @property
    def n_states(self) -> int:
        return self.E.shape[0]

    @property
    def n_actions(self) -> int:
        return len(self.T)

    @property
    def n_obs(self) -> int:
        return self.E.shape[1]

    def __repr__(self) -> str:
        kind = "sparse" if self.is_sparse else "dense"
        return f"ActionHMM(n_states={self.n_states}, n_actions={self.n_actions}, n_obs={self.n_obs}, {kind})"

    # ------------------------------------------------------------ builders
    @classmethod
    def from_deterministic(cls, next_state, emission, n_obs: int, start: int = 0) -> "ActionHMM":
        """A sparse deterministic model: ``next_state`` (A x H, -1 = unknown), ``emission`` (H,).

        >>> hmm = ActionHMM.from_deterministic([[1, -1]], [0, 1], n_obs=2)
        >>> hmm.T[0].toarray().tolist()
        [[0.0, 1.0], [0.0, 0.0]]
        """
        ns = _integer_array(next_state, "next_state")
        em = _integer_array(emission, "emission")
        if ns.ndim != 2 or em.ndim != 1 or ns.shape[1] != em.shape[0]:
            raise ValueError(f"next_state (A x H) and emission (H,) disagree: {ns.shape} vs {em.shape}")
        H = em.shape[0]
        if H == 0:
            raise ValueError("a deterministic model needs at least one state")
        if ns.size and (ns.max() >= H or ns.min() < -1):
            raise ValueError(f"next_state entries must be state indices in 0..{H - 1} or -1")
        from ._limits import check_memory

        check_memory(f"a model of {H} states and {n_obs} observations (dense emissions)", 8 * H * n_obs)
        if em.min() < 0 or em.max() >= n_obs:
            raise ValueError(f"emission entries must be observations in 0..{n_obs - 1}")
        if not 0 <= start < H:
            raise ValueError(f"start={start} is not a state index in 0..{H - 1}")
        T = []
        for a in range(ns.shape[0]):
            src = np.flatnonzero(ns[a] >= 0)
            T.append(sp.csr_matrix((np.ones(len(src)), (src, ns[a, src])), shape=(H, H)))
        E = np.zeros((H, n_obs))
        E[np.arange(H), em] = 1.0
        B = np.zeros(H)
        B[start] = 1.0
        return cls(T, E, B)

    def transition(self, a: int):
        """``T[a]`` as stored (ndarray or CSR matrix).

        >>> hmm = ActionHMM.from_deterministic([[1, 0], [0, 1]], [0, 1], n_obs=2)
        >>> hmm.transition(0).toarray().tolist()   # action 0 swaps the two states
        [[0.0, 1.0], [1.0, 0.0]]
        """
        return self.T[a]

    def to_dense(self) -> "ActionHMM":
        """A dense copy (for small models, pgmpy export, tests); a dense model is returned as is.

        >>> dense = ActionHMM.from_deterministic([[1, 0], [0, 1]], [0, 1], n_obs=2).to_dense()
        >>> dense.is_sparse, dense.T.shape, dense.log_likelihood([0, 1, 1], [-1, 0, 1])
        (False, (2, 2, 2), 0.0)
        """
        if not self.is_sparse:
            return self
        return ActionHMM(np.stack([m.toarray() for m in self.T]), self.E, self.B)

    # ------------------------------------------------------------ filtering
    def _prepare(self, obs, actions) -> tuple[np.ndarray, np.ndarray, bool]:
        """Checked (obs, actions) 2-D arrays, and whether the input was one 1-D episode."""
        if actions is None and not isinstance(obs, (Trajectories, tuple)):
            if self.n_actions != 1:
                raise ValueError(f"actions are required: the model has {self.n_actions} actions")
            actions = np.zeros(np.shape(obs), dtype=np.int64)
            actions[..., :1] = -1
        raw = obs.obs if isinstance(obs, Trajectories) else obs[0] if isinstance(obs, tuple) else obs
        traj = as_trajectories(obs, actions)
        check_symbols(traj.obs, traj.actions, self.n_obs, self.n_actions)
        return traj.obs, traj.actions, np.ndim(raw) == 1 and traj.n_episodes == 1

    def _stacked_csr(self):
        if self._csr is None:
            H = self.n_states
            stacked = sp.vstack(self.T, format="csr")
            stacked.sort_indices()
            emitters = sp.csc_matrix(self.E > 0)
            self._csr = (
                stacked.indptr.astype(np.int64),
                stacked.indices.astype(np.int64),
                stacked.data.astype(np.float64),
                emitters.indptr.astype(np.int64),
                emitters.indices.astype(np.int64),
            )
            assert stacked.shape == (self.n_actions * H, H)
        return self._csr

    def run_filter(self, obs, actions=None, *, predictions=False, posteriors=False) -> FilterResult:
        """Run the scaled forward filter over a batch of episodes.

        ``obs``/``actions``: (N, L) int arrays (or 1-D for one episode, a pair
        ``(obs, actions)``, or a :class:`~hmmmerge.trajectories.Trajectories`),
        ``actions[:, 0] == -1``.  Every episode restarts from ``B``.

        Returns
        -------
        FilterResult
            per-step log-probabilities and no-prediction flags; predictive
            distributions and beliefs when asked for.

        See Also
        --------
        log_likelihood, filter, predict_obs, hmmmerge.evaluate.score_trajectories

        >>> import numpy as np
        >>> hmm = ActionHMM(np.ones((1, 2, 2)) / 2, np.eye(2), [0.5, 0.5])
        >>> r = hmm.run_filter([[0, 1, 1]], [[-1, 0, 0]])
        >>> np.round(np.exp(r.log_probs), 3).tolist()
        [[0.5, 0.5, 0.5]]
        """
        o, a, _ = self._prepare(obs, actions)
        return self._run(o, a, predictions, posteriors)

    def _run(self, o: np.ndarray, a: np.ndarray, predictions: bool = False, posteriors: bool = False) -> FilterResult:
        from . import _forward

        N, L = o.shape
        logp = np.zeros((N, L))
        nopred = np.zeros((N, L), dtype=bool)
        pred_out = np.zeros((N, L, self.n_obs) if predictions else (0, 0, 0))
        post_out = np.zeros((N, L, self.n_states) if posteriors else (0, 0, 0))
        if self.is_sparse:
            indptr, indices, data, em_ptr, em_idx = self._stacked_csr()
            _forward.forward_csr(
                indptr, indices, data, self.E, self.B, em_ptr, em_idx, o, a, logp, nopred, pred_out, post_out
            )
        else:
            _forward.forward_dense(self.T, self.E, self.B, o, a, logp, nopred, pred_out, post_out)
        return FilterResult(
            logp, nopred, pred_out if predictions else None, post_out if posteriors else None
        )

    def log_likelihood(self, obs, actions=None) -> float:
        """Total log-likelihood in nats of all episodes (each restarting from ``B``).

        Returns
        -------
        float (``-inf`` if some observation had probability 0)

        See Also
        --------
        run_filter

        >>> import numpy as np
        >>> hmm = ActionHMM(np.ones((1, 2, 2)) / 2, np.eye(2), [0.5, 0.5])
        >>> bool(round(hmm.log_likelihood([0, 0, 1, 0]), 6) == round(4 * np.log(0.5), 6))
        True
        """
        return self.run_filter(obs, actions).log_likelihood

    def filter(self, obs, actions=None) -> np.ndarray:
        """Filtered beliefs ``P(h_t | o_<=t, a_<=t)``: (N, L, H), or (L, H) for one episode.

        Memory grows as N * L * H; meant for small models and short windows.

        See Also
        --------
        run_filter, predict_obs

        >>> import numpy as np
        >>> hmm = ActionHMM(np.ones((1, 2, 2)) / 2, np.eye(2), [0.5, 0.5])
        >>> hmm.filter([0, 1]).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        return self._per_episode(obs, actions, "posteriors")

    def predict_obs(self, obs, actions=None) -> np.ndarray:
        """Predictive distributions ``P(o_t | o_<t, a_<=t)``: (N, L, O), or (L, O) for one episode.

        Entry ``t`` is the prediction made *before* seeing ``o_t``; an all-zero
        row means the model made no prediction at that step.

        See Also
        --------
        run_filter, filter

        >>> import numpy as np
        >>> hmm = ActionHMM(np.ones((1, 2, 2)) / 2, np.eye(2), [1.0, 0.0])
        >>> hmm.predict_obs([0, 1]).tolist()
        [[1.0, 0.0], [0.5, 0.5]]
        """
        return self._per_episode(obs, actions, "predictions")

    def _per_episode(self, obs, actions, what: str) -> np.ndarray:
        """``posteriors`` or ``predictions`` of the filter, without the episode axis for one 1-D episode."""
        o, a, single = self._prepare(obs, actions)
        out = getattr(self._run(o, a, **{what: True}), what)
        return out[0] if single else out

    # ------------------------------------------------------------ sampling
    def sample(self, n_episodes: int = 1, episode_length: int = 50, seed=0, actions=None) -> Trajectories:
        """Sample episodes; ``states`` holds the hidden states.

        ``actions``: an (n_episodes, episode_length + 1) int array with first
        column -1, or ``None`` for uniformly random actions.

        Returns
        -------
        Trajectories
            with ``states`` the sampled hidden states.

        See Also
        --------
        hmmmerge.rollouts.random_walk : episodes of an Environment.

        >>> import numpy as np
        >>> hmm = ActionHMM(np.array([[[0., 1.], [1., 0.]]]), np.eye(2), [1.0, 0.0])
        >>> hmm.sample(1, 4, seed=0).obs.tolist()
        [[0, 1, 0, 1, 0]]
        """
        check_int(n_episodes, "n_episodes", low=1)
        check_int(episode_length, "episode_length", low=0)
        rng = as_generator(seed)
        if actions is None:
            acts = np.empty((n_episodes, episode_length + 1), dtype=np.int64)
            acts[:, 0] = -1
            acts[:, 1:] = rng.integers(0, self.n_actions, size=(n_episodes, episode_length))
        else:
            acts = Trajectories(np.zeros_like(actions), actions).actions
            if acts.shape != (n_episodes, episode_length + 1):
                raise ValueError(f"actions must have shape ({n_episodes}, {episode_length + 1}), got {acts.shape}")
            check_symbols(np.zeros(0, dtype=np.int64), acts, self.n_obs, self.n_actions)
        states = np.empty_like(acts)
        states[:, 0] = _draw(np.broadcast_to(self.B, (n_episodes, self.n_states)), rng)
        for t in range(1, episode_length + 1):
            rows = np.empty((n_episodes, self.n_states))
            for n in range(n_episodes):
                a, s = acts[n, t], states[n, t - 1]
                row = self.T[a][s]
                rows[n] = row.toarray().ravel() if self.is_sparse else row
            empty = rows.sum(axis=1) == 0
            if empty.any():
                n = int(np.flatnonzero(empty)[0])
                raise ValueError(
                    f"cannot sample: state {states[n, t - 1]} has no transition for action {acts[n, t]}"
                )
            states[:, t] = _draw(rows, rng)
        obs = _draw(self.E[states.ravel()], rng).reshape(states.shape)
        return Trajectories(obs=obs, actions=acts, states=states)


def _draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``probs`` by inverse CDF."""
    cum = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cum[:, -1]
    idx = (u[:, None] >= cum).sum(axis=1)
    return np.minimum(idx, probs.shape[1] - 1).astype(np.int64)


def _real_array(x, name: str) -> np.ndarray:
    """``x`` as float64, refusing complex, object and string data instead of casting them.

    >>> _real_array([1, 0.5], "B").tolist()
    [1.0, 0.5]
    >>> _real_array([1 + 0j], "B")
    Traceback (most recent call last):
    ...
    TypeError: B must hold real numbers, got dtype complex128
    """
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def _integer_array(x, name: str) -> np.ndarray:
    """``x`` as int64; floats only if they are whole numbers (never truncated).

    >>> _integer_array([1.0, -1.0], "emission").tolist()
    [1, -1]
    >>> _integer_array([1.5], "emission")
    Traceback (most recent call last):
    ...
    ValueError: emission must hold integers, got 1.5
    """
    a = np.asarray(x)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    if a.dtype.kind != "f" and a.size:
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (a != np.round(a)) | (np.abs(a) >= 2.0**62)
    if bad.any():
        raise ValueError(f"{name} must hold integers, got {float(a[bad][0])!r}")
    return a.astype(np.int64)


def _check_distribution_rows(M: np.ndarray, name: str, atol: float) -> None:
    if not np.isfinite(M).all():
        raise ValueError(f"{name} holds NaN or inf")
    if (M < 0).any():
        raise ValueError(f"{name} holds a negative probability")
    sums = M.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > atol)
    if len(bad):
        label = name if M.shape[0] == 1 and name == "B" else f"{name} row {bad[0]}"
        raise ValueError(f"{label} sums to {sums[bad[0]]:.12g}, not 1")
