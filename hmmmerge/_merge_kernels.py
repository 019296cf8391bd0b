"""Numba kernels of one merge iteration (:mod:`hmmmerge.merging`): the clusters' kept counts brought
up to date, and a list of merge pairs applied with splits, each in one call.

Imported lazily (numba takes about half a second to import).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._cluster_kernels import member_lists
from ._successor_kernels import add_depth_counts


@njit(cache=True)
def members_and_counts(states, assignment, ids, next_state, emission, rows, valid, counts):
    """CSR ``(ptr, idx)`` of the members among ``states`` (increasing) of clusters ``ids`` (see
    :func:`hmmmerge.merging.cluster_sets`), and the kept counts brought up to date: for each cluster
    ``ids[p]`` whose row ``rows[p]`` of ``counts`` is not ``valid``, ``counts[rows[p]]`` <- its per-depth
    observation counts (see :func:`~hmmmerge._successor_kernels.set_depth_counts`), now valid."""
    top = 0
    for p in range(ids.shape[0]):
        top = max(top, ids[p] + 1)
    for q in range(states.shape[0]):
        top = max(top, assignment[states[q]] + 1)
    position = np.full(top, -1, dtype=np.int64)
    for p in range(ids.shape[0]):
        position[ids[p]] = p
    ptr, idx = member_lists(states, assignment, position, ids.shape[0])
    front = np.empty(64, dtype=np.int64)
    nxt = np.empty(64, dtype=np.int64)
    for p in range(ids.shape[0]):
        r = rows[p]
        if valid[r]:
            continue
        counts[r] = 0
        front, nxt = add_depth_counts(next_state, emission, idx[ptr[p]:ptr[p + 1]], counts.shape[1], counts[r],
                                      front, nxt)
        valid[r] = True
    return ptr, idx


@njit(cache=True)
def split_mask(next_state, emission, n_obs, states, agree):
    """``agree[q]``: whether ``states[q]`` agrees with the majority on one action (see
    :func:`hmmmerge.merging.split_by_next_observation`, which this computes)."""
    A = next_state.shape[0]
    m = states.shape[0]
    action, fewest = 0, m + 1
    for a in range(A):
        unknown = 0
        for q in range(m):
            if next_state[a, states[q]] < 0:
                unknown += 1
        if unknown < fewest:
            action, fewest = a, unknown
    agree[:m] = True
    if fewest == m:  # no known successor: everyone agrees
        return
    seen = np.zeros(n_obs, dtype=np.int64)
    for q in range(m):
        j = next_state[action, states[q]]
        if j >= 0:
            seen[emission[j]] += 1
    majority = 0
    for o in range(n_obs):
        if seen[o] > seen[majority]:
            majority = o
    for q in range(m):
        j = next_state[action, states[q]]
        if j >= 0 and emission[j] != majority:
            agree[q] = False


@njit(cache=True)
def merge_pairs_with_split(next_state, emission, n_obs, ids, ptr, idx, pairs, track, valid, counts):
    """Merge pairs with splits (:func:`hmmmerge.merging.merge_with_split`) worked out in one pass.

    The clusters are ``ids`` with members CSR ``ptr``/``idx``; ``pairs`` (P x 2)
    are positions in ``ids`` (probe, candidate), applied in order, a candidate
    emptied by a merge standing for the probe that absorbed it.  With
    ``track``, the kept per-depth counts (``valid``, ``counts``, rows by
    cluster id; read only) are followed: a touched cluster's counts are the sum
    of the pooled rows minus a fresh count of the states split back off, known
    if both rows it came from were valid.  Returns ``(moved, target, touched,
    size, known, rows)``: the states that change cluster and their new cluster
    ids, the touched positions, every position's size, and the touched
    clusters whose counts are known with those counts (``rows``, in position order).
    """
    m = ids.shape[0]
    link = np.full(idx.shape[0], -1, dtype=np.int64)  # member lists as linked slots of idx
    origin = np.empty(idx.shape[0], dtype=np.int64)  # the position each slot started in
    head = np.full(m, -1, dtype=np.int64)
    tail = np.full(m, -1, dtype=np.int64)
    size = np.zeros(m, dtype=np.int64)
    for p in range(m):
        origin[ptr[p]:ptr[p + 1]] = p
        if ptr[p + 1] > ptr[p]:
            head[p], tail[p], size[p] = ptr[p], ptr[p + 1] - 1, ptr[p + 1] - ptr[p]
            for j in range(ptr[p], ptr[p + 1] - 1):
                link[j] = j + 1
    absorbed = np.full(m, -1, dtype=np.int64)
    touched = np.zeros(m, dtype=np.bool_)
    status = np.zeros(m, dtype=np.int64)  # 0: row not read yet, 1: row in `rows`, 2: unknown
    slot = np.full(m, -1, dtype=np.int64)
    horizon, n_cols = counts.shape[1], counts.shape[2]
    rows = np.zeros((min(2 * pairs.shape[0], m) if track else 0, horizon, n_cols), dtype=np.int64)
    fresh = np.zeros((horizon, n_cols), dtype=np.int64)
    used = 0
    slots = np.empty(idx.shape[0], dtype=np.int64)
    pooled = np.empty(idx.shape[0], dtype=np.int64)
    agree = np.empty(idx.shape[0], dtype=np.bool_)
    front = np.empty(64, dtype=np.int64)
    nxt = np.empty(64, dtype=np.int64)
    for t in range(pairs.shape[0]):
        probe, cand = pairs[t, 0], pairs[t, 1]
        while absorbed[probe] >= 0:
            probe = absorbed[probe]
        while absorbed[cand] >= 0:
            cand = absorbed[cand]
        if probe == cand:
            continue
        q = 0
        for c in (probe, cand):
            j = head[c]
            while j >= 0:
                slots[q], pooled[q] = j, idx[j]
                q += 1
                j = link[j]
        split_mask(next_state, emission, n_obs, pooled[:q], agree)
        head[probe] = head[cand] = -1
        size[probe] = size[cand] = 0
        for r in range(q):
            c = probe if agree[r] else cand
            j = slots[r]
            if head[c] < 0:
                head[c] = j
            else:
                link[tail[c]] = j
            tail[c] = j
            link[j] = -1
            size[c] += 1
        touched[probe] = touched[cand] = True
        if size[cand] == 0:
            absorbed[cand] = probe
        if not track:
            continue
        for c in (probe, cand):
            if status[c] == 0:
                if valid[ids[c]]:
                    slot[c] = used
                    rows[used] = counts[ids[c]]
                    used += 1
                    status[c] = 1
                else:
                    status[c] = 2
        if status[probe] == 1 and status[cand] == 1:
            fresh[:] = 0
            q = 0
            j = head[cand]
            while j >= 0:
                pooled[q] = idx[j]
                q += 1
                j = link[j]
            front, nxt = add_depth_counts(next_state, emission, pooled[:q], horizon, fresh, front, nxt)
            x, y = rows[slot[probe]], rows[slot[cand]]
            for d in range(horizon):
                for o in range(n_cols):
                    x[d, o] += y[d, o] - fresh[d, o]
                    y[d, o] = fresh[d, o]
        else:
            status[probe] = status[cand] = 2
    n_moved = 0
    for p in range(m):
        j = head[p] if touched[p] else -1
        while j >= 0:
            if origin[j] != p:
                pooled[n_moved], slots[n_moved] = idx[j], ids[p]
                n_moved += 1
            j = link[j]
    known = touched & (status == 1) & (size > 0)
    n_known = 0
    for p in range(m):
        n_known += known[p]
    out = np.empty((n_known, horizon, n_cols), dtype=np.int64)
    q = 0
    for p in range(m):
        if known[p]:
            out[q] = rows[slot[p]]
            q += 1
    return pooled[:n_moved].copy(), slots[:n_moved].copy(), touched, size, known, out
