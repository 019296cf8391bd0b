"""Numba kernels of best-first model merging (see :mod:`hmmmerge.baselines.bfmm`).

Imported lazily.  The model is a set of states with deterministic emissions
and Viterbi transition counts stored as an edge pool, a :class:`Pool`:

* edge ``e``: ``src[e] -act[e]-> dst[e]`` with count ``cnt[e] > 0``;
* out-lists per *row* ``(s, a)`` (``row = s * A1 + a``): ``out_head[row]``,
  ``out_next[e]``; in-lists per state: ``in_head[s]``, ``in_next[e]``
  (singly linked, ``-1`` ends a list);
* row caches ``row_n`` (distinct successors), ``row_C`` (total count) and
  ``row_term`` (the row's log evidence, see :func:`row_term_from`).

The kernels take their arrays bundled in named tuples (:class:`Pool`,
:class:`Prior`, :class:`Scratch`, :class:`Colours`, :class:`PairCache`;
:class:`FoldModel`, :class:`Journal`, :class:`FoldScratch` for the fold
search), which numba passes like separate arguments.

Merging ``y`` into ``x`` relabels ``y``'s edges, concatenates the lists and
adds up edges that became equal (same row, same target): the Viterbi path of
the merged model is taken as the union of the merged paths, so counts simply
add.  Dead edges are unlinked from every list at once.

Row log evidence (Dirichlet prior of total weight ``alpha`` spread uniformly
over the ``n`` successors the structure allows, counts ``c_1..c_n``, total ``C``)::

    lgamma(alpha) - lgamma(alpha + C) + sum_j lgamma(c_j + alpha/n) - n lgamma(alpha/n)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

NEG_INF = -np.inf


class Prior(NamedTuple):
    """The Dirichlet prior of every row: total weight ``alpha`` and its :func:`lgamma_table`."""
    alpha: float
    tab: np.ndarray


class Pool(NamedTuple):
    """The model's Viterbi counts as an edge pool with linked lists (module docstring); updated in place."""
    A1: int                # actions per state, virtual start and end actions included
    src: np.ndarray        # (E,) int
    act: np.ndarray        # (E,) int
    dst: np.ndarray        # (E,) int
    cnt: np.ndarray        # (E,) float
    alive: np.ndarray      # (E,) bool, False once an edge was added into another
    out_head: np.ndarray   # (states * A1,) first edge of each row, -1 none
    out_next: np.ndarray   # (E,)
    in_head: np.ndarray    # (states,) first in-edge of each state, -1 none
    in_next: np.ndarray    # (E,)
    row_n: np.ndarray      # (states * A1,) int, distinct successors
    row_C: np.ndarray      # (states * A1,) total count
    row_term: np.ndarray   # (states * A1,) log evidence


class Scratch(NamedTuple):
    """Work arrays of :func:`pair_delta` and :func:`merge_states`, returned clean."""
    acc: np.ndarray        # (states,) float, zeros
    touched: np.ndarray    # (states,) int
    mark: np.ndarray       # (states * A1,) int, -1
    collapsed: np.ndarray  # (E + 1,) int: rows that collapsed in the last merge


class Colours(NamedTuple):
    """The same-emission pairs, grouped by colour.

    Colour ``c`` has ``col_n[c]`` states ``members[col_off[c]:col_off[c + 1]]``;
    state ``s`` is at position ``pos[s]`` of its colour ``col[s]``; the pair at
    positions ``(i, j)`` has entry ``loc_off[c] + i * col_n[c] + j`` in
    ``allowed`` (may merge) and in the scores of :class:`PairCache`.
    """
    col: np.ndarray
    col_off: np.ndarray
    col_n: np.ndarray
    members: np.ndarray
    pos: np.ndarray
    loc_off: np.ndarray
    allowed: np.ndarray


class PairCache(NamedTuple):
    """:class:`Colours` and the scores of its pairs (built by :func:`run_merging`).

    ``local``: change of the log evidence (``-inf`` not scored) and ``rem``:
    transitions removed, per pair entry; ``rowbest[s]`` bounds the best score
    of a pair of ``s`` (``rowarg[s]`` its partner); ``alive[s]``: ``s`` is a
    state of the model (not merged away).
    """
    colours: Colours
    local: np.ndarray
    rem: np.ndarray
    alive: np.ndarray
    rowbest: np.ndarray
    rowarg: np.ndarray


