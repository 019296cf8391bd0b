"""Use a learned map: localise in it, plan to a goal in it, and navigate the true world with it.

Any :class:`~hmmmerge.hmm.ActionHMM` is a map (the true world's, a learned
level 2, EM's clone HMM, a first-order model).  Three questions are asked of it:

* **Where am I?** :func:`localise` filters the model along episodes and maps
  its most probable state to a true state through a :class:`Correspondence`
  (the true state each learned state stands for, by majority of the filter's
  posterior mass on walks whose true states are known,
  :func:`estimate_correspondence`).  The correspondence only *scores*; the
  agent never sees it.
* **How do I get there?** :func:`plan` returns the actions that maximise the
  probability of reaching a goal (an observation, or a learned state) within a
  horizon, by finite-horizon value iteration on the model's transitions from
  the belief's most probable state; among equally likely plans the fastest.
  On a deterministic map this is a shortest path.
* **Does it work?** :func:`navigate` puts the agent at random places of the
  true :class:`~hmmmerge.environment.Environment`, lets it localise for a few
  random moves, then asks it to reach a random colour, re-planning after every
  observation (belief-weighted, QMDP-style), and scores success, path length
  against the true shortest path, and localisation.  With
  ``update_map=True`` a move the map did not predict (a blocked passage,
  :func:`block_passage`) is removed from the map online, so the next plan
  takes the detour.

Value iteration (``g[h] = P(goal | h)``, ``V_0 = g``)::

    Q_k(h, a) = sum_j T[a][h, j] V_{k-1}(j)
    V_k(h)    = g(h) + (1 - g(h)) max_a Q_k(h, a)     # P(goal reached within k moves)

The action chosen with ``k`` moves left maximises ``Q_k`` and, among ties
(within 1e-9), ``sum_{i<=k} Q_i`` (which is ``k - distance`` on a deterministic
map: the shortest route).  The iteration stops when ``V`` no longer changes,
so a generous horizon costs nothing.

Large learned maps stay cheap: the transitions are used sparse, and a dense
map whose rows are mostly one value (EM's pseudocount) as its entries above
that floor plus the floor (the same map; each sweep and each belief update
costs the entries above the floor, not ``A H^2``).  A navigation computes a
goal's values once and reuses them at every re-plan and every pair with that
goal; a move's score is the predicted belief after it dotted with them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ._random import as_generator
from ._validation import check_float, check_int
from .environment import Environment
from .hmm import ActionHMM
from .trajectories import Trajectories

__all__ = [
    "Correspondence",
    "Localisation",
    "NavigationResult",
    "Plan",
    "UnreachableGoalError",
    "block_passage",
    "distances_to",
    "estimate_correspondence",
    "localise",
    "navigate",
    "occupancy",
    "plan",
    "without_transitions",
]

_TIE = 1e-9  # probabilities closer than this are ties (broken by speed, then by the lower action)


class UnreachableGoalError(ValueError):
    """The map knows no way to the goal within the horizon from where the agent believes it is."""


# --------------------------------------------------------------------------- correspondence and localisation
@dataclass(frozen=True)
class Correspondence:
    """Which true state each learned state stands for.

    Attributes
    ----------
    states : (H,) int, the true state of largest posterior mass per learned state; -1 if it got none.
    share : (H,) float, that state's share of the learned state's mass (its purity; 0 if no mass).
    counts : (H, S) float, the posterior mass of learned state ``h`` on true state ``s`` (place fields).
    """

    states: np.ndarray
    share: np.ndarray
    counts: np.ndarray

    @property
    def n_states(self) -> int:
        """Number of learned states."""
        return len(self.states)


def _episodes_per_chunk(traj: Trajectories, n_states: int, budget: int = 2_000_000) -> int:
    """Episodes whose filtered beliefs (episodes x steps x states floats) stay within ``budget`` floats."""
    return max(1, budget // max(1, traj.obs.shape[1] * n_states))


def estimate_correspondence(model: ActionHMM, traj: Trajectories, n_true_states: int | None = None
                            ) -> Correspondence:
    """The learned-state -> true-state :class:`Correspondence`, by majority over walks with known ``states``.

    Each step adds the model's filtered belief ``P(h_t | o_<=t, a_<=t)`` to the
    row of the true state ``traj.states[:, t]``; a learned state stands for the
    true state where it has most mass.

    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(3, 3, n_colours=9, seed=0)
    >>> c = estimate_correspondence(env.to_hmm(), random_walk(env, 20, 10, seed=0))
    >>> bool((c.states == range(9)).all()), float(c.share.min())
    (True, 1.0)
    """
    _check_model(model)
    if not isinstance(traj, Trajectories):
        raise TypeError(f"traj must be Trajectories with true states, got {type(traj).__name__}")
    if traj.states is None:
        raise ValueError("traj has no true states: the correspondence needs walks with known states")
    S = int(traj.states.max()) + 1 if n_true_states is None else check_int(n_true_states, "n_true_states", low=1)
    if traj.states.max() >= S:
        raise ValueError(f"traj.states holds state {int(traj.states.max())} >= n_true_states={S}")
    H = model.n_states
    counts = np.zeros((H, S))
    chunk = _episodes_per_chunk(traj, H)
    for lo in range(0, traj.n_episodes, chunk):
        part = traj[lo:lo + chunk]
        post = model.run_filter(part.obs, part.actions, posteriors=True).posteriors.reshape(-1, H)
        s = part.states.ravel()
        onehot = sp.csr_matrix((np.ones(len(s)), (np.arange(len(s)), s)), shape=(len(s), S))
        counts += np.asarray((onehot.T @ post).T)
    total = counts.sum(axis=1)
    states = np.where(total > 0, counts.argmax(axis=1), -1)
    share = np.divide(counts.max(axis=1), total, out=np.zeros(H), where=total > 0)
    return Correspondence(states.astype(np.int64), share, counts)


@dataclass(frozen=True)
class Localisation:
    """Output of :func:`localise`.

    Attributes
    ----------
    accuracy : share of steps whose most probable learned state stands for the true state.
    curve : (L,) that share per step of the episode (over episodes).
    map_states : (N, L) the most probable learned state per step.
    estimated : (N, L) the true state it stands for (-1: a learned state without correspondence).
    """

    accuracy: float
    curve: np.ndarray
    map_states: np.ndarray
    estimated: np.ndarray

    def accuracy_after(self, moves: int) -> float:
        """Accuracy over the steps from move ``moves`` on (the beliefs after ``moves`` moves and later).

        >>> Localisation(0.5, np.array([0.0, 0.5, 1.0]), None, None).accuracy_after(1)
        0.75
        """
        check_int(moves, "moves", low=0)
        if moves >= len(self.curve):
            raise ValueError(f"episodes have {len(self.curve) - 1} moves; no step from move {moves} on")
        return float(self.curve[moves:].mean())


def localise(model: ActionHMM, traj: Trajectories, correspondence: Correspondence) -> Localisation:
    """Filter ``model`` along ``traj`` and score where it believes the agent is against ``traj.states``.

    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(3, 3, n_colours=3, seed=0)
    >>> oracle, walks = env.to_hmm(), random_walk(env, 5, 8, seed=1)
    >>> loc = localise(oracle, walks, estimate_correspondence(oracle, random_walk(env, 50, 8, seed=0)))
    >>> loc.accuracy, loc.curve.shape
    (1.0, (9,))
    """
    _check_model(model)
    if not isinstance(correspondence, Correspondence):
        raise TypeError(f"correspondence must be a Correspondence, got {type(correspondence).__name__}")
    if correspondence.n_states != model.n_states:
        raise ValueError(f"correspondence is for {correspondence.n_states} learned states, "
                         f"the model has {model.n_states}")
    if not isinstance(traj, Trajectories) or traj.states is None:
        raise ValueError("traj must be Trajectories with true states (traj.states)")
    chunk = _episodes_per_chunk(traj, model.n_states)
    map_states = np.concatenate([
        model.run_filter(traj.obs[lo:lo + chunk], traj.actions[lo:lo + chunk], posteriors=True)
        .posteriors.argmax(axis=2) for lo in range(0, traj.n_episodes, chunk)])
    estimated = correspondence.states[map_states]
    hit = estimated == traj.states
    return Localisation(float(hit.mean()), hit.mean(axis=0), map_states, estimated)


# --------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class Plan:
    """Output of :func:`plan`.

    Attributes
    ----------
    actions : (K,) int, the moves to make.
    states : (K+1,) int, the learned states the map expects to pass (the most probable successor each move).
    probability : P(goal reached within the horizon) from the start state, following the plan's policy.
    start : the learned state planned from (the belief's most probable).
    """

    actions: np.ndarray
    states: np.ndarray
    probability: float
    start: int

    def __len__(self) -> int:
        return len(self.actions)


def _goal_weights(model: ActionHMM, goal) -> tuple[np.ndarray, str]:
    """``g[h] = P(goal | h)`` and a description of the goal."""
    if isinstance(goal, tuple) and len(goal) == 2 and goal[0] in ("obs", "state"):
        kind, value = goal
    elif isinstance(goal, (int, np.integer)) and not isinstance(goal, bool):
        kind, value = "obs", goal
    else:
        raise TypeError(f"goal must be an observation (int) or ('obs', o) / ('state', h), got {goal!r}")
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"goal {kind} must be an integer, got {value!r}")
    value = int(value)
    if kind == "obs":
        if not 0 <= value < model.n_obs:
            raise ValueError(f"goal observation {value} is not in 0..{model.n_obs - 1}")
        g = model.E[:, value].copy()
        if not g.any():
            raise UnreachableGoalError(f"goal observation {value} is emitted by no state of the map")
        return g, f"observation {value}"
    if not 0 <= value < model.n_states:
        raise ValueError(f"goal state {value} is not a learned state in 0..{model.n_states - 1}")
    g = np.zeros(model.n_states)
    g[value] = 1.0
    return g, f"state {value}"


def _check_model(model) -> None:
    if not isinstance(model, ActionHMM):
        raise TypeError(f"model must be an ActionHMM, got {type(model).__name__}")


def _check_belief(model: ActionHMM, belief) -> np.ndarray:
    b = np.asarray(belief)
    if b.dtype.kind not in "biuf":
        raise TypeError(f"belief must hold real numbers, got dtype {b.dtype}")
    b = b.astype(np.float64)
    if b.shape != (model.n_states,):
        raise ValueError(f"belief must have shape ({model.n_states},) (one entry per learned state), got {b.shape}")
    if not np.isfinite(b).all() or (b < 0).any():
        raise ValueError("belief must be finite and non-negative")
    if abs(b.sum() - 1.0) > 1e-6:
        raise ValueError(f"belief sums to {b.sum():.6g}, not 1")
    return b


#: a dense map is planned on as sparse + floor (see :class:`_Transitions`) when at most this share of its entries
#: differ from their row's smallest
_SPARSE_SHARE = 0.25


class _Transitions:
    """A map's transitions stacked as one (A*H, H) matrix (row ``a*H + h`` is ``T[a][h, :]``), for planning and
    filtering.

    A sparse map is kept as it is (CSR).  A dense map whose rows are mostly one value, their smallest (EM's
    pseudocount: every count of 0 gives the same probability), is kept as ``S + floor 1^T``: ``S`` the entries
    above the row's floor (CSR) and ``floor`` (A*H,) the floors, so that ``T V = S V + floor sum(V)`` and
    ``b T_a = b S_a + (b . floor_a) 1`` cost the nonzeros of ``S`` instead of ``A H^2``.  Same map, same
    values (up to rounding); other dense maps stay dense.  ``mode`` forces ``"dense"`` or ``"sparse"``.

    A ring of 5 states that moves forward with probability 0.6 and anywhere else with 0.1 each:

    >>> T = np.full((1, 5, 5), 0.1); T[0, range(5), [1, 2, 3, 4, 0]] = 0.6
    >>> t = _Transitions(ActionHMM(T, np.eye(5), np.ones(5) / 5))
    >>> t.kind, t.S.nnz, t.dot(np.array([1.0, 0, 0, 0, 0])).round(3).tolist()
    ('floor', 5, [0.1, 0.1, 0.1, 0.1, 0.6])
    """

    def __init__(self, model: ActionHMM, mode: str = "auto"):
        A, H = model.n_actions, model.n_states
        self.A, self.H, self.share = A, H, _SPARSE_SHARE
        self.floor = None
        if model.is_sparse:
            self.kind, self.S = "sparse", sp.vstack(model.T, format="csr")
        else:
            D = model.T.reshape(-1, H)
            floor = D.min(axis=1)
            above = D != floor[:, None]
            if mode == "sparse" or (mode == "auto" and np.count_nonzero(above) <= _SPARSE_SHARE * D.size):
                r, c = np.nonzero(above)
                self.kind = "floor" if floor.any() else "sparse"
                self.S = sp.csr_matrix(((D - floor[:, None])[r, c], (r, c)), shape=D.shape)
                self.floor = floor if floor.any() else None
            else:
                self.kind, self.S = "dense", D
        if self.kind == "dense":
            self.back = None
        else:  # per action, T_a's transpose without the floor: b T_a = back[a] @ b (+ the floor's part)
            self.back = [self.S[a * H:(a + 1) * H].T.tocsr() for a in range(A)]

    def dot(self, V: np.ndarray, rows=None) -> np.ndarray:
        """``T V`` over the stacked rows (or the stacked ``rows`` only); ``V`` (H,) or (H, m)."""
        S = self.S if rows is None else self.S[rows]
        out = np.asarray(S @ V)
        if self.floor is not None:
            f = self.floor if rows is None else self.floor[rows]
            out = out + (f[:, None] * V.sum(axis=0) if V.ndim == 2 else f * V.sum())
        return out

    def predict(self, b: np.ndarray, a: int) -> np.ndarray:
        """``b T_a``: the belief after move ``a`` before the observation."""
        if self.back is None:
            return b @ self.S[a * self.H:(a + 1) * self.H]
        out = self.back[a] @ b
        if self.floor is not None:
            out = out + b @ self.floor[a * self.H:(a + 1) * self.H]
        return out

    def row(self, a: int, h: int) -> np.ndarray:
        """``T[a][h, :]`` as a dense vector."""
        r = self.S[a * self.H + h]
        r = r.toarray().ravel() if sp.issparse(r) else np.asarray(r, dtype=np.float64)
        return r + self.floor[a * self.H + h] if self.floor is not None else r


_TRANSITIONS: "weakref.WeakKeyDictionary[ActionHMM, tuple]" = weakref.WeakKeyDictionary()


def _transitions_of(model: ActionHMM) -> _Transitions:
    """``_Transitions(model)``, made once per map (a dense map's scan costs more than a plan): kept while the
    map lives and its ``T`` is the same object (a map changed in place is not noticed; :func:`without_transitions`
    makes a new one)."""
    held = _TRANSITIONS.get(model)
    if held is None or held[0] is not model.T or held[1].share != _SPARSE_SHARE:
        held = (model.T, _Transitions(model))
        _TRANSITIONS[model] = held
    return held[1]


class _ValueTables:
    """Finite-horizon values of one goal on one map (see the module docstring)."""

    def __init__(self, model: ActionHMM, g: np.ndarray, horizon: int, transitions: _Transitions | None = None):
        self.model, self.g, self.horizon = model, g, horizon
        self.A, self.H = model.n_actions, model.n_states
        self.T = _transitions_of(model) if transitions is None else transitions
        if self.T.kind != "dense":
            self.V = self._sparse_sweeps(g, horizon)
            self.converged = len(self.V) - 1 < horizon
            self.cum = np.cumsum(self.V, axis=0)
            return
        V = [g]
        for _ in range(horizon):
            Q = self.T.dot(V[-1]).reshape(self.A, self.H)
            nxt = g + (1.0 - g) * Q.max(axis=0)
            grew = not np.array_equal(nxt > 0, V[-1] > 0)  # the states that can reach the goal at all
            done = np.abs(nxt - V[-1]).max() <= 1e-12
            if done and not grew and np.array_equal(nxt, V[-1]):
                break  # converged exactly: V_k is V_K for every k > K
            V.append(nxt)
            if done and not grew:
                break  # converged to 1e-12 with the same support (which then never grows): V_k ~ V_K
        self.V = np.array(V)  # (K+1, H)
        self.converged = len(V) - 1 < horizon
        self.cum = np.cumsum(self.V, axis=0)  # cum[i] = sum_{j<=i} V_j

    def _sparse_sweeps(self, g: np.ndarray, horizon: int) -> np.ndarray:
        """``V_0..V_K`` by the numba kernel (the loop above, on the sparse form), 256 sweeps at a time."""
        from ._planning_kernels import sweeps

        S = self.T.S
        floor = np.empty(0) if self.T.floor is None else self.T.floor
        g = np.ascontiguousarray(g, dtype=np.float64)
        V, last, left = [g[None, :]], g, horizon
        while left > 0:
            out = np.empty((min(left, 256), self.H))
            n, stopped = sweeps(S.indptr, S.indices, S.data, floor, g, self.A, last, out)
            V.append(out[:n])
            left -= n
            last = out[n - 1] if n else last
            if stopped:
                break
        return np.concatenate(V)

    @property
    def size(self) -> int:
        """Floats held (the cache's measure)."""
        return self.V.size + self.cum.size

    def value(self, k: int) -> np.ndarray:
        """``V_k``."""
        return self.V[min(k, len(self.V) - 1)]

    def _cumulative(self, k: int) -> np.ndarray:
        """``sum_{j<=k} V_j``."""
        K = len(self.V) - 1
        return self.cum[k] if k <= K else self.cum[K] + (k - K) * self.V[K]

    def targets(self, k: int) -> np.ndarray:
        """(H, 2): ``V_{k-1}`` and ``sum_{j<k} V_j``, whose expectation after a move is ``(Q_k, sum_{i<=k} Q_i)``."""
        return np.stack([self.value(k - 1), self._cumulative(k - 1)], axis=1)

    def scores(self, k: int, rows):
        """``(Q_k, sum_{i<=k} Q_i)`` of the states ``rows``, (A, len(rows)) each."""
        idx = (np.arange(self.A)[:, None] * self.H + np.asarray(rows)[None, :]).ravel()
        out = self.T.dot(self.targets(k), idx).reshape(self.A, len(rows), 2)
        return out[..., 0], out[..., 1]


def _most_probable(p: np.ndarray) -> int:
    """The index of the largest entry; among entries within a relative 1e-9 of it (ties, whatever the rounding
    of the sums that made them) the lowest.

    >>> _most_probable(np.array([0.2, 0.4, 0.4 * (1 + 1e-12)]))
    1
    """
    return int(np.flatnonzero(p >= p.max() * (1.0 - 1e-9))[0])


def _best_action(q: np.ndarray, s: np.ndarray, tolerance: float = _TIE) -> int:
    """The action of largest ``q``; among ties (within ``tolerance``) the largest ``s`` (within 1e-9); then the
    lowest index."""
    cand = q >= q.max() - tolerance
    s = np.where(cand, s, -np.inf)
    return int(np.flatnonzero(s >= s.max() - _TIE)[0])


def plan(model: ActionHMM, belief, goal, horizon: int) -> Plan:
    """The moves that maximise the probability of reaching ``goal`` within ``horizon`` moves.

    Parameters
    ----------
    model : the map.
    belief : (H,) distribution over the map's states; the plan starts from its most probable state.
    goal : an observation ``o`` (int, or ``("obs", o)``: reach a state that emits it) or
        ``("state", h)`` (reach learned state ``h``).
    horizon : most moves, >= 1.

    Returns
    -------
    Plan
        the moves, the states the map expects to pass, and the probability of arriving in time.
        An empty plan if the start state already is a goal state (``P(goal | start) >= 0.5``).

    Raises
    ------
    UnreachableGoalError (a ValueError)
        if the map knows no way to the goal within ``horizon`` from the start state.

    Examples
    --------
    A ring of 5 states coloured 0, 1, 2, 3, 4; action 0 steps forward, 1 back:

    >>> from hmmmerge.gallery import cycle_world
    >>> model = cycle_world(5, n_colours=5).to_hmm()
    >>> p = plan(model, [1, 0, 0, 0, 0], goal=3, horizon=10)
    >>> p.actions.tolist(), p.states.tolist(), p.probability
    ([1, 1], [0, 4, 3], 1.0)
    >>> plan(model, [1, 0, 0, 0, 0], goal=3, horizon=1)
    Traceback (most recent call last):
    ...
    hmmmerge.planning.UnreachableGoalError: the map knows no way from state 0 to observation 3 within 1 move
    """
    _check_model(model)
    check_int(horizon, "horizon", low=1)
    g, what = _goal_weights(model, goal)
    b = _check_belief(model, belief)
    start = _most_probable(b)
    tables = _ValueTables(model, g, horizon)
    prob = float(tables.value(horizon)[start])
    if prob <= 0.0:
        raise UnreachableGoalError(f"the map knows no way from state {start} to {what} within {horizon} "
                                   f"move{'s' if horizon > 1 else ''}")
    actions, states = [], [start]
    h = start
    for k in range(horizon, 0, -1):
        if g[h] >= 0.5:
            break
        q, s = tables.scores(k, [h])
        if q.max() <= 0.0:
            break
        a = _best_action(q[:, 0], s[:, 0])
        h = _most_probable(tables.T.row(a, h))
        actions.append(a)
        states.append(h)
    return Plan(np.array(actions, dtype=np.int64), np.array(states, dtype=np.int64), prob, start)


def without_transitions(model: ActionHMM, transitions) -> ActionHMM:
    """A copy of ``model`` that knows no successor of the given ``(state, action)`` pairs (their rows are 0).

    >>> from hmmmerge.gallery import cycle_world
    >>> m = without_transitions(cycle_world(4, n_colours=4).to_hmm(), [(0, 0)])
    >>> m.T[0].toarray()[0].tolist(), m.T[0].toarray()[1].tolist()
    ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0])
    """
    _check_model(model)
    pairs = [(int(h), int(a)) for h, a in transitions]
    for h, a in pairs:
        if not (0 <= h < model.n_states and 0 <= a < model.n_actions):
            raise ValueError(f"transition ({h}, {a}) is not a (state, action) of the model "
                             f"({model.n_states} states, {model.n_actions} actions)")
    if model.is_sparse:
        mats = [m.tolil(copy=True) for m in model.T]
        for h, a in pairs:
            mats[a][h, :] = 0
        T = [sp.csr_matrix(m) for m in mats]
        for m in T:
            m.eliminate_zeros()
    else:
        T = model.T.copy()
        for h, a in pairs:
            T[a, h, :] = 0.0
    return ActionHMM(T, model.E, model.B)


# --------------------------------------------------------------------------- the true world
def distances_to(env: Environment, targets) -> np.ndarray:
    """Fewest moves from every true state to any of ``targets`` (state indices); ``inf`` if none is reachable.

    In a stochastic world, along moves of positive probability (the shortest path if every move goes well).

    >>> from hmmmerge.gallery import cycle_world
    >>> distances_to(cycle_world(5, n_colours=5), [0]).tolist()
    [0.0, 1.0, 2.0, 2.0, 1.0]
    """
    targets = np.unique(np.asarray(targets, dtype=np.int64).ravel())
    S = env.n_states
    if targets.size and (targets.min() < 0 or targets.max() >= S):
        raise ValueError(f"targets must be state indices in 0..{S - 1}")
    t = env.transitions  # every move of positive probability (a slip included)
    src = np.repeat(np.arange(env.n_actions * S) % S, np.diff(t.indptr))
    back = sp.csr_matrix((np.ones(len(src)), (t.indices, src)), shape=(S, S))  # v -> states u that can move to v
    dist = np.full(S, np.inf)
    dist[targets] = 0.0
    frontier, k = targets, 0
    while frontier.size:  # breadth-first from all targets at once, along reversed moves
        k += 1
        nb = np.unique(back[frontier].indices)
        frontier = nb[np.isinf(dist[nb])]
        dist[frontier] = k
    return dist


def block_passage(env: Environment, u, v) -> Environment:
    """A copy of ``env`` where the moves between nodes ``u`` and ``v`` (both ways) stay in place.

    As a wall put between two cells after learning (CSCG's detours).

    >>> from hmmmerge.gallery import cycle_world
    >>> block_passage(cycle_world(4, n_colours=4), 0, 1).next_state.tolist()
    [[0, 2, 3, 0], [3, 1, 1, 2]]
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    for node in (u, v):
        if node not in env.index:
            raise ValueError(f"node {node!r} is not a state of the world")
    i, j = env.index[u], env.index[v]
    if i == j:
        raise ValueError(f"{u!r} and {v!r} are the same state: nothing to block")
    S, A = env.n_states, env.n_actions
    t = env.transitions
    rows = np.repeat(np.arange(A * S), np.diff(t.indptr))
    cols = t.indices.copy()
    into = ((rows % S == i) & (cols == j)) | ((rows % S == j) & (cols == i))
    if not into.any():
        raise ValueError(f"no move joins {u!r} and {v!r}: nothing to block")
    cols[into] = rows[into] % S  # the move stays in place
    if env._transitions is None:
        ns = cols.reshape(A, S)
        return Environment._from_tables(env.nodes, env.obs, ns, env.start, env.n_obs, f"blocked {u!r}-{v!r}",
                                        obs_dist=env._obs_dist, obs_noise=env.obs_noise)
    from .environment import Transitions, _most_likely

    m = sp.csr_matrix((t.probs, (rows, cols)), shape=(A * S, S))  # duplicates (a slip into the wall) summed
    m.sum_duplicates()
    m.sort_indices()
    table = Transitions(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data.astype(np.float64))
    return Environment._from_tables(env.nodes, env.obs, _most_likely(table, S, A), env.start, env.n_obs,
                                    f"blocked {u!r}-{v!r}", transitions=table, obs_dist=env._obs_dist,
                                    obs_noise=env.obs_noise)


def _world_step(env: Environment, s: int, a: int, rng) -> int:
    """The true successor of ``s`` under ``a`` (drawn in a world whose moves can slip)."""
    if env.deterministic_moves:
        return int(env.next_state[a, s])
    return int(env._sample_successors(np.array([s]), np.array([a]), rng.random(1))[0])


def _observe(env: Environment, s: int, rng) -> int:
    """What the agent sees in true state ``s`` (drawn in a world with noisy views)."""
    if env._obs_dist is None and env.obs_noise == 0:
        return int(env.obs[s])
    return int(env._sample_observations(np.array([s]), rng)[0])


# --------------------------------------------------------------------------- navigation
@dataclass(frozen=True)
class NavigationResult:
    """Output of :func:`navigate`: scores over start/goal pairs, and the pairs themselves.

    Attributes
    ----------
    success_rate : share of pairs where the goal colour was reached within ``budget * shortest`` moves.
    path_ratio : mean over successes of moves taken / shortest path in the true world (NaN: no success).
    localisation_accuracy : share of steps from the ``warmup``-th move on whose most probable learned
        state stands for the true state.
    starts, goals, shortest, steps, success : per pair: the true state navigation started from, the goal
        observation, the true shortest path, the moves taken, whether the goal was reached in time.
    localisation_curve : (warmup + longest + 1,) localisation accuracy per step of an episode (NaN: no data).
    map_updates : transitions removed from the map online (``update_map=True``).
    paths : per pair, the true states visited from the navigation start (with ``keep_paths=True``).
    """

    success_rate: float
    path_ratio: float
    localisation_accuracy: float
    starts: np.ndarray
    goals: np.ndarray
    shortest: np.ndarray
    steps: np.ndarray
    success: np.ndarray
    localisation_curve: np.ndarray
    map_updates: int = 0
    paths: list | None = field(default=None, repr=False)

    @property
    def n_pairs(self) -> int:
        return len(self.goals)

    def as_dict(self) -> dict:
        """The scores as plain Python values (the per-pair arrays summarised), ready for JSON."""
        ok = self.success
        return {
            "success_rate": self.success_rate,
            "path_ratio": self.path_ratio,
            "localisation_accuracy": self.localisation_accuracy,
            "n_pairs": self.n_pairs,
            "mean_shortest": float(self.shortest.mean()) if self.n_pairs else float("nan"),
            "mean_steps_success": float(self.steps[ok].mean()) if ok.any() else float("nan"),
            "max_path_ratio": float((self.steps[ok] / self.shortest[ok]).max()) if ok.any() else float("nan"),
            "map_updates": self.map_updates,
        }


def occupancy(model: ActionHMM, n_iter: int = 200) -> np.ndarray:
    """How often a random walk in the map is in each state in the long run (from ``B``, uniform actions).

    The average of ``B P^t`` for ``t < n_iter``, with ``P`` the mean of the ``T[a]`` (rows without a
    successor lose their mass; each step is renormalised); the prior of :func:`navigate`'s random starts,
    so that states the map hardly uses (EM's spare clones) do not attract the belief.

    >>> from hmmmerge.gallery import cycle_world
    >>> occupancy(cycle_world(4, n_colours=4).to_hmm()).round(2).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    _check_model(model)
    check_int(n_iter, "n_iter", low=1)
    T = _transitions_of(model)
    p = model.B.copy()
    total = np.zeros_like(p)
    for _ in range(n_iter):
        total += p
        nxt = sum(T.predict(p, a) for a in range(model.n_actions))
        if nxt.sum() <= 0:
            break
        p = nxt / nxt.sum()
    return total / total.sum()


def _initial_belief(model: ActionHMM, o: int, prior=None) -> np.ndarray:
    """The belief on first seeing ``o``: ``prior`` (default uniform) times ``E[:, o]``, normalised; the
    states that emit ``o`` if the prior gives them no mass; uniform if none does."""
    E = model.E[:, o]
    for p in ((E if prior is None else prior * E), E):
        if p.sum() > 0:
            return p / p.sum()
    return np.full(model.n_states, 1.0 / model.n_states)


#: floats of value tables a navigation keeps for the goals it met (least recently used dropped first): 128 MB
_CACHE_FLOATS = 2**24


class _Navigator:
    """Belief tracking and belief-weighted action choice on one (possibly updated) map.

    The value tables of a goal are computed once and reused by every re-plan and every pair with that goal
    (within ``_CACHE_FLOATS``); a move's score is the predicted belief after it dotted with them.
    """

    def __init__(self, model: ActionHMM, horizon: int | None, tolerance: float = _TIE):
        self.horizon, self.tolerance = horizon, tolerance
        self.set_model(model)

    def set_model(self, model: ActionHMM) -> None:
        self.model = model
        self.T = _transitions_of(model)
        self.policy: dict[int, _ValueTables] = {}  # goal -> its value tables, least recently used first
        self.held = 0

    def predict(self, b: np.ndarray, a: int) -> np.ndarray:
        return self.T.predict(b, a)

    def update(self, b: np.ndarray, a: int, o: int) -> tuple[np.ndarray, float]:
        """The belief after move ``a`` and observation ``o``, and the probability the map gave ``o``.

        When it gave 0, the belief restarts from the states of the old belief that emit ``o`` (the move
        may have failed), else from every state that emits ``o``.
        """
        E = self.model.E[:, o]
        pred = self.predict(b, a)
        mass = pred.sum()
        post = pred * E
        total = post.sum()
        if total > 0:
            return post / total, float(total / mass)
        for prior in (b * E, E):
            if prior.sum() > 0:
                return prior / prior.sum(), 0.0
        return np.full(len(b), 1.0 / len(b)), 0.0

    def tables(self, goal: int, k: int) -> _ValueTables:
        """The goal's value tables, covering ``k`` moves (computed, or extended, when they do not)."""
        tables = self.policy.pop(goal, None)
        if tables is None or (tables.horizon < k and not tables.converged):
            if tables is not None:
                self.held -= tables.size
            g = self.model.E[:, goal].copy()
            tables = _ValueTables(self.model, g, max(k, 2 * tables.horizon if tables else k), self.T)
            self.held += tables.size
        self.policy[goal] = tables  # most recently used last
        while self.held > _CACHE_FLOATS and len(self.policy) > 1:
            self.held -= self.policy.pop(next(iter(self.policy))).size
        return tables

    def action(self, b: np.ndarray, goal: int, moves_left: int) -> int | None:
        """The move of largest belief-weighted ``Q`` (QMDP) with ``horizon`` moves (default: ``moves_left``)
        to go, or ``None`` if the map sees no way to ``goal``."""
        k = self.horizon or moves_left
        vs = self.tables(goal, k).targets(k)
        qs = np.stack([self.predict(b, a) for a in range(self.T.A)]) @ vs  # (A, 2): sum_h b_h (Q_k, sum Q_i)(h, a)
        q = qs[:, 0]
        if q.max() <= 0.0:
            return None
        return _best_action(q, qs[:, 1], self.tolerance)


def navigate(env: Environment, model: ActionHMM, n_pairs: int = 100, seed=0, *, correspondence=None,
             warmup: int = 10, budget: float = 2.0, horizon: int | None = None, start="random",
             update_map: bool = False, surprise: float = 1e-3, keep_paths: bool = False,
             pairs=None, goals=None, tolerance: float = 0.01) -> NavigationResult:
    """Navigate the true world ``env`` with the map ``model``, over ``n_pairs`` start/goal pairs.

    Each pair: the agent is put at a uniformly random true state (``start="random"``; belief: the map's
    states that emit what it sees, weighted by the map's long-run :func:`occupancy`) or at ``env.start``
    (``start="world"``; belief: the map's ``B``), makes ``warmup`` random moves to localise, then gets a
    goal: a colour, uniformly among those it is not in now and can reach in the true world.  It then
    moves by the map, re-planning after every observation (the move that maximises the belief-weighted
    probability of reaching the goal within ``horizon``, see :func:`plan`), until it stands on the goal
    colour or has made ``ceil(budget * shortest)`` moves.  When the map sees no way from the current
    belief it makes a random move.

    Parameters
    ----------
    env : the true world, deterministic or stochastic: moves are executed there (slipping as its moves do),
        views drawn as it shows them (noise included); the goal is reached in a state of the goal's colour
        (``env.obs``), the shortest path is along moves of positive probability.
    model : the map, an ActionHMM over the same observations and actions.
    n_pairs : start/goal pairs, >= 1.
    seed : int or Generator.  Starts, warm-up moves and goals come from one stream, moves made without a plan
        and the world's slips from another, so every map is given the same pairs.
    correspondence : a :class:`Correspondence` to score localisation with; by default estimated on 200
        random walks of 50 moves in ``env`` (seeded from ``seed``).
    warmup : random moves before the goal is given (localisation before it is not scored).
    budget : the goal must be reached within ``budget`` times the true shortest path (>= 1).
    horizon : planning horizon; by default the moves left in the pair's budget (the agent maximises the
        probability of arriving in time).
    tolerance : moves whose belief-weighted probability of arriving in time is within ``tolerance`` of the
        best are equally good, and the fastest of them is made (in [0, 1]).  On a map whose transitions
        leak a little probability everywhere (EM's pseudocount) the most probable route is often a
        detour by a hair; 0.01 trades at most 1% of that probability for speed.  A deterministic map
        (the oracle's, fold's) gives every move probability 0 or 1, so there it changes nothing.
    start : ``"random"``, ``"world"``, or state indices to draw the start from uniformly (as ``"random"``
        otherwise: e.g. the places the training walks visited).
    update_map : remove from the map a move that surprised the agent (an observation the map gave
        probability below ``surprise``) from a state it was sure of (belief >= 0.5); the next plans avoid it.
        Meant for worlds that changed (a blocked passage); in a world whose moves slip or views are noisy,
        the map should give those surprises their probability (else it will remove good moves).
    surprise : that threshold, in [0, 1).
    keep_paths : keep the true states visited by each navigation.
    goals : observations to draw the goals from (default: all); e.g. the views the training walks showed.
    pairs : optional ``(start state index, goal observation)`` pairs to use instead of random ones
        (``n_pairs`` is then ignored); the warm-up moves still come first (``warmup=0`` starts there).

    Returns
    -------
    NavigationResult

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> r = navigate(env, env.to_hmm(), n_pairs=20, seed=0)
    >>> r.success_rate, r.path_ratio, r.localisation_accuracy
    (1.0, 1.0, 1.0)
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    _check_model(model)
    if (model.n_obs, model.n_actions) != (env.n_obs, env.n_actions):
        raise ValueError(f"the map has {model.n_obs} observations and {model.n_actions} actions, the world "
                         f"{env.n_obs} and {env.n_actions}")
    if pairs is not None:
        pairs = [(check_int(a, "pair start", low=0, high=env.n_states - 1),
                  check_int(c, "pair goal", low=0, high=env.n_obs - 1)) for a, c in pairs]
        if not pairs:
            raise ValueError("pairs is empty")
        n_pairs = len(pairs)
    check_int(n_pairs, "n_pairs", low=1)
    check_int(warmup, "warmup", low=0)
    check_float(budget, "budget", low=1.0)
    check_float(surprise, "surprise", low=0.0, high=1.0)
    check_float(tolerance, "tolerance", low=0.0, high=1.0)
    horizon = None if horizon is None else check_int(horizon, "horizon", low=1)
    allowed = np.ones(env.n_obs, dtype=bool)
    if goals is not None:
        chosen = np.unique(np.asarray(goals).ravel())
        if chosen.dtype.kind not in "iu" or not chosen.size or chosen.min() < 0 or chosen.max() >= env.n_obs:
            raise ValueError(f"goals must be observations in 0..{env.n_obs - 1}")
        allowed[:] = False
        allowed[chosen] = True
    candidates = None
    if not isinstance(start, str):
        candidates = np.unique(np.asarray(start).ravel())
        if candidates.dtype.kind not in "iu" or not candidates.size or candidates.min() < 0 \
                or candidates.max() >= env.n_states:
            raise ValueError(f"start must be 'random', 'world' or state indices in 0..{env.n_states - 1}")
        start = "random"
    elif start not in ("random", "world"):
        raise ValueError(f"start must be 'random', 'world' or state indices, got {start!r}")
    rng = as_generator(seed)  # starts, warm-up moves and goals: the same pairs for every map
    walk_seed, move_seed = (int(x) for x in rng.integers(2**62, size=2))
    move_rng = np.random.default_rng(move_seed)  # moves made without a plan, the world's slips
    if correspondence is None:
        from .rollouts import random_walk

        correspondence = estimate_correspondence(model, random_walk(env, 200, 50, seed=walk_seed), env.n_states)
    elif not isinstance(correspondence, Correspondence) or correspondence.n_states != model.n_states:
        raise ValueError("correspondence must be a Correspondence of the model's states")
    corr = correspondence.states

    nav = _Navigator(model, horizon, max(float(tolerance), _TIE))
    prior = model.B if start == "world" and pairs is None else occupancy(model) + 1e-9 / model.n_states
    colours_at = [np.flatnonzero(env.obs == o) for o in range(env.n_obs)]
    dist_cache: dict[int, np.ndarray] = {}
    starts, goals, shortest, steps, success, paths = [], [], [], [], [], []
    hits = []  # per pair: localisation hit per step
    removed = 0
    for i in range(n_pairs):
        if candidates is not None:
            s = int(candidates[rng.integers(len(candidates))])
        else:
            s = int(rng.integers(env.n_states)) if start == "random" else env.start
        if pairs is not None:
            s = pairs[i][0]
        b = _initial_belief(nav.model, _observe(env, s, rng), prior)
        hit = [corr[_most_probable(b)] == s]
        for _ in range(warmup):
            a = int(rng.integers(env.n_actions))
            s = _world_step(env, s, a, rng)
            b, _ = nav.update(b, a, _observe(env, s, rng))
            hit.append(corr[_most_probable(b)] == s)
        for c in (np.flatnonzero(allowed) if pairs is None else [pairs[i][1]]):
            if c not in dist_cache:
                dist_cache[c] = distances_to(env, colours_at[c])
        o = int(env.obs[s])  # the true colour
        if pairs is not None:
            goal = pairs[i][1]
            if goal == o or not np.isfinite(dist_cache[goal][s]):
                raise ValueError(f"pair {i}: goal observation {goal} is seen at the start or unreachable "
                                 "in the true world")
        else:
            options = [c for c in range(env.n_obs) if allowed[c] and c != o and np.isfinite(dist_cache[c][s])]
            if not options:
                continue
            goal = int(options[rng.integers(len(options))])
        d = int(dist_cache[goal][s])
        limit = int(np.ceil(budget * d))
        starts.append(s)
        goals.append(goal)
        shortest.append(d)
        path = [s]
        taken = 0
        reached = False
        while taken < limit:
            a = nav.action(b, goal, limit - taken)
            if a is None:
                a = int(move_rng.integers(env.n_actions))
            before = b
            s = _world_step(env, s, a, move_rng)
            b, p_obs = nav.update(b, a, _observe(env, s, move_rng))
            taken += 1
            path.append(s)
            hit.append(corr[_most_probable(b)] == s)
            if update_map and p_obs < surprise:
                h = _most_probable(before)
                if before[h] >= 0.5 and (nav.model.T[a][h].sum() > 0):
                    nav.set_model(without_transitions(nav.model, [(h, a)]))
                    removed += 1
            if env.obs[s] == goal:  # in the goal's place (what it shows may be noise)
                reached = True
                break
        steps.append(taken)
        success.append(reached)
        hits.append(hit)
        if keep_paths:
            paths.append(path)

    success = np.array(success, dtype=bool)
    shortest = np.array(shortest, dtype=np.int64)
    steps = np.array(steps, dtype=np.int64)
    if not len(goals):
        raise ValueError("no pair had a reachable goal: the world has a single observation?")
    longest = max(len(h) for h in hits)
    curve_sum, curve_n = np.zeros(longest), np.zeros(longest)
    after = []
    for h in hits:
        curve_sum[:len(h)] += h
        curve_n[:len(h)] += 1
        after.extend(h[warmup:])
    curve = np.divide(curve_sum, curve_n, out=np.full(longest, np.nan), where=curve_n > 0)
    ratio = float((steps[success] / shortest[success]).mean()) if success.any() else float("nan")
    return NavigationResult(
        success_rate=float(success.mean()), path_ratio=ratio,
        localisation_accuracy=float(np.mean(after)) if after else float("nan"),
        starts=np.array(starts, dtype=np.int64), goals=np.array(goals, dtype=np.int64), shortest=shortest,
        steps=steps, success=success, localisation_curve=curve, map_updates=removed,
        paths=paths if keep_paths else None)
