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

**Schedule.** ``incremental=True`` (default), Stolcke & Omohundro's
incremental merging: each episode is added to the current model as a new
path of states (one per observation) and the model is merged back to a local
optimum of the posterior before the next episode comes; so the search works
on the current model plus one path, and 1,000 episodes of the paper's
protocol take seconds.  ``incremental=False``: batch merging from the
maximally specific model of all the data (``initial``).

**Search.** ``search="pairs"`` (default): best-first over single merges.
All same-emission pairs are scored once and cached (local evidence change,
transitions removed).  After merging ``y`` into ``x`` only the pairs whose
touched rows changed are re-scored: every pair of ``x`` and of states whose
row collapsed; pairs ``(u, v)`` with ``u -a-> x`` and ``v -a-> y``; pairs of
successors of a changed row (they gained a common predecessor).  Each state
keeps an upper bound of its best pair score (the prior term ``r log Q`` only
falls as Q falls); a lazy scan refreshes the top row until it is exact, so
every merge is the true best.  Cost per search: ``O(sum_c n_c^2 d)`` to
start (``n_c`` states of colour ``c``, ``d`` edges per state), ``O(P d + H)``
per merge (``P`` re-scored pairs), memory ``O(sum_c n_c^2)``.

``search="fold"`` (batch, prefix tree): determinising merges in the order
of the evidence, as in RPNI / EDSM "blue-fringe" state merging, scored by the
same posterior.  Red states start as the root; the blue state (a successor
of a red state that is not red) with the largest count is folded into the
red state of its colour whose fold raises the posterior most, or becomes red
if no fold does.  Folding ``u`` into ``m`` merges them and then, recursively,
every two successors that now share an action and an observation, so the
model stays emission-deterministic and a merge of two copies of one place
takes their whole futures with it, which a single merge cannot: a single
merge of two copies makes their successor rows non-deterministic and costs
evidence until the successors are merged too, so the pair search prefers
small merges near the leaves and ends near the first-order model.  Every
tried fold is undone from a journal.

**Candidates.** ``candidates`` (a callable, e.g. :func:`sf_candidates`)
returns the pairs of states that may merge; a merged state may merge with
anything either part could.  This cuts the quadratic start and the
per-merge work, but the greedy search then only sees a subset of merges: it
may stop earlier (more states, lower posterior) or take a different path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln

from .._estimator import Estimator
from .._random import as_generator, check_seed
from .._validation import Bool, Float, Int, Options, alphabet_sizes, as_trajectories, check_float, check_int
from ..hmm import ActionHMM
from ..trajectories import Trajectories

