"""Numba kernel of Algorithm 2 (successor features of many initial sets, :mod:`hmmmerge.successor`).

Imported lazily (numba takes about half a second to import).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def set_successor_features(next_state, emission, n_obs, set_ptr, set_idx, gamma, horizon, out_sf, out_depth):
    """Algorithm 2 for many initial sets (CSR ``set_ptr``/``set_idx``).

    Frontier ``PS <- union over actions of T(h, a), h in PS``; at depth ``l``
    the normalised observation counts of ``PS`` are added with weight
    ``gamma ** (l - 1)``.  ``out_depth`` gets the last depth whose frontier was
    not empty (the BFS "dies out" after it).
    """
    A, N = next_state.shape
    stamp = np.zeros(N, dtype=np.int64)
    clock = 0
    front = np.empty(N, dtype=np.int64)
    nxt = np.empty(N, dtype=np.int64)
    counts = np.zeros(n_obs)
    for s in range(set_ptr.shape[0] - 1):
        m = 0
        for k in range(set_ptr[s], set_ptr[s + 1]):
            front[m] = set_idx[k]
            m += 1
        weight = 1.0
        out_depth[s] = 0
        for depth in range(1, horizon + 1):
            clock += 1
            m2 = 0
            for q in range(m):
                h = front[q]
                for a in range(A):
                    j = next_state[a, h]
                    if j >= 0 and stamp[j] != clock:
                        stamp[j] = clock
                        nxt[m2] = j
                        m2 += 1
            if m2 == 0:
                break
            counts[:] = 0.0
            for q in range(m2):
                counts[emission[nxt[q]]] += 1.0
            for o in range(n_obs):
                out_sf[s, o] += weight * counts[o] / m2
            out_depth[s] = depth
            weight *= gamma
            for q in range(m2):
                front[q] = nxt[q]
            m = m2


@njit(cache=True)
def set_depth_counts(next_state, emission, set_ptr, set_idx, horizon, out, target):
    """Observation counts of Algorithm 2's breadth-first sets, per depth, for many initial sets.

    ``out[target[s], l - 1, o]`` (int, added to) counts the states emitting ``o`` at
    depth ``l`` from set ``s``; :func:`features_from_depth_counts` turns these counts into
    the successor features of :func:`set_successor_features`, bit for bit.  Only
    for Algorithm 1's memory, where every state has at most one incoming link
    (from an older state; :meth:`~hmmmerge.episodic.EpisodicMemory.from_state_dict`
    checks it): a state is then reached at one depth from at most one state of a
    set, so no visited marks are needed (the work is the size of the sets, not of
    level 1), and the counts of disjoint sets add up (what lets clusters keep them
    up to date).
    """
    front = np.empty(64, dtype=np.int64)
    nxt = np.empty(64, dtype=np.int64)
    for s in range(set_ptr.shape[0] - 1):
        front, nxt = add_depth_counts(next_state, emission, set_idx[set_ptr[s]:set_ptr[s + 1]], horizon,
                                      out[target[s]], front, nxt)


@njit(cache=True)
def add_depth_counts(next_state, emission, states, horizon, out, front, nxt):
    """Add the per-depth observation counts of one set ``states`` to ``out`` (horizon x n_obs), as
    :func:`set_depth_counts` does for each of its sets; ``front`` and ``nxt`` are work buffers,
    returned (grown if they were too small)."""
    A = next_state.shape[0]
    m = states.shape[0]
    if m > front.shape[0] or m * A > nxt.shape[0]:
        front, nxt = np.empty(2 * m * A, dtype=np.int64), np.empty(2 * m * A, dtype=np.int64)
    for q in range(m):
        front[q] = states[q]
    for depth in range(horizon):
        m2 = 0
        for q in range(m):
            h = front[q]
            for a in range(A):
                j = next_state[a, h]
                if j >= 0:
                    if m2 == nxt.shape[0]:
                        grown = np.empty(2 * m2, dtype=np.int64)
                        grown[:m2] = nxt[:m2]
                        nxt = grown
                    nxt[m2] = j
                    m2 += 1
        if m2 == 0:
            break
        if front.shape[0] < m2:
            front = np.empty(nxt.shape[0], dtype=np.int64)
        for q in range(m2):
            out[depth, emission[nxt[q]]] += 1
            front[q] = nxt[q]
        m = m2
    return front, nxt


@njit(cache=True)
def features_from_depth_counts(counts, rows, gamma, out_sf, out_depth):
    """Successor features and depths reached from per-depth counts (see :func:`set_depth_counts`) of
    rows ``rows`` of ``counts``, into ``out_sf[i]`` and ``out_depth[i]`` for ``rows[i]``.

    The same floating-point operations in the same order as
    :func:`set_successor_features`, so the results are identical.
    """
    horizon, n_obs = counts.shape[1], counts.shape[2]
    for s in range(rows.shape[0]):
        r = rows[s]
        weight = 1.0
        out_depth[s] = 0
        for depth in range(horizon):
            m2 = 0
            for o in range(n_obs):
                m2 += counts[r, depth, o]
            if m2 == 0:
                break
            for o in range(n_obs):
                out_sf[s, o] += weight * float(counts[r, depth, o]) / m2
            out_depth[s] = depth + 1
            weight *= gamma


@njit(cache=True)
def add_new_descendants(new_states, parent, parent_action, next_state, emission, cluster_of, skip, valid,
                        counts):
    """Add each new state to the per-depth counts of the clusters of its ancestors.

    A new state ``w`` lies at depth ``d`` below its ``d``-th ancestor along
    links that still exist (in-degree is at most one); for ``d`` up to the
    horizon (``counts.shape[1]``) and ancestors in a cluster whose counts are
    ``valid`` and that are not in ``skip`` (a sorted array of states whose
    counts are added whole, because they joined a cluster after ``w`` was
    created), ``counts[cluster, d - 1, emission[w]] += 1``.
    """
    horizon = counts.shape[1]
    for q in range(new_states.shape[0]):
        w = new_states[q]
        o = emission[w]
        x = w
        for d in range(horizon):
            p = parent[x]
            if p < 0 or next_state[parent_action[x], p] != x:
                break
            c = cluster_of[p]
            if c >= 0 and valid[c] and not _contains(skip, p):
                counts[c, d, o] += 1
            x = p


@njit(cache=True)
def position(sorted_values, x):
    """Index of ``x`` in ``sorted_values`` (increasing), -1 if absent: bisection (``np.searchsorted`` would
    load numba's array-math module, and with it ``scipy.linalg``, when a process first loads a kernel)."""
    lo, hi = 0, sorted_values.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < sorted_values.shape[0] and sorted_values[lo] == x else -1


@njit(cache=True)
def _contains(sorted_values, x):
    """Whether ``x`` is in ``sorted_values`` (increasing)."""
    return position(sorted_values, x) >= 0
