"""Best-first model merging (Stolcke & Omohundro 1994) for action-conditioned HMMs.

"Best-first model merging for hidden Markov model induction": start from the
maximally specific model of the data and greedily merge the pair of states
that most raises the posterior ``log P(M) + log P(X | M)``; stop when no merge
raises it.  Our version, for deterministic emissions and action-conditioned
transitions:

**Initial model.** ``initial="tree"`` (default): the prefix tree of the
episodes, i.e. Algorithm 1's episodic memory without overwriting (follow
``T(h, a)``; create a new state when there is none with the observed
emission), so identical prefixes share states and every episode has exactly
one path.  ``initial="sequences"``: one state per observation occurrence.
A non-emitting start state with a virtual action leads to the first states;
its row gives the initial distribution ``B``.

**Viterbi approximation.** Each state emits one symbol, so only states with
the same emission are ever merged (a merge of different emissions has
likelihood 0).  The Viterbi path of a merged model is taken as the union of
the merged paths (Stolcke & Omohundro's approximation; the paths are not
re-decoded after a merge), so the counts of the merged state are the sums of
the counts of its parts: merging ``i`` and ``j`` adds their count rows and
columns, and edges that become equal add up.

**Posterior.** ``log P(X | M_S)`` is the Viterbi-count evidence with the
transition parameters integrated out: every row ``(state, action)`` with
successor counts ``c_1..c_n`` (total ``C``) and a Dirichlet prior of total
weight ``prior_weight`` spread over its ``n`` allowed successors contributes
``lgamma(a) - lgamma(a + C) + sum_j [lgamma(c_j + a/n) - lgamma(a/n)]``
(0 for a deterministic row).  Emissions are deterministic, so they add
nothing to the evidence.  ``log P(M_S)`` is minus ``structure_prior`` times
the description length: every transition codes its target with
``log(Q + 1)`` nats and every state its emission with ``log(n_obs + 1)``
(Q = number of states).  The change a merge makes depends only on the rows
it touches (the out-rows of the two states, the rows of other states that
lead to both) plus two global terms (Q and the number of transitions), so
it is computed in time linear in those rows.

**Search.** All same-emission pairs are scored once and cached (local
evidence change, transitions removed).  After merging ``y`` into ``x`` only
the pairs whose touched rows changed are re-scored: every pair of ``x`` and
of states whose row collapsed; pairs ``(u, v)`` with ``u -a-> x`` and
``v -a-> y``; pairs of successors of a changed row (they gained a common
predecessor).  Each state keeps an upper bound of its best pair score (the
prior term ``r log Q`` only falls as Q falls); a lazy scan refreshes the top
row until it is exact, so every merge is the true best.  Cost:
``O(sum_c n_c^2 d)`` to start (``n_c`` states of colour ``c``, ``d`` edges
per state), ``O(P d + H)`` per merge (``P`` re-scored pairs, H states),
memory ``O(sum_c n_c^2)``; quadratic in the data by nature.  Measured on
the 10x10 world: about episodes^2 in time (100 episodes, 4,754 states: 3 s;
300 episodes: 26 s).

**Candidates.** ``candidates`` (a callable, e.g. :func:`sf_candidates`)
returns the pairs of initial states that may merge; a merged state may merge
with anything either part could.  This cuts the quadratic start and the
per-merge work, but the greedy search then only sees a subset of merges: it
may stop earlier (more states, lower posterior) or take a different path.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln

from .._random import as_generator
from ..hmm import ActionHMM
from ..rollouts import Trajectories

__all__ = [
    "BestFirstMerging",
    "InitialModel",
    "prefix_tree",
    "sequence_model",
    "viterbi_log_posterior",
    "sf_candidates",
]


@dataclass(frozen=True)
class InitialModel:
    """The maximally specific model of the data, as an edge list.

    States ``0..n_states-1`` emit ``emission[s]``; state ``n_states`` is the
    non-emitting start state (its edges carry the virtual action
    ``n_actions``) and state ``n_states + 1`` the non-emitting final state
    (reached from the last state of every episode by the virtual action
    ``n_actions + 1``, when ``end_state``).  ``src, act, dst, count`` are the
    Viterbi transition counts; ``path[e, t]`` is the state of episode ``e`` at step ``t``.

    Examples
    --------
    >>> m = prefix_tree(Trajectories(obs=[[0, 1, 0], [0, 1, 1]], actions=[[-1, 0, 0], [-1, 0, 0]]))
    >>> m.start, m.final, m.path.tolist()   # the episodes share their prefix 0 -> 1
    (4, 5, [[0, 1, 2], [0, 1, 3]])
    >>> [(int(s), int(d), float(c)) for s, d, c in zip(m.src, m.dst, m.count) if s == m.start]
    [(4, 0, 2.0)]
    """

    emission: np.ndarray
    src: np.ndarray
    act: np.ndarray
    dst: np.ndarray
    count: np.ndarray
    path: np.ndarray
    n_obs: int
    n_actions: int

    @property
    def n_states(self) -> int:
        return len(self.emission)

    @property
    def start(self) -> int:
        """Index of the non-emitting start state."""
        return len(self.emission)

    @property
    def final(self) -> int:
        """Index of the non-emitting final state."""
        return len(self.emission) + 1


def prefix_tree(traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None,
                end_state: bool = True) -> InitialModel:
    """The prefix tree of the episodes (identical prefixes share states), built layer by layer.

    >>> t = Trajectories(obs=[[0, 1, 0], [0, 1, 1]], actions=[[-1, 0, 0], [-1, 0, 0]])
    >>> m = prefix_tree(t)
    >>> m.n_states, m.emission.tolist(), m.count.tolist()
    (4, [0, 1, 0, 1], [2.0, 2.0, 1.0, 1.0, 1.0, 1.0])
    """
    obs, actions, O, A = _check_data(traj, n_obs, n_actions)
    N, L = obs.shape
    A1 = A + 1
    node = np.full(N, -1, dtype=np.int64)  # -1 = the start state, renumbered below
    srcs, acts, dsts, cnts, ems = [], [], [], [], []
    next_id = 0
    for t in range(L):
        a = actions[:, t] if t > 0 else np.full(N, A, dtype=np.int64)
        key = ((node + 1) * A1 + a) * O + obs[:, t]
        uniq, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        ids = next_id + np.arange(len(uniq), dtype=np.int64)
        next_id += len(uniq)
        srcs.append(uniq // (A1 * O) - 1)
        acts.append((uniq // O) % A1)
        dsts.append(ids)
        cnts.append(counts.astype(np.float64))
        ems.append(uniq % O)
        node = ids[inv.ravel()]
        if t == 0:
            path = np.empty((N, L), dtype=np.int64)
        path[:, t] = node
    H = next_id
    src = np.concatenate(srcs)
    src[src < 0] = H
    act, dst, cnt = np.concatenate(acts), np.concatenate(dsts), np.concatenate(cnts)
    if end_state:
        last, c_last = np.unique(path[:, -1], return_counts=True)
        src = np.concatenate([src, last])
        act = np.concatenate([act, np.full(len(last), A + 1)])
        dst = np.concatenate([dst, np.full(len(last), H + 1)])
        cnt = np.concatenate([cnt, c_last.astype(np.float64)])
    return InitialModel(np.concatenate(ems), src, act, dst, cnt, path, O, A)


def sequence_model(traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None,
                   end_state: bool = True) -> InitialModel:
    """One state per observation occurrence (episode e, step t -> state e * (L+1) + t).

    >>> t = Trajectories(obs=[[0, 1], [0, 1]], actions=[[-1, 0], [-1, 0]])
    >>> m = sequence_model(t, end_state=False)
    >>> m.n_states, m.src.tolist(), m.dst.tolist()
    (4, [4, 4, 0, 2], [0, 2, 1, 3])
    """
    obs, actions, O, A = _check_data(traj, n_obs, n_actions)
    N, L = obs.shape
    H = N * L
    path = np.arange(H, dtype=np.int64).reshape(N, L)
    src = np.concatenate([np.full(N, H, dtype=np.int64), path[:, :-1].ravel()])
    act = np.concatenate([np.full(N, A, dtype=np.int64), actions[:, 1:].ravel()])
    dst = np.concatenate([path[:, 0], path[:, 1:].ravel()])
    if end_state:
        src = np.concatenate([src, path[:, -1]])
        act = np.concatenate([act, np.full(N, A + 1, dtype=np.int64)])
        dst = np.concatenate([dst, np.full(N, H + 1, dtype=np.int64)])
    return InitialModel(obs.ravel().copy(), src, act, dst, np.ones(len(src)), path, O, A)


def _check_data(traj, n_obs, n_actions):
    if not isinstance(traj, Trajectories):
        raise TypeError(f"traj must be a Trajectories, got {type(traj).__name__}")
    obs, actions = traj.obs, traj.actions
    O_data = int(obs.max()) + 1
    A_data = int(actions[:, 1:].max()) + 1 if obs.shape[1] > 1 else 1
    O = O_data if n_obs is None else n_obs
    A = A_data if n_actions is None else n_actions
    for name, v, low in (("n_obs", O, O_data), ("n_actions", A, A_data)):
        if not isinstance(v, Integral) or isinstance(v, bool) or v < max(low, 1):
            raise ValueError(f"{name} must be an integer >= {max(low, 1)} (the data need it), got {v!r}")
    return obs, actions, int(O), int(A)


def _aggregate(src, act, dst, count, n_rows_states, A1):
    """Sum duplicate edges: returns (row, dst, count) with row = src * A1 + act, sorted."""
    key = (src.astype(np.int64) * A1 + act) * n_rows_states + dst
    uniq, inv = np.unique(key, return_inverse=True)
    c = np.bincount(inv.ravel(), weights=count)
    return uniq // n_rows_states, uniq % n_rows_states, c


def viterbi_log_posterior(src, act, dst, count, n_states, n_obs, prior_weight=1.0, structure_prior=1.0):
    """``log P(M_S) + log P(X | M_S)`` of a model given by its Viterbi counts, recounted from scratch.

    ``src, act, dst, count``: edges (duplicates are added up); ``n_states``:
    number of emitting states Q.  See the module docstring for the formula.

    >>> round(viterbi_log_posterior([0, 0], [0, 0], [0, 1], [1.0, 1.0], n_states=2, n_obs=2), 4)
    -6.4739
    """
    src = np.asarray(src, dtype=np.int64)
    act = np.asarray(act, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    count = np.asarray(count, dtype=np.float64)
    if len(src) == 0:
        return float(-structure_prior * n_states * np.log(n_obs + 1))
    A1 = int(act.max()) + 1
    big = int(max(src.max(), dst.max())) + 1
    row, _, c = _aggregate(src, act, dst, count, big, A1)
    urow, rinv = np.unique(row, return_inverse=True)
    n = np.bincount(rinv, minlength=len(urow)).astype(np.float64)
    C = np.bincount(rinv, weights=c, minlength=len(urow))
    beta = prior_weight / n
    S = np.bincount(rinv, weights=gammaln(c + beta[rinv]), minlength=len(urow))
    evidence = np.sum(gammaln(prior_weight) - gammaln(prior_weight + C) + S - n * gammaln(beta))
    n_trans = len(c)
    prior = -structure_prior * (n_trans * np.log(n_states + 1) + n_states * np.log(n_obs + 1))
    return float(evidence + prior)


def sf_candidates(k: int = 10, gamma: float = 0.8, horizon: int = 25):
    """A candidate rule: each initial state may merge with its ``k`` nearest same-emission states by SF.

    The successor feature of a state (Algorithm 2 of the paper on the initial
    model): ``sum_l gamma^(l-1) p_l`` where ``p_l`` is the distribution of
    emissions over the distinct states ``l`` steps ahead (any action);
    distance is euclidean.  Returns a callable ``rule(model) -> (P, 2) array``.

    >>> t = Trajectories(obs=[[0, 1, 0], [0, 1, 1]], actions=[[-1, 0, 0], [-1, 0, 0]])
    >>> sf_candidates(k=1)(prefix_tree(t)).tolist()
    [[0, 2], [1, 3]]
    """
    if not isinstance(k, Integral) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if not (isinstance(gamma, Real) and 0 < gamma < 1):
        raise ValueError(f"gamma must be in (0, 1), got {gamma!r}")
    if not isinstance(horizon, Integral) or horizon < 1:
        raise ValueError(f"horizon must be a positive integer, got {horizon!r}")

    def rule(model: InitialModel) -> np.ndarray:
        H, O = model.n_states, model.n_obs
        keep = (model.src < H) & (model.dst < H)
        adj = sp.csr_matrix((np.ones(int(keep.sum())), (model.src[keep], model.dst[keep])), shape=(H, H))
        adj.data[:] = 1.0
        adj.sum_duplicates()
        adj.data[:] = 1.0
        emit = sp.csr_matrix((np.ones(H), (np.arange(H), model.emission)), shape=(H, O))
        frontier = sp.identity(H, format="csr")
        sf = np.zeros((H, O))
        for level in range(horizon):
            frontier = frontier @ adj
            frontier.data[:] = 1.0
            dist = np.asarray((frontier @ emit).todense())
            tot = dist.sum(axis=1, keepdims=True)
            np.divide(dist, tot, out=dist, where=tot > 0)
            sf += gamma**level * dist
            if frontier.nnz == 0:
                break
        pairs = []
        for o in range(O):
            idx = np.flatnonzero(model.emission == o)
            if len(idx) < 2:
                continue
            X = sf[idx]
            d2 = (X * X).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2 * X @ X.T
            np.fill_diagonal(d2, np.inf)
            kk = min(k, len(idx) - 1)
            nn = np.argpartition(d2, kk - 1, axis=1)[:, :kk]
            a = np.repeat(idx, kk)
            b = idx[nn.ravel()]
            pairs.append(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1))
        if not pairs:
            return np.zeros((0, 2), dtype=np.int64)
        return np.unique(np.concatenate(pairs), axis=0)

    return rule


class BestFirstMerging:
    """Best-first model merging of an action-conditioned HMM (Stolcke & Omohundro 1994).

    Parameters
    ----------
    prior_weight : total weight ``a > 0`` of the symmetric Dirichlet prior of
        every transition row (spread over the row's allowed successors).
    structure_prior : weight ``>= 0`` of the description-length prior
        ``-log P(M_S)`` (0 turns it off; then merges are only taken when they
        raise the evidence itself).
    candidates : ``None`` (every same-emission pair) or a callable
        ``rule(model: InitialModel) -> (P, 2)`` pairs of initial states that
        may merge (e.g. :func:`sf_candidates`).
    max_merges : stop after this many merges (``None``: until no merge helps).
    initial : ``"tree"`` (prefix tree, default) or ``"sequences"``.
    end_state : give the model Stolcke & Omohundro's final state: the last
        state of every episode moves to it by a virtual "end" action (a
        separate row, so it never costs likelihood; it lets states that end
        episodes share a successor, which guides the merging backwards from
        the ends).  ``to_hmm`` drops it.
    seed : int or Generator; breaks ties between equally good merges (the
        initial states are numbered in a random order).

    Attributes after :meth:`fit`
    ----------------------------
    n_states_ : number of states of the merged model.
    n_merges_ : merges done.
    n_initial_states_ : states of the initial model.
    log_posterior_ : (n_merges_ + 1,) trace of ``log P(M_S) + log P(X | M_S)``.
    merges_ : (n_merges_, 2) merged pairs ``(kept, removed)`` in initial-state numbering.
    labels_ : (n_initial_states_,) the merged state (0..n_states_-1) of every initial state.
    initial_model_ : the :class:`InitialModel` (numbered as used in the search).

    Examples
    --------
    Strings of (ab)+ ending in the marker 2, one action, three episodes:

    >>> obs = [[0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 2], [0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 0],
    ...        [0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 2]]
    >>> acts = [[-1] + [0] * 10] * 3
    >>> bf = BestFirstMerging(structure_prior=2.0).fit(Trajectories(obs, acts))
    >>> bf.n_initial_states_, bf.n_states_, bf.n_merges_
    (26, 3, 23)
    >>> hmm = bf.to_hmm()
    >>> hmm.E.argmax(1).tolist(), hmm.T[0].toarray().round(2).tolist()
    ([0, 2, 1], [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.35, 0.65, 0.0]])
    """

    def __init__(self, prior_weight: float = 1.0, structure_prior: float = 1.0, candidates=None,
                 max_merges: int | None = None, initial: str = "tree", end_state: bool = True, seed=0):
        if isinstance(prior_weight, bool) or not isinstance(prior_weight, Real) or not (
            np.isfinite(prior_weight) and prior_weight > 0
        ):
            raise ValueError(f"prior_weight must be a finite number > 0, got {prior_weight!r}")
        if isinstance(structure_prior, bool) or not isinstance(structure_prior, Real) or not (
            np.isfinite(structure_prior) and structure_prior >= 0
        ):
            raise ValueError(f"structure_prior must be a finite number >= 0, got {structure_prior!r}")
        if candidates is not None and not callable(candidates):
            raise TypeError("candidates must be None or a callable rule(model) -> (P, 2) pairs")
        if max_merges is not None and (
            not isinstance(max_merges, Integral) or isinstance(max_merges, bool) or max_merges < 0
        ):
            raise ValueError(f"max_merges must be None or an integer >= 0, got {max_merges!r}")
        if initial not in ("tree", "sequences"):
            raise ValueError(f"initial must be 'tree' or 'sequences', got {initial!r}")
        if not isinstance(end_state, (bool, np.bool_)):
            raise TypeError(f"end_state must be a bool, got {end_state!r}")
        as_generator(seed)  # validates
        self.prior_weight = float(prior_weight)
        self.structure_prior = float(structure_prior)
        self.candidates = candidates
        self.max_merges = max_merges
        self.initial = initial
        self.end_state = bool(end_state)
        self.seed = seed

    # ------------------------------------------------------------------ fit
    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None):
        """Merge from the maximally specific model of ``traj`` until no merge raises the posterior.

        >>> traj = Trajectories([[0, 1, 0, 1, 0, 1, 0, 1]], [[-1] + [0] * 7])
        >>> bf = BestFirstMerging().fit(traj)
        >>> bf.n_initial_states_, bf.n_states_, bool((np.diff(bf.log_posterior_) > 0).all())
        (8, 2, True)
        """
        from . import _bfmm_kernels as K

        if isinstance(traj, Trajectories) and traj.n_episodes == 0:
            raise ValueError("the trajectories hold no episodes: nothing to fit")
        build = prefix_tree if self.initial == "tree" else sequence_model
        model = build(traj, n_obs, n_actions, end_state=self.end_state)
        model = _permute(model, as_generator(self.seed))
        H, O, A = model.n_states, model.n_obs, model.n_actions
        A1 = A + 2  # with the virtual start and end actions
        Hs = H + 2  # with the start and final states
        src = model.src.copy()
        act = model.act.copy()
        dst = model.dst.copy()
        cnt = model.count.astype(np.float64).copy()
        E0 = len(src)
        alive_e = np.ones(E0, dtype=np.bool_)
        out_head = np.full(Hs * A1, -1, np.int64)
        out_next = np.full(E0, -1, np.int64)
        in_head = np.full(Hs, -1, np.int64)
        in_next = np.full(E0, -1, np.int64)
        K.build_lists(Hs, A1, src, act, dst, out_head, out_next, in_head, in_next)
        row_n = np.zeros(Hs * A1, np.int64)
        row_C = np.zeros(Hs * A1)
        row_term = np.zeros(Hs * A1)
        tab = K.lgamma_table(self.prior_weight, cnt.sum())
        for row in np.unique(src * A1 + act):
            K.refresh_row(row, out_head, out_next, cnt, row_n, row_C, row_term, self.prior_weight, tab)

        emitting = np.zeros(Hs, dtype=np.bool_)
        emitting[:H] = True
        col = np.concatenate([model.emission, [0, 0]]).astype(np.int64)
        order = np.argsort(model.emission, kind="stable")
        col_n = np.bincount(model.emission, minlength=O).astype(np.int64)
        col_off = np.concatenate([[0], np.cumsum(col_n)]).astype(np.int64)
        members = order.astype(np.int64)
        pos = np.zeros(Hs, np.int64)
        pos[order] = np.arange(H) - col_off[model.emission[order]]
        loc_off = np.concatenate([[0], np.cumsum(col_n.astype(np.int64) ** 2)]).astype(np.int64)
        allowed = self._allowed(model, col_n, col_off, pos, loc_off)

        max_merges = H if self.max_merges is None else int(self.max_merges)
        merges = np.zeros((max(min(max_merges, H), 1), 2), np.int64)
        deltas = np.zeros(len(merges))
        lp0 = viterbi_log_posterior(src, act, dst, cnt, H, O, self.prior_weight, self.structure_prior)
        stats = np.zeros(2, np.int64)
        n_done = K.run_merging(
            Hs, A1, self.prior_weight, tab, self.structure_prior, float(np.log(O + 1)), src, act, dst, cnt,
            alive_e, out_head, out_next, in_head, in_next, row_n, row_C, row_term, emitting, col, col_off,
            col_n, members, pos, loc_off, allowed, int(alive_e.sum()), max_merges, merges, deltas, stats,
        )
        self.n_pair_evaluations_, self.n_row_refreshes_ = int(stats[0]), int(stats[1])
        self.initial_model_ = model
        self.merges_ = merges[:n_done].copy()
        self.n_merges_ = int(n_done)
        self.n_initial_states_ = H
        self.log_posterior_ = lp0 + np.concatenate([[0.0], np.cumsum(deltas[:n_done])])
        rep = _representatives(H, self.merges_)
        survivors = np.unique(rep)
        self.n_states_ = len(survivors)
        self.labels_ = np.searchsorted(survivors, rep)
        self.emission_ = model.emission[survivors]
        keep = alive_e
        lab = np.concatenate([self.labels_, [self.n_states_, self.n_states_ + 1]])
        self._edges = (lab[src[keep]], act[keep], lab[dst[keep]], cnt[keep])
        self.n_obs_, self.n_actions_ = O, A
        return self

    def _allowed(self, model, col_n, col_off, pos, loc_off):
        total = int(loc_off[-1])
        if self.candidates is None:
            return np.ones(total, dtype=np.bool_)
        pairs = np.asarray(self.candidates(model))
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        if pairs.ndim != 2 or pairs.shape[1] != 2 or (pairs.size and not np.issubdtype(pairs.dtype, np.integer)):
            raise ValueError(f"candidates must return an int array of shape (P, 2), got shape {pairs.shape}")
        H = model.n_states
        if pairs.size and (pairs.min() < 0 or pairs.max() >= H):
            raise ValueError(f"candidates returned a state outside 0..{H - 1}")
        a, b = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        if (model.emission[a] != model.emission[b]).any():
            raise ValueError("candidates returned a pair of states with different emissions")
        allowed = np.zeros(total, dtype=np.bool_)
        c = model.emission[a]
        n = col_n[c]
        allowed[loc_off[c] + pos[a] * n + pos[b]] = True
        allowed[loc_off[c] + pos[b] * n + pos[a]] = True
        return allowed

    # ------------------------------------------------------------ outputs
    def _check_fitted(self):
        if not hasattr(self, "_edges"):
            raise ValueError("this BestFirstMerging is not fitted yet: call fit(traj) first")

    def transition_counts(self):
        """The Viterbi counts of the merged model: a list of A sparse (Q x Q) matrices and the start counts (Q,).

        >>> bf = BestFirstMerging().fit(Trajectories([[0, 1, 0, 1, 0, 1, 0, 1]], [[-1] + [0] * 7]))
        >>> mats, start = bf.transition_counts()
        >>> bf.emission_.tolist(), mats[0].toarray().tolist(), start.tolist()   # colour 1 -> 0 three times
        ([1, 0], [[0.0, 3.0], [4.0, 0.0]], [0.0, 1.0])
        """
        self._check_fitted()
        s, a, d, c = self._edges
        Q, A = self.n_states_, self.n_actions_
        start = np.bincount(d[s == Q], weights=c[s == Q], minlength=Q)
        mats = []
        for k in range(A):
            m = (s < Q) & (a == k) & (d < Q)
            mats.append(sp.csr_matrix((c[m], (s[m], d[m])), shape=(Q, Q)))
        return mats, start

    def to_hmm(self, estimate: str = "mean") -> ActionHMM:
        """The merged model as a sparse :class:`~hmmmerge.hmm.ActionHMM`.

        ``estimate="mean"``: Dirichlet posterior mean over each row's allowed
        successors, ``(c_j + a/n) / (C + a)``; ``"map"``: the posterior mode
        ``(c_j + a/n - 1) / (C + a - n)`` (positive, since every count is >= 1).
        Rows ``(state, action)`` never seen in the data stay 0: the model
        makes no prediction there (no smoothing to unseen successors, as the
        prior only covers transitions in the structure).

        >>> traj = Trajectories([[0, 1, 0, 1, 0, 1, 0, 1]], [[-1] + [0] * 7])
        >>> hmm = BestFirstMerging().fit(traj).to_hmm()
        >>> hmm.n_states, hmm.E.argmax(1).tolist(), hmm.T[0].toarray().tolist(), hmm.log_likelihood(traj)
        (2, [1, 0], [[0.0, 1.0], [1.0, 0.0]], 0.0)
        """
        self._check_fitted()
        if estimate not in ("mean", "map"):
            raise ValueError(f"estimate must be 'mean' or 'map', got {estimate!r}")
        mats, start = self.transition_counts()
        a0 = self.prior_weight
        out = []
        for m in mats + [sp.csr_matrix(start[None, :])]:
            m = m.tocsr()
            n = np.diff(m.indptr)
            C = np.asarray(m.sum(axis=1)).ravel()
            rows = np.repeat(np.arange(m.shape[0]), n)
            beta = a0 / np.maximum(n, 1)
            if estimate == "mean":
                data = (m.data + beta[rows]) / (C + a0)[rows]
            else:
                data = (m.data + beta[rows] - 1.0) / (C + a0 - n)[rows]
            out.append(sp.csr_matrix((data, m.indices, m.indptr), shape=m.shape))
        B = out.pop().toarray().ravel()
        E = np.zeros((self.n_states_, self.n_obs_))
        E[np.arange(self.n_states_), self.emission_] = 1.0
        return ActionHMM(out, E, B)


def _permute(model: InitialModel, rng) -> InitialModel:
    """Renumber the emitting states in a random order (ties in the search follow this order)."""
    H = model.n_states
    perm = rng.permutation(H)  # new index of old state
    full = np.concatenate([perm, [H, H + 1]])
    inv = np.empty(H, np.int64)
    inv[perm] = np.arange(H)
    edge_order = np.lexsort((full[model.dst], model.act, full[model.src]))
    return InitialModel(
        model.emission[inv], full[model.src][edge_order], model.act[edge_order], full[model.dst][edge_order],
        model.count[edge_order], full[model.path], model.n_obs, model.n_actions,
    )


def _representatives(H: int, merges: np.ndarray) -> np.ndarray:
    """The surviving state of every initial state after a sequence of (kept, removed) merges."""
    parent = np.arange(H)
    for x, y in merges:
        parent[y] = x

    def find(v):
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    return np.array([find(v) for v in range(H)], dtype=np.int64)


class _Workspace:
    """The kernels' count bookkeeping for one initial model, driven from Python (tests, inspection)."""

    def __init__(self, model: InitialModel, prior_weight: float = 1.0):
        from . import _bfmm_kernels as K

        self.K = K
        self.model = model
        self.alpha = float(prior_weight)
        H, A1 = model.n_states, model.n_actions + 2
        self.H, self.A1 = H, A1
        Hs = H + 2
        self.src, self.act, self.dst = model.src.copy(), model.act.copy(), model.dst.copy()
        self.cnt = model.count.astype(np.float64).copy()
        E0 = len(self.src)
        self.alive_e = np.ones(E0, dtype=np.bool_)
        self.out_head = np.full(Hs * A1, -1, np.int64)
        self.out_next = np.full(E0, -1, np.int64)
        self.in_head = np.full(Hs, -1, np.int64)
        self.in_next = np.full(E0, -1, np.int64)
        K.build_lists(Hs, A1, self.src, self.act, self.dst, self.out_head, self.out_next, self.in_head,
                      self.in_next)
        self.row_n = np.zeros(Hs * A1, np.int64)
        self.row_C = np.zeros(Hs * A1)
        self.row_term = np.zeros(Hs * A1)
        self.tab = K.lgamma_table(self.alpha, self.cnt.sum())
        for row in np.unique(self.src * A1 + self.act):
            K.refresh_row(row, self.out_head, self.out_next, self.cnt, self.row_n, self.row_C, self.row_term,
                          self.alpha, self.tab)
        self.acc = np.zeros(Hs)
        self.touched = np.zeros(Hs, np.int64)
        self.mark = np.full(Hs * A1, -1, np.int64)
        self.collapsed = np.zeros(E0 + 1, np.int64)
        self.alive = np.ones(H, dtype=bool)

    def delta(self, x: int, y: int):
        """(change of the log evidence, transitions removed) if x and y merge."""
        return self.K.pair_delta(x, y, self.A1, self.alpha, self.tab, self.dst, self.act, self.src, self.cnt,
                                 self.out_head, self.out_next, self.in_head, self.in_next, self.row_n,
                                 self.row_C, self.row_term, self.acc, self.touched, self.mark)

    def merge(self, x: int, y: int) -> int:
        """Merge y into x; returns the number of transitions removed."""
        _, removed = self.K.merge_states(x, y, self.A1, self.alpha, self.tab, self.src, self.act, self.dst, self.cnt,
                                         self.alive_e, self.out_head, self.out_next, self.in_head,
                                         self.in_next, self.row_n, self.row_C, self.row_term, self.mark,
                                         self.collapsed)
        self.alive[y] = False
        return removed

    def edges(self):
        """Alive edges (src, act, dst, count), sorted."""
        k = self.alive_e
        s, a, d, c = self.src[k], self.act[k], self.dst[k], self.cnt[k]
        o = np.lexsort((d, a, s))
        return s[o], a[o], d[o], c[o]

    def evidence(self) -> float:
        """Sum of the cached row terms."""
        return float(self.row_term.sum())