__all__ = [
    "BestFirstMerging",
    "InitialModel",
    "prefix_tree",
    "sequence_model",
    "viterbi_log_posterior",
    "path_log_posterior",
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
    """``(obs, actions, n_obs, n_actions)`` of any input :func:`~hmmmerge._validation.as_trajectories` accepts."""
    traj = as_trajectories(traj)
    O, A = alphabet_sizes(traj.obs, traj.actions, n_obs, n_actions)
    return traj.obs, traj.actions, O, A


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


def path_log_posterior(traj: Trajectories, states, n_obs: int | None = None, n_actions: int | None = None,
                       prior_weight: float = 1.0, structure_prior: float = 1.0, end_state: bool = True) -> float:
    """Log posterior (the terms best-first merging optimises) of the model whose Viterbi paths are ``states``.

    ``states`` (shaped like ``traj.obs``) names the hidden state of every
    observation: the counts of the model are the transitions along these
    paths (from the start state to the first state of every episode and,
    with ``end_state``, from the last one to the final state), its states
    the distinct names, each of which must always emit the same
    observation.  This scores any model on the data the same way: the true
    world (``traj.states``), the first-order model (``traj.obs``), the Viterbi
    paths of an EM model, or a merged model (``labels_``).

    >>> t = Trajectories(obs=[[0, 1, 0, 1]], actions=[[-1, 0, 0, 0]])
    >>> bf = BestFirstMerging().fit(t)
    >>> lp = path_log_posterior(t, bf.labels_.reshape(t.obs.shape))
    >>> bool(np.isclose(lp, bf.log_posterior_)), bool(np.isclose(lp, path_log_posterior(t, t.obs)))
    (True, True)
    """
    obs, actions, O, A = _check_data(traj, n_obs, n_actions)
    states = np.asarray(states)
    if states.shape != obs.shape or (states.size and not np.issubdtype(states.dtype, np.integer)):
        raise ValueError(f"states must be an int array shaped like obs {obs.shape}, got {states.dtype} {states.shape}")
    names, lab = np.unique(states, return_inverse=True)
    lab = lab.reshape(obs.shape)
    Q = len(names)
    emission = np.full(Q, -1, np.int64)
    emission[lab.ravel()] = obs.ravel()
    if (emission[lab] != obs).any():
        raise ValueError("states must emit one observation each: a state is seen with two observations")
    model = sequence_model(traj, O, A, end_state=end_state)
    full = np.concatenate([lab.ravel(), [Q, Q + 1]])
    return viterbi_log_posterior(full[model.src], model.act, full[model.dst], model.count, Q, O, prior_weight,
                                 structure_prior)


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
    check_int(k, "k", low=1)
    check_float(gamma, "gamma", low=0, high=1, low_open=True)
    if gamma == 1:
        raise ValueError(f"gamma must be in (0, 1), got {gamma!r}")
    check_int(horizon, "horizon", low=1)

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


def _check_candidates(value, name):
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be None or a callable rule(model) -> (P, 2) pairs")


class BestFirstMerging(Estimator):
    """Best-first model merging of an action-conditioned HMM (Stolcke & Omohundro 1994).

    Parameters
    ----------
    prior_weight : total weight ``a > 0`` of the symmetric Dirichlet prior of
        every transition row (spread over the row's allowed successors).
    structure_prior : weight ``>= 0`` of the description-length prior
        ``-log P(M_S)`` (0 turns it off; then merges are only taken when they
        raise the evidence itself).
    incremental : ``True`` (default): Stolcke & Omohundro's incremental
        schedule; each episode is added as a new path of states and the model
        is merged back to a local optimum of the posterior before the next
        one, so the search always works on a small model (1,000 episodes of
        the paper's protocol in seconds).  ``False``: batch merging from the
        maximally specific model of all the data (quadratic in the data).
    candidates : ``None`` (every same-emission pair) or a callable
        ``rule(model: InitialModel) -> (P, 2)`` pairs of states that may merge
        (e.g. :func:`sf_candidates`); a merged state may merge with anything
        either part could.  Incremental: applied to every episode's working
        model (the current model plus the new path).
    max_merges : stop after this many merges in all (``None``: until no merge helps).
    initial : batch only: ``"tree"`` (prefix tree, default) or ``"sequences"``
        (one path per episode, the model the incremental schedule builds up).
    end_state : give the model Stolcke & Omohundro's final state: the last
        state of every episode moves to it by a virtual "end" action (a
        separate row, so it never costs likelihood; it lets states that end
        episodes share a successor, which guides the merging backwards from
        the ends).  ``to_hmm`` drops it.
    search : ``"pairs"`` (best-first over single merges, Stolcke &
        Omohundro) or ``"fold"`` (evidence-driven determinising folds of the
        prefix tree; needs ``incremental=False``, see the module docstring).
    seed : int or Generator; breaks ties between equally good merges (the
        states are numbered in a random order).

    Attributes after :meth:`fit`
    ----------------------------
    n_states_ : number of states of the merged model.
    n_merges_ : merges done.
    initial_model_ : the maximally specific model of the data (:class:`InitialModel`;
        incremental: :func:`sequence_model`, state ``e * (L + 1) + t`` is step
        ``t`` of episode ``e``).
    n_initial_states_ : its number of states.
    merges_ : (n_merges_, 2) merged pairs ``(kept, removed)`` in its numbering, in order.
    merge_gains_ : log posterior gain of every accepted step (all > 0): a merge
        (``search="pairs"``, n_merges_ of them) or a fold (``search="fold"``).
    labels_ : (n_initial_states_,) the merged state (0..n_states_-1) of every initial state.
    emission_ : (n_states_,) the observation each merged state emits.
    log_posterior_ : ``log P(M_S) + log P(X | M_S)`` of the merged model and all the data.
    log_posterior_trace_ : batch: the posterior before every step (merge or
        fold) and at the end; incremental: (n_episodes,) the posterior of the
        episodes so far after each episode's merging.
    merges_per_episode_ : incremental: (n_episodes,) merges done after adding each episode; batch: ``None``.
    edges_ : ``(src, act, dst, count)`` of the merged model's Viterbi counts
        (states ``0..n_states_-1``, start ``n_states_``, final ``n_states_ + 1``).

    Examples
    --------
    Strings of (ab)+ ending in the marker 2, one action, three episodes:

    >>> obs = [[0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 2], [0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 0],
    ...        [0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 2]]
    >>> acts = [[-1] + [0] * 10] * 3
    >>> bf = BestFirstMerging(structure_prior=2.0).fit(Trajectories(obs, acts))
    >>> bf.n_initial_states_, bf.n_states_, bf.n_merges_
    (33, 3, 30)
    >>> hmm = bf.to_hmm()
    >>> hmm.E.argmax(1).tolist(), hmm.T[0].toarray().round(2).tolist()
    ([0, 1, 2], [[0.0, 1.0, 0.0], [0.35, 0.0, 0.65], [1.0, 0.0, 0.0]])

    Determinising folds of the prefix tree find the same three states:

    >>> fold = BestFirstMerging(structure_prior=2.0, incremental=False, search="fold").fit(Trajectories(obs, acts))
    >>> fold.n_states_, bool(np.isclose(fold.log_posterior_, bf.log_posterior_))
    (3, True)
    """

    def __init__(self, prior_weight: float = 1.0, structure_prior: float = 1.0, incremental: bool = True,
                 search: str = "pairs", candidates=None, max_merges: int | None = None, initial: str = "tree",
                 end_state: bool = True, seed=0):
        self.prior_weight = prior_weight
        self.search = search
        self.structure_prior = structure_prior
        self.incremental = incremental
        self.candidates = candidates
        self.max_merges = max_merges
        self.initial = initial
        self.end_state = end_state
        self.seed = seed

    _parameter_constraints = {
        "prior_weight": Float(0, low_open=True), "structure_prior": Float(0), "incremental": Bool(),
        "search": Options("pairs", "fold"), "candidates": _check_candidates, "max_merges": Int(0, none=True),
        "initial": Options("tree", "sequences"), "end_state": Bool(), "seed": check_seed,
    }

    def _validate_params(self) -> None:
        """The table, then what ``search="fold"`` needs of the others."""
        super()._validate_params()
        if self.search == "fold":
            for name, ok in (("incremental=False", not self.incremental), ("initial='tree'", self.initial == "tree"),
                             ("candidates=None", self.candidates is None), ("max_merges=None", self.max_merges is None)):
                if not ok:
                    raise ValueError(f"search='fold' runs on the prefix tree of all the data and needs {name}")

    # ------------------------------------------------------------------ fit
    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None):
        """Merge the episodes' paths until no merge raises the posterior (incrementally by default).

        ``traj``: a :class:`~hmmmerge.trajectories.Trajectories` or a pair
        ``(obs, actions)`` (what :func:`~hmmmerge._validation.as_trajectories`
        accepts).  Every call starts afresh.

        >>> traj = Trajectories([[0, 1, 0, 1, 0, 1, 0, 1]], [[-1] + [0] * 7])
        >>> bf = BestFirstMerging().fit(traj)
        >>> bf.n_initial_states_, bf.n_states_, bool((bf.merge_gains_ > 0).all())
        (8, 2, True)
        """
        self._validate_params()
        traj = as_trajectories(traj)
        obs, actions, O, A = _check_data(traj, n_obs, n_actions)
        rng = as_generator(self.seed)
        self.merges_per_episode_ = None
        if self.incremental:
            model = sequence_model(traj, O, A, end_state=self.end_state)
            merges, gains, trace, per_episode, stats = self._fit_incremental(obs, actions, O, A, rng)
            self.merges_per_episode_ = per_episode
        elif self.search == "fold":
            model = _permute(prefix_tree(traj, O, A, end_state=self.end_state), rng)
            merges, gains, stats = _fold_search(model, self.prior_weight, self.structure_prior)
            trace = None
        else:
            build = prefix_tree if self.initial == "tree" else sequence_model
            model = _permute(build(traj, O, A, end_state=self.end_state), rng)
            tab = _lgamma_table(self.prior_weight, model.count.sum())
            pairs = self._candidate_pairs(model)
            merges, gains, _, stats = _search(model.emission, model.src, model.act, model.dst, model.count, O, A,
                                              self.prior_weight, self.structure_prior, tab, pairs,
                                              self._merge_budget(model.n_states))
            trace = None
        H = model.n_states
        self.n_pair_evaluations_, self.n_row_refreshes_ = int(stats[0]), int(stats[1])
        self.initial_model_ = model
        self.merges_ = merges
        self.merge_gains_ = gains
        self.n_merges_ = len(merges)
        self.n_initial_states_ = H
        rep = _representatives(H, merges)
        survivors = np.unique(rep)
        self.n_states_ = len(survivors)
        self.labels_ = np.searchsorted(survivors, rep)
        self.emission_ = model.emission[survivors]
        lab = np.concatenate([self.labels_, [self.n_states_, self.n_states_ + 1]])
        row, d, c = _aggregate(lab[model.src], model.act, lab[model.dst], model.count, self.n_states_ + 2, A + 2)
        self.edges_ = (row // (A + 2), row % (A + 2), d, c)
        self.n_obs_, self.n_actions_ = O, A
        self.log_posterior_ = viterbi_log_posterior(*self.edges_, self.n_states_, O, self.prior_weight,
                                                    self.structure_prior)
        if trace is None:  # batch: the posterior before every step and at the end
            lp0 = viterbi_log_posterior(model.src, model.act, model.dst, model.count, H, O, self.prior_weight,
                                        self.structure_prior)
            trace = lp0 + np.concatenate([[0.0], np.cumsum(gains)])
        self.log_posterior_trace_ = trace
        return self

    def _merge_budget(self, n_states: int) -> int:
        return n_states if self.max_merges is None else min(int(self.max_merges), n_states)

    def _candidate_pairs(self, model: InitialModel):
        if self.candidates is None:
            return None
        pairs = np.asarray(self.candidates(model))
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        if pairs.ndim != 2 or pairs.shape[1] != 2 or (pairs.size and not np.issubdtype(pairs.dtype, np.integer)):
            raise ValueError(f"candidates must return an int array of shape (P, 2), got shape {pairs.shape}")
        H = model.n_states
        if pairs.size and (pairs.min() < 0 or pairs.max() >= H):
            raise ValueError(f"candidates returned a state outside 0..{H - 1}")
        if (model.emission[pairs[:, 0]] != model.emission[pairs[:, 1]]).any():
            raise ValueError("candidates returned a pair of states with different emissions")
        return pairs.astype(np.int64)

    def _fit_incremental(self, obs, actions, O, A, rng):
        """Stolcke & Omohundro's incremental schedule: add each episode as a path, merge to a local optimum.

        The working model has states ``0..Q-1`` plus the start (Q) and final (Q+1)
        states; ``occ[s]`` is the initial-state number (episode * (L+1) + step)
        that represents state ``s``, so that the merges are reported in the
        numbering of :func:`sequence_model`.
        """
        N, L1 = obs.shape
        tab = _lgamma_table(self.prior_weight, N * (L1 + 1))
        emission = np.zeros(0, np.int64)
        occ = np.zeros(0, np.int64)
        src = act = dst = np.zeros(0, np.int64)
        cnt = np.zeros(0)
        budget = self._merge_budget(N * L1)
        merges, gains, trace = [], [], np.zeros(N)
        stats = np.zeros(2, np.int64)
        steps = np.arange(L1)
        for e in range(N):
            Q = len(emission)
            H = Q + L1
            ids = Q + rng.permutation(L1)  # the new states, numbered in a random order (ties)
            emission = np.concatenate([emission, np.zeros(L1, np.int64)])
            emission[ids] = obs[e]
            occ = np.concatenate([occ, np.zeros(L1, np.int64)])
            occ[ids] = e * L1 + steps
            # old start/final move to H/H+1; the path: start -> ids[0] -> ... -> ids[-1] (-> final)
            src = np.where(src == Q, H, src)
            dst = np.where(dst == Q + 1, H + 1, dst)
            p_src = np.concatenate([[H], ids[:-1]])
            p_act = np.concatenate([[A], actions[e, 1:]])
            p_dst = ids
            if self.end_state:
                p_src = np.concatenate([p_src, ids[-1:]])
                p_act = np.concatenate([p_act, [A + 1]])
                p_dst = np.concatenate([p_dst, [H + 1]])
            src, act, dst = np.concatenate([src, p_src]), np.concatenate([act, p_act]), np.concatenate([dst, p_dst])
            cnt = np.concatenate([cnt, np.ones(len(p_src))])
            pairs = None
            if self.candidates is not None:
                pairs = self._candidate_pairs(InitialModel(emission, src, act, dst, cnt, ids[None, :], O, A))
            m, g, (src, act, dst, cnt), st = _search(emission, src, act, dst, cnt, O, A, self.prior_weight,
                                                     self.structure_prior, tab, pairs, budget)
            stats += st
            budget -= len(m)
            merges.append(occ[m])
            gains.append(g)
            # renumber the survivors 0..Q'-1 (start, final -> Q', Q'+1)
            rep = _representatives(H, m)
            keep = np.unique(rep)
            new = np.full(H + 2, -1, np.int64)
            new[keep] = np.arange(len(keep))
            new[H], new[H + 1] = len(keep), len(keep) + 1
            src, dst = new[src], new[dst]
            emission, occ = emission[keep], occ[keep]
            trace[e] = viterbi_log_posterior(src, act, dst, cnt, len(keep), O, self.prior_weight,
                                             self.structure_prior)
        per_episode = np.array([len(m) for m in merges], dtype=np.int64)
        return np.concatenate(merges).reshape(-1, 2), np.concatenate(gains), trace, per_episode, stats

    # ------------------------------------------------------------ outputs
    def transition_counts(self):
        """The Viterbi counts of the merged model: a list of A sparse (Q x Q) matrices and the start counts (Q,).

        >>> bf = BestFirstMerging().fit(Trajectories([[0, 1, 0, 1, 0, 1, 0, 1]], [[-1] + [0] * 7]))
        >>> mats, start = bf.transition_counts()
        >>> bf.emission_.tolist(), mats[0].toarray().tolist(), start.tolist()   # colour 1 -> 0 three times
        ([1, 0], [[0.0, 3.0], [4.0, 0.0]], [0.0, 1.0])
        """
        self._check_fitted("edges_")
        s, a, d, c = self.edges_
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
        self._check_fitted("edges_")
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


def _lgamma_table(alpha: float, max_count: float):
    from . import _bfmm_kernels as K

    return K.lgamma_table(alpha, max_count)


#: Pair-score cache entries (sum over colours of n_c^2) above which a search is refused (about 2.6 GB).
MAX_PAIR_CACHE = 200_000_000


def _search(emission, src, act, dst, cnt, n_obs, n_actions, alpha, lam, tab, pairs, max_merges):
    """Best-first merging of the model ``(emission, edges)`` with the numba kernels.

    States ``0..H-1`` emit ``emission``; ``H`` and ``H + 1`` are the start and
    final states.  ``pairs``: ``None`` (every same-emission pair) or the
    allowed pairs.  Returns ``(merges (k, 2) as (kept, removed), gains (k,),
    (src, act, dst, cnt) of the merged model's edges, stats)``; the edges
    keep the numbering ``0..H+1`` (removed states no longer occur).
    """
    from . import _bfmm_kernels as K

    H, O = len(emission), n_obs
    A1, Hs = n_actions + 2, H + 2
    g, prior = _pool(K, Hs, A1, src, act, dst, cnt, alpha, tab)
    E0 = len(g.src)
    emitting = np.zeros(Hs, dtype=np.bool_)
    emitting[:H] = True
    col = np.concatenate([emission, [0, 0]]).astype(np.int64)
    order = np.argsort(emission, kind="stable")
    col_n = np.bincount(emission, minlength=O).astype(np.int64)
    col_off = np.concatenate([[0], np.cumsum(col_n)]).astype(np.int64)
    pos = np.zeros(Hs, np.int64)
    pos[order] = np.arange(H) - col_off[emission[order]]
    loc_off = np.concatenate([[0], np.cumsum(col_n**2)]).astype(np.int64)
    if loc_off[-1] > MAX_PAIR_CACHE:
        raise ValueError(f"best-first merging of {H} states would cache {loc_off[-1]:,} pair scores "
                         f"(limit {MAX_PAIR_CACHE:,}): use incremental=True or fewer episodes")
    if pairs is None:
        allowed = np.ones(loc_off[-1], dtype=np.bool_)
    else:
        allowed = np.zeros(loc_off[-1], dtype=np.bool_)
        a, b = pairs[:, 0], pairs[:, 1]
        c = emission[a]
        allowed[loc_off[c] + pos[a] * col_n[c] + pos[b]] = True
        allowed[loc_off[c] + pos[b] * col_n[c] + pos[a]] = True
    cl = K.Colours(col=col, col_off=col_off, col_n=col_n, members=order.astype(np.int64), pos=pos, loc_off=loc_off,
                   allowed=allowed)
    merges = np.zeros((max(min(max_merges, H), 1), 2), np.int64)
    gains = np.zeros(len(merges))
    stats = np.zeros(2, np.int64)
    n_done = K.run_merging(g, prior, cl, emitting, lam, float(np.log(O + 1)), E0, max_merges, merges, gains, stats)
    k = g.alive
    return merges[:n_done].copy(), gains[:n_done].copy(), (g.src[k], g.act[k], g.dst[k], g.cnt[k]), stats


def _pool(K, n_states, A1, src, act, dst, cnt, alpha, tab):
    """The edge :class:`~._bfmm_kernels.Pool` (edges copied, lists and row caches built) and the prior; ``K``
    is the kernels' module (imported by the caller: numba is slow to import)."""
    src, act, dst = (np.array(v, dtype=np.int64) for v in (src, act, dst))
    E0, R = len(src), n_states * A1
    g = K.Pool(A1=A1, src=src, act=act, dst=dst, cnt=np.array(cnt, dtype=np.float64),
               alive=np.ones(E0, dtype=np.bool_), out_head=np.full(R, -1, np.int64), out_next=np.full(E0, -1, np.int64),
               in_head=np.full(n_states, -1, np.int64), in_next=np.full(E0, -1, np.int64),
               row_n=np.zeros(R, np.int64), row_C=np.zeros(R), row_term=np.zeros(R))
    prior = K.Prior(float(alpha), tab)
    K.build_lists(n_states, g, prior)
    return g, prior



#: Entries of the fold search's dense successor table (states x actions x observations) above which it is refused.
MAX_FOLD_TABLE = 100_000_000


def _fold_search(model: InitialModel, alpha: float, lam: float):
    """Evidence-driven blue-fringe merging with determinising folds (see :func:`_bfmm_kernels.run_folds`).

    Returns ``(merges (k, 2) as (kept, removed) in the model's numbering, gains per fold, stats)``.
    """
    from . import _bfmm_kernels as K

    H, O, A = model.n_states, model.n_obs, model.n_actions
    A1, O1 = A + 2, O + 1
    if (H + 2) * A1 * O1 > MAX_FOLD_TABLE:
        raise ValueError(f"search='fold' would need a successor table of {(H + 2) * A1 * O1:,} entries "
                         f"(limit {MAX_FOLD_TABLE:,}): use fewer episodes")
    emission = np.concatenate([model.emission, [-1, -2]]).astype(np.int64)
    obs_of = np.concatenate([model.emission, [O, O]])  # the final state's "observation" is O
    child = np.full((H + 2, A1, O1), -1, np.int64)
    fcnt = np.zeros((H + 2, A1, O1))
    child[model.src, model.act, obs_of[model.dst]] = model.dst
    fcnt[model.src, model.act, obs_of[model.dst]] = model.count
    prior = K.Prior(float(alpha), _lgamma_table(alpha, model.count.sum()))
    R = (H + 2) * A1
    fm = K.FoldModel(parent=np.arange(H + 2, dtype=np.int64), child=child, fcnt=fcnt, row_term=np.zeros(R))
    K.init_fold_rows(fm, prior)
    E = len(model.src)
    journal = K.Journal(parent=np.zeros(H + 2, np.int64), child=np.zeros(E + 1, np.int64),
                        child_old=np.zeros(E + 1, np.int64), count=np.zeros(2 * E + 2, np.int64),
                        count_old=np.zeros(2 * E + 2), length=np.zeros(3, np.int64))
    scratch = K.FoldScratch(stack=np.zeros((E + 1, 2), np.int64), touched=np.zeros(R, np.int64),
                            mark=np.full(R, -1, np.int64))
    merges = np.zeros((H, 2), np.int64)
    gains = np.zeros(H)
    n_merges, n_folds = K.run_folds(H, emission, fm, prior, journal, scratch, lam, float(np.log(O + 1)), H, E,
                                    merges, gains)
    return merges[:n_merges].copy(), gains[:n_folds].copy(), np.array([n_folds, 0])


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
    """The kernels' edge :class:`~._bfmm_kernels.Pool` (edges copied, lists and row caches built) and prior."""

    def __init__(self, model: InitialModel, prior_weight: float = 1.0):
        from . import _bfmm_kernels as K

        self.K = K
        self.model = model
        H, A1 = model.n_states, model.n_actions + 2
        self.H, self.A1 = H, A1
        tab = K.lgamma_table(float(prior_weight), model.count.sum())
        self.pool, self.prior = _pool(K, H + 2, A1, model.src, model.act, model.dst, model.count, prior_weight, tab)
        Hs, E0 = H + 2, len(model.src)
        self.scratch = K.Scratch(acc=np.zeros(Hs), touched=np.zeros(Hs, np.int64), mark=np.full(Hs * A1, -1, np.int64),
                                 collapsed=np.zeros(E0 + 1, np.int64))
        self.alive = np.ones(H, dtype=bool)

    def delta(self, x: int, y: int):
        """(change of the log evidence, transitions removed) if x and y merge."""
        return self.K.pair_delta(x, y, self.pool, self.prior, self.scratch)

    def merge(self, x: int, y: int) -> int:
        """Merge y into x; returns the number of transitions removed."""
        _, removed = self.K.merge_states(x, y, self.pool, self.prior, self.scratch)
        self.alive[y] = False
        return removed

    def edges(self):
        """Alive edges (src, act, dst, count), sorted."""
        g = self.pool
        k = g.alive
        s, a, d, c = g.src[k], g.act[k], g.dst[k], g.cnt[k]
        o = np.lexsort((d, a, s))
        return s[o], a[o], d[o], c[o]

    def evidence(self) -> float:
        """Sum of the cached row terms."""
        return float(self.pool.row_term.sum())
