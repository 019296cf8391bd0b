"""Numba kernel of :mod:`hmmmerge.planning`: value-iteration sweeps on a sparse map.

One sweep (``g[h] = P(goal | h)``, rows ``a*H + h`` of the stacked transitions, each the
entries above the row's floor plus ``floor[a*H + h]`` times every state)::

    Q(h, a) = sum_j S[a*H + h, j] V(j) + floor[a*H + h] sum_j V(j)
    V'(h)   = g(h) + (1 - g(h)) max_a Q(h, a)

A sweep costs the entries of ``S`` plus ``A H``: on EM's 1,080-state FourRooms map about
10,000 operations, where numpy's calls cost more than the arithmetic.  The stopping rule is
:class:`hmmmerge.planning._ValueTables`'.

Imported lazily (numba is slow to import).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def sweeps(indptr, indices, data, floor, g, A, V, out):
    """Value-iteration sweeps from ``V`` (H,), written to the rows of ``out`` (K, H) until the values stop
    changing or ``out`` is full; returns ``(rows written, stopped)``.

    ``floor``: (A*H,) or empty (no floor).  Stops, as ``_ValueTables`` does, when a sweep changes no value by
    more than 1e-12 and no state starts to reach the goal: before writing the sweep when it changed nothing
    at all, after writing it otherwise.
    """
    H = V.shape[0]
    prev = V.copy()
    nxt = np.empty(H)
    has_floor = floor.shape[0] > 0
    for k in range(out.shape[0]):
        total = 0.0
        if has_floor:
            for j in range(H):
                total += prev[j]
        for h in range(H):
            best = -np.inf
            for a in range(A):
                r = a * H + h
                acc = 0.0
                for p in range(indptr[r], indptr[r + 1]):
                    acc += data[p] * prev[indices[p]]
                if has_floor:
                    acc += floor[r] * total
                if acc > best:
                    best = acc
            nxt[h] = g[h] + (1.0 - g[h]) * best
        grew = False
        same = True
        change = 0.0
        for h in range(H):
            if (nxt[h] > 0.0) != (prev[h] > 0.0):
                grew = True
            if nxt[h] != prev[h]:
                same = False
            d = abs(nxt[h] - prev[h])
            if d > change:
                change = d
        done = change <= 1e-12
        if done and not grew and same:
            return k, True
        out[k] = nxt
        if done and not grew:
            return k + 1, True
        prev[:] = nxt
    return out.shape[0], False
