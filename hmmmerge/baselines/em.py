"""EM baseline: the action-conditioned clone-structured HMM.

The model of clone-structured cognitive graphs (George et al. 2021, Nature
Communications): every observation ``o`` owns a fixed block of ``n_clones[o]``
hidden "clone" states that emit ``o`` and nothing else, and the transitions
``T[a, i, j] = P(h' = j | h = i, a)`` are conditioned on the action.  Learning
is Baum-Welch whose forward-backward messages live on the observed clone
blocks only (``O(clones**2)`` work per step instead of ``O(H**2)``), with
scaled messages, a Dirichlet pseudocount, early stopping on the training
log-likelihood, several random restarts, and an optional Viterbi (hard-EM)
refinement.  The kernels are numba functions in
:mod:`hmmmerge.baselines._em_kernels`.

The fitted model is an :class:`~hmmmerge.hmm.ActionHMM` (:meth:`CloneHMM.to_hmm`)
scored by the same filter as every other model.
"""

from __future__ import annotations

import time
import numpy as np
import scipy.sparse as sp

from .._estimator import ModelLearner
from .._random import as_generator
from .._random import check_seed
from .._validation import Bool, Float, Int, alphabet_sizes, as_sequence
from ..hmm import ActionHMM
from ..trajectories import Trajectories

__all__ = ["CloneHMM"]


