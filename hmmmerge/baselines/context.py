"""Variable-order context baseline: predict from the longest matching history.

The history of an episode is a string of *pairs* ``(action, observation)``;
its first pair is ``(-1, o_0)`` (the episode start, as in
:class:`~hmmmerge.rollouts.Trajectories`), so a context can be anchored at
the start.  A *context* is any string of at most ``order`` consecutive pairs
that occurs in the training episodes.  To predict the observation after
action ``a``, the model takes the longest suffix of the history (at most
``order`` pairs) that occurs followed by action ``a`` in the training data,
and predicts the next observations counted there (plus ``pseudocount``);
when no suffix has been followed by ``a``, it backs off to the counts of
``a`` alone, and if ``a`` was never taken it makes no prediction.

As an :class:`~hmmmerge.hmm.ActionHMM` the model is a deterministic suffix
automaton (a prediction suffix tree with its transitions): one hidden state
per context, emitting the context's last observation; from context ``s``
under action ``a`` it moves to the longest context that is a suffix of
``s + (a, o')`` with the probability of ``o'``.  The contexts are closed
under suffixes and prefixes (they are substrings of the data), so the state
reached is exactly the longest context that is a suffix of the whole
history; the forward filter therefore computes the predictor above, and the
one evaluator scores it like every other model.

Contexts are stored as integers (pairs are digits in base
``(n_actions + 1) * n_obs + 1``), so ``order`` is bounded by 63 bits.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._estimator import Estimator
from .._validation import Float, Int, alphabet_sizes
from ..trajectories import Trajectories

__all__ = ["ContextModel"]


class ContextModel(Estimator):
    """Longest-matching-context predictor of the next observation, as a suffix automaton.

    Parameters
    ----------
    order : int >= 1, the longest context in pairs ``(action, observation)``,
        the current pair included (``order=1``: the last action and observation).
    pseudocount : float >= 0, added to the count of every observation in the
        context used for a prediction (0: unseen observations get probability 0).

    Attributes (after :meth:`fit`)
    -------------------------------
    contexts_ : (H,) int codes of the contexts, sorted (one hidden state each).
    context_lengths_ : (H,) their lengths in pairs.
    n_obs_, n_actions_ : alphabet sizes.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(5, 5, n_colours=5, seed=0)
    >>> model = ContextModel(order=3).fit(random_walk(env, 200, seed=0), n_obs=5, n_actions=4)
    >>> hmm = model.to_hmm()
    >>> hmm.n_states == model.n_contexts_, hmm.n_actions, hmm.n_obs
    (True, 4, 5)
    """

    _parameter_constraints = {"order": Int(1), "pseudocount": Float(0)}

    def __init__(self, order: int = 4, pseudocount: float = 0.0):
        self.order = order
        self.pseudocount = pseudocount

    # ------------------------------------------------------------ fitting
    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None) -> "ContextModel":
        """Count every context (up to ``order`` pairs) and the pair that follows it.

        Alphabet sizes default to the largest value seen + 1.

        >>> from hmmmerge import Trajectories
        >>> m = ContextModel(order=2).fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]))
        >>> m.n_contexts_, m.context_lengths_.tolist()   # all 4 single pairs + (-1,0)(0,1) + (0,1)(0,0)
        (6, [1, 1, 1, 1, 2, 2])
        """
        self._validate_params()
        if not isinstance(traj, Trajectories):
            raise TypeError(f"traj must be a Trajectories, got {type(traj).__name__}")
        if traj.n_episodes == 0:
            raise ValueError("traj holds no episodes: nothing to fit")
        k = int(self.order)
        self._pseudocount = float(self.pseudocount)
        obs, act = traj.obs, traj.actions
        n_obs, n_actions = alphabet_sizes(obs, act, n_obs, n_actions)
        O, A = int(n_obs), int(n_actions)
        R = (A + 1) * O + 1  # digit base: pair symbols are 1..R-1, 0 marks "no pair"
        if k * np.log2(R) >= 62:
            raise ValueError(f"order={k} is too long for {A} actions and {O} observations: contexts are "
                             f"{k} digits in base {R}, which exceeds 62 bits; use order <= "
                             f"{int(62 // np.log2(R))}")
        pow_ = R ** np.arange(k + 1, dtype=np.int64)
        Z = (act + 1) * O + obs + 1  # (N, L+1) pair symbols
        N, L1 = Z.shape

        # codes[l-1][:, t]: the context of length l ending at t (-1 where t < l-1)
        codes = []
        cur = Z.copy()
        for length in range(1, k + 1):
            if length > 1:
                nxt = np.full_like(cur, -1)
                nxt[:, length - 1:] = cur[:, length - 1:] + Z[:, : L1 - length + 1] * pow_[length - 1]
                cur = nxt
            codes.append(cur)
        pieces = [c[c >= 0] for c in codes] + [np.arange(1, R, dtype=np.int64)]
        ctx = np.unique(np.concatenate(pieces))
        H = len(ctx)
        lengths = np.searchsorted(pow_, ctx, side="right").astype(np.int64)  # digits of each code

        # counts[a]: (H + 1, O); row H is the empty context
        rows, cols, acts = [], [], []
        if L1 > 1:
            nxt_a, nxt_o = act[:, 1:], obs[:, 1:]
            for c in codes:
                valid = c[:, :-1] >= 0
                rows.append(np.searchsorted(ctx, c[:, :-1][valid]))
                acts.append(nxt_a[valid])
                cols.append(nxt_o[valid])
            rows.append(np.full(nxt_a.size, H, dtype=np.int64))
            acts.append(nxt_a.ravel())
            cols.append(nxt_o.ravel())
        r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        c_ = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        a_ = np.concatenate(acts) if acts else np.zeros(0, dtype=np.int64)
        self.counts_ = [sp.csr_matrix((np.ones(int((a_ == a).sum())), (r[a_ == a], c_[a_ == a])),
                                      shape=(H + 1, O)) for a in range(A)]
        for m in self.counts_:
            m.sum_duplicates()
        self.start_counts_ = np.bincount(obs[:, 0], minlength=O).astype(np.float64)
        self.contexts_ = ctx
        self.context_lengths_ = lengths
        self.n_contexts_ = H
        self.n_obs_, self.n_actions_ = O, A
        self._base, self._order = R, k
        self._hmm = None
        return self

    def _lookup(self, codes: np.ndarray) -> np.ndarray:
        """Index of each code among the contexts, -1 where it is not one."""
        ctx = self.contexts_
        i = np.minimum(np.searchsorted(ctx, codes), len(ctx) - 1)
        return np.where(ctx[i] == codes, i, -1)

    # ------------------------------------------------------------ the automaton
    def to_hmm(self):
        """The model as a sparse deterministic-state :class:`~hmmmerge.hmm.ActionHMM` (one state per context).

        >>> from hmmmerge import Trajectories
        >>> t = Trajectories([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
        >>> hmm = ContextModel(order=1).fit(t, n_actions=1).to_hmm()
        >>> hmm.predict_obs([0, 1, 0], [-1, 0, 0]).tolist()
        [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
        """
        from ..hmm import ActionHMM

        self._check_fitted("contexts_")
        if self._hmm is not None:
            return self._hmm
        O, A, k, R, pc = self.n_obs_, self.n_actions_, self._order, self._base, self._pseudocount
        ctx, lengths, H = self.contexts_, self.context_lengths_, self.n_contexts_
        pow_ = R ** np.arange(k + 1, dtype=np.int64)
        # suffix_ids[l-1]: the suffix of length l of every context (-1 if the context is shorter)
        suffix_ids = [np.where(lengths >= ln, self._lookup(ctx % pow_[ln]), -1) for ln in range(1, k + 1)]
        T = []
        for a in range(A):
            tot = np.asarray(self.counts_[a].sum(axis=1)).ravel()
            backoff = np.full(H, H if tot[H] > 0 else -1, dtype=np.int64)
            for sid in suffix_ids:  # longer suffixes override shorter ones
                ok = (sid >= 0) & (tot[np.maximum(sid, 0)] > 0)
                backoff[ok] = sid[ok]
            src = np.flatnonzero(backoff >= 0)
            counts = self.counts_[a][backoff[src]]
            if pc > 0:
                dense = counts.toarray() + pc
                rr, oo = np.nonzero(dense)
                vals = dense[rr, oo]
            else:
                coo = counts.tocoo()
                rr, oo, vals = coo.row, coo.col, coo.data
            row_tot = tot[backoff[src]] + pc * O
            s = src[rr]
            prob = vals / row_tot[rr]
            # successor: the longest context that is a suffix of s + (a, o')
            ext = (ctx[s] % pow_[k - 1]) * R + (a + 1) * O + oo + 1
            ext_len = np.minimum(lengths[s] + 1, k)
            dest = np.full(len(s), -1, dtype=np.int64)
            for ln in range(1, k + 1):
                j = self._lookup(ext % pow_[ln])
                ok = (j >= 0) & (ext_len >= ln)
                dest[ok] = j[ok]
            T.append(sp.csr_matrix((prob, (s, dest)), shape=(H, H)))
        last_obs = (ctx % R - 1) % O
        E = np.zeros((H, O))
        E[np.arange(H), last_obs] = 1.0
        B = np.zeros(H)
        b = self.start_counts_ + pc
        B[self._lookup(np.arange(O, dtype=np.int64) + 1)] = b / b.sum()  # start pairs (-1, o)
        self._hmm = ActionHMM(T, E, B)
        return self._hmm

    def score(self, traj: Trajectories) -> float:
        """Total log-likelihood (nats) of ``traj``, each episode restarting from the start.

        >>> from hmmmerge import Trajectories
        >>> t = Trajectories([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
        >>> ContextModel(order=2).fit(t).score(t)
        0.0
        """
        return self.to_hmm().log_likelihood(traj)
