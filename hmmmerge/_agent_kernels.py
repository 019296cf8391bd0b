"""Numba kernels of the online agent (:class:`hmmmerge.agent.TwoLevelMemory`).

The agent's state travels in small named tuples of arrays rather than in
positional arguments:

* :class:`Level1` -- the buffers of the episodic memory (Algorithm 1);
* :class:`Level2` -- the level-2 model as last refreshed: ``T2`` as stacked
  CSR (row ``a * n_clusters + c``), the cluster of every level-1 state (C),
  the observation of every cluster and the clusters emitting each observation;
* :class:`Belief` -- a sparse belief over clusters (values, support, size);
* :class:`FirstOrder` -- the first-order counts and the previous observation;
* :class:`Scratch` -- work arrays of the level-2 step;
* :class:`Steps` -- the flat input stream; :class:`Predictions` -- the flat
  outputs, one array per predictor name.

The level-2 prediction step is :func:`hmmmerge._forward.csr_propagate`, the
same step the forward filter of :class:`~hmmmerge.hmm.ActionHMM` uses;
conditioning is simpler here because every cluster emits one observation,
unless the merger gives each cluster an emission distribution (``Level2.soft``,
fold-noisy's noise-aware emissions): then the predicted distribution mixes the
clusters' emissions and conditioning weighs each cluster by its probability of
the observation (a noisy observation no longer loses the belief).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ._episodic_kernels import CURRENT, l1_observe
from ._forward import clear_touched, csr_propagate
from ._successor_kernels import position


class Level1(NamedTuple):
    next_state: np.ndarray  # (A, capacity) int, -1 unknown
    emission: np.ndarray    # (capacity,) int
    labels: np.ndarray      # (capacity,) int, true state at creation (-1 unknown)
    scal: np.ndarray        # [n_states, current state, T(start, -1)]


class Level2(NamedTuple):
    n_clusters: int
    t2_ptr: np.ndarray
    t2_idx: np.ndarray
    t2_val: np.ndarray
    cluster_of: np.ndarray   # (capacity,) cluster of each level-1 state, -1 unconnected (C)
    cluster_obs: np.ndarray  # (n_clusters,) observation of each cluster
    em_ptr: np.ndarray       # CSR by observation of the clusters emitting it
    em_idx: np.ndarray
    soft: np.ndarray         # (n_clusters, O) emission probabilities of the merger (fold-noisy), or
                             # (0, O): every cluster emits its ``cluster_obs``
    soft_floor: np.ndarray   # (n_clusters,) when every row of ``soft`` holds this value off the cluster's
                             # ``cluster_obs`` (replay's noise rate), else (0,): see _predict_floor
    belief_cut: float = 0.0  # > 0: after conditioning, clusters holding less than this share of the belief
                             # leave it (replay's ONLINE_BELIEF_CUT; 0: every cluster with mass stays)


class Belief(NamedTuple):
    p: np.ndarray        # (n_clusters,) probabilities, zero off the support
    support: np.ndarray  # (n_clusters,) int, the first ``size[0]`` entries are the support
    size: np.ndarray     # (1,) int, 0 = belief lost


class FirstOrder(NamedTuple):
    counts: np.ndarray  # (O, A, O) int
    prev: np.ndarray    # (1,) the previous observation


class Scratch(NamedTuple):
    pred: np.ndarray      # (n_clusters,)
    touched: np.ndarray   # (n_clusters,) bool
    tlist: np.ndarray     # (n_clusters,) int
    obs_dist: np.ndarray  # (O,)


class Steps(NamedTuple):
    obs: np.ndarray       # (G,) flat over episodes
    actions: np.ndarray   # (G,) -1 at episode starts
    labels: np.ndarray    # (G,) true states, -1 unknown
    uniforms: np.ndarray  # (G, 2) draws of the online connection


class Predictions(NamedTuple):
    """Per step: the observation each predictor expected (-1 none, -2 not scored), the level-1 state
    after it, and whether that state was connected to a cluster online at that step."""
    l1: np.ndarray
    l2: np.ndarray
    l2_filter: np.ndarray
    first_order: np.ndarray
    state: np.ndarray
    joined: np.ndarray


def new_belief(n_clusters: int) -> Belief:
    size = max(n_clusters, 1)
    return Belief(np.zeros(size), np.zeros(size, dtype=np.int64), np.zeros(1, dtype=np.int64))


def new_scratch(n_clusters: int, n_obs: int) -> Scratch:
    size = max(n_clusters, 1)
    return Scratch(np.zeros(size), np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64), np.zeros(n_obs))


@njit(cache=True)
def _predict(bel, a, l2, s):
    """Propagate ``bel`` through T2[a] into ``s.pred``; fill ``s.obs_dist``; return (#touched, total mass)."""
    mt = csr_propagate(bel.p, bel.support, bel.size[0], a, l2.n_clusters, l2.t2_ptr, l2.t2_idx, l2.t2_val,
                       s.pred, s.touched, s.tlist)
    if l2.soft_floor.shape[0] > 0:
        return _predict_floor(mt, l2, s)
    s.obs_dist[:] = 0.0
    total = 0.0
    if l2.soft.shape[0] > 0:
        for q in range(mt):
            j = s.tlist[q]
            for o in range(s.obs_dist.shape[0]):
                s.obs_dist[o] += s.pred[j] * l2.soft[j, o]
            total += s.pred[j]
        return mt, total
    for q in range(mt):
        j = s.tlist[q]
        s.obs_dist[l2.cluster_obs[j]] += s.pred[j]
        total += s.pred[j]
    return mt, total


@njit(cache=True)
def _predict_floor(mt, l2, s):
    """:func:`_predict`'s observation distribution when every cluster's emission row is ``soft_floor``
    off its own observation, in O(touched + O) rather than O(touched x O): the floor adds the same mass
    to every observation, so only the mass above it, per observation, ranks them.  ``s.obs_dist`` then
    holds that mass; when its top two are closer than the round-off of either sum (a bound far above
    it, relative to the total), the distribution is summed as :func:`_predict` does, so that the
    prediction (the first largest entry) is the same.  Returns (#touched, total mass)."""
    d = s.obs_dist
    d[:] = 0.0
    total = 0.0
    for q in range(mt):
        j = s.tlist[q]
        c = l2.cluster_obs[j]
        d[c] += s.pred[j] * (l2.soft[j, c] - l2.soft_floor[j])
        total += s.pred[j]
    best = 0
    for o in range(1, d.shape[0]):
        if d[o] > d[best]:
            best = o
    second = -np.inf
    for o in range(d.shape[0]):
        if o != best and d[o] > second:
            second = d[o]
    if d[best] - second > 4e-15 * (mt + 2) * total:
        return mt, total
    d[:] = 0.0
    for q in range(mt):
        j = s.tlist[q]
        for o in range(d.shape[0]):
            d[o] += s.pred[j] * l2.soft[j, o]
    return mt, total


@njit(cache=True)
def _condition(bel, mt, total, o, l2, s):
    """Condition the propagated belief on ``o``; clear the scratch; set the new support size (0 = lost)."""
    m_new = 0
    z = 0.0
    soft = l2.soft.shape[0] > 0
    if total > 0.0:
        for q in range(mt):
            j = s.tlist[q]
            w = s.pred[j] * l2.soft[j, o] if soft else (s.pred[j] if l2.cluster_obs[j] == o else 0.0)
            if w > 0.0:
                bel.p[j] = w
                z += w
                bel.support[m_new] = j
                m_new += 1
    clear_touched(s.pred, s.touched, s.tlist, mt)
    if z > 0.0 and l2.belief_cut > 0.0:   # clusters below the cut leave the support (the others as without it)
        cut = l2.belief_cut * z
        m = 0
        for q in range(m_new):
            j = bel.support[q]
            if bel.p[j] >= cut:
                bel.p[j] /= z
                bel.support[m] = j
                m += 1
            else:
                bel.p[j] = 0.0
        m_new = m
    elif z > 0.0:
        for q in range(m_new):
            bel.p[bel.support[q]] /= z
    else:
        for q in range(m_new):
            bel.p[bel.support[q]] = 0.0
        m_new = 0
    bel.size[0] = m_new


@njit(cache=True)
def _argmax_or_none(dist, total):
    if total <= 0.0:
        return -1
    best = 0
    for o in range(1, dist.shape[0]):
        if dist[o] > dist[best]:
            best = o
    return best


@njit(cache=True)
def _set_onehot(bel, c):
    for q in range(bel.size[0]):
        bel.p[bel.support[q]] = 0.0
    bel.p[c] = 1.0
    bel.support[0] = c
    bel.size[0] = 1


@njit(cache=True)
def _set_emitters(bel, o, l2):
    """Uniform over the clusters that emit ``o`` (none: the belief is lost); with emission
    distributions, proportional to each cluster's probability of ``o``."""
    for q in range(bel.size[0]):
        bel.p[bel.support[q]] = 0.0
    if l2.soft.shape[0] > 0:
        z = 0.0
        n = 0
        for c in range(l2.n_clusters):
            if l2.soft[c, o] > 0.0:
                bel.p[c] = l2.soft[c, o]
                z += l2.soft[c, o]
                bel.support[n] = c
                n += 1
        for q in range(n):
            bel.p[bel.support[q]] /= z
        bel.size[0] = n
        return
    n = l2.em_ptr[o + 1] - l2.em_ptr[o]
    for q in range(n):
        c = l2.em_idx[l2.em_ptr[o] + q]
        bel.p[c] = 1.0 / n
        bel.support[q] = c
    bel.size[0] = n


@njit(cache=True)
def connect_online(h, o, cluster_of, bel, em_ptr, u_connect, u_choose):
    """Connect level-1 state ``h`` to a cluster drawn from the belief, with probability 1 - exp(H)/n_o.

    ``n_o`` clusters emit ``o`` (``em_ptr``, CSR by observation); a uniform
    belief over them never connects.  Returns whether it connected.
    """
    m = bel.size[0]
    n_o = em_ptr[o + 1] - em_ptr[o]
    if n_o == 0:
        return False
    # the entropy is at least -(sum p) log(max p): when even that bound puts p_connect under the draw by a
    # margin far above the round-off of the entropy's sum (relative to exp(H) / n_o), the draw cannot
    # connect, and the logarithms (most of the cost) are skipped
    top = 0.0
    total = 0.0
    for q in range(m):
        p = bel.p[bel.support[q]]
        top = max(top, p)
        total += p
    if top > 0.0:
        bound = 1.0 - np.exp(-total * np.log(top)) / n_o
        if bound + 1e-6 * (2.0 - bound) <= max(u_connect, 1e-12):
            return False
    entropy = 0.0
    for q in range(m):
        p = bel.p[bel.support[q]]
        if p > 0.0:
            entropy -= p * np.log(p)
    p_connect = 1.0 - np.exp(entropy) / n_o
    if p_connect <= 1e-12 or u_connect >= p_connect:  # a uniform belief never connects (round-off aside)
        return False
    acc = 0.0
    chosen = bel.support[m - 1]
    for q in range(m):
        acc += bel.p[bel.support[q]]
        if u_choose < acc:
            chosen = bel.support[q]
            break
    cluster_of[h] = chosen
    return True


@njit(cache=True)
def _first_order_step(fo, a, o):
    """The first-order prediction (most counted next observation, -1 unseen), then count ``o``."""
    prev = fo.prev[0]
    row_total = 0
    best = -1
    for j in range(fo.counts.shape[2]):
        c = fo.counts[prev, a, j]
        row_total += c
        if best < 0 or c > fo.counts[prev, a, best]:
            best = j
    fo.counts[prev, a, o] += 1
    return best if row_total > 0 else -1


@njit(cache=True)
def _same_belief(b1, b2):
    """Whether two beliefs are equal bit for bit: the same support in the same order, the same values
    (both are zero off their supports)."""
    n = b1.size[0]
    if n != b2.size[0]:
        return False
    for q in range(n):
        j = b1.support[q]
        if b2.support[q] != j or b1.p[j] != b2.p[j]:
            return False
    return True


@njit(cache=True)
def _copy_belief(src, dst):
    """``dst`` becomes a copy of ``src`` (support, order, values), in O(both supports)."""
    for q in range(dst.size[0]):
        dst.p[dst.support[q]] = 0.0
    n = src.size[0]
    for q in range(n):
        j = src.support[q]
        dst.support[q] = j
        dst.p[j] = src.p[j]
    dst.size[0] = n


@njit(cache=True)
def agent_steps(steps, g0, g1, l1, l2, anchored, filtered, fo, scratch, out, online):
    """The online agent over flat steps ``g0 <= g < g1`` (see :class:`hmmmerge.agent.TwoLevelMemory`).

    Before each observation of a move it records the observation predicted by
    level 1, the first-order model, level 2 anchored to the current level-1
    state (the paper's predictor, belief ``anchored``) and the pure level-2
    filter (belief ``filtered``); then it learns level 1 (Algorithm 1) and the
    first-order counts, and updates the two level-2 beliefs.

    With ``online``, a level-1 state without a cluster is connected to a
    cluster drawn from the anchored level-2 posterior (see
    :func:`connect_online`) with the two uniform draws ``steps.uniforms[g]``.
    """
    k = l2.n_clusters
    # the two beliefs start alike at every episode start and stay alike until the level-1 state
    # has a cluster (anchored) or the filter is lost (filtered): while they are equal, bit for bit,
    # the filter's step is the anchored one's, computed once and copied
    same = k > 0 and _same_belief(anchored, filtered)
    for g in range(g0, g1):
        a = steps.actions[g]
        o = steps.obs[g]
        if a >= 0:
            h = l1.next_state[a, l1.scal[CURRENT]]
            out.l1[g] = l1.emission[h] if h >= 0 else -1
            out.first_order[g] = _first_order_step(fo, a, o)
            if k > 0:
                mt, total = _predict(anchored, a, l2, scratch)
                out.l2[g] = _argmax_or_none(scratch.obs_dist, total)
                _condition(anchored, mt, total, o, l2, scratch)
                if same:
                    out.l2_filter[g] = out.l2[g]
                    _copy_belief(anchored, filtered)
                else:
                    mt, total = _predict(filtered, a, l2, scratch)
                    out.l2_filter[g] = _argmax_or_none(scratch.obs_dist, total)
                    _condition(filtered, mt, total, o, l2, scratch)
                if filtered.size[0] == 0:  # the pure filter restarts from the clusters that emit o
                    _set_emitters(filtered, o, l2)
                    same = False
            else:
                out.l2[g] = -1
                out.l2_filter[g] = -1
        fo.prev[0] = o
        h1 = l1_observe(l1.next_state, l1.emission, l1.labels, l1.scal, a, o, steps.labels[g])
        out.state[g] = h1
        if k > 0:
            c = l2.cluster_of[h1]
            if c < 0 and online and a >= 0 and anchored.size[0] > 0:
                out.joined[g] = connect_online(h1, o, l2.cluster_of, anchored, l2.em_ptr,
                                               steps.uniforms[g, 0], steps.uniforms[g, 1])
            elif c >= 0:
                _set_onehot(anchored, c)
                same = False
            elif a < 0:
                _set_emitters(anchored, o, l2)
            if a < 0:  # both beliefs are set alike (c >= 0: its one-hot; else the emitters of o)
                if c >= 0:
                    _set_onehot(filtered, c)
                else:
                    _set_emitters(filtered, o, l2)
                same = True


@njit(cache=True)
def level2_transitions(next_state, n, assignment, k):
    """Row-normalised level-2 transitions as stacked CSR (row ``a * k + c``), with their counts.

    Counts the level-1 links ``i -a-> j`` with both ends connected to clusters
    (``T2[a] ∝ C^T T1[a] C`` for a hard C) in two passes over the states.
    Within a row, columns come in the order of their first link by source
    state index (``first_source``, kept so that :func:`level2_add_links` can
    add links later and give the same matrix).  Returns ``(indptr, indices,
    data, counts, first_source)``.
    """
    A = next_state.shape[0]
    rows = A * k
    raw = np.zeros(rows + 1, dtype=np.int64)
    for a in range(A):
        for i in range(n):
            j = next_state[a, i]
            if j >= 0 and assignment[i] >= 0 and assignment[j] >= 0:
                raw[a * k + assignment[i] + 1] += 1
    for r in range(rows):
        raw[r + 1] += raw[r]
    fill = raw[:-1].copy()
    cols = np.empty(raw[rows], dtype=np.int64)
    srcs = np.empty(raw[rows], dtype=np.int64)
    for a in range(A):
        for i in range(n):
            j = next_state[a, i]
            if j >= 0 and assignment[i] >= 0 and assignment[j] >= 0:
                r = a * k + assignment[i]
                cols[fill[r]] = assignment[j]
                srcs[fill[r]] = i
                fill[r] += 1
    # merge duplicate columns row by row
    seen = np.full(max(k, 1), -1, dtype=np.int64)
    slot = np.zeros(max(k, 1), dtype=np.int64)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indices = np.empty(raw[rows], dtype=np.int64)
    counts = np.empty(raw[rows], dtype=np.int64)
    first = np.empty(raw[rows], dtype=np.int64)
    m = 0
    for r in range(rows):
        for p in range(raw[r], raw[r + 1]):
            c = cols[p]
            if seen[c] != r:
                seen[c] = r
                slot[c] = m
                indices[m] = c
                counts[m] = 1
                first[m] = srcs[p]
                m += 1
            else:
                counts[slot[c]] += 1
        indptr[r + 1] = m
    indices, counts, first = indices[:m].copy(), counts[:m].copy(), first[:m].copy()
    return indptr, indices, _row_normalised(indptr, counts), counts, first


@njit(cache=True)
def _row_normalised(indptr, counts):
    data = np.empty(counts.shape[0], dtype=np.float64)
    for r in range(indptr.shape[0] - 1):
        total = 0
        for p in range(indptr[r], indptr[r + 1]):
            total += counts[p]
        for p in range(indptr[r], indptr[r + 1]):
            data[p] = float(counts[p]) / total
    return data


@njit(cache=True)
def _sort_by_first(idx, cnt, fst, start, stop):
    """Order the entries ``start:stop`` of one row by first source (insertion sort: rows are short)."""
    for p in range(start + 1, stop):
        c, v, f = idx[p], cnt[p], fst[p]
        j = p - 1
        while j >= start and fst[j] > f:
            idx[j + 1], cnt[j + 1], fst[j + 1] = idx[j], cnt[j], fst[j]
            j -= 1
        idx[j + 1], cnt[j + 1], fst[j + 1] = c, v, f


@njit(cache=True)
def level2_add_links(indptr, indices, counts, first, k, src, rows, cols):
    """T2 of :func:`level2_transitions` with more links counted: ``src`` (source states)
    ``-> (rows[q], cols[q])`` (row ``a * k + c``, column cluster).

    Returns ``(indptr, indices, data, counts, first_source)``, equal to what
    :func:`level2_transitions` gives on level 1 with these links: counts add up,
    each column keeps its smallest source state, and a row's columns are ordered
    by it.
    """
    n_rows = indptr.shape[0] - 1
    extra = np.zeros(n_rows + 1, dtype=np.int64)
    for q in range(rows.shape[0]):
        extra[rows[q] + 1] += 1
    for r in range(n_rows):
        extra[r + 1] += extra[r]
    size = counts.shape[0] + rows.shape[0]
    ptr = np.zeros(n_rows + 1, dtype=np.int64)
    idx = np.empty(size, dtype=np.int64)
    cnt = np.empty(size, dtype=np.int64)
    fst = np.empty(size, dtype=np.int64)
    order = np.argsort(rows, kind="mergesort")
    m = 0
    for r in range(n_rows):
        start = m
        for p in range(indptr[r], indptr[r + 1]):
            idx[m], cnt[m], fst[m] = indices[p], counts[p], first[p]
            m += 1
        changed = False
        for e in range(extra[r], extra[r + 1]):
            q = order[e]
            found = -1
            for p in range(start, m):
                if idx[p] == cols[q]:
                    found = p
                    break
            if found < 0:
                idx[m], cnt[m], fst[m] = cols[q], 1, src[q]
                m += 1
                changed = True
            else:
                cnt[found] += 1
                if src[q] < fst[found]:
                    fst[found] = src[q]
                    changed = True
        if changed:
            _sort_by_first(idx, cnt, fst, start, m)
        ptr[r + 1] = m
    idx, cnt, fst = idx[:m].copy(), cnt[:m].copy(), fst[:m].copy()
    return ptr, idx, _row_normalised(ptr, cnt), cnt, fst


@njit(cache=True)
def stale_clusters(starts, parent, parent_action, next_state, cluster_of, depth, out):
    """Clusters whose successor features a change of level 1 at ``starts`` may have changed.

    A new or replaced link at state ``p`` changes the breadth-first sets of the
    states from which ``p`` is reachable in fewer than ``depth`` moves: ``p``
    and its ancestors along still-existing links (in-degree is at most one in
    Algorithm 1's memory).  Their clusters are flagged in ``out`` (bool, by id).
    """
    for q in range(starts.shape[0]):
        x = starts[q]
        for _ in range(depth):
            if x < 0:
                break
            c = cluster_of[x]
            if c >= 0:
                out[c] = True
            p = parent[x]
            if p < 0 or next_state[parent_action[x], p] != x:
                break
            x = p


@njit(cache=True)
def _before(x, moved, was, new):
    """The cluster of state ``x`` before a sleep, in the ids after it (``moved``/``was``: see
    :class:`~hmmmerge.clusters.Changes`; a state not moved kept its cluster up to the relabelling)."""
    q = position(moved, x)
    return was[q] if q >= 0 else new[x]


@njit(cache=True)
def level2_moves(indptr, indices, counts, first, k_old, k_ext, relabel, moved, was, new, next_state, parent,
                 parent_action):
    """First part of T2 after a sleep (see :func:`level2_after_sleep`): a hash table of entries.

    Entries of T2 before the sleep are relabelled (``relabel``: old id -> new id,
    ghosts ``>= k_new`` for emptied clusters, ``k_ext`` ids in all; entries that
    land on one (row, column) add their counts and keep the smaller first
    source); the links of ``moved`` states are taken out under their clusters
    before the sleep and put back under their new ones.  Returns the table and
    ``m`` entries: rows ``a * k_ext + c``, columns, counts, first sources and
    the flag of entries whose first source left them.
    """
    A = next_state.shape[0]
    n_old_rows = indptr.shape[0] - 1
    cap = 16
    while cap < 4 * (counts.shape[0] + 2 * A * moved.shape[0] + 8):
        cap *= 2
    table = np.full(cap, -1, dtype=np.int64)
    size = cap // 2
    e_row = np.empty(size, dtype=np.int64)
    e_col = np.empty(size, dtype=np.int64)
    e_cnt = np.zeros(size, dtype=np.int64)
    e_first = np.empty(size, dtype=np.int64)
    e_lost = np.zeros(size, dtype=np.bool_)
    m = 0
    for r in range(n_old_rows):  # relabel
        a, c = r // max(k_old, 1), r % max(k_old, 1)
        for p in range(indptr[r], indptr[r + 1]):
            e, m = _entry(table, e_row, e_col, e_cnt, e_first, m, a * k_ext + relabel[c], relabel[indices[p]],
                          first[p])
            e_cnt[e] += counts[p]
    for q in range(moved.shape[0]):  # take the moved states' links out (clusters before the sleep)
        u = moved[q]
        bu = was[q]
        if bu < 0:
            continue
        p = parent[u]
        if p >= 0 and next_state[parent_action[u], p] == u:
            bp = _before(p, moved, was, new)
            if bp >= 0:
                _take_out(table, e_row, e_col, e_cnt, e_first, e_lost, parent_action[u] * k_ext + bp, bu, p)
        for a in range(A):
            w = next_state[a, u]
            if w >= 0 and position(moved, w) < 0 and new[w] >= 0:
                _take_out(table, e_row, e_col, e_cnt, e_first, e_lost, a * k_ext + bu, new[w], u)
    for q in range(moved.shape[0]):  # and back in (new clusters)
        u = moved[q]
        p = parent[u]
        if p >= 0 and next_state[parent_action[u], p] == u and new[p] >= 0 and new[u] >= 0:
            e, m = _entry(table, e_row, e_col, e_cnt, e_first, m, parent_action[u] * k_ext + new[p], new[u], p)
            e_cnt[e] += 1
        for a in range(A):
            w = next_state[a, u]
            if w >= 0 and position(moved, w) < 0 and new[u] >= 0 and new[w] >= 0:
                e, m = _entry(table, e_row, e_col, e_cnt, e_first, m, a * k_ext + new[u], new[w], u)
                e_cnt[e] += 1
    return table, e_row, e_col, e_cnt, e_first, e_lost, m


@njit(cache=True)
def lost_first_sources(e_row, e_cnt, e_first, e_lost, m, k_ext, k_new):
    """Entries that lost their first source but kept links: their flag stays, their first source is
    reset; returns the number of such entries in the rows of each cluster."""
    lost = np.zeros(max(k_new, 1), dtype=np.int64)
    for e in range(m):
        if e_lost[e] and e_cnt[e] > 0:
            e_first[e] = np.iinfo(np.int64).max
            c = e_row[e] % k_ext
            if c < k_new:  # (an emptied cluster's entry: level2_csr refuses it)
                lost[c] += 1
        else:
            e_lost[e] = False
    return lost


@njit(cache=True)
def find_first_sources(table, e_row, e_col, e_first, e_lost, k_ext, ids, ptr, idx, lost, new, next_state):
    """The smallest source of each flagged entry (see :func:`lost_first_sources`): for each cluster
    ``ids[r]``, one ordered pass over its states ``idx[ptr[r]:ptr[r + 1]]`` (increasing) until its
    ``lost`` entries are found."""
    A = next_state.shape[0]
    for r in range(ids.shape[0]):
        c = ids[r]
        left = lost[c]
        for q in range(ptr[r], ptr[r + 1]):
            i = idx[q]
            for a in range(A):
                j = next_state[a, i]
                if j < 0 or new[j] < 0:
                    continue
                h = _find(table, e_row, e_col, a * k_ext + c, new[j])
                if h >= 0 and e_lost[h] and i < e_first[h]:
                    e_first[h] = i
                    e_lost[h] = False
                    left -= 1
            if left == 0:
                break


@njit(cache=True)
def level2_csr(e_row, e_col, e_cnt, e_first, m, k_ext, k_new, n_actions):
    """T2 as :func:`level2_transitions` returns it, from the entries of :func:`level2_moves`
    (rows in order, within a row by first source; entries without links dropped)."""
    rows = n_actions * k_new
    out_ptr = np.zeros(rows + 1, dtype=np.int64)
    live = 0
    for e in range(m):
        if e_cnt[e] > 0:
            c = e_row[e] % k_ext
            if c >= k_new or e_col[e] >= k_new:
                raise ValueError("T2 after a sleep: an emptied cluster kept links")
            e_row[e] = (e_row[e] // k_ext) * k_new + c
            out_ptr[e_row[e] + 1] += 1
            live += 1
    for r in range(rows):
        out_ptr[r + 1] += out_ptr[r]
    fill = out_ptr[:-1].copy()
    out_idx = np.empty(live, dtype=np.int64)
    out_cnt = np.empty(live, dtype=np.int64)
    out_first = np.empty(live, dtype=np.int64)
    for e in range(m):
        if e_cnt[e] > 0:
            p = fill[e_row[e]]
            out_idx[p], out_cnt[p], out_first[p] = e_col[e], e_cnt[e], e_first[e]
            fill[e_row[e]] += 1
    for r in range(rows):
        _sort_by_first(out_idx, out_cnt, out_first, out_ptr[r], out_ptr[r + 1])
    return out_ptr, out_idx, _row_normalised(out_ptr, out_cnt), out_cnt, out_first


@njit(cache=True)
def _hash(row, col, cap):
    x = np.uint64(row) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(col) * np.uint64(0xC2B2AE3D27D4EB4F)
    return np.int64((x >> np.uint64(29)) & np.uint64(cap - 1))


@njit(cache=True)
def _find(table, e_row, e_col, row, col):
    cap = table.shape[0]
    h = _hash(row, col, cap)
    while table[h] >= 0:
        e = table[h]
        if e_row[e] == row and e_col[e] == col:
            return e
        h = (h + 1) & (cap - 1)
    return -1


@njit(cache=True)
def _entry(table, e_row, e_col, e_cnt, e_first, m, row, col, source):
    """The entry (row, col), created with count 0 if new; its first source becomes min(first, source)."""
    cap = table.shape[0]
    h = _hash(row, col, cap)
    while table[h] >= 0:
        e = table[h]
        if e_row[e] == row and e_col[e] == col:
            if source < e_first[e]:
                e_first[e] = source
            return e, m
        h = (h + 1) & (cap - 1)
    table[h] = m
    e_row[m], e_col[m], e_cnt[m], e_first[m] = row, col, 0, source
    return m, m + 1


@njit(cache=True)
def _take_out(table, e_row, e_col, e_cnt, e_first, e_lost, row, col, source):
    """One link less in entry (row, col); mark the entry if it was its first source."""
    e = _find(table, e_row, e_col, row, col)
    e_cnt[e] -= 1
    if e_first[e] == source:
        e_lost[e] = True
