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
    k_old = roots.shape[0]
    present = np.zeros(k_old, dtype=np.bool_)
    for i in range(n):
        if assignment[i] >= 0:
            if assignment[i] >= k_old:
                raise ValueError("renumber: a cluster id has no root")
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
def label_table(assignment, labels, n, k, n_labels):
    """Counts of true labels per cluster (a dense k x n_labels table) over the connected states ``< n``,
    and the number of connected states without a label (-1)."""
    table = np.zeros((k, n_labels), dtype=np.int64)
    unlabelled = 0
    for i in range(n):
        c = assignment[i]
        if c >= 0:
            if labels[i] < 0:
                unlabelled += 1
            else:
                table[c, labels[i]] += 1
    return table, unlabelled


@njit(cache=True)
def label_table_after_sleep(table, relabel, k_ext, k_new, moved, was, new, labels):
    """:func:`label_table` after a sleep, from the table before it and the changes of C (see
    :class:`~hmmmerge.clusters.Changes`); returns the table and the change of the unlabelled count."""
    out = np.zeros((k_ext, table.shape[1]), dtype=np.int64)
    for c in range(table.shape[0]):
        for lab in range(table.shape[1]):
            out[relabel[c], lab] += table[c, lab]
    unlabelled = 0
    for q in range(moved.shape[0]):
        u = moved[q]
        lab = labels[u]
        if lab < 0:
            if was[q] < 0:
                unlabelled += 1
            continue
        if was[q] >= 0:
            out[was[q], lab] -= 1
        out[new[u], lab] += 1
    for c in range(k_new, k_ext):
        for lab in range(table.shape[1]):
            if out[c, lab] != 0:
                raise ValueError("label counts after a sleep: an emptied cluster kept states")
    return out[:k_new], unlabelled


@njit(cache=True)
def journal_changes(states, was, assignment, stamp, epoch, relabel, full, n_codes, k):
    """The moves of a change journal (see :meth:`hmmmerge.clusters.Clusters.changes`), in O(entries + k).

    ``states``/``was``: the journal in order (old clusters as codes: ids, -1 not
    connected, ``-2 - g`` ghosts, ``n_codes`` ghosts); a state's first entry
    holds its old cluster (``stamp``: per-state marks, ``epoch`` new each call).
    An old cluster none of whose states escaped the journal (a ghost, or
    ``full``: rewritten whole) is relabelled to where its states went (a
    Boyer-Moore majority vote).  Returns ``(relabel, n_ghosts, moved, was, ok)``
    with moved states in journal order.
    """
    offset = n_codes + 1  # code x is at x + offset
    size = offset + k
    partial = np.zeros(size, dtype=np.bool_)  # codes holding states never logged
    for c in range(relabel.shape[0]):
        if not full[c] and relabel[c] >= 0:
            partial[relabel[c] + offset] = True
    first = np.zeros(states.shape[0], dtype=np.bool_)
    vote = np.full(size, -1, dtype=np.int64)
    votes = np.zeros(size, dtype=np.int64)
    for q in range(states.shape[0]):
        u = states[q]
        if stamp[u] == epoch:
            continue
        stamp[u] = epoch
        first[q] = True
        x, now = was[q], assignment[u]
        if x == -1 or now < 0 or partial[x + offset]:
            continue
        i = x + offset
        if votes[i] == 0:
            vote[i], votes[i] = now, 1
        elif vote[i] == now:
            votes[i] += 1
        else:
            votes[i] -= 1
    target = np.empty(size, dtype=np.int64)
    ghosts = 0
    for i in range(size):
        x = i - offset
        if vote[i] >= 0 and x != -1:
            target[i] = vote[i]
        elif x <= -2:  # an emptied cluster whose states all lost their clusters
            target[i] = k + ghosts
            ghosts += 1
        else:
            target[i] = x
    out_relabel = np.empty(relabel.shape[0], dtype=np.int64)
    for c in range(relabel.shape[0]):
        out_relabel[c] = target[relabel[c] + offset]
    ok = True
    count = 0
    for q in range(states.shape[0]):
        if first[q]:
            w, now = target[was[q] + offset], assignment[states[q]]
            if now < 0:
                first[q] = False
                if w >= 0:
                    ok = False
            elif now == w:
                first[q] = False
            else:
                count += 1
    moved = np.empty(count, dtype=np.int64)
    moved_was = np.empty(count, dtype=np.int64)
    p = 0
    for q in range(states.shape[0]):
        if first[q]:
            moved[p], moved_was[p] = states[q], target[was[q] + offset]
            p += 1
    return out_relabel, ghosts, moved, moved_was, ok