def lgamma_table(alpha, max_count, max_n=64):
    """``tab[n, c] = lgamma(c + alpha / n)`` for ``1 <= n < max_n`` and ``tab[0, c] = lgamma(alpha + c)``.

    Counts are integers, so the kernels look these up instead of calling lgamma.
    """
    from scipy.special import gammaln

    c = np.arange(int(max_count) + 1, dtype=np.float64)
    n = np.arange(1, max_n, dtype=np.float64)
    tab = np.empty((max_n, len(c)))
    tab[0] = gammaln(alpha + c)
    tab[1:] = gammaln(c[None, :] + alpha / n[:, None])
    return tab


@njit(cache=True)
def lg(c, n, alpha, tab):
    """``lgamma(c + alpha / n)`` for an integer count ``c >= 0``."""
    if n < tab.shape[0]:
        ci = int(c)
        if ci < tab.shape[1]:
            return tab[n, ci]
    return math.lgamma(c + alpha / n)


@njit(cache=True)
def row_term_from(n, C, S, alpha, tab):
    """Log evidence of a row with ``n`` successors, total ``C`` and ``S = sum lgamma(c_j + alpha/n)``."""
    if n == 0:
        return 0.0
    ci = int(C)
    lg_ac = tab[0, ci] if ci < tab.shape[1] else math.lgamma(alpha + C)
    if n < tab.shape[0]:
        lg_b = tab[n, 0]
    else:
        lg_b = math.lgamma(alpha / n)
    return tab[0, 0] - lg_ac + S - n * lg_b


@njit(cache=True)
def refresh_row(row, g, prior):
    """Recompute the caches of row ``row`` of the pool ``g`` from its edges."""
    alpha, tab = prior.alpha, prior.tab
    n = 0
    C = 0.0
    e = g.out_head[row]
    while e >= 0:
        n += 1
        C += g.cnt[e]
        e = g.out_next[e]
    S = 0.0
    if n > 0:
        e = g.out_head[row]
        while e >= 0:
            S += lg(g.cnt[e], n, alpha, tab)
            e = g.out_next[e]
    g.row_n[row] = n
    g.row_C[row] = C
    g.row_term[row] = row_term_from(n, C, S, alpha, tab)


@njit(cache=True)
def build_lists(n_states, g, prior):
    """Link every edge of ``g`` into its row's out-list and its target's in-list (edge order kept), then
    compute the caches of every row that has an edge."""
    A1 = g.A1
    out_tail = np.full(n_states * A1, -1, np.int64)
    in_tail = np.full(n_states, -1, np.int64)
    for e in range(g.src.shape[0]):
        row = g.src[e] * A1 + g.act[e]
        g.out_next[e] = -1
        if out_tail[row] < 0:
            g.out_head[row] = e
        else:
            g.out_next[out_tail[row]] = e
        out_tail[row] = e
        t = g.dst[e]
        g.in_next[e] = -1
        if in_tail[t] < 0:
            g.in_head[t] = e
        else:
            g.in_next[in_tail[t]] = e
        in_tail[t] = e
    for row in range(n_states * A1):
        if g.out_head[row] >= 0:
            refresh_row(row, g, prior)


