"""Merging a clone HMM's duplicate clones, and splitting a clone at the visits that contradict it.

EM on a clone HMM (:class:`~hmmmerge.baselines.em.CloneHMM`) often spreads one
place over several clones of its view, each of which has tried only some of the
moves: a move never tried from the clone the agent is in sends the map's belief
everywhere.  And it can leave a rarely visited place inside the clone of a busy
place of the same view.  Two operations on the decoded clone graph (transition
counts of a decoded path, or expected counts) repair both:

* :func:`merge_duplicates` -- the clones that stand for one place become one,
  as when minimising an incomplete automaton.  A move is *tried* from a clone
  when its counts reach ``min_count``; its *usual* successor is the clone of
  largest count among those of the most counted next view.  Two clones of one
  view are compatible when, on every move tried from both, their usual
  successors show the same view and are compatible in turn (recursively); an
  untried move is a wildcard.  Aliased places (one view, different places)
  are kept apart as soon as their futures differ on a tried move.  Greedily,
  busiest clone first: each clone joins the compatible earlier class that
  agrees with it on the most tried moves (none when two tie), else starts a
  class.  A merged class pools the moves its clones tried.
* :func:`odd_visits` -- the visits of a decoded path after which the next view
  is not the usual one for that clone and move; in a world whose moves are
  deterministic they are visits of another place, and moving them to a clone
  of their own (``CloneHMM(merge_rounds=...)``) lets EM re-learn it.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_float

__all__ = ["merge_duplicates", "odd_visits"]


def _check_counts(counts, state_obs) -> tuple[np.ndarray, np.ndarray]:
    C = np.asarray(counts, dtype=np.float64)
    view = np.asarray(state_obs)
    if C.ndim != 3 or C.shape[1] != C.shape[2]:
        raise ValueError(f"counts must be an (A, H, H) array, got shape {C.shape}")
    if not np.isfinite(C).all() or (C < 0).any():
        raise ValueError("counts must be finite and >= 0")
    if view.shape != (C.shape[1],) or view.dtype.kind not in "iu" or (view.size and view.min() < 0):
        raise ValueError(f"state_obs must hold one observation index >= 0 per state ({C.shape[1]}), "
                         f"got shape {view.shape}, dtype {view.dtype}")
    return C, view.astype(np.int64)


class _Classes:
    """Union-find over states with the pooled successor counts of each class (per action: successor -> count)."""

    def __init__(self, C: np.ndarray, view: np.ndarray, used: np.ndarray, min_count: float):
        self.view, self.min_count = view, min_count
        self.parent = np.arange(C.shape[1])
        self.succ = {}
        sub = C[:, used][:, :, used]  # moves into states the counts hardly use are left out
        for i, h in enumerate(used):
            self.succ[int(h)] = [{int(used[j]): float(sub[a, i, j]) for j in np.flatnonzero(sub[a, i] > 0)}
                                 for a in range(C.shape[0])]

    def find(self, x: int) -> int:
        # no path compression: a tentative merge is undone by resetting the parents it set
        while self.parent[x] != x:
            x = int(self.parent[x])
        return int(x)

    def usual(self, x: int, a: int) -> int | None:
        """The usual successor class of class ``x`` under ``a``; None if ``a`` was not tried from ``x``."""
        by_class: dict[int, float] = {}
        for j, c in self.succ[x][a].items():
            j = self.find(j)
            by_class[j] = by_class.get(j, 0.0) + c
        if sum(by_class.values()) < self.min_count:
            return None
        by_view: dict[int, float] = {}
        for j, c in by_class.items():
            by_view[self.view[j]] = by_view.get(self.view[j], 0.0) + c
        o = min(by_view, key=lambda v: (-by_view[v], v))
        return min((j for j in by_class if self.view[j] == o), key=lambda j: (-by_class[j], j))

    def try_merge(self, x: int, y: int) -> tuple[bool, int, list]:
        """Merge classes ``x`` and ``y`` and, recursively, their usual successors on the moves both tried.

        Returns (compatible, moves that agreed, undo log); the merges stay done until :meth:`undo`.
        """
        log, stack, agreed = [], [(x, y)], 0
        while stack:
            u, v = (self.find(z) for z in stack.pop())
            if u == v:
                continue
            if self.view[u] != self.view[v]:
                return False, agreed, log
            pairs = []
            for a in range(len(self.succ[u])):
                su, sv = self.usual(u, a), self.usual(v, a)
                if su is not None and sv is not None:
                    if self.view[su] != self.view[sv]:
                        return False, agreed, log
                    agreed += 1
                    pairs.append((su, sv))
            if u > v:
                u, v = v, u
            log.append((v, u, self.succ[u]))
            self.parent[v] = u
            self.succ[u] = [dict(su) for su in self.succ[u]]
            for a, sv in enumerate(self.succ[v]):
                for j, c in sv.items():
                    self.succ[u][a][j] = self.succ[u][a].get(j, 0.0) + c
            stack.extend(pairs)
        return True, agreed, log

    def undo(self, log) -> None:
        for v, u, saved in reversed(log):
            self.parent[v] = v
            self.succ[u] = saved


def merge_duplicates(counts, state_obs, min_count: float = 0.5, initial=None) -> np.ndarray:
    """The classes of states that stand for one place: labels (H,), ``-1`` for states the counts never use.

    ``counts[a, i, j]``: how often move ``a`` led from state ``i`` to state ``j``
    (a decoded path's counts, or EM's expected counts); ``state_obs[i]``: the view
    state ``i`` shows.  A state is used when its counts in, out and ``initial``
    (episode starts, (H,)) add up to ``min_count``; a move is tried from a class
    when its counts do.  Labels number the classes 0..K-1 by their lowest state.
    See the module docstring for the compatibility test.

    Examples
    --------
    A 2-cycle of views 0, 1 (move 0 goes round) whose place of view 0 is spread over
    states 0 and 2; state 2 tried only move 0.  State 3 also shows view 0 but
    move 0 from it stays there: another place.

    >>> import numpy as np
    >>> C = np.zeros((1, 4, 4))
    >>> C[0, 0, 1] = C[0, 1, 0] = 5; C[0, 1, 2] = C[0, 2, 1] = 2; C[0, 3, 3] = 4
    >>> merge_duplicates(C, [0, 1, 0, 0]).tolist()
    [0, 1, 0, 2]
    """
    C, view = _check_counts(counts, state_obs)
    min_count = check_float(min_count, "min_count", low=0.0, low_open=True)
    H = C.shape[1]
    start = np.zeros(H) if initial is None else np.asarray(initial, dtype=np.float64)
    if start.shape != (H,) or not np.isfinite(start).all() or (start < 0).any():
        raise ValueError(f"initial must be {H} finite counts >= 0, got shape {start.shape}")
    mass = C.sum(axis=(0, 2)) + C.sum(axis=(0, 1)) + start
    used = np.flatnonzero(mass >= min_count)
    classes = _Classes(C, view, used, min_count)
    reds: dict[int, list[int]] = {}  # view -> states that started a class
    for x in used[np.argsort(-mass[used], kind="stable")]:
        x = int(x)
        fits = []
        for r in reds.get(int(view[x]), []):
            ok, agreed, log = classes.try_merge(r, x)
            classes.undo(log)
            if ok:
                fits.append((agreed, r))
        fits.sort(key=lambda f: (-f[0], f[1]))
        if fits and (len(fits) == 1 or fits[0][0] > fits[1][0]):
            ok, _, _ = classes.try_merge(fits[0][1], x)
            assert ok
        else:
            reds.setdefault(int(view[x]), []).append(x)
    roots = np.array([classes.find(h) for h in range(H)])
    labels = np.full(H, -1, dtype=np.int64)
    is_used = np.zeros(H, dtype=bool)
    is_used[used] = True
    keep = np.unique(roots[is_used])
    labels[is_used] = np.searchsorted(keep, roots[is_used])
    return labels


def odd_visits(path, obs, acts, n_states: int, significance: float | None = None) -> np.ndarray:
    """The steps of a decoded path after which the next view is not the usual one for that state and move.

    ``path``, ``obs``, ``acts``: one flat sequence (``acts[t] = -1`` starts an
    episode; ``acts[t]`` is the move that led to step ``t``).  For every state
    ``h`` and move ``a``, the usual next view is the one most often seen after
    ``h`` and ``a`` along the path (the lowest of ties); a visit of ``h``
    followed by ``a`` and another view is odd.  Returns their indices.

    ``significance``: keep only the odd visits of the (state, move) pairs that
    have more of them than the world's own rate of odd views explains: with
    ``r`` the share of odd visits over the whole path, a pair with ``m`` odd
    visits among ``n`` is kept when ``P(Binomial(n, r) >= m) < significance``.
    In a world whose moves are deterministic ``r`` is tiny and one odd visit
    is enough; where moves slip, odd visits at the slip rate are not kept.

    >>> odd_visits([0, 1, 0, 1, 0, 2], [0, 1, 0, 1, 0, 2], [-1, 0, 0, 0, 0, 0], 3).tolist()
    [4]
    """
    path, obs, acts = (np.asarray(x, dtype=np.int64) for x in (path, obs, acts))
    if not (path.shape == obs.shape == acts.shape) or path.ndim != 1:
        raise ValueError(f"path, obs and acts must be 1-D of one length, got {path.shape}, {obs.shape}, "
                         f"{acts.shape}")
    if path.size and (path.min() < 0 or path.max() >= n_states):
        raise ValueError(f"path holds a state outside 0..{n_states - 1}")
    if significance is not None:
        significance = check_float(significance, "significance", low=0.0, high=1.0, low_open=True)
    t = np.flatnonzero(np.r_[acts[1:] >= 0, False])
    if not t.size:
        return t
    key = path[t] * (int(acts.max()) + 1) + acts[t + 1]
    n_obs = int(obs.max()) + 1
    counts = np.zeros((int(key.max()) + 1, n_obs))
    np.add.at(counts, (key, obs[t + 1]), 1)
    odd = obs[t + 1] != counts.argmax(axis=1)[key]
    if significance is not None and odd.any():
        from scipy.stats import binom

        n = counts.sum(axis=1)
        m = n - counts.max(axis=1)
        surprising = binom.sf(m - 1, n, odd.mean()) < significance
        odd &= surprising[key]
    return t[odd]
