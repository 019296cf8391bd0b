"""Numba kernels of the sleep-replay learner (:mod:`hmmmerge.replay`).

:func:`lump_clones` groups the clones of the learned clone HMM into blocks of
clones that no test tells apart: partition refinement (the coarsest stable
partition, as in Moore's minimisation) where two clones stay in one block when,
for every action, their expected next-block frequencies pass ALERGIA's
Hoeffding test (Carrasco & Oncina 1994): ``|f1/n1 - f2/n2| < bound * (1/sqrt(n1)
+ 1/sqrt(n2))`` with ``bound = sqrt(log(2 / risk) / 2)``.  A clone joins the
first compatible group of its block, groups pool their counts, clones are taken
heaviest first.

Hoeffding's bound is distribution-free: it never tells apart a clone seen 3
times going to block X from one seen 10 times going to Y.  In a near-deterministic
world that is decisive, so a second test may be required too (``alpha > 0``):
the log Bayes factor of two next-block distributions against one, with
Dirichlet-multinomial marginals of concentration ``alpha`` per next block
(small: one main successor per (place, action)), must not exceed ``threshold``
(:func:`_log_bayes_factor`; as in the Hoeffding test, an action whose next-block
frequencies all differ by less than ``floor`` is taken to agree: EM's own imprecision).  Two identical count vectors always pass it (the
factor is then at most 0: Jensen), and so does a clone with no action in common
with the group.

Imported lazily (numba is slow to import).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def lump_clones(counts, colour, bound, floor, max_rounds, alpha=0.0, threshold=0.0):
    """Blocks of clones (ids ``0..nb-1``) from expected transition counts ``counts`` (A, H, H).

    Starts from one block per colour (observation) and refines until no block
    splits (or ``max_rounds``); entries below 1e-3 (a thousandth of a transition)
    are left out.  ``alpha > 0``: the Bayes-factor test too (module docstring).
    Returns ``block`` (H,).
    """
    A, H, _ = counts.shape
    pairs = np.empty((1, 2), dtype=np.int64)
    pairs[0, 0] = 0
    pairs[0, 1] = 0
    starts = np.zeros(1, dtype=np.int64)
    sizes = np.full(1, H, dtype=np.int64)
    return lump_clones_pairs(counts, 1.0, pairs, starts, sizes, colour, bound, floor, max_rounds, alpha, threshold)


@njit(cache=True)
def lump_clones_pairs(counts, factor, pairs, starts, sizes, colour, bound, floor, max_rounds, alpha=0.0,
                      threshold=0.0, skip=True):
    """:func:`lump_clones` of ``factor * counts`` read on the blocks of the observation pairs ``pairs``
    only (the rest of ``counts`` is zero).  ``skip=False``: every round tests every block (the same blocks;
    a reference for the tests)."""
    A, H, _ = counts.shape
    # the entries worth a thousandth of a transition or more, as a list (refinement rounds then cost O(entries));
    # one pass over the pairs' blocks into lists with room for all their entries (np.empty: the pages past
    # the entries kept are never touched)
    room = 0
    for p in range(pairs.shape[0]):
        room += A * sizes[pairs[p, 0]] * sizes[pairs[p, 1]]
    e_a = np.empty(room, dtype=np.int64)
    e_i = np.empty(room, dtype=np.int64)
    e_j = np.empty(room, dtype=np.int64)
    e_c = np.empty(room)
    n_out = np.zeros((H, A))
    occ = np.zeros(H)
    m = 0
    # row by row, a row's blocks in the order of the pairs: each clone's entries come in the order of a
    # pass pair by pair (pair, action, next clone), which is all that the refinement reads of their order
    vptr, vidx = _pairs_by_view(pairs, sizes.shape[0], np.ones(pairs.shape[0], dtype=np.bool_))
    for o in range(sizes.shape[0]):
        for i in range(starts[o], starts[o] + sizes[o]):
            for e in range(vptr[o], vptr[o + 1]):
                p = vidx[e]
                s1, n1 = starts[pairs[p, 1]], sizes[pairs[p, 1]]
                for a in range(A):
                    for j in range(s1, s1 + n1):
                        c = factor * counts[a, i, j]
                        if c >= 1e-3:
                            e_a[m], e_i[m], e_j[m], e_c[m] = a, i, j, c
                            n_out[i, a] += c
                            occ[i] += c
                            m += 1
    e_a, e_i, e_j, e_c = e_a[:m], e_i[:m], e_j[:m], e_c[:m]
    order = np.argsort(-occ, kind="mergesort")
    # colours renumbered 0..nb-1 in order of first appearance by clone index
    block = np.full(H, -1, dtype=np.int64)
    seen = np.full(colour.max() + 1, -1, dtype=np.int64)
    nb = 0
    for i in range(H):
        c = colour[i]
        if seen[c] < 0:
            seen[c] = nb
            nb += 1
        block[i] = seen[c]
    # each clone's entries (in their order above): a round reads them, not a clones x blocks table
    ptr = np.zeros(H + 1, dtype=np.int64)
    for q in range(m):
        ptr[e_i[q] + 1] += 1
    for i in range(H):
        ptr[i + 1] += ptr[i]
    by_clone = np.empty(m, dtype=np.int64)
    fill = ptr[:-1].copy()
    for q in range(m):
        by_clone[fill[e_i[q]]] = q
        fill[e_i[q]] += 1
    # a block whose clones' entries all lead into blocks that the last round did not split has the same
    # next-block vectors as in the last round (up to the blocks' ids), where its clones formed one group:
    # taken in the same order against the same pools they form one group again, so the round skips it
    # (``dirty``: the blocks to test; the rounds and the partitions are those of testing every block)
    dirty = np.ones(nb, dtype=np.bool_)
    for _ in range(max_rounds):
        new = _refine(block, nb, order, ptr, by_clone, e_a, e_j, e_c, n_out, A, bound, floor, alpha, threshold,
                      dirty)
        # number the new blocks in order of their first clone (stable ids)
        ng = 0
        for i in range(H):
            ng = max(ng, new[i] + 1)
        ids = np.full(ng, -1, dtype=np.int64)
        k = 0
        for i in range(H):
            if ids[new[i]] < 0:
                ids[new[i]] = k
                k += 1
        for i in range(H):
            new[i] = ids[new[i]]
        stable = k == nb
        if stable:
            block = new
            nb = k
            break
        # the blocks that split (a block's clones took more than one new id), then the new blocks with a clone
        # whose entries lead into one of them
        first = np.full(nb, -1, dtype=np.int64)
        split = np.zeros(nb, dtype=np.bool_)
        for i in range(H):
            b = block[i]
            if first[b] < 0:
                first[b] = new[i]
            elif first[b] != new[i]:
                split[b] = True
        dirty = np.zeros(k, dtype=np.bool_) if skip else np.ones(k, dtype=np.bool_)
        for q in range(m):
            if split[block[e_j[q]]]:
                dirty[new[e_i[q]]] = True
        block = new
        nb = k
    return block


@njit(cache=True)
def _refine(block, nb, order, ptr, by_clone, e_a, e_j, e_c, n_out, A, bound, floor, alpha, threshold, dirty):
    """One round of the refinement: clone ``order[q]`` (heaviest first) joins the first group of its block
    whose pooled next-block counts pass the Hoeffding test against its own, and with ``alpha > 0`` the
    Bayes-factor test (log factor at most ``threshold``) too (else it starts a group).
    Blocks are taken one after the other (a clone meets only its own block's groups, so the groups are
    those of taking the clones in ``order`` throughout); vectors over (action, next block) are sparse:
    an entry where both are zero always passes.  A block not ``dirty`` is one group without a test
    (:func:`lump_clones_pairs` says why).  Returns the group of every clone (ids by block)."""
    H = block.shape[0]
    width = A * nb
    # clones of each block, in ``order``
    bptr = np.zeros(nb + 1, dtype=np.int64)
    for i in range(H):
        bptr[block[i] + 1] += 1
    big = 0
    for b in range(nb):
        big = max(big, bptr[b + 1])
        bptr[b + 1] += bptr[b]
    members = np.empty(H, dtype=np.int64)
    fill = bptr[:-1].copy()
    for q in range(H):
        i = order[q]
        members[fill[block[i]]] = i
        fill[block[i]] += 1
    vec = np.zeros(width)                      # the clone's counts, and their support
    vsup = np.empty(width, dtype=np.int64)
    pool = np.zeros((big, width))              # the block's groups: pooled counts, support, per-action totals
    psup = np.empty((big, width), dtype=np.int64)
    plen = np.zeros(big, dtype=np.int64)
    g_n = np.zeros((big, A))
    tol = np.empty(A)
    lx = np.zeros(A)                           # the Bayes factor's per-action sums
    ly = np.zeros(A)
    lxy = np.zeros(A)
    kn = np.zeros(A)
    wide = np.zeros(A)
    new = np.full(H, -1, dtype=np.int64)
    offset = 0
    for b in range(nb):
        if not dirty[b]:   # one group, as in the last round (lump_clones_pairs)
            for r in range(bptr[b], bptr[b + 1]):
                new[members[r]] = offset
            offset += 1
            continue
        ng = 0
        for r in range(bptr[b], bptr[b + 1]):
            i = members[r]
            vlen = 0
            for t in range(ptr[i], ptr[i + 1]):
                q = by_clone[t]
                x = e_a[q] * nb + block[e_j[q]]
                if vec[x] == 0.0:
                    vsup[vlen] = x
                    vlen += 1
                vec[x] += e_c[q]
            g = 0
            while g < ng:
                ok = True
                for a in range(A):
                    tol[a] = -1.0   # an action either side never took: not tested
                    if n_out[i, a] > 0.0 and g_n[g, a] > 0.0:
                        tol[a] = max(bound * (1.0 / np.sqrt(n_out[i, a]) + 1.0 / np.sqrt(g_n[g, a])), floor)
                for s in range(vlen):
                    x = vsup[s]
                    a = x // nb
                    if tol[a] >= 0.0 and abs(vec[x] / n_out[i, a] - pool[g, x] / g_n[g, a]) >= tol[a]:
                        ok = False
                        break
                if ok:
                    for s in range(plen[g]):
                        x = psup[g, s]
                        a = x // nb
                        if tol[a] >= 0.0 and vec[x] == 0.0 and abs(0.0 - pool[g, x] / g_n[g, a]) >= tol[a]:
                            ok = False
                            break
                if ok and alpha > 0.0:
                    ok = _log_bayes_factor(vec, vsup, vlen, pool[g], psup[g], plen[g], tol, nb, A, alpha, floor,
                                           n_out[i], g_n[g], lx, ly, lxy, kn, wide) <= threshold
                if ok:
                    break
                g += 1
            if g == ng:
                ng += 1
            new[i] = offset + g
            for s in range(vlen):
                x = vsup[s]
                if pool[g, x] == 0.0:
                    psup[g, plen[g]] = x
                    plen[g] += 1
                pool[g, x] += vec[x]
                vec[x] = 0.0
            for a in range(A):
                g_n[g, a] += n_out[i, a]
        for g in range(ng):
            for s in range(plen[g]):
                pool[g, psup[g, s]] = 0.0
            plen[g] = 0
            for a in range(A):
                g_n[g, a] = 0.0
        offset += ng
    return new


@njit(cache=True)
def _log_bayes_factor(vec, vsup, vlen, pool, psup, plen, tol, nb, A, alpha, floor, nx, ny, lx, ly, lxy, kn, wide):
    """``log P(x | two distributions) - log P(x + y | one)`` for two next-block count vectors over (action,
    next block) -- ``vec`` with support ``vsup[:vlen]``, ``pool`` with ``psup[:plen]``, per-action totals
    ``nx``, ``ny`` -- summed over the actions both took (``tol[a] >= 0``) where some next-block frequency
    differs by ``floor`` or more (closer ones are EM's own imprecision, as for the Hoeffding test): per
    action, Dirichlet-multinomial marginals of the sequences (concentration ``alpha`` on each of the ``k``
    next blocks either side saw),
    ``log DM(v) = lgamma(k alpha) - lgamma(n + k alpha) + sum_b [lgamma(v_b + alpha) - lgamma(alpha)]``.
    ``lx``, ``ly``, ``lxy``, ``kn``, ``wide``: scratch (A,)."""
    for a in range(A):
        lx[a] = 0.0
        ly[a] = 0.0
        lxy[a] = 0.0
        kn[a] = 0.0
        wide[a] = 0.0
    g0 = math.lgamma(alpha)
    for s in range(vlen):
        x = vsup[s]
        a = x // nb
        if tol[a] < 0.0:
            continue
        u, v = vec[x], pool[x]
        if abs(u / nx[a] - v / ny[a]) >= floor:
            wide[a] = 1.0
        kn[a] += 1.0
        lx[a] += math.lgamma(u + alpha)
        ly[a] += math.lgamma(v + alpha) if v > 0.0 else g0
        lxy[a] += math.lgamma(u + v + alpha)
    for s in range(plen):
        x = psup[s]
        a = x // nb
        if tol[a] < 0.0 or vec[x] != 0.0:
            continue
        v = pool[x]
        if v / ny[a] >= floor:
            wide[a] = 1.0
        kn[a] += 1.0
        lx[a] += g0
        ly[a] += math.lgamma(v + alpha)
        lxy[a] += math.lgamma(v + alpha)
    out = 0.0
    for a in range(A):
        if tol[a] < 0.0 or wide[a] == 0.0:
            continue
        c = kn[a] * alpha
        # log DM(x) + log DM(y) - log DM(x + y): one set of the sum_b lgamma(alpha) terms is left
        out += (math.lgamma(c) - math.lgamma(nx[a] + c) - math.lgamma(ny[a] + c) + math.lgamma(nx[a] + ny[a] + c)
                + lx[a] + ly[a] - lxy[a] - kn[a] * g0)
    return out


@njit(cache=True)
def _pairwise_leaf(pos, val, p0, p1, lo, n):
    """:func:`pairwise_sum` of a run of at most 128 entries."""
    if n < 8:
        res = -0.0
        for p in range(p0, p1):
            res += val[p]
        return res
    r = np.zeros(8)
    main = lo + n - n % 8
    p = p0
    while p < p1 and pos[p] < main:
        r[(pos[p] - lo) % 8] += val[p]
        p += 1
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while p < p1:
        res += val[p]
        p += 1
    return res


@njit(cache=True)
def pairwise_sum(pos, val, p0, p1, lo, n):
    """numpy's sum of a vector of length ``n`` that is zero except at the increasing positions
    ``pos[p0:p1]`` (in ``[lo, lo + n)``, values ``val[p0:p1]``), bit for bit: the pairwise summation of
    ``np.add.reduce``'s inner loop (runs under 8 summed in turn, 8 partial sums in runs up to 128, halves
    above: ``pw(first n2) + pw(rest)``, ``n2`` half of ``n`` rounded down to a multiple of 8), zeros
    skipped (adding a zero changes no sum but the sign of a zero one).  ``x.sum(axis=-1)`` of a float row
    is ``0.0 + pairwise_sum(...)`` of the whole row; ``np.add.reduceat`` of a group is its first entry
    ``+ pairwise_sum(...)`` of the others.  (An explicit stack: numba does not cache recursive kernels.)"""
    return _pairwise(pos, val, p0, p1, lo, n, np.empty((6, 64), dtype=np.int64), np.empty(64))


@njit(cache=True)
def _pairwise(pos, val, p0, p1, lo, n, fi, fl):
    """:func:`pairwise_sum` with its stack in ``fi`` ((6, 64) int) and ``fl`` ((64,) float): no allocation."""
    if p1 - p0 <= 2:   # no entry, one, or two: their sum whatever the order
        if p1 == p0:
            return -0.0 if n < 8 else 0.0
        return val[p0] if p1 - p0 == 1 else val[p0] + val[p0 + 1]
    if n <= 128:
        return _pairwise_leaf(pos, val, p0, p1, lo, n)
    f_p0, f_p1, f_lo, f_n, f_mid = fi[0], fi[1], fi[2], fi[3], fi[4]
    f_phase = fi[5]   # 0 new, 1 waiting for the left half, 2 for the right
    f_left = fl       # the left half's sum
    f_p0[0], f_p1[0], f_lo[0], f_n[0], f_phase[0] = p0, p1, lo, n, 0
    top = 1
    result = 0.0
    while top > 0:
        f = top - 1
        if f_phase[f] == 0 and f_n[f] <= 128:
            result = _pairwise_leaf(pos, val, f_p0[f], f_p1[f], f_lo[f], f_n[f])
            top -= 1
        elif f_phase[f] == 0:
            n2 = f_n[f] // 2
            n2 -= n2 % 8
            mid = f_p0[f]
            while mid < f_p1[f] and pos[mid] < f_lo[f] + n2:
                mid += 1
            f_mid[f] = mid
            f_phase[f] = 1
            f_p0[top], f_p1[top], f_lo[top], f_n[top], f_phase[top] = f_p0[f], mid, f_lo[f], n2, 0
            top += 1
            continue
        elif f_phase[f] == 2:
            result = f_left[f] + result
            top -= 1
        if top == 0:
            break
        g = top - 1   # deliver ``result`` to the parent
        if f_phase[g] == 1:
            f_left[g] = result
            f_phase[g] = 2
            n2 = f_n[g] // 2
            n2 -= n2 % 8
            f_p0[top], f_p1[top], f_lo[top], f_n[top], f_phase[top] = f_mid[g], f_p1[g], f_lo[g] + n2, f_n[g] - n2, 0
            top += 1
    return result


@njit(cache=True)
def _grown(x, size):
    """``x`` with room for at least ``size`` entries (doubled)."""
    if size <= x.shape[0]:
        return x
    out = np.empty(max(size, 2 * x.shape[0]), dtype=x.dtype)
    out[:x.shape[0]] = x
    return out


@njit(cache=True)
def lumped_model(T, B, weight, block, nb, succ_ptr, succ_col, starts, sizes, colour):
    """The clone HMM lumped by ``block``: ``T_L[a, X, Y] = sum_{i in X} w_i sum_{j in Y} T[a, i, j] / sum_{i in X} w_i``
    and ``B_L[X] = sum_{i in X} B[i]``; a block of zero weight takes its clones' plain mean.  ``T`` is read
    on the blocks of the observation pairs only (``succ_ptr``/``succ_col``: the views after each view, by
    the view of each clone ``colour``; zero elsewhere).  Returns ``(ptr, col, val, B_L)``: ``T_L`` as
    stacked CSR (row ``a * nb + X``, columns increasing; an entry wherever a pair's block reaches, zero
    or not).  Each entry is summed as a dense ``T_L[a, block[i], block[j]] += w_i T[a, i, j]`` over the
    pairs, ``i`` then ``j`` increasing, would sum it (the same numbers bit for bit)."""
    A, H, _ = T.shape
    K = sizes.shape[0]
    w = np.zeros(nb)
    cnt = np.zeros(nb)
    for i in range(H):
        w[block[i]] += weight[i]
        cnt[block[i]] += 1.0
    order = np.argsort(block, kind="mergesort")
    bptr = np.zeros(nb + 1, dtype=np.int64)
    for i in range(H):
        bptr[block[i] + 1] += 1
    for x in range(nb):
        bptr[x + 1] += bptr[x]
    # every row of block X reaches the same blocks: those of the clones of the views after its clones'
    # views (increasing); listed once per view (blocks of the learner hold one view each) and, for a
    # block of several views, once for the block (no per-row sort)
    mark = np.full(nb, -1, dtype=np.int64)
    rptr = np.zeros(K + 1, dtype=np.int64)
    reach = np.empty(16, dtype=np.int64)
    n_r = 0
    for o in range(K):
        for e in range(succ_ptr[o], succ_ptr[o + 1]):
            o2 = succ_col[e]
            for j in range(starts[o2], starts[o2] + sizes[o2]):
                if mark[block[j]] != o:
                    mark[block[j]] = o
                    reach = _grown(reach, n_r + 1)
                    reach[n_r] = block[j]
                    n_r += 1
        reach[rptr[o]:n_r].sort()
        rptr[o + 1] = n_r
    r_lo = np.empty(nb, dtype=np.int64)
    r_hi = np.empty(nb, dtype=np.int64)
    for x in range(nb):
        if bptr[x + 1] == bptr[x]:
            r_lo[x] = r_hi[x] = 0
            continue
        o = colour[order[bptr[x]]]
        r_lo[x], r_hi[x] = rptr[o], rptr[o + 1]
        for q in range(bptr[x] + 1, bptr[x + 1]):
            if colour[order[q]] != o:   # a block of several views: the union of their lists
                r_lo[x] = n_r
                for q2 in range(bptr[x], bptr[x + 1]):
                    o1 = colour[order[q2]]
                    for r in range(rptr[o1], rptr[o1 + 1]):
                        if mark[reach[r]] != K + x:
                            mark[reach[r]] = K + x
                            reach = _grown(reach, n_r + 1)
                            reach[n_r] = reach[r]
                            n_r += 1
                reach[r_lo[x]:n_r].sort()
                r_hi[x] = n_r
                break
    acc = np.zeros(nb)
    ptr = np.zeros(A * nb + 1, dtype=np.int64)
    room = 0
    for x in range(nb):
        room += r_hi[x] - r_lo[x]
    col = np.empty(A * room, dtype=np.int64)
    val = np.empty(A * room)
    m = 0
    for a in range(A):
        for x in range(nb):
            for q in range(bptr[x], bptr[x + 1]):
                i = order[q]
                wi = weight[i] / w[x] if w[x] > 0.0 else 1.0 / cnt[x]
                o = colour[i]
                for e in range(succ_ptr[o], succ_ptr[o + 1]):
                    o2 = succ_col[e]
                    for j in range(starts[o2], starts[o2] + sizes[o2]):
                        acc[block[j]] += wi * T[a, i, j]
            for r in range(r_lo[x], r_hi[x]):
                y = reach[r]
                col[m] = y
                val[m] = acc[y]
                m += 1
                acc[y] = 0.0
            ptr[a * nb + x + 1] = m
    BL = np.zeros(nb)
    for i in range(H):
        BL[block[i]] += B[i]
    return ptr, col, val, BL


@njit(cache=True)
def _group_sums(key, rank, v, p0, p1, out_key, out_val, m, pos, fi, fl):
    """``np.add.reduceat`` of groups: entries ``p0:p1`` sorted by ``key`` then ``rank`` (the entry's place in
    its group of ``size`` entries is ``rank``; value ``v``) give one sum per key, the group's first entry
    (zero when absent) plus the pairwise sum of the others; written from ``out_*[m]``, returns the new m.
    ``rank`` holds ``rank * 2**32 + size`` (one array for both); ``pos``, ``fi``, ``fl``: work space."""
    p = p0
    while p < p1:
        q = p
        while q < p1 and key[q] == key[p]:
            q += 1
        size = rank[p] & 0xFFFFFFFF
        first = 0.0
        s = p
        if (rank[p] >> 32) == 0:
            first = v[p]
            s = p + 1
        if size > 1:
            for t in range(s, q):
                pos[t] = rank[t] >> 32
            first = first + _pairwise(pos, v, s, q, 1, size - 1, fi, fl)
        out_key[m] = key[p]
        out_val[m] = first
        m += 1
        p = q
    return m


@njit(cache=True)
def _sort_by(key, rank, v, n):
    """Sort the first ``n`` entries of ``key`` (with ``rank`` and ``v``) by ``key``, stably, in place."""
    if n > 48:
        s = np.argsort(key[:n], kind="mergesort")
        key[:n], rank[:n], v[:n] = key[:n][s], rank[:n][s], v[:n][s]
        return
    for p in range(1, n):
        k0, r0, v0 = key[p], rank[p], v[p]
        q = p - 1
        while q >= 0 and key[q] > k0:
            key[q + 1], rank[q + 1], v[q + 1] = key[q], rank[q], v[q]
            q -= 1
        key[q + 1], rank[q + 1], v[q + 1] = k0, r0, v0


@njit(cache=True)
def folded_model(ptr, col, val, A, nb, share, fold, n):
    """The lumped model of :func:`lumped_model` (stacked CSR on ``nb`` blocks) with blocks ``b`` joined into
    ``fold[b]`` (``n`` of them): ``T_F[a, X, Y] = sum_{x in X} share_x sum_{y in Y} T_L[a, x, y]``, as stacked
    CSR (row ``a * n + X``, columns increasing), bit for bit what ``np.add.reduceat`` over the joined blocks
    (members in increasing order), first of the rows scaled by ``share`` and then of the columns, gives on
    the dense arrays."""
    order = np.argsort(fold, kind="mergesort")
    gptr = np.zeros(n + 1, dtype=np.int64)
    for b in range(nb):
        gptr[fold[b] + 1] += 1
    for X in range(n):
        gptr[X + 1] += gptr[X]
    rank = np.empty(nb, dtype=np.int64)   # place in the group << 32 | group size
    for X in range(n):
        for q in range(gptr[X], gptr[X + 1]):
            rank[order[q]] = ((q - gptr[X]) << 32) | (gptr[X + 1] - gptr[X])
    largest = 0
    for X in range(n):
        largest = max(largest, gptr[X + 1] - gptr[X])
    if largest <= 8:
        return _folded_small(ptr, col, val, A, nb, share, fold, n, order, gptr, rank)
    width = 1   # the most entries of one joined row
    for a in range(A):
        for X in range(n):
            size = 0
            for q in range(gptr[X], gptr[X + 1]):
                r = a * nb + order[q]
                size += ptr[r + 1] - ptr[r]
            width = max(width, size)
    ky = np.empty(width, dtype=np.int64)
    kr = np.empty(width, dtype=np.int64)
    kv = np.empty(width)
    y1 = np.empty(width, dtype=np.int64)
    v1 = np.empty(width)
    pos = np.empty(width, dtype=np.int64)
    fi = np.empty((6, 64), dtype=np.int64)
    fl = np.empty(64)
    out_ptr = np.zeros(A * n + 1, dtype=np.int64)
    out_col = np.empty(max(val.shape[0], 1), dtype=np.int64)
    out_val = np.empty(max(val.shape[0], 1))
    m = 0
    for a in range(A):
        for X in range(n):
            g = gptr[X + 1] - gptr[X]
            e = 0
            for q in range(gptr[X], gptr[X + 1]):   # members in increasing order
                x = order[q]
                r = a * nb + x
                for p in range(ptr[r], ptr[r + 1]):
                    ky[e] = col[p]
                    kr[e] = ((q - gptr[X]) << 32) | g
                    kv[e] = val[p] * share[x]
                    e += 1
            _sort_by(ky, kr, kv, e)   # by column, members in order
            m1 = _group_sums(ky, kr, kv, 0, e, y1, v1, 0, pos, fi, fl)   # rows joined, column by column
            for t in range(m1):   # by joined column, members in order (y1 increasing)
                ky[t] = fold[y1[t]]
                kr[t] = rank[y1[t]]
                kv[t] = v1[t]
            _sort_by(ky, kr, kv, m1)
            m = _group_sums(ky, kr, kv, 0, m1, out_col, out_val, m, pos, fi, fl)
            out_ptr[a * n + X + 1] = m
    return out_ptr, out_col[:m].copy(), out_val[:m].copy()


@njit(cache=True)
def _folded_small(ptr, col, val, A, nb, share, fold, n, order, gptr, rank):
    """:func:`folded_model` when no joined block has more than 8 blocks: ``np.add.reduceat`` of a group is
    then its first entry plus the others summed in turn (from -0.0: numpy's pairwise sum of fewer than 8),
    so two running sums per column do it, without sorting the entries."""
    first = np.zeros(nb)
    rest = np.zeros(nb)
    seen = np.zeros(nb, dtype=np.bool_)
    tl = np.empty(nb, dtype=np.int64)
    first2 = np.zeros(n)
    rest2 = np.zeros(n)
    seen2 = np.zeros(n, dtype=np.bool_)
    tl2 = np.empty(n, dtype=np.int64)
    out_ptr = np.zeros(A * n + 1, dtype=np.int64)
    out_col = np.empty(max(val.shape[0], 1), dtype=np.int64)
    out_val = np.empty(max(val.shape[0], 1))
    m = 0
    for a in range(A):
        for X in range(n):
            g = gptr[X + 1] - gptr[X]
            mt = 0
            for q in range(gptr[X], gptr[X + 1]):   # members in increasing order
                x = order[q]
                r = a * nb + x
                for p in range(ptr[r], ptr[r + 1]):
                    y = col[p]
                    if not seen[y]:
                        seen[y] = True
                        tl[mt] = y
                        mt += 1
                        first[y] = 0.0
                        rest[y] = -0.0
                    if q == gptr[X]:
                        first[y] = val[p] * share[x]
                    else:
                        rest[y] += val[p] * share[x]
            tl[:mt].sort()
            m2 = 0
            for t in range(mt):   # columns in increasing order: each joined column's members in order
                y = tl[t]
                seen[y] = False
                v = first[y] + rest[y] if g > 1 else first[y]
                Y = fold[y]
                if not seen2[Y]:
                    seen2[Y] = True
                    tl2[m2] = Y
                    m2 += 1
                    first2[Y] = 0.0
                    rest2[Y] = -0.0
                if (rank[y] >> 32) == 0:
                    first2[Y] = v
                else:
                    rest2[Y] += v
            tl2[:m2].sort()
            for t in range(m2):
                Y = tl2[t]
                seen2[Y] = False
                out_col[m] = Y
                out_val[m] = first2[Y] + rest2[Y] if (rank[order[gptr[Y]]] & 0xFFFFFFFF) > 1 else first2[Y]
                m += 1
            out_ptr[a * n + X + 1] = m
    return out_ptr, out_col[:m].copy(), out_val[:m].copy()


@njit(cache=True)
def restricted_transitions(ptr, col, val, nb, ids, prune):
    """The agent's level 2 from the lumped model (stacked CSR on ``nb`` blocks, row ``a * nb + x``): ``T`` on
    the blocks ``ids`` (cluster ``c`` is block ``ids[c]``), rows renormalised (a row without mass uniform),
    entries below ``prune`` dropped but each row's largest (the first), rows renormalised again.  Returns
    the stacked CSR ``(indptr, indices, data)`` (row ``a * k + c``, columns increasing), bit for bit what
    these steps give on the dense ``(A, k, k)`` array ``T[:, ids][:, :, ids]`` (its rows summed in turn,
    numpy's sum along a slowest axis; the pruned rows, contiguous, by :func:`pairwise_sum`)."""
    k = ids.shape[0]
    A = (ptr.shape[0] - 1) // max(nb, 1)
    pos_of = np.full(nb, -1, dtype=np.int64)
    for c in range(k):
        pos_of[ids[c]] = c
    out_ptr = np.zeros(A * k + 1, dtype=np.int64)
    out_idx = np.empty(16, dtype=np.int64)
    out_val = np.empty(16)
    m = 0
    every = prune <= 0.0   # every entry is kept, zeros too
    pos = np.empty(max(k, 1), dtype=np.int64)
    v = np.empty(max(k, 1))
    spare = np.empty(max(k, 1), dtype=np.int64)
    kp = np.empty(max(k, 1), dtype=np.int64)
    kv = np.empty(max(k, 1))
    fi = np.empty((6, 64), dtype=np.int64)
    fl = np.empty(64)
    stamp = np.full(max(k, 1), -1, dtype=np.int64)
    dense = np.empty(max(k, 1))
    for a in range(A):
        for c in range(k):
            r = a * nb + ids[c]
            n_r = 0
            increasing = True
            for p in range(ptr[r], ptr[r + 1]):
                if pos_of[col[p]] >= 0:
                    pos[n_r] = pos_of[col[p]]
                    v[n_r] = val[p]
                    if n_r and pos[n_r] < pos[n_r - 1]:
                        increasing = False
                    n_r += 1
            if not increasing:
                if n_r <= 48:
                    _sort_by(pos, spare, v, n_r)
                else:   # positions are distinct: placed by position and read in order (no sort)
                    for q in range(n_r):
                        stamp[pos[q]] = r
                        dense[pos[q]] = v[q]
                    q = 0
                    for t in range(k):
                        if stamp[t] == r:
                            pos[q] = t
                            v[q] = dense[t]
                            q += 1
            total = 0.0   # numpy sums T[:, ids][:, :, ids] along its slowest axis: in turn, no pairs
            for q in range(n_r):
                total += v[q]
            if total > 0.0:
                if every:   # the zeros too, in place from the last position down
                    q = n_r - 1
                    for t in range(k - 1, -1, -1):
                        if q >= 0 and pos[q] == t:
                            v[t] = v[q]
                            q -= 1
                        else:
                            v[t] = 0.0
                        pos[t] = t
                    n_r = k
                for q in range(n_r):
                    v[q] = v[q] / total
            else:
                for q in range(k):
                    pos[q] = q
                    v[q] = 1.0 / max(k, 1)
                n_r = k
            best = 0
            for q in range(1, n_r):
                if v[q] > v[best]:
                    best = q
            n_k = 0
            for q in range(n_r):
                if v[q] >= prune or q == best:
                    kp[n_k] = pos[q]
                    kv[n_k] = v[q]
                    n_k += 1
            z = 0.0 + _pairwise(kp, kv, 0, n_k, 0, k, fi, fl)
            out_idx = _grown(out_idx, m + n_k)
            out_val = _grown(out_val, m + n_k)
            for q in range(n_k):
                out_idx[m] = kp[q]
                out_val[m] = kv[q] / z
                m += 1
            out_ptr[a * k + c + 1] = m
    return out_ptr, out_idx[:m].copy(), out_val[:m].copy()


def dense_lumped(ptr, col, val, A, n):
    """The dense ``(A, n, n)`` array of a stacked CSR lumped model (row ``a * n + x``).

    >>> dense_lumped(np.array([0, 1, 1]), np.array([1]), np.array([0.5]), 1, 2).tolist()
    [[[0.0, 0.5], [0.0, 0.0]]]
    """
    out = np.zeros((A * n, n))
    rows = np.repeat(np.arange(A * n), np.diff(ptr))
    out[rows, col] = val
    return out.reshape(A, n, n)


def m_step_pairs(S, Q, T, pairs, starts, sizes, scale, pc, slip, redo, row_sums=None, pair_on=None):
    """:func:`_m_step_pairs` with ``row_sums`` and ``pair_on`` optional (None: empty). numba types an
    omitted array default by the default's identity, a new object in every process, so a kernel with array
    defaults is compiled afresh in every process and its cache grows by one entry per process; this
    wrapper always passes arrays.

    >>> S = np.ones((1, 2, 2)); Q, T = np.zeros_like(S), np.zeros_like(S)
    >>> one = np.zeros(1, dtype=np.int64)
    >>> m_step_pairs(S, Q, T, np.zeros((1, 2), dtype=np.int64), one, one + 2, 1.0, 0.0, 0.0, np.ones(1, dtype=np.bool_))
    >>> T[0].tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    _m_step_pairs(S, Q, T, pairs, starts, sizes, scale, pc, slip, redo,
                  np.zeros((0, 0)) if row_sums is None else row_sums,
                  np.zeros(0, dtype=np.bool_) if pair_on is None else pair_on)


@njit(cache=True)
def _m_step_pairs(S, Q, T, pairs, starts, sizes, scale, pc, slip, redo, row_sums, pair_on):
    """The M-step on the blocks of the observation pairs (``T``, ``Q`` zero elsewhere), rows of the
    observations with ``redo`` only: ``Q[a, i, :] ~ scale * S[a, i, :] + pc`` over the pairs' blocks, and
    ``T_a = (1 - slip) Q_a + slip mean_b Q_b``.  ``row_sums``: ``S.sum(axis=2)`` summed pair by pair as
    :func:`absorb_counts` returns it (the pass over ``S`` that computes it is then skipped), or empty.
    ``pair_on``: when not empty, ``Q`` and ``T`` are written on the blocks of the pairs it marks only
    (normalised over all the pairs; the other blocks keep stale values until the next full M-step)."""
    A, H, _ = S.shape
    K = sizes.shape[0]
    given = row_sums.shape[0] > 0
    Z = row_sums if given else np.zeros((A, H))
    width = np.zeros(K)
    for p in range(pairs.shape[0]):
        o, o2 = pairs[p, 0], pairs[p, 1]
        if not redo[o]:
            continue
        width[o] += sizes[o2]
        if given:
            continue
        s0, n0, s1, n1 = starts[o], sizes[o], starts[o2], sizes[o2]
        for a in range(A):
            for i in range(s0, s0 + n0):
                acc = 0.0
                for j in range(s1, s1 + n1):
                    acc += S[a, i, j]
                Z[a, i] += acc
    # row by row over the runs of adjoining blocks to write (every cell is its own: any order gives the
    # same numbers, and whole rows are read and written in long stretches)
    rptr, lo, hi = _pair_runs(pairs, starts, sizes, redo, pair_on)
    mean = np.empty(H)
    for o in range(K):
        if rptr[o] == rptr[o + 1]:
            continue
        for i in range(starts[o], starts[o] + sizes[o]):
            for r in range(rptr[o], rptr[o + 1]):
                for j in range(lo[r], hi[r]):
                    mean[j] = 0.0
            for a in range(A):
                z = scale * Z[a, i] + pc * width[o]
                for r in range(rptr[o], rptr[o + 1]):
                    for j in range(lo[r], hi[r]):
                        q = (scale * S[a, i, j] + pc) / z
                        Q[a, i, j] = q
                        mean[j] += q
            for a in range(A):
                for r in range(rptr[o], rptr[o + 1]):
                    for j in range(lo[r], hi[r]):
                        T[a, i, j] = (1.0 - slip) * Q[a, i, j] + slip / A * mean[j]


@njit(cache=True)
def take_blocks(T, Q, blocks, starts, sizes):
    """Copies of ``T`` and ``Q`` on the clone blocks of the view pairs ``blocks`` (rows ``(o, o2)``), flat,
    block after block (every action, then the rows of ``o``, then the columns of ``o2``); see
    :func:`put_blocks`.

    >>> T = np.arange(16.0).reshape(1, 4, 4); one = np.ones(2, dtype=np.int64)
    >>> take_blocks(T, -T, np.array([[1, 0]]), np.array([0, 2]), one * 2)[0].tolist()
    [8.0, 9.0, 12.0, 13.0]
    """
    A = T.shape[0]
    n = 0
    for b in range(blocks.shape[0]):
        n += A * sizes[blocks[b, 0]] * sizes[blocks[b, 1]]
    bt = np.empty(n)
    bq = np.empty(n)
    m = 0
    for b in range(blocks.shape[0]):
        s0, n0, s1, n1 = starts[blocks[b, 0]], sizes[blocks[b, 0]], starts[blocks[b, 1]], sizes[blocks[b, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                for j in range(s1, s1 + n1):
                    bt[m] = T[a, i, j]
                    bq[m] = Q[a, i, j]
                    m += 1
    return bt, bq


@njit(cache=True)
def put_blocks(T, Q, blocks, starts, sizes, bt, bq):
    """Write back what :func:`take_blocks` copied from the same ``blocks``.

    >>> T = np.zeros((1, 2, 2)); Q = np.zeros((1, 2, 2)); one = np.ones(2, dtype=np.int64)
    >>> put_blocks(T, Q, np.array([[0, 1]]), np.array([0, 1]), one, np.array([5.0]), np.array([6.0]))
    >>> T[0].tolist(), float(Q[0, 0, 1])
    ([[0.0, 5.0], [0.0, 0.0]], 6.0)
    """
    A = T.shape[0]
    m = 0
    for b in range(blocks.shape[0]):
        s0, n0, s1, n1 = starts[blocks[b, 0]], sizes[blocks[b, 0]], starts[blocks[b, 1]], sizes[blocks[b, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                for j in range(s1, s1 + n1):
                    T[a, i, j] = bt[m]
                    Q[a, i, j] = bq[m]
                    m += 1


@njit(cache=True)
def _pair_runs(pairs, starts, sizes, redo, pair_on):
    """The blocks of the pairs whose first view is marked ``redo`` (and which ``pair_on`` marks, unless it is
    empty) as runs of adjoining clones per first view: ``(ptr, lo, hi)``, view ``o``'s runs
    ``lo[ptr[o]:ptr[o + 1]]`` to ``hi[...]`` (increasing)."""
    K = sizes.shape[0]
    every = pair_on.shape[0] == 0
    on = np.empty(pairs.shape[0], dtype=np.bool_)
    for p in range(pairs.shape[0]):
        on[p] = redo[pairs[p, 0]] and (every or pair_on[p])
    ptr, idx = _pairs_by_view(pairs, K, on)
    nxt = pairs[idx, 1].copy()
    for o in range(K):
        nxt[ptr[o]:ptr[o + 1]].sort()   # views in order: their clones in order
    return _adjoining_runs(ptr, nxt, starts, sizes)


@njit(cache=True)
def _adjoining_runs(ptr, cols, starts, sizes):
    """The clone blocks of the views ``cols[ptr[o]:ptr[o + 1]]`` after each view ``o`` (increasing) as runs of
    adjoining clones: ``(run_ptr, lo, hi)``, view ``o``'s runs ``lo[run_ptr[o]:run_ptr[o + 1]]`` to ``hi[...]``."""
    K = ptr.shape[0] - 1
    run_ptr = np.zeros(K + 1, dtype=np.int64)
    lo = np.empty(cols.shape[0], dtype=np.int64)
    hi = np.empty(cols.shape[0], dtype=np.int64)
    nr = 0
    for o in range(K):
        for q in range(ptr[o], ptr[o + 1]):
            s0 = starts[cols[q]]
            if nr > run_ptr[o] and hi[nr - 1] == s0:
                hi[nr - 1] = s0 + sizes[cols[q]]
            else:
                lo[nr] = s0
                hi[nr] = s0 + sizes[cols[q]]
                nr += 1
        run_ptr[o + 1] = nr
    return run_ptr, lo, hi


@njit(cache=True)
def _pairs_by_view(pairs, K, on):
    """The pairs marked ``on`` by first view, each view's in the order of ``pairs``: ``(ptr, pair index)``."""
    ptr = np.zeros(K + 1, dtype=np.int64)
    for p in range(pairs.shape[0]):
        if on[p]:
            ptr[pairs[p, 0] + 1] += 1
    for o in range(K):
        ptr[o + 1] += ptr[o]
    idx = np.empty(ptr[K], dtype=np.int64)
    fill = ptr[:-1].copy()
    for p in range(pairs.shape[0]):
        if on[p]:
            idx[fill[pairs[p, 0]]] = p
            fill[pairs[p, 0]] += 1
    return ptr, idx


def absorb_counts(S, C, Q, Z, pairs, on, starts, sizes, slip, add, floor=0.0, view_moves=None):
    """:func:`_absorb_counts`; ``view_moves``: ``(vmax, vtot)``, (A, H) arrays of zeros that take, per row
    ``(a, i)`` of the recorded counts ``C``, the moves to its most common next view and all its moves (the
    slip floor, :func:`~hmmmerge.replay.slip_share_floor`)."""
    if view_moves is None:
        e = np.zeros((0, 0))
        return _absorb_counts(S, C, Q, Z, pairs, on, starts, sizes, slip, add, floor, e, e)
    return _absorb_counts(S, C, Q, Z, pairs, on, starts, sizes, slip, add, floor, view_moves[0], view_moves[1])


@njit(cache=True)
def _view_moves(vmax, vtot, a, i, blk):
    """Row ``(a, i)``'s recorded moves ``blk`` to one view (a block: the pairs are distinct) into its largest
    and its sum over views."""
    vtot[a, i] += blk
    if blk > vmax[a, i]:
        vmax[a, i] = blk


@njit(cache=True)
def _absorb_counts(S, C, Q, Z, pairs, on, starts, sizes, slip, add, floor, vmax, vtot):
    """Fold the E-step's counts ``C`` of the recorded action into the kept counts ``S`` of the executed
    action, on the blocks of the pairs marked ``on`` (the batch's: ``C`` is zero elsewhere): a move
    ``i -> j`` recorded as ``a`` was made by ``a`` with weight ``(1 - slip) Q_a[i, j]`` and by each ``b``
    with ``slip / A Q_b[i, j]`` (over their sum ``T_a[i, j]``, computed from ``Q``: ``T`` is not read); ``S <- S + add * executed`` and
    ``Z <- Z + add * executed.sum(axis=2)`` (``Z`` the row sums of ``S``); ``C`` is zeroed there (the
    buffer is reused).  Returns the expected slipped moves of ``C``.

    The decay of the stepwise update is not applied here: the caller keeps ``S`` as ``g * S`` with a
    global scale ``g`` (decay: ``g <- keep * g``, ``add = eta / (n g)``), so the blocks the batch did not
    make cost nothing.  A row of an ``on`` block where ``C`` is at most ``floor`` for every action (the
    batch hardly passed through that clone) only decays too: its counts are dropped (``C`` is zeroed)."""
    A, H, _ = C.shape
    K = sizes.shape[0]
    rsum = np.empty(H)
    qsum = np.empty(H)
    # row by row (a row's blocks in the order of the pairs: the row sums add up as pair by pair); the
    # slipped moves of each cell kept and summed at the end in the order of a pass pair by pair
    vptr, vidx = _pairs_by_view(pairs, K, on)
    base = np.zeros(pairs.shape[0] + 1, dtype=np.int64)
    for p in range(pairs.shape[0]):
        base[p + 1] = base[p] + (sizes[pairs[p, 0]] * sizes[pairs[p, 1]] if on[p] and slip > 0.0 else 0)
    part = np.zeros(base[pairs.shape[0]])
    for o in range(K):
        s0, n0 = starts[o], sizes[o]
        for i in range(s0, s0 + n0):
            for e in range(vptr[o], vptr[o + 1]):
                p = vidx[e]
                s1, n1 = starts[pairs[p, 1]], sizes[pairs[p, 1]]
                empty = True
                for a in range(A):
                    for j in range(s1, s1 + n1):
                        if C[a, i, j] > floor:
                            empty = False
                            break
                    if not empty:
                        break
                if empty:
                    if floor > 0.0:
                        for a in range(A):
                            for j in range(s1, s1 + n1):
                                C[a, i, j] = 0.0
                    continue
                if vtot.shape[0] > 0 and slip == 0.0:
                    for a in range(A):
                        blk = 0.0
                        for j in range(s1, s1 + n1):
                            blk += C[a, i, j]
                        _view_moves(vmax, vtot, a, i, blk)
                if slip > 0.0:
                    # T_a = (1 - slip) Q_a + slip mean_b Q_b as the M-step writes it, from Q (one array less read)
                    for j in range(s1, s1 + n1):
                        rsum[j] = 0.0
                        qsum[j] = 0.0
                    for a in range(A):
                        for j in range(s1, s1 + n1):
                            qsum[j] += Q[a, i, j]
                    for a in range(A):
                        blk = 0.0
                        for j in range(s1, s1 + n1):
                            c = C[a, i, j]
                            if c != 0.0:   # 0 / t is 0: the division only where the batch counted
                                blk += c
                                t = (1.0 - slip) * Q[a, i, j] + slip / A * qsum[j]
                                r = c / t if t > 0.0 else 0.0
                                C[a, i, j] = r
                                rsum[j] += r
                        if vtot.shape[0] > 0:
                            _view_moves(vmax, vtot, a, i, blk)
                    at = base[p] + (i - s0) * n1 - s1
                    for j in range(s1, s1 + n1):
                        part[at + j] = slip / A * rsum[j] * qsum[j]
                for a in range(A):
                    acc = 0.0
                    for j in range(s1, s1 + n1):
                        c = C[a, i, j]
                        if slip > 0.0:
                            c = Q[a, i, j] * ((1.0 - slip) * c + slip / A * rsum[j])
                        S[a, i, j] += add * c
                        acc += c
                        C[a, i, j] = 0.0
                    Z[a, i] += add * acc
    slipped = 0.0   # an empty row's zeros change no sum
    for q in range(part.shape[0]):
        slipped += part[q]
    return slipped


@njit(cache=True)
def faded_pairs(S, pairs, starts, sizes, floor):
    """Whether every kept count of each pair's block is at most ``floor`` (all actions), (n_pairs,) bool."""
    A = S.shape[0]
    out = np.ones(pairs.shape[0], dtype=np.bool_)
    for p in range(pairs.shape[0]):
        s0, n0, s1, n1 = starts[pairs[p, 0]], sizes[pairs[p, 0]], starts[pairs[p, 1]], sizes[pairs[p, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                for j in range(s1, s1 + n1):
                    if S[a, i, j] > floor:
                        out[p] = False
                        break
                if not out[p]:
                    break
            if not out[p]:
                break
    return out


@njit(cache=True)
def drop_pairs(S, Q, T, Z, pairs, drop, starts, sizes):
    """Zero ``S``, ``Q``, ``T`` on the blocks of the pairs marked ``drop``, and sum the rows ``Z`` of their
    first observations anew from the blocks of the pairs kept (the other rows of ``Z`` are unchanged)."""
    A = S.shape[0]
    K = sizes.shape[0]
    redo = np.zeros(K, dtype=np.bool_)
    for p in range(pairs.shape[0]):
        if not drop[p]:
            continue
        o = pairs[p, 0]
        redo[o] = True
        s0, n0, s1, n1 = starts[o], sizes[o], starts[pairs[p, 1]], sizes[pairs[p, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                for j in range(s1, s1 + n1):
                    S[a, i, j] = 0.0
                    Q[a, i, j] = 0.0
                    T[a, i, j] = 0.0
    for o in range(K):
        if redo[o]:
            for a in range(A):
                for i in range(starts[o], starts[o] + sizes[o]):
                    Z[a, i] = 0.0
    for p in range(pairs.shape[0]):
        o = pairs[p, 0]
        if drop[p] or not redo[o]:
            continue
        s0, n0, s1, n1 = starts[o], sizes[o], starts[pairs[p, 1]], sizes[pairs[p, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                acc = 0.0
                for j in range(s1, s1 + n1):
                    acc += S[a, i, j]
                Z[a, i] += acc
    return redo


@njit(cache=True)
def row_sums(S, pairs, starts, sizes):
    """``S.sum(axis=2)`` read on the pairs' blocks, summed pair by pair, (A, H)."""
    A, H, _ = S.shape
    Z = np.zeros((A, H))
    for p in range(pairs.shape[0]):
        s0, n0, s1, n1 = starts[pairs[p, 0]], sizes[pairs[p, 0]], starts[pairs[p, 1]], sizes[pairs[p, 1]]
        for a in range(A):
            for i in range(s0, s0 + n0):
                acc = 0.0
                for j in range(s1, s1 + n1):
                    acc += S[a, i, j]
                Z[a, i] += acc
    return Z


@njit(cache=True)
def _m_cell(S, Q, T, Z, i, j, scale, pc_row, pc, slip):
    """The M-step of one clone pair ``(i, j)`` over every action: ``Q[a, i, j] = (scale S + pc) / (scale Z[a, i]
    + pc_row)``, ``T[a, i, j] = (1 - slip) Q[a, i, j] + slip mean_b Q[b, i, j]``."""
    A = S.shape[0]
    mean = 0.0
    for a in range(A):
        x = (scale * S[a, i, j] + pc) / (scale * Z[a, i] + pc_row)
        Q[a, i, j] = x
        mean += x
    for a in range(A):
        T[a, i, j] = (1.0 - slip) * Q[a, i, j] + slip / A * mean


@njit(cache=True)
def m_step_lines(S, Q, T, Z, lines, colour, starts, sizes, succ_ptr, succ_col, pred_ptr, pred_col, scale, pc,
                 slip):
    """The M-step of :func:`m_step_pairs` on the rows and the columns of the clones ``lines`` only: what a
    move of kept counts between clones changes (a split).  The rows' sums ``Z`` are summed anew; the
    columns are written with the other rows' ``Z`` as they are (moves between clones of one view keep
    the sums of the rows they pass through).  ``succ_*``, ``pred_*``: the views after / before each view
    (CSR of the pairs)."""
    A = S.shape[0]
    K = sizes.shape[0]
    width = np.zeros(K)
    for o in range(K):
        for q in range(succ_ptr[o], succ_ptr[o + 1]):
            width[o] += sizes[succ_col[q]]
    for r in range(lines.shape[0]):
        i = lines[r]
        o = colour[i]
        for a in range(A):
            acc = 0.0
            for q in range(succ_ptr[o], succ_ptr[o + 1]):
                s1 = starts[succ_col[q]]
                for j in range(s1, s1 + sizes[succ_col[q]]):
                    acc += S[a, i, j]
            Z[a, i] = acc
        for q in range(succ_ptr[o], succ_ptr[o + 1]):
            s1 = starts[succ_col[q]]
            for j in range(s1, s1 + sizes[succ_col[q]]):
                _m_cell(S, Q, T, Z, i, j, scale, pc * width[o], pc, slip)
    for r in range(lines.shape[0]):
        j = lines[r]
        v = colour[j]
        for q in range(pred_ptr[v], pred_ptr[v + 1]):
            o = pred_col[q]
            s0 = starts[o]
            for i in range(s0, s0 + sizes[o]):
                _m_cell(S, Q, T, Z, i, j, scale, pc * width[o], pc, slip)


@njit(cache=True)
def block_argmax(alpha, off):
    """Index of the largest entry of every step's block of the flat per-step array (first on ties)."""
    n = off.shape[0] - 1
    out = np.zeros(n, dtype=np.int64)
    for t in range(n):
        best = -1.0
        for k in range(off[t + 1] - off[t]):
            if alpha[off[t] + k] > best:
                best = alpha[off[t] + k]
                out[t] = k
    return out


@njit(cache=True)
def move_states(clone_state, states, clones, labels, count, lab, unlab):
    """``clone_state[states[t]] <- clones[t]`` in order (a state given twice ends with its last clone),
    keeping per clone the number of its states ``count`` and, when ``lab`` has rows, of its states per
    true label ``lab`` (clones x labels; ``labels[t]`` is ``states[t]``'s, and ``unlab`` counts label -1)."""
    keep_lab = lab.shape[0] > 0
    for t in range(states.shape[0]):
        s = states[t]
        new = clones[t]
        old = clone_state[s]
        if old == new:
            continue
        lb = labels[t]
        if old >= 0:
            count[old] -= 1
            if keep_lab:
                if lb >= 0:
                    lab[old, lb] -= 1
                else:
                    unlab[old] -= 1
        if new >= 0:
            count[new] += 1
            if keep_lab:
                if lb >= 0:
                    lab[new, lb] += 1
                else:
                    unlab[new] += 1
        clone_state[s] = new


@njit(cache=True)
def clone_purity(count, lab, unlab, cluster_of_clone, k, L):
    """Per cluster (``cluster_of_clone``: -1 for none): its number of states and the count of its most
    common label (labels below ``L``), summed from the clones' tables of :func:`move_states`; and the
    connected states without a label.  Returns ``(sizes, top, unlabelled)``."""
    H = lab.shape[0]
    sizes = np.zeros(k, dtype=np.int64)
    top = np.zeros(k, dtype=np.int64)
    unlabelled = 0
    order = np.argsort(cluster_of_clone, kind="mergesort")
    row = np.zeros(L, dtype=np.int64)
    i = 0
    while i < H:
        c = cluster_of_clone[order[i]]
        j = i
        while j < H and cluster_of_clone[order[j]] == c:
            j += 1
        if c >= 0:
            for q in range(i, j):
                h = order[q]
                if count[h] > 0:
                    sizes[c] += count[h]
                    unlabelled += unlab[h]
                    for b in range(L):
                        row[b] += lab[h, b]
            best = 0
            for b in range(L):
                if row[b] > best:
                    best = row[b]
                row[b] = 0
            top[c] = best
        i = j
    return sizes, top, unlabelled


@njit(cache=True)
def write_assignment(assignment, clone_state, n, cluster_of_clone, k):
    """``assignment[i] <- cluster_of_clone[clone_state[i]]`` for the first ``n`` states (-1 without a
    clone); returns the largest state of each of the ``k`` clusters (-1: none)."""
    rep = np.full(k, -1, dtype=np.int64)
    for i in range(n):
        c = clone_state[i]
        x = cluster_of_clone[c] if c >= 0 else -1
        assignment[i] = x
        if x >= 0:
            rep[x] = i
    return rep


@njit(cache=True)
def noise_odds(T, starts, sizes, obs, acts, off, alpha, scale, horizon, n_obs, expected_above, succ_ptr, succ_col):
    """Evidence that each view was a random one, from the views that follow it.

    For every step ``t`` that is not an episode start, with ``e`` the last step
    of the episode at most ``horizon`` steps later: ``log((1/n_obs) P(o_{t+1..e} | skip))
    - log(P(o_t .. o_e | o_<t))``, where *skip* is the belief after the move of
    step ``t`` without its view (``alpha_{t-1} T[a_t]``) and the second term is the
    forward pass's own (``scale``).  Also the view the skip belief expects most.
    ``alpha``, ``scale``: a forward pass of :mod:`hmmmerge.baselines._em_kernels`; ``succ_ptr``,
    ``succ_col``: the observations that may follow each one (CSR; ``T`` is zero elsewhere).
    A view predicted with probability ``scale[t] >= expected_above`` is not weighed against the
    future (the skip and the taken belief then agree on it): ``log_odds = -log(n_obs * scale[t])``,
    ``expected = obs[t]``.  Returns ``(log_odds, expected)``; ``-inf`` / -1 at episode starts.
    """
    N = obs.shape[0]
    H = T.shape[1]
    K = sizes.shape[0]
    max_size = 0
    for o in range(K):
        if sizes[o] > max_size:
            max_size = sizes[o]
    m = np.empty(H)
    buf = np.empty(max_size)
    nxt = np.empty(max_size)
    mass = np.empty(K)
    log_odds = np.full(N, -np.inf)
    expected = np.full(N, -1, dtype=np.int64)
    # the views after each view as runs of contiguous clones (one loop where the pairs' blocks adjoin)
    run_ptr, run_lo, run_hi = _adjoining_runs(succ_ptr, succ_col, starts, sizes)
    # steps taken by (action, previous view): consecutive steps read the same rows of T (each step's
    # numbers are its own: the order changes no result)
    key = np.empty(N, dtype=np.int64)
    for t in range(N):
        key[t] = (acts[t] * K + obs[t - 1]) if t > 0 and acts[t] >= 0 else -1
    for t in np.argsort(key, kind="mergesort"):
        if key[t] < 0:
            continue
        if scale[t] >= expected_above:
            log_odds[t] = -np.log(n_obs * scale[t])
            expected[t] = obs[t]
            continue
        e = t
        while e + 1 < N and acts[e + 1] >= 0 and e - t < horizon:
            e += 1
        cond = 0.0
        for s in range(t, e + 1):
            cond += np.log(scale[s])
        po = obs[t - 1]
        p0 = starts[po]
        pb = off[t - 1]
        for j in range(H):
            m[j] = 0.0
        Ta = T[acts[t]]
        for i in range(sizes[po]):
            w = alpha[pb + i]
            if w > 0.0:
                row = Ta[p0 + i]
                for q in range(run_ptr[po], run_ptr[po + 1]):   # T is zero outside the observed pairs
                    for j in range(run_lo[q], run_hi[q]):
                        m[j] += w * row[j]
        for o in range(K):
            mass[o] = 0.0
            for k in range(sizes[o]):
                mass[o] += m[starts[o] + k]
        best = 0
        for o in range(1, K):
            if mass[o] > mass[best]:
                best = o
        expected[t] = best
        skip = -np.log(n_obs)
        if e > t:
            o1 = obs[t + 1]
            s1 = starts[o1]
            n1 = sizes[o1]
            Tb = T[acts[t + 1]]
            for k in range(n1):
                buf[k] = 0.0
            for j in range(H):
                mj = m[j]
                if mj > 0.0:
                    row = Tb[j, s1:s1 + n1]
                    for k in range(n1):
                        buf[k] += mj * row[k]
            c = 0.0
            for k in range(n1):
                c += buf[k]
            if not c > 0.0:
                continue
            skip += np.log(c)
            for k in range(n1):
                buf[k] /= c
            prev = o1
            for s in range(t + 2, e + 1):
                o2 = obs[s]
                s2 = starts[o2]
                n2 = sizes[o2]
                sp = starts[prev]
                Tc = T[acts[s]]
                for k in range(n2):
                    nxt[k] = 0.0
                for i in range(sizes[prev]):
                    w = buf[i]
                    if w > 0.0:
                        for k in range(n2):
                            nxt[k] += w * Tc[sp + i, s2 + k]
                c = 0.0
                for k in range(n2):
                    c += nxt[k]
                if not c > 0.0:
                    skip = -np.inf
                    break
                skip += np.log(c)
                for k in range(n2):
                    buf[k] = nxt[k] / c
                prev = o2
        log_odds[t] = skip - cond
    return log_odds, expected


@njit(cache=True)
def _side_counts(M, side, s, base, out):
    """``out[f] = base + sum_k M[k, f]`` over the keys ``k`` with ``side[k] == s``."""
    for f in range(out.shape[0]):
        out[f] = base
    for k in range(M.shape[0]):
        if side[k] == s:
            for f in range(out.shape[0]):
                out[f] += M[k, f]


@njit(cache=True)
def split_tests(seg, key, fut, cnt, n_fut, min_visits):
    """Whether each clone's visits fall into two groups by the way they came in, with different futures.

    The visits of one clone are the rows ``seg[c]:seg[c+1]`` of the sorted unique
    (clone, key, future) triples ``key``, ``fut`` with counts ``cnt``: ``key`` names
    how a visit came in (action and previous clone, or the episode's start),
    ``fut`` what followed (action and next view, ``0..n_fut-1``).  The keys are
    parted into two groups by 2-means on their future counts (a key joins the
    group whose smoothed future distribution gives its counts the larger
    likelihood), started from the key farthest from all the others.  Returns
    ``(G, group)``: the likelihood-ratio statistic ``2 (log L(two groups) -
    log L(one))`` per clone (0 below ``min_visits`` visits or with one key), and
    each triple's group (0 or 1).
    """
    nc = seg.shape[0] - 1
    G = np.zeros(nc)
    group = np.zeros(key.shape[0], dtype=np.int64)
    loc = np.full(n_fut, -1, dtype=np.int64)
    for c in range(nc):
        a, b = seg[c], seg[c + 1]
        n = 0.0
        for r in range(a, b):
            n += cnt[r]
        if n < min_visits:
            continue
        # local ids of the keys (sorted: consecutive runs) and of the futures
        nk = 0
        for r in range(a, b):
            if r == a or key[r] != key[r - 1]:
                nk += 1
        if nk < 2:
            continue
        nf = 0
        for r in range(a, b):
            if loc[fut[r]] < 0:
                loc[fut[r]] = nf
                nf += 1
        M = np.zeros((nk, nf))
        kid = np.empty(b - a, dtype=np.int64)
        k = -1
        for r in range(a, b):
            if r == a or key[r] != key[r - 1]:
                k += 1
            kid[r - a] = k
            M[k, loc[fut[r]]] += cnt[r]
        for r in range(a, b):
            loc[fut[r]] = -1
        tot = np.zeros(nf)
        nkey = np.zeros(nk)
        for k in range(nk):
            for f in range(nf):
                tot[f] += M[k, f]
                nkey[k] += M[k, f]
        # start: the key whose futures differ most from the rest's (its likelihood-ratio statistic)
        best, seed = -1.0, 0
        for k in range(nk):
            g = 0.0
            rest = n - nkey[k]
            if rest <= 0.0:
                continue
            for f in range(nf):
                x, y = M[k, f], tot[f] - M[k, f]
                if x > 0.0:
                    g += x * np.log(x / nkey[k] / (tot[f] / n))
                if y > 0.0:
                    g += y * np.log(y / rest / (tot[f] / n))
            if g > best:
                best, seed = g, k
        side = np.zeros(nk, dtype=np.int64)
        side[seed] = 1
        P = np.empty((2, nf))
        for _ in range(20):
            for s in range(2):
                _side_counts(M, side, s, 0.5, P[s])
                z = 0.0
                for f in range(nf):
                    z += P[s, f]
                for f in range(nf):
                    P[s, f] = np.log(P[s, f] / z)
            moved = False
            for k in range(nk):
                l0, l1 = 0.0, 0.0
                for f in range(nf):
                    l0 += M[k, f] * P[0, f]
                    l1 += M[k, f] * P[1, f]
                s = 1 if l1 > l0 else 0
                if s != side[k]:
                    side[k] = s
                    moved = True
            if not moved:
                break
        # G with maximum-likelihood distributions (0 when one group is empty)
        g = 0.0
        for s in range(2):
            _side_counts(M, side, s, 0.0, P[s])
            ns = 0.0
            for k in range(nk):
                if side[k] == s:
                    ns += nkey[k]
            if ns <= 0.0 or ns >= n:
                g = -1.0
                break
            for f in range(nf):
                if P[s, f] > 0.0:
                    g += P[s, f] * np.log(P[s, f] / ns / (tot[f] / n))
        G[c] = 2.0 * g if g > 0.0 else 0.0
        for r in range(a, b):
            group[r] = side[kid[r - a]]
    return G, group