@njit(cache=True)
def pair_delta(x, y, g, prior, w):
    """Change of the log evidence and number of transitions removed if ``x`` and ``y`` of pool ``g`` merge.

    Only the rows touched by the merge enter: the out-rows of ``x`` and ``y``
    (merged, with targets ``y`` relabelled ``x``) and the rows ``(k, a)`` of
    other states that lead to both ``x`` and ``y`` (their two entries add up).
    The scratch ``w`` (:class:`Scratch`) is returned clean.
    """
    A1, alpha, tab = g.A1, prior.alpha, prior.tab
    src, act, dst, cnt = g.src, g.act, g.dst, g.cnt
    out_head, out_next, in_head, in_next = g.out_head, g.out_next, g.in_head, g.in_next
    row_n, row_C, row_term = g.row_n, g.row_C, g.row_term
    acc, touched, mark = w.acc, w.touched, w.mark
    dl = 0.0
    r = 0
    # merged out-rows
    for a in range(A1):
        rx = x * A1 + a
        ry = y * A1 + a
        if out_head[rx] < 0 and out_head[ry] < 0:
            continue
        if out_head[rx] < 0 or out_head[ry] < 0:
            # one row only: it changes only if it leads to both x and y
            r1 = rx if out_head[ry] < 0 else ry
            hits = 0
            e = out_head[r1]
            while e >= 0:
                if dst[e] == x or dst[e] == y:
                    hits += 1
                e = out_next[e]
            if hits < 2:
                continue
        nt = 0
        C = 0.0
        for side in range(2):
            e = out_head[rx] if side == 0 else out_head[ry]
            while e >= 0:
                t = dst[e]
                if t == y:
                    t = x
                if acc[t] == 0.0:
                    touched[nt] = t
                    nt += 1
                acc[t] += cnt[e]
                C += cnt[e]
                e = out_next[e]
        S = 0.0
        for i in range(nt):
            t = touched[i]
            S += lg(acc[t], nt, alpha, tab)
            acc[t] = 0.0
        dl += row_term_from(nt, C, S, alpha, tab) - row_term[rx] - row_term[ry]
        r += row_n[rx] + row_n[ry] - nt
    # rows of other states leading to both x and y
    e = in_head[x]
    while e >= 0:
        k = src[e]
        if k != x and k != y:
            mark[k * A1 + act[e]] = e
        e = in_next[e]
    e = in_head[y]
    while e >= 0:
        k = src[e]
        if k != x and k != y:
            row = k * A1 + act[e]
            e2 = mark[row]
            if e2 >= 0:
                n_new = row_n[row] - 1
                S = lg(cnt[e] + cnt[e2], n_new, alpha, tab)
                f = out_head[row]
                while f >= 0:
                    if f != e and f != e2:
                        S += lg(cnt[f], n_new, alpha, tab)
                    f = out_next[f]
                dl += row_term_from(n_new, row_C[row], S, alpha, tab) - row_term[row]
                r += 1
        e = in_next[e]
    e = in_head[x]
    while e >= 0:
        k = src[e]
        if k != x and k != y:
            mark[k * A1 + act[e]] = -1
        e = in_next[e]
    return dl, r


@njit(cache=True)
def _unlink_dead(list_id, head, nxt_of, alive_e):
    """Drop dead edges from the linked list ``list_id`` (in-list of a state or out-list of a row)."""
    prev = -1
    e = head[list_id]
    while e >= 0:
        nxt = nxt_of[e]
        if not alive_e[e]:
            if prev < 0:
                head[list_id] = nxt
            else:
                nxt_of[prev] = nxt
        else:
            prev = e
        e = nxt


@njit(cache=True)
def merge_states(x, y, g, prior, w):
    """Merge state ``y`` into ``x`` in the pool ``g``, in place.

    ``w.collapsed[:k]`` receives the rows ``(s * A1 + a)`` of other states that
    collapsed.  Returns ``(k, removed)`` with ``removed`` the number of
    transitions (edges) that disappeared.
    """
    A1 = g.A1
    src, act, dst, cnt, alive_e = g.src, g.act, g.dst, g.cnt, g.alive
    out_head, out_next, in_head, in_next = g.out_head, g.out_next, g.in_head, g.in_next
    row_n, row_C, row_term = g.row_n, g.row_C, g.row_term
    mark, collapsed = w.mark, w.collapsed
    removed = 0
    # relabel y's out-edges and append y's rows to x's rows
    for a in range(A1):
        ry = y * A1 + a
        e = out_head[ry]
        if e < 0:
            continue
        while e >= 0:
            src[e] = x
            e = out_next[e]
        rx = x * A1 + a
        if out_head[rx] < 0:
            out_head[rx] = out_head[ry]
        else:
            e = out_head[rx]
            while out_next[e] >= 0:
                e = out_next[e]
            out_next[e] = out_head[ry]
        out_head[ry] = -1
        row_n[ry] = 0
        row_C[ry] = 0.0
        row_term[ry] = 0.0
    # relabel y's in-edges and append y's in-list to x's
    e = in_head[y]
    if e >= 0:
        while e >= 0:
            dst[e] = x
            e = in_next[e]
        if in_head[x] < 0:
            in_head[x] = in_head[y]
        else:
            e = in_head[x]
            while in_next[e] >= 0:
                e = in_next[e]
            in_next[e] = in_head[y]
        in_head[y] = -1
    # add up equal out-edges of x (same row, same target); mark[t] holds the first edge
    n_dirty_t = 0
    for a in range(A1):
        rx = x * A1 + a
        prev = -1
        e = out_head[rx]
        while e >= 0:
            nxt = out_next[e]
            t = dst[e]
            first = mark[t]
            if first >= 0:
                cnt[first] += cnt[e]
                alive_e[e] = False
                removed += 1
                if prev < 0:
                    out_head[rx] = nxt
                else:
                    out_next[prev] = nxt
                if t != x:
                    # the dead edge still sits in t's in-list
                    _unlink_dead(t, in_head, in_next, alive_e)
            else:
                mark[t] = e
                prev = e
            e = nxt
        e = out_head[rx]
        while e >= 0:
            mark[dst[e]] = -1
            e = out_next[e]
    # add up equal in-edges of x from other states (rows k -a-> {x, y})
    n_col = 0
    _unlink_dead(x, in_head, in_next, alive_e)  # edges killed above may still sit in x's in-list
    prev = -1
    e = in_head[x]
    while e >= 0:
        nxt = in_next[e]
        k = src[e]
        if k == x:
            prev = e
            e = nxt
            continue
        row = k * A1 + act[e]
        first = mark[row]
        if first >= 0:
            cnt[first] += cnt[e]
            alive_e[e] = False
            removed += 1
            if prev < 0:
                in_head[x] = nxt
            else:
                in_next[prev] = nxt
            _unlink_dead(row, out_head, out_next, alive_e)
            collapsed[n_col] = row
            n_col += 1
        else:
            mark[row] = e
            prev = e
        e = nxt
    e = in_head[x]
    while e >= 0:
        if src[e] != x:
            mark[src[e] * A1 + act[e]] = -1
        e = in_next[e]
    for a in range(A1):
        refresh_row(x * A1 + a, g, prior)
    for i in range(n_col):
        refresh_row(collapsed[i], g, prior)
    return n_col, removed


