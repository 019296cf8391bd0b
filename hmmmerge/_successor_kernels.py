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