def _check_n_clones(value, name: str) -> None:
    """An integer >= 1, or a 1-D integer array (one count per observation) of values >= 1."""
    nc = np.asarray(value)
    if nc.ndim == 0:
        if not np.issubdtype(nc.dtype, np.integer) or isinstance(value, bool):
            raise ValueError(f"{name} must be an integer or an int array, got {value!r}")
    elif nc.ndim == 1:
        if nc.size and not np.issubdtype(nc.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {nc.dtype}")
    else:
        raise ValueError(f"{name} must be an integer or a 1-D array, got shape {nc.shape}")
    if (nc < 1).any():
        raise ValueError(f"{name} must be >= 1 for every observation, got {int(nc.min())}")


class CloneHMM(ModelLearner):
    """Action-conditioned clone-structured HMM learned by EM (Baum-Welch).

    Parameters
    ----------
    n_clones : int or int array (n_obs,)
        Clones per observation (the same for all, or one count per observation).
    n_iter : int
        Maximum number of Baum-Welch iterations per restart.
    pseudocount : float >= 0
        Added to every expected count before normalising ``T`` and ``B`` (the
        MAP estimate under a Dirichlet prior); 0 gives maximum likelihood.
    tol : float >= 0
        Early stop when one iteration improves the total training
        log-likelihood (nats) by less than ``tol``.
    seed : int, sequence of ints, numpy Generator or None
        Seed of the random initialisation (a sequence seeds a SeedSequence).
    viterbi_refine : bool
        After EM, run hard-EM: decode the most probable clone path (max-product
        restricted to blocks), re-estimate from the path's counts, repeat.
    n_viterbi_iter : int
        Maximum number of hard-EM iterations.
    viterbi_pseudocount : float >= 0 or None
        Pseudocount of the hard-EM re-estimation (default: ``pseudocount``).
    n_init : int
        Random restarts; the restart with the highest final training
        log-likelihood is kept.
    split_rounds : int >= 0
        After EM (before any Viterbi refinement), rounds of clone splitting
        (the split move of split-and-merge EM, Ueda et al. 2000): every clone
        whose expected surprise at the next view on the training data
        (:func:`clone_surprise`) is at least ``split_surprise`` nats is split
        into itself and an unused clone of its observation (outgoing
        transitions copied, incoming ones shared at random), then EM resumes.
        EM can stop with one clone standing for two places that show the same
        view (their next views then mix); splitting lets it separate them.
        0 (the default) changes nothing.
    split_surprise : float >= 0
        The threshold of ``split_rounds`` in nats (20: well above the
        ~10 nats the pseudocount alone gives a clone on the paper's world).
    merge_rounds : int >= 0
        After EM and splits (before any Viterbi refinement), rounds of
        merging and splitting, for worlds whose moves are deterministic.
        The clones that stand for one place are merged on EM's expected
        counts (:func:`~hmmmerge.baselines.clone_merge.merge_duplicates`:
        compatible on every move both tried, recursively; an untried move is
        a wildcard; clones with expected visits < 0.5 are dropped) and EM
        resumes; then the visits of the decoded clone path after which the
        next view is not the usual one for that clone and move get a clone
        of their own (:func:`~hmmmerge.baselines.clone_merge.odd_visits`:
        only where they are more than the path's overall rate of odd views
        explains, binomial tail < 0.01, so slipping moves are not split off)
        and EM resumes again.  Stops early when a round neither merges, drops nor
        splits.  EM spreads a rarely visited place over several clones, each
        with moves never tried from it (a belief there then goes everywhere
        after such a move), and can leave it inside the clone of a busy place
        of the same view; this repairs both.  The number of clones per view
        then varies (``n_clones_``).  0 (the default) changes nothing.

    Attributes (after :meth:`fit`)
    ------------------------------
    T_ : (A, H, H) transitions.  B_ : (H,) initial distribution.
    n_clones_ : (O,) clones per observation.  state_obs_ : (H,) observation of each clone.
    n_iter_ : EM iterations run (kept restart).  converged_ : early stop reached.
    train_log_likelihood_ : (n_iter_,) total training log-likelihood in nats
        before each M-step (the likelihood of the parameters at that iteration).
    train_objective_ : (n_iter_,) the same plus the log-prior
        ``pseudocount * (sum log T + sum log B)``; EM never decreases it.
    viterbi_log_likelihood_ : (k,) ``log P(best path, X)`` per hard-EM iteration.
    split_log_ : (rounds, 2) per splitting round: clones split, training log-likelihood after EM resumed.
    merge_log_ : (rounds, 4) per merging round: clones dropped (expected visits < 0.5), clones merged into another,
        classes split, training log-likelihood after EM resumed.
    log_likelihood_ : training log-likelihood of the final model.
    fit_time_ : wall seconds of :meth:`fit`.

    See Also
    --------
    hmmmerge.models.build_model : builds this model by the name ``"em"``.

    Examples
    --------
    >>> import numpy as np
    >>> from hmmmerge import Environment, random_walk
    >>> # a 4-cycle (action 0 forward, 1 back) coloured 0 0 1 1: aliased, first order fails
    >>> env = Environment.from_arrays([[1, 2, 3, 0], [3, 0, 1, 2]], [0, 0, 1, 1])
    >>> traj = random_walk(env, 40, 20, seed=0)
    >>> model = CloneHMM(n_clones=3, n_iter=200, pseudocount=1e-4, seed=0, n_init=3).fit(traj)
    >>> model.to_hmm().n_states
    6
    >>> fresh = random_walk(env, 20, 20, seed=1)
    >>> bool(-model.score(fresh) / fresh.n_steps < 0.05)
    True
    """

    def __init__(
        self,
        n_clones=10,
        n_iter: int = 100,
        pseudocount: float = 1e-3,
        tol: float = 1e-2,
        seed=0,
        viterbi_refine: bool = False,
        n_viterbi_iter: int = 50,
        viterbi_pseudocount=None,
        n_init: int = 1,
        split_rounds: int = 0,
        split_surprise: float = 20.0,
        merge_rounds: int = 0,
    ):
        self.n_clones = n_clones
        self.n_iter = n_iter
        self.pseudocount = pseudocount
        self.tol = tol
        self.seed = seed
        self.viterbi_refine = viterbi_refine
        self.n_viterbi_iter = n_viterbi_iter
        self.viterbi_pseudocount = viterbi_pseudocount
        self.n_init = n_init
        self.split_rounds = split_rounds
        self.split_surprise = split_surprise
        self.merge_rounds = merge_rounds

    # ------------------------------------------------------------ validation
    # n_clones' length is checked against the data's alphabet by _clone_counts
    _parameter_constraints = {
        "n_clones": _check_n_clones, "n_iter": Int(0), "n_viterbi_iter": Int(0), "n_init": Int(1),
        "pseudocount": Float(0), "tol": Float(0), "viterbi_pseudocount": Float(0, none=True),
        "viterbi_refine": Bool(), "seed": check_seed, "split_rounds": Int(0), "split_surprise": Float(0),
        "merge_rounds": Int(0),
    }

    def _clone_counts(self, n_obs: int) -> np.ndarray:
        nc = np.asarray(self.n_clones)
        if nc.ndim == 0:
            return np.full(n_obs, int(nc), dtype=np.int64)
        if nc.shape[0] != n_obs:
            raise ValueError(f"n_clones has {nc.shape[0]} entries but there are n_obs={n_obs} observations")
        return nc.astype(np.int64)

    def _sequence(self, traj, n_obs=None, n_actions=None):
        """Concatenated (obs, acts) with -1 at episode starts, plus n_obs, n_actions."""
        obs, acts = as_sequence(traj)
        n_obs, n_actions = alphabet_sizes(obs, acts, n_obs, n_actions)
        return obs, acts, n_obs, n_actions

    # ------------------------------------------------------------------ fit
    def fit(self, traj, n_obs: int | None = None, n_actions: int | None = None) -> "CloneHMM":
        """Learn ``T_`` and ``B_`` from trajectories by Baum-Welch (and hard-EM).

        ``traj``: a :class:`~hmmmerge.rollouts.Trajectories` (every episode
        restarts from ``B``, which is learned from the episodes' first clones)
        or a pair ``(obs, actions)`` of int arrays: 2-D (episodes x steps) or
        1-D, one sequence where every ``-1`` in ``actions`` starts an episode
        (so episodes may differ in length; ``actions[0] == -1``).
        ``n_obs`` defaults to ``len(n_clones)`` when that is an array, else to
        the largest observation plus one; ``n_actions`` to the largest action
        plus one.  A new fit starts afresh.

        Returns
        -------
        self

        >>> import numpy as np
        >>> obs = np.array([0, 1, 0, 1, 0]); acts = np.array([-1, 0, 0, 0, 0])
        >>> m = CloneHMM(n_clones=1, n_iter=5, pseudocount=0.0).fit((obs, acts))
        >>> m.T_[0].round(3).tolist(), round(m.log_likelihood_, 6)
        ([[0.0, 1.0], [1.0, 0.0]], 0.0)
        """
        from . import _em_kernels as K

        t0 = time.perf_counter()
        self._validate_params()
        if n_obs is None and np.ndim(self.n_clones) == 1:
            n_obs = len(self.n_clones)
        obs, acts, n_obs, n_actions = self._sequence(traj, n_obs, n_actions)
        nc = self._clone_counts(n_obs)
        _check_em_memory(int(np.sum(nc)), int(n_actions), int(np.asarray(obs).size), int(np.max(nc)))
        data = _Data(K, obs, acts, nc)
        H = data.H
        rng = as_generator(self.seed)  # a sequence of ints seeds numpy's SeedSequence, e.g. [run, seed]
        best = None
        for _ in range(self.n_init):
            T = rng.random((n_actions, H, H))
            T /= T.sum(axis=2, keepdims=True)
            B = np.full(H, 1.0 / H)
            run = _run_em(K, data, T, B, self.n_iter, float(self.pseudocount), float(self.tol))
            if best is None or run["log_likelihood"] > best["log_likelihood"]:
                best = run
        T, B = best["T"], best["B"]
        split_log = []
        if self.split_rounds:
            T, B, split_log = _run_splits(K, data, T, B, self, rng)
        merge_log = []
        if self.merge_rounds:
            T, B, data, merge_log = _run_merges(K, data, T, B, self)
            nc = data.sizes.copy()
        vit_ll = []
        if self.viterbi_refine:
            vp = self.pseudocount if self.viterbi_pseudocount is None else self.viterbi_pseudocount
            T, B, vit_ll = _run_hard_em(K, data, T, B, self.n_viterbi_iter, float(vp), float(self.tol))
        self.n_clones_ = nc
        self.state_obs_ = np.repeat(np.arange(n_obs), nc)
        self.T_ = T
        self.B_ = B
        self.n_obs_ = n_obs
        self.n_actions_ = n_actions
        self.n_iter_ = best["n_iter"]
        self.converged_ = best["converged"]
        self.train_log_likelihood_ = np.asarray(best["lls"])
        self.train_objective_ = np.asarray(best["objectives"])
        self.viterbi_log_likelihood_ = np.asarray(vit_ll)
        self.split_log_ = np.asarray(split_log, dtype=np.float64).reshape(-1, 2)
        self.merge_log_ = np.asarray(merge_log, dtype=np.float64).reshape(-1, 4)
        self.log_likelihood_ = data.log_likelihood(T, B)
        self.fit_time_ = time.perf_counter() - t0
        return self

    # ------------------------------------------------------------- results
    @property
    def n_states_(self) -> int:
        self._check_fitted("T_")
        return int(self.state_obs_.shape[0])

    def to_hmm(self, sparse: bool = False) -> ActionHMM:
        """The fitted model as an :class:`~hmmmerge.hmm.ActionHMM` (clones as hidden states).

        ``sparse=True`` stores ``T`` as CSR (worth it when the pseudocount is 0).

        Returns
        -------
        ActionHMM

        See Also
        --------
        hmmmerge.evaluate.score_trajectories : scores it.

        >>> m = CloneHMM(n_clones=2, n_iter=3).fit(([0, 1, 0], [-1, 0, 1]))
        >>> m.to_hmm()
        ActionHMM(n_states=4, n_actions=2, n_obs=2, dense)
        """
        self._check_fitted("T_")
        H = self.n_states_
        E = np.zeros((H, self.n_obs_))
        E[np.arange(H), self.state_obs_] = 1.0
        if sparse:
            import scipy.sparse as sp

            return ActionHMM([sp.csr_matrix(m) for m in self.T_], E, self.B_)
        return ActionHMM(self.T_, E, self.B_)

    def decode(self, traj, actions=None):
        """Most probable clone path: ``(log P(path, X), states)``, states shaped like ``obs``.

        Returns
        -------
        log_prob : float
        states : int array shaped like ``obs``

        See Also
        --------
        posteriors

        >>> m = CloneHMM(n_clones=1, n_iter=5, pseudocount=0.0).fit(([0, 1, 0], [-1, 0, 0]))
        >>> m.decode([0, 1, 0], [-1, 0, 0])[1].tolist()
        [0, 1, 0]
        """
        data, shape = self._fitted_data(traj, actions)
        lp, path = data.viterbi(self.T_, self.B_)
        return lp, path.reshape(shape)

    def posteriors(self, traj, actions=None) -> np.ndarray:
        """Smoothed posteriors ``P(h_t | X)`` (N, L, H), or (L, H) for one 1-D sequence.

        See Also
        --------
        decode, hmmmerge.hmm.ActionHMM.filter : the filtered (not smoothed) beliefs.

        >>> m = CloneHMM(n_clones=1, n_iter=5, pseudocount=0.0).fit(([0, 1], [-1, 0]))
        >>> m.posteriors([0, 1], [-1, 0]).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        data, shape = self._fitted_data(traj, actions)
        flat = data.posteriors(self.T_, self.B_)
        obs = data.obs
        out = np.zeros((obs.shape[0], self.n_states_))
        rows = np.repeat(np.arange(obs.shape[0]), data.sizes[obs])
        cols = data.starts[obs][rows] + (np.arange(flat.shape[0]) - data.off[:-1][rows])
        out[rows, cols] = flat
        return out.reshape(shape + (self.n_states_,))

    def _fitted_data(self, traj, actions):
        """The kernels' layout of ``traj`` under the fitted alphabet, and the shape of its ``obs``."""
        from . import _em_kernels as K

        self._check_fitted("T_")
        shape = np.shape(traj.obs if isinstance(traj, Trajectories) else traj[0] if actions is None else traj)
        obs, acts, _, _ = self._sequence(traj if actions is None else (traj, actions), self.n_obs_, self.n_actions_)
        return _Data(K, obs, acts, self.n_clones_), shape


# --------------------------------------------------------------------- engine
class _Data:
    """A training sequence laid out for the kernels.

    Steps are grouped by (action, previous observation, observation): every
    group's expected counts fill one block ``C[a][blk_prev, blk]`` of the count
    tensor, summed in a cache-resident buffer over the group's steps.
    """

    def __init__(self, K, obs, acts, n_clones):
        self.K = K
        self.obs = np.ascontiguousarray(obs, dtype=np.int64)
        self.acts = np.ascontiguousarray(acts, dtype=np.int64)
        self.sizes = np.ascontiguousarray(n_clones, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.H = int(self.sizes.sum())
        self.max_size = int(self.sizes.max())
        self.off = K.step_offsets(self.obs, self.sizes)
        self.alpha = np.empty(self.off[-1])
        self.bk = np.empty(self.off[-1])
        self.scale = np.empty(self.obs.shape[0])
        self.first = np.flatnonzero(self.acts < 0)
        self._groups = None

    def groups(self):
        """Move steps sorted by (action, previous observation, observation) and the group cuts."""
        if self._groups is None:
            O = self.sizes.shape[0]
            moves = np.flatnonzero(self.acts >= 0)
            key = (self.acts[moves] * O + self.obs[moves - 1]) * O + self.obs[moves]
            order = np.argsort(key, kind="stable")
            key = key[order]
            cuts = np.flatnonzero(np.diff(key)) + 1
            bounds = np.concatenate([[0], cuts, [moves.size]]) if moves.size else np.zeros(1, dtype=np.int64)
            self._groups = (np.ascontiguousarray(moves[order]), bounds.astype(np.int64))
        return self._groups

    def _first_blocks(self):
        """Flat positions and clone indices of the blocks of the episodes' first steps."""
        if not hasattr(self, "_first_flat"):
            o = self.obs[self.first]
            n = self.sizes[o]
            within = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)  # 0..n-1 per block
            self._first_len = n
            self._first_flat = np.repeat(self.off[self.first], n) + within
            self._first_states = np.repeat(self.starts[o], n) + within
        return self._first_flat, self._first_states

    def log_likelihood(self, T, B) -> float:
        return float(
            self.K.forward(
                T, B, self.starts, self.sizes, self.obs, self.acts, self.off, self.alpha, self.scale, self.max_size
            )
        )

    def _backward(self, T) -> None:
        self.K.backward(T, self.starts, self.sizes, self.obs, self.acts, self.off, self.scale, self.bk)

    def expected_counts(self, T, B):
        """E-step: ``(log P(X), C (A, H, H), Bc (H,))``; ``C``, ``Bc`` are zero if ``P(X) = 0``."""
        ll = self.log_likelihood(T, B)
        C = np.zeros_like(T)
        Bc = np.zeros_like(B)
        if not np.isfinite(ll):
            return ll, C, Bc
        self._backward(T)
        order, bounds = self.groups()
        self.K.transition_counts(
            T, self.starts, self.sizes, self.obs, self.acts, self.off, self.alpha, self.bk, order, bounds, C
        )
        # posteriors at episode starts: gamma = alpha * bk * c
        flat, states = self._first_blocks()
        c = np.repeat(self.scale[self.first], self._first_len)
        np.add.at(Bc, states, self.alpha[flat] * self.bk[flat] * c)
        return ll, C, Bc

    def posteriors(self, T, B) -> np.ndarray:
        """Smoothed posteriors of every step, flat like ``alpha``."""
        ll = self.log_likelihood(T, B)
        if not np.isfinite(ll):
            raise ValueError("the sequence has probability 0 under the model")
        self._backward(T)
        return self.alpha * self.bk * np.repeat(self.scale, self.sizes[self.obs])

    def viterbi(self, T, B):
        with np.errstate(divide="ignore"):
            logT, logB = np.log(T), np.log(B)
        path = np.empty_like(self.obs)
        lp = self.K.viterbi(
            logT, logB, self.starts, self.sizes, self.obs, self.acts, self.off, self.max_size, path
        )
        return float(lp), path

    def path_counts(self, path, n_actions):
        """Hard counts of a decoded path: ``C (A, H, H)``, ``Bc (H,)``."""
        C = np.zeros((n_actions, self.H, self.H))
        moves = self.acts >= 0
        prev = np.concatenate([[0], path[:-1]])
        np.add.at(C, (self.acts[moves], prev[moves], path[moves]), 1.0)
        Bc = np.bincount(path[~moves], minlength=self.H).astype(np.float64)
        return C, Bc


def _normalise(C, Bc, pseudocount):
    """M-step: rows of ``C + pseudocount`` and ``Bc + pseudocount`` normalised (all-zero rows stay 0)."""
    T = C + pseudocount
    s = T.sum(axis=2, keepdims=True)
    np.divide(T, s, out=T, where=s > 0)
    B = Bc + pseudocount
    B /= B.sum()
    return T, B


def _log_prior(T, B, pseudocount) -> float:
    if pseudocount == 0.0:
        return 0.0
    return pseudocount * float(np.log(T).sum() + np.log(B).sum())


def em_step(data: _Data, T, B, pseudocount: float):
    """One Baum-Welch iteration: ``(log P(X | T, B), T_new, B_new)``.

    One clone per observation on the sequence 0 1 0 1: a single step finds the alternation.

    >>> from hmmmerge.baselines import _em_kernels
    >>> data = _Data(_em_kernels, [0, 1, 0, 1], [-1, 0, 0, 0], [1, 1])
    >>> ll, T, B = em_step(data, np.full((1, 2, 2), 0.5), np.array([0.5, 0.5]), pseudocount=0.0)
    >>> round(ll, 4) == round(4 * float(np.log(0.5)), 4), T[0].tolist(), B.tolist()
    (True, [[0.0, 1.0], [1.0, 0.0]], [1.0, 0.0])
    """
    ll, C, Bc = data.expected_counts(T, B)
    if not np.isfinite(ll):
        raise ValueError("the training data has probability 0 under the current model (pseudocount 0?)")
    T2, B2 = _normalise(C, Bc, pseudocount)
    return ll, T2, B2


def _check_em_memory(H: int, n_actions: int, n_steps: int, max_clones: int) -> None:
    """Refuse an EM fit whose dense transitions (a few copies of A x H x H) or per-step
    messages (clones per step) would not fit in the memory budget."""
    from .._limits import check_memory

    check_memory(f"EM on {H} clone states, {n_actions} actions, {n_steps} steps",
                 4 * 8 * n_actions * H * H + 3 * 8 * n_steps * max_clones)


def _run_em(K, data, T, B, n_iter, pseudocount, tol):
    lls, objectives = [], []
    converged = False
    for _ in range(n_iter):
        ll, T_new, B_new = em_step(data, T, B, pseudocount)
        lls.append(ll)
        objectives.append(ll + _log_prior(T, B, pseudocount))
        T, B = T_new, B_new
        if len(lls) > 1 and lls[-1] - lls[-2] < tol:
            converged = True
            break
    return {
        "T": T,
        "B": B,
        "lls": lls,
        "objectives": objectives,
        "n_iter": len(lls),
        "converged": converged,
        "log_likelihood": data.log_likelihood(T, B),
    }


def clone_surprise(data: _Data, T, B) -> tuple[np.ndarray, np.ndarray]:
    """``(surprise, occupancy)``, (H,) each: a clone's expected surprise at the next view on the training
    data, in nats, and its occupancy.

    The clone's occupancy (smoothed posterior mass summed over the training
    steps) times the entropy of the view after it, averaged over the actions.
    A clone that stands for one place of a deterministic world is followed by
    one view per action (surprise ~0, up to the pseudocount); one that stands
    for two places is not.

    >>> from hmmmerge.baselines import _em_kernels
    >>> data = _Data(_em_kernels, [0, 1, 0, 2], [-1, 0, 0, 0], [1, 1, 1])
    >>> T = np.zeros((1, 3, 3)); T[0, 0, 1:] = 0.5; T[0, 1:, 0] = 1.0
    >>> surprise, occupancy = clone_surprise(data, T, np.array([1.0, 0, 0]))
    >>> np.round(surprise, 3).tolist(), occupancy.tolist()  # clone 0: 2 visits x log 2
    ([1.386, 0.0, 0.0], [2.0, 1.0, 1.0])
    """
    flat = data.posteriors(T, B)
    rows = np.repeat(np.arange(data.obs.shape[0]), data.sizes[data.obs])
    cols = data.starts[data.obs][rows] + (np.arange(flat.shape[0]) - data.off[:-1][rows])
    occupancy = np.bincount(cols, weights=flat, minlength=data.H)
    nxt = np.add.reduceat(T, data.starts, axis=2)  # (A, H, O): P(next view | clone, action)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = np.where(nxt > 0, -nxt * np.log(nxt), 0.0).sum(axis=2).mean(axis=0)
    return occupancy * entropy, occupancy


def split_clone(T, B, h: int, j: int, share, b_share: float) -> None:
    """Split clone ``h`` into ``h`` and the clone ``j`` of the same view, in place.

    ``j`` gets ``h``'s outgoing transitions; every transition into ``h`` is
    shared, ``share`` (A, H) of it staying on ``h`` and the rest moving to
    ``j`` (``b_share`` likewise for ``B``).  When ``j`` was unreachable (no
    transition into it, ``B[j] = 0``) the model's distribution over
    observation sequences is unchanged.

    >>> T = np.array([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]); B = np.array([1.0, 0, 0])
    >>> split_clone(T, B, 1, 2, np.full((1, 3), 0.25), 0.5)
    >>> T[0].tolist()
    [[0.0, 0.25, 0.75], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """
    T[:, j, :] = T[:, h, :]
    into = T[:, :, h].copy()
    T[:, :, h] = into * share
    T[:, :, j] += into * (1.0 - share)
    B[j] += B[h] * (1.0 - b_share)
    B[h] *= b_share


def _run_splits(K, data, T, B, params, rng):
    """``params.split_rounds`` rounds of splitting and resumed EM; ``(T, B, [(clones split, log-lik), ...])``."""
    T, B = T.copy(), B.copy()
    state_obs = np.repeat(np.arange(data.sizes.shape[0]), data.sizes)
    log = []
    for _ in range(params.split_rounds):
        surprise, occupancy = clone_surprise(data, T, B)
        spare = occupancy < 0.5  # clones the data hardly use
        n_split = 0
        for h in np.argsort(-surprise, kind="stable"):
            if surprise[h] < params.split_surprise:
                break
            free = np.flatnonzero(spare & (state_obs == state_obs[h]))
            free = free[free != h]
            if not free.size:
                continue
            j = int(free[0])
            split_clone(T, B, int(h), j, rng.random(T.shape[:2]), float(rng.random()))
            spare[j] = False
            n_split += 1
        if not n_split:
            break
        run = _run_em(K, data, T, B, params.n_iter, float(params.pseudocount), float(params.tol))
        T, B = run["T"], run["B"]
        log.append((n_split, run["log_likelihood"]))
    return T, B, log


def _relaid(K, data, C, Bc, class_of, class_view, pseudocount):
    """The map of ``C``, ``Bc`` lumped by ``class_of`` (state -> class, -1: dropped), its clones laid out in
    view blocks (every view keeps >= 1 clone): ``(data, T, B)``."""
    O = data.sizes.shape[0]
    class_view = np.concatenate([class_view, np.setdiff1d(np.arange(O), class_view)])
    order = np.argsort(class_view, kind="stable")  # clones of a view in one block
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    sizes = np.bincount(class_view, minlength=O).astype(np.int64)
    new = _Data(K, data.obs, data.acts, sizes)
    keep = np.flatnonzero(class_of >= 0)
    M = sp.csr_matrix((np.ones(keep.size), (keep, rank[class_of[keep]])), shape=(class_of.size, new.H))
    lumped = np.stack([np.asarray((M.T @ (M.T @ C[a]).T).T) for a in range(C.shape[0])])
    T, B = _normalise(lumped, M.T @ Bc, pseudocount)
    return new, T, B


def _run_merges(K, data, T, B, params):
    """``params.merge_rounds`` rounds of merging and splitting, each followed by EM;
    ``(T, B, data, [(dropped, merged, split, log-lik), ...])`` (``data`` laid out for the new clones).

    A round: the clones that stand for one place are merged on EM's expected counts
    (:func:`~hmmmerge.baselines.clone_merge.merge_duplicates`; the clones the data hardly use, expected
    visits < 0.5, are dropped) and EM resumes; then the visits of the decoded path after which the next view
    is not the usual one for that clone and move move to a clone of their own
    (:func:`~hmmmerge.baselines.clone_merge.odd_visits`, significance 0.01), and EM resumes again.
    """
    from .clone_merge import merge_duplicates, odd_visits

    A, O = T.shape[0], data.sizes.shape[0]
    pc, n_iter, tol = float(params.pseudocount), params.n_iter, float(params.tol)
    log = []
    for _ in range(params.merge_rounds):
        ll, C, Bc = data.expected_counts(T, B)
        if not np.isfinite(ll):
            break
        view = np.repeat(np.arange(O), data.sizes)
        labels = merge_duplicates(C, view, min_count=0.5, initial=Bc)
        n_used, n_class = int((labels >= 0).sum()), int(labels.max()) + 1
        changed = n_class < view.size  # something merged or dropped
        entry = (view.size - n_used, n_used - n_class)
        class_view = np.zeros(n_class, dtype=np.int64)
        class_view[labels[labels >= 0]] = view[labels >= 0]
        if changed:
            data, T, B = _relaid(K, data, C, Bc, labels, class_view, pc)
            run = _run_em(K, data, T, B, n_iter, pc, tol)
            T, B, ll = run["T"], run["B"], run["log_likelihood"]
        lp, path = data.viterbi(T, B)
        odd = (odd_visits(path, data.obs, data.acts, data.H, significance=0.01) if np.isfinite(lp)
               else np.zeros(0, dtype=np.int64))
        split = np.unique(path[odd])
        if split.size:
            path[odd] = data.H + np.searchsorted(split, path[odd])
            view = np.repeat(np.arange(O), data.sizes)
            Cp = np.zeros((A, data.H + split.size, data.H + split.size))
            moves = data.acts >= 0
            prev = np.concatenate([[0], path[:-1]])
            np.add.at(Cp, (data.acts[moves], prev[moves], path[moves]), 1.0)
            Bp = np.bincount(path[~moves], minlength=data.H + split.size).astype(np.float64)
            data, T, B = _relaid(K, data, Cp, Bp, np.arange(data.H + split.size),
                                 np.concatenate([view, view[split]]), pc)
            run = _run_em(K, data, T, B, n_iter, pc, tol)
            T, B, ll = run["T"], run["B"], run["log_likelihood"]
        log.append((*entry, split.size, ll))
        if not changed and not split.size:
            break
    return T, B, data, log


def _run_hard_em(K, data, T, B, n_iter, pseudocount, tol):
    n_actions = T.shape[0]
    vit = []
    for _ in range(n_iter):
        lp, path = data.viterbi(T, B)
        if not np.isfinite(lp):
            break
        vit.append(lp)
        if len(vit) > 1 and vit[-1] - vit[-2] < tol:
            break
        C, Bc = data.path_counts(path, n_actions)
        T, B = _normalise(C, Bc, pseudocount)
    return T, B, vit