@njit(cache=True)
def _row_best(u, pc, lam_logq):
    """The best score of a pair of ``u`` in the cache ``pc`` and its partner (-1 none)."""
    cl = pc.colours
    pos, col, col_off, col_n, members, loc_off = cl.pos, cl.col, cl.col_off, cl.col_n, cl.members, cl.loc_off
    local, rem, alive = pc.local, pc.rem, pc.alive
    c = col[u]
    n = col_n[c]
    base = loc_off[c] + pos[u] * n
    best = NEG_INF
    arg = -1
    for j in range(n):
        v = members[col_off[c] + j]
        if v == u or not alive[v]:
            continue
        d = local[base + j]
        if d == NEG_INF:
            continue
        s = d + lam_logq * rem[base + j]
        if s > best:
            best = s
            arg = v
    return best, arg


@njit(cache=True)
def _eval_pairs_of(u, done, pc, lam_logq, g, prior, w):
    """Re-evaluate every pair (u, v) of u's colour (skipping v with ``done[v]``)."""
    cl = pc.colours
    pos, col, col_off, col_n, members = cl.pos, cl.col, cl.col_off, cl.col_n, cl.members
    loc_off, allowed, local, rem, alive = cl.loc_off, cl.allowed, pc.local, pc.rem, pc.alive
    rowbest, rowarg = pc.rowbest, pc.rowarg
    c = col[u]
    n = col_n[c]
    iu = pos[u]
    best = NEG_INF
    arg = -1
    for j in range(n):
        v = members[col_off[c] + j]
        if v == u or not alive[v]:
            continue
        iuv = loc_off[c] + iu * n + j
        ivu = loc_off[c] + j * n + iu
        if done[v]:
            d = local[iuv]
            rr = rem[iuv]
        elif allowed[iuv]:
            d, rr = pair_delta(u, v, g, prior, w)
            local[iuv] = d
            local[ivu] = d
            rem[iuv] = rr
            rem[ivu] = rr
            s = d + lam_logq * rr
            if s > rowbest[v]:
                rowbest[v] = s
                rowarg[v] = u
        else:
            continue
        if d == NEG_INF:
            continue
        s = d + lam_logq * rr
        if s > best:
            best = s
            arg = v
    rowbest[u] = best
    rowarg[u] = arg


