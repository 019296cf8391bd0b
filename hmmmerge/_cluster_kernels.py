"""Numba kernels of the cluster bookkeeping (:mod:`hmmmerge.clusters`, :mod:`hmmmerge.merging`).

One pass over the level-1 states each, where numpy needed several passes and a sort.
Imported lazily (numba takes about half a second to import).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def renumber(assignment, roots):
    """In place, ``assignment[i] <- new id of roots[assignment[i]]`` with the used roots numbered
    ``0..k-1`` in increasing order; returns ``(present, new_id, k)`` (``present[c]``: old id ``c``
    had a state; ``new_id[r]``: the new id of root ``r``).  ``roots`` must cover every id used."""
    n = assignment.shape[0]
    k_old = 0
    for i in range(n):
        if assignment[i] + 1 > k_old:
            k_old = assignment[i] + 1
    present = np.zeros(k_old, dtype=np.bool_)
    for i in range(n):
        if assignment[i] >= 0:
            present[assignment[i]] = True
    k_root = 0
    for c in range(k_old):
        if present[c] and roots[c] + 1 > k_root:
            k_root = roots[c] + 1
    new_id = np.full(k_root, -1, dtype=np.int64)
    for c in range(k_old):
        if present[c]:
            new_id[roots[c]] = 0
    k = 0
    for r in range(k_root):
        if new_id[r] == 0:
            new_id[r] = k
            k += 1
    for i in range(n):
        if assignment[i] >= 0:
            assignment[i] = new_id[roots[assignment[i]]]
    return present, new_id, k


@njit(cache=True)
def member_lists(states, assignment, position, m):
    """CSR ``(ptr, idx)`` of those of ``states`` (increasing) whose cluster ``c`` has ``position[c] >= 0``,
    grouped by position and in increasing state order within a group."""
    ptr = np.zeros(m + 1, dtype=np.int64)
    for q in range(states.shape[0]):
        c = assignment[states[q]]
        if c >= 0 and position[c] >= 0:
            ptr[position[c] + 1] += 1
    for p in range(m):
        ptr[p + 1] += ptr[p]
    fill = ptr[:-1].copy()
    idx = np.empty(ptr[m], dtype=np.int64)
    for q in range(states.shape[0]):
        i = states[q]
        c = assignment[i]
        if c >= 0 and position[c] >= 0:
            idx[fill[position[c]]] = i
            fill[position[c]] += 1
    return ptr, idx


@njit(cache=True)
def label_scan(assignment, labels, n):
    """``(connected, largest label)`` over the connected states ``< n``; the label is -1 if one of
    them has no true label (-1)."""
    connected = 0
    largest = -1
    for i in range(n):
        if assignment[i] >= 0:
            connected += 1
            if labels[i] < 0:
                return connected, -1
            if labels[i] > largest:
                largest = labels[i]
    return connected, largest


@njit(cache=True)
def cluster_sizes_and_top(assignment, labels, n, k, n_labels):
    """Per cluster ``0..k-1``: its number of states and the count of its most common label (one pass,
    a dense k x n_labels table)."""
    table = np.zeros((k, n_labels), dtype=np.int64)
    sizes = np.zeros(k, dtype=np.int64)
    for i in range(n):
        c = assignment[i]
        if c >= 0:
            table[c, labels[i]] += 1
            sizes[c] += 1
    top = np.zeros(k, dtype=np.int64)
    for c in range(k):
        for lab in range(n_labels):
            if table[c, lab] > top[c]:
                top[c] = table[c, lab]
    return sizes, top