@njit(cache=True)
def _update_pair(u, v, pc, lam_logq, g, prior, w):
    """Re-evaluate one pair if it is a live same-emission candidate; raise the rows' bounds. Returns 1 if evaluated."""
    cl = pc.colours
    pos, col, col_n, loc_off, allowed = cl.pos, cl.col, cl.col_n, cl.loc_off, cl.allowed
    local, rem, alive, rowbest, rowarg = pc.local, pc.rem, pc.alive, pc.rowbest, pc.rowarg
    if u == v or not alive[u] or not alive[v] or col[u] != col[v]:
        return 0
    c = col[u]
    n = col_n[c]
    iuv = loc_off[c] + pos[u] * n + pos[v]
    if not allowed[iuv]:
        return 0
    ivu = loc_off[c] + pos[v] * n + pos[u]
    d, rr = pair_delta(u, v, g, prior, w)
    local[iuv] = d
    local[ivu] = d
    rem[iuv] = rr
    rem[ivu] = rr
    sc = d + lam_logq * rr
    if sc > rowbest[u]:
        rowbest[u] = sc
        rowarg[u] = v
    if sc > rowbest[v]:
        rowbest[v] = sc
        rowarg[v] = u
    return 1


@njit(cache=True)
def run_merging(g, prior, cl, emitting, lam, log_o1, n_trans, max_merges, merges, deltas, stats):
    """Greedy best-first merging of the pool ``g`` until no merge raises the log posterior.

    ``cl`` (:class:`Colours`): the pairs that may merge; ``emitting``: the
    states that may merge; ``n_trans``: the number of edges.  Returns the
    number of merges done; ``merges[k] = (kept, removed)`` and ``deltas[k]``
    (the log posterior change of merge k) are filled in; ``stats`` receives
    (pair evaluations, row refreshes).
    """
    H = emitting.shape[0]
    A1 = g.A1
    total = cl.loc_off[-1]
    pc = PairCache(cl, np.full(total, NEG_INF),
                   np.zeros(total, np.int32), emitting.copy(), np.full(H, NEG_INF), np.full(H, -1, np.int64))
    w = Scratch(np.zeros(H, np.float64), np.zeros(H, np.int64), np.full(H * A1, -1, np.int64),
                np.zeros(g.src.shape[0] + 1, np.int64))
    src, act, dst = g.src, g.act, g.dst
    in_head, in_next, out_head, out_next = g.in_head, g.in_next, g.out_head, g.out_next
    col, col_off, col_n, members, pos = cl.col, cl.col_off, cl.col_n, cl.members, cl.pos
    loc_off, allowed, local, rem = cl.loc_off, cl.allowed, pc.local, pc.rem
    alive, rowbest, rowarg = pc.alive, pc.rowbest, pc.rowarg
    collapsed = w.collapsed
    q = 0
    for s in range(H):
        if alive[s]:
            q += 1
    fresh = np.full(H, -1, np.int64)
    done = np.zeros(H, np.bool_)
    in_dirty = np.zeros(H, np.bool_)
    dirty = np.zeros(H, np.int64)
    pe_src = np.zeros(src.shape[0], np.int64)
    pe_act = np.zeros(src.shape[0], np.int64)

    lam_logq = lam * math.log(q) if q > 0 else 0.0
    # all pairs, once
    for c in range(col_n.shape[0]):
        n = col_n[c]
        for i in range(n):
            u = members[col_off[c] + i]
            for j in range(i + 1, n):
                k = loc_off[c] + i * n + j
                if not allowed[k]:
                    continue
                v = members[col_off[c] + j]
                d, rr = pair_delta(u, v, g, prior, w)
                stats[0] += 1
                local[k] = d
                rem[k] = rr
                k2 = loc_off[c] + j * n + i
                local[k2] = d
                rem[k2] = rr
    for s in range(H):
        if alive[s]:
            b, a_ = _row_best(s, pc, lam_logq)
            rowbest[s] = b
            rowarg[s] = a_
            fresh[s] = 0

    n_done = 0
    it = 0
    while n_done < max_merges and q > 1:
        lam_logq = lam * math.log(q)
        # lazy best-first: rowbest holds upper bounds; refresh the top row until it is fresh
        u = H
        while True:
            b = NEG_INF
            for s in range(H):
                if rowbest[s] > b:
                    b = rowbest[s]
                    u = s
            if b == NEG_INF or fresh[u] == it:
                break
            b2, a2 = _row_best(u, pc, lam_logq)
            stats[1] += 1
            rowbest[u] = b2
            rowarg[u] = a2
            fresh[u] = it
        if b == NEG_INF:
            break
        gain = rowbest[u] + lam * (n_trans * math.log((q + 1.0) / q) + log_o1)
        if not gain > 0.0:
            break
        x = u
        y = rowarg[u]
        if y < x:
            x, y = y, x
        # in-edges of x and y before the merge: pairs (u -a-> x, v -a-> y) change
        npx = 0
        e = in_head[x]
        while e >= 0:
            pe_src[npx] = src[e]
            pe_act[npx] = act[e]
            npx += 1
            e = in_next[e]
        npy = npx
        e = in_head[y]
        while e >= 0:
            pe_src[npy] = src[e]
            pe_act[npy] = act[e]
            npy += 1
            e = in_next[e]
        n_col, removed = merge_states(x, y, g, prior, w)
        alive[y] = False
        rowbest[y] = NEG_INF
        rowarg[y] = -1
        # merge the candidate masks of x and y
        c = col[x]
        n = col_n[c]
        ix = pos[x]
        iy = pos[y]
        for j in range(n):
            a_xy = allowed[loc_off[c] + ix * n + j] or allowed[loc_off[c] + iy * n + j]
            allowed[loc_off[c] + ix * n + j] = a_xy
            allowed[loc_off[c] + j * n + ix] = a_xy
        merges[n_done, 0] = x
        merges[n_done, 1] = y
        deltas[n_done] = gain
        n_done += 1
        n_trans -= removed
        q -= 1
        it += 1
        if q <= 1:
            break
        lam_logq = lam * math.log(q)
        # 1. every pair of x and of the states whose rows collapsed
        nd = 0
        dirty[nd] = x
        nd += 1
        for i in range(n_col):
            k = collapsed[i] // A1
            if emitting[k] and not in_dirty[k]:
                in_dirty[k] = True
                dirty[nd] = k
                nd += 1
        for i in range(nd):
            s_ = dirty[i]
            if alive[s_]:
                stats[0] += col_n[col[s_]]
                _eval_pairs_of(s_, done, pc, lam_logq, g, prior, w)
                fresh[s_] = it
                done[s_] = True
        # 2. pairs (u, v) with u -a-> x and v -a-> y before the merge (now one shared target)
        for i in range(npx):
            u = pe_src[i]
            if not emitting[u] or done[u]:
                continue
            for j in range(npx, npy):
                v = pe_src[j]
                if pe_act[j] == pe_act[i] and emitting[v] and not done[v]:
                    stats[0] += _update_pair(u, v, pc, lam_logq, g, prior, w)
        # 3. pairs of successors of a changed row (x's merged rows, collapsed rows): new common predecessor
        for i in range(A1 + n_col):
            row = x * A1 + i if i < A1 else collapsed[i - A1]
            e = out_head[row]
            while e >= 0:
                u = dst[e]
                if emitting[u] and not done[u]:
                    f = out_next[e]
                    while f >= 0:
                        v = dst[f]
                        if emitting[v] and not done[v]:
                            stats[0] += _update_pair(u, v, pc, lam_logq, g, prior, w)
                        f = out_next[f]
                e = out_next[e]
        for i in range(nd):
            done[dirty[i]] = False
            in_dirty[dirty[i]] = False
    return n_done


# ----------------------------------------------------------------------------------------------------
# Determinising folds (search="fold"): evidence-driven blue-fringe merging of the prefix tree.
#
# The model is kept emission-deterministic: every row (s, a) has at most one successor per observation,
# ``child[s, a, o]`` (-1: none) with count ``fcnt[s, a, o]``.  Folding u into m merges u into m and then,
# recursively, every pair of successors that now share (a, o) -- the determinising merge of RPNI /
# EDSM state merging.  ``parent`` is a union-find forest without path compression (so that a fold can be
# undone from its journal).


class FoldModel(NamedTuple):
    """The emission-deterministic model of the fold search (updated in place, journalled)."""
    parent: np.ndarray    # (states,) union-find forest, no path compression
    child: np.ndarray     # (states, A1, O1) the successor by (action, observation), -1 none
    fcnt: np.ndarray      # (states, A1, O1) its count
    row_term: np.ndarray  # (states * A1,) log evidence of each row as last committed


class Journal(NamedTuple):
    """Every write of the folds since the last commit, to undo them (:func:`undo`)."""
    parent: np.ndarray     # states whose parent was set
    child: np.ndarray      # flat ``child`` entries written ...
    child_old: np.ndarray  # ... and their old values
    count: np.ndarray      # flat ``fcnt`` entries written ...
    count_old: np.ndarray  # ... and their old values
    length: np.ndarray     # (3,) entries in use: [parent, child, count]


class FoldScratch(NamedTuple):
    """Work arrays of :func:`fold`."""
    stack: np.ndarray    # (E + 1, 2) pairs still to fold
    touched: np.ndarray  # (states * A1,) rows whose terms changed
    mark: np.ndarray     # (states * A1,) -1


@njit(cache=True)
def _find(parent, u):
    while parent[u] != u:
        u = parent[u]
    return u


@njit(cache=True)
def _fold_row_term(s, a, fcnt, alpha, tab):
    n = 0
    C = 0.0
    for o in range(fcnt.shape[2]):
        c = fcnt[s, a, o]
        if c > 0:
            n += 1
            C += c
    if n == 0:
        return 0.0
    S = 0.0
    for o in range(fcnt.shape[2]):
        c = fcnt[s, a, o]
        if c > 0:
            S += lg(c, n, alpha, tab)
    return row_term_from(n, C, S, alpha, tab)


@njit(cache=True)
def fold(m, u, fm, prior, jr, w):
    """Fold state ``u`` into ``m`` (both representatives) in ``fm``; journal every write in ``jr``.

    Returns ``(states removed, transitions removed, change of the log evidence, n touched rows)``;
    ``fm.row_term`` is *not* updated (see :func:`commit_rows`), ``w.touched[:k]`` lists the rows
    (s * A1 + a) whose terms changed (a removed state's rows included), ``w.mark`` (-1) is restored.
    """
    parent, child, fcnt, row_term = fm.parent, fm.child, fm.fcnt, fm.row_term
    alpha, tab = prior.alpha, prior.tab
    jp, jc, jcv, jf, jfv, jlen = jr.parent, jr.child, jr.child_old, jr.count, jr.count_old, jr.length
    stack, touched, mark = w.stack, w.touched, w.mark
    A1 = child.shape[1]
    O1 = child.shape[2]
    n_removed = 0
    r_removed = 0
    nt = 0
    top = 0
    stack[0, 0] = m
    stack[0, 1] = u
    top = 1
    while top > 0:
        top -= 1
        x = _find(parent, stack[top, 0])
        y = _find(parent, stack[top, 1])
        if x == y:
            continue
        jp[jlen[0]] = y
        jlen[0] += 1
        parent[y] = x
        n_removed += 1
        for a in range(A1):
            ry = y * A1 + a
            rx = x * A1 + a
            any_y = False
            for o in range(O1):
                cy = fcnt[y, a, o]
                if cy <= 0:
                    continue
                any_y = True
                cu = child[y, a, o]
                cx = child[x, a, o]
                # y's entry moves to x (added to x's entry if there is one)
                jf[jlen[2]] = (y * A1 + a) * O1 + o
                jfv[jlen[2]] = cy
                jlen[2] += 1
                fcnt[y, a, o] = 0.0
                jf[jlen[2]] = (x * A1 + a) * O1 + o
                jfv[jlen[2]] = fcnt[x, a, o]
                jlen[2] += 1
                if fcnt[x, a, o] > 0:
                    fcnt[x, a, o] += cy
                    r_removed += 1
                    if cu >= 0 and cx >= 0:
                        stack[top, 0] = cx
                        stack[top, 1] = cu
                        top += 1
                else:
                    fcnt[x, a, o] = cy
                    jc[jlen[1]] = (x * A1 + a) * O1 + o
                    jcv[jlen[1]] = child[x, a, o]
                    jlen[1] += 1
                    child[x, a, o] = cu
            if any_y:
                for r in (rx, ry):
                    if mark[r] < 0:
                        mark[r] = nt
                        touched[nt] = r
                        nt += 1
    dl = 0.0
    for i in range(nt):
        r = touched[i]
        mark[r] = -1
        dl += _fold_row_term(r // A1, r % A1, fcnt, alpha, tab) - row_term[r]
    return n_removed, r_removed, dl, nt


@njit(cache=True)
def undo(fm, jr, base):
    """Roll ``fm`` back to the journal positions ``base`` (as ``jr.length`` was before the folds)."""
    parent, child, fcnt = fm.parent, fm.child, fm.fcnt
    jp, jc, jcv, jf, jfv, jlen = jr.parent, jr.child, jr.child_old, jr.count, jr.count_old, jr.length
    A1 = child.shape[1]
    O1 = child.shape[2]
    for i in range(jlen[2] - 1, base[2] - 1, -1):
        idx = jf[i]
        fcnt[idx // (A1 * O1), (idx // O1) % A1, idx % O1] = jfv[i]
    for i in range(jlen[1] - 1, base[1] - 1, -1):
        idx = jc[i]
        child[idx // (A1 * O1), (idx // O1) % A1, idx % O1] = jcv[i]
    for i in range(jlen[0] - 1, base[0] - 1, -1):
        parent[jp[i]] = jp[i]
    jlen[0] = base[0]
    jlen[1] = base[1]
    jlen[2] = base[2]


@njit(cache=True)
def init_fold_rows(fm, prior):
    """Every row's log evidence into ``fm.row_term``."""
    fcnt, row_term = fm.fcnt, fm.row_term
    A1 = fcnt.shape[1]
    for s in range(fcnt.shape[0]):
        for a in range(A1):
            row_term[s * A1 + a] = _fold_row_term(s, a, fcnt, prior.alpha, prior.tab)


@njit(cache=True)
def commit_rows(touched, nt, fm, prior):
    """The log evidence of the rows ``touched[:nt]`` into ``fm.row_term``."""
    fcnt, row_term = fm.fcnt, fm.row_term
    A1 = fcnt.shape[1]
    for i in range(nt):
        r = touched[i]
        row_term[r] = _fold_row_term(r // A1, r % A1, fcnt, prior.alpha, prior.tab)


@njit(cache=True)
def run_folds(root, emission, fm, prior, jr, w, lam, log_o1, q, n_trans, merges, gains):
    """Evidence-driven blue-fringe search with determinising folds of ``fm`` (``jr.length`` zeros).

    Red states start as {root}; blue states are the successors of red states that are not red.  The blue
    state with the largest count (the most evidence) is folded into the red state of its emission whose
    fold raises the log posterior most; if none does, it becomes red.  Returns (pair merges, folds);
    ``merges[k] = (kept, removed)``, ``gains[j]`` the log posterior change of fold j.
    """
    parent, child, fcnt = fm.parent, fm.child, fm.fcnt
    jp, jlen = jr.parent, jr.length
    H = parent.shape[0]
    A1 = child.shape[1]
    O1 = child.shape[2]
    red = np.zeros(H, np.bool_)
    red[root] = True
    reds = np.zeros(H, np.int64)
    reds[0] = root
    n_red = 1
    incount = np.zeros(H)
    stamp = np.full(H, -1, np.int64)  # incount[c] counts for this step only when stamp[c] == step
    step = 0
    base = np.zeros(3, np.int64)
    n_merges = 0
    n_folds = 0
    while True:
        # the blue state with the largest in-count
        step += 1
        best_b = -1
        best_c = 0.0
        for i in range(n_red):
            s = reds[i]
            for a in range(A1):
                for o in range(O1):
                    c = child[s, a, o]
                    if c >= 0 and fcnt[s, a, o] > 0:
                        c = _find(parent, c)
                        if not red[c] and emission[c] >= 0:
                            if stamp[c] != step:
                                stamp[c] = step
                                incount[c] = 0.0
                            incount[c] += fcnt[s, a, o]
                            if incount[c] > best_c:
                                best_c = incount[c]
                                best_b = c
        if best_b < 0:
            break
        b = best_b
        # score folding b into every red state of its emission
        best_gain = 0.0
        best_r = -1
        for i in range(n_red):
            r = reds[i]
            if emission[r] != emission[b]:
                continue
            base[:] = jlen
            nrem, rrem, dl, nt = fold(r, b, fm, prior, jr, w)
            q2 = q - nrem
            t2 = n_trans - rrem
            gain = dl - lam * (t2 * math.log(q2 + 1.0) - n_trans * math.log(q + 1.0) + (q2 - q) * log_o1)
            undo(fm, jr, base)
            if gain > best_gain:
                best_gain = gain
                best_r = r
        if best_r < 0:
            red[b] = True
            reds[n_red] = b
            n_red += 1
            continue
        start = jlen[0]
        nrem, rrem, dl, nt = fold(best_r, b, fm, prior, jr, w)
        commit_rows(w.touched, nt, fm, prior)
        for i in range(start, jlen[0]):
            y = jp[i]
            merges[n_merges, 0] = parent[y]
            merges[n_merges, 1] = y
            n_merges += 1
        q -= nrem
        n_trans -= rrem
        gains[n_folds] = best_gain
        n_folds += 1
        jlen[:] = 0  # committed: the journal restarts
    return n_merges, n_folds
