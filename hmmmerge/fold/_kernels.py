"""Numba kernels of the fold consolidation (:class:`hmmmerge.fold.FoldMerger`).

The merger's state is a :class:`FoldState` of flat arrays (node ``h + 1`` is
level-1 state ``h``; node 0 is the virtual start) plus scalar counters in
``sc`` (indices below).  Capacities are managed by the caller: every kernel
states what it may append, and :func:`blue_fringe` returns ``NEED_ROOM``
(at a point where stopping changes nothing) when its journal could overflow.

Journal rows are ``(kind, x, a, old, old_child)`` with ``-1`` in unused
fields; they are undone latest first by :func:`rollback`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

# journal operations
PLACE, ROOT, UNION, DELTA, RED, CONFLICT = range(6)
# scalar counters (FoldState.sc)
JLEN, NRED, NCONF, SETTLED, NDEC, STAMP, MERGES, PROMOTIONS, CONFLICTS, NROOTS, LINKS_OK, NROWS, WORK, WORK_LIMIT = range(14)
PRICE, PRICE_LIMIT = 14, 15
N_SC = 16
# WORK counts journal rows written and red blocks scanned (a deterministic measure of a sleep's work);
# a positive WORK_LIMIT makes blue_fringe and fold_groups stop with OVER_BUDGET once WORK exceeds it (the
# state is then left mid-sleep: for a caller that drops the merger, see hmmmerge.replay's exact phase).
# PRICE adds what WORK leaves out, in units of about one WORK's CPU: 2 per pair popped in `fold` (two finds,
# also for pairs already in one block) and 16 per tentative fold of `_evaluate` (its call, stamp, rollback
# and clash memo); the priced work is WORK + PRICE, and a positive PRICE_LIMIT stops a sleep as WORK_LIMIT
# does once WORK + PRICE exceeds it. Both only count: the fold's results do not depend on them.
NEED_ROOM = 1
OVER_BUDGET = 2
_KEY = np.int64(1) << 32


class FoldState(NamedTuple):
    parent: np.ndarray     # (cap,) parent node (0 for a first observation), -1 unrecorded
    action: np.ndarray     # (cap,) action that led to the node (n_actions for a first observation)
    colour: np.ndarray     # (cap,)
    uf: np.ndarray         # (cap,) union-find parent, -1 unplaced; roots are blocks
    uf_time: np.ndarray    # (cap,) journal index of the operation that attached the node
    just: np.ndarray       # (cap,) placement: the node whose transition it followed; -1 fold/root
    red: np.ndarray        # (cap,) bool
    row: np.ndarray        # (cap,) the node's row in the tables below, -1 none (rows: nodes made roots)
    delta: np.ndarray      # (rows, A + 1) successor node per action, -1 none
    dchild: np.ndarray     # (rows, A + 1) a node that gave that successor
    cid: np.ndarray        # (cap,) cluster id of a root as last written, -1 none
    stamp: np.ndarray      # (cap,) scratch marks
    links: np.ndarray      # (rows, A + 1) per root: level-1 links ``i -a->`` from its states (if sc[LINKS_OK])
    first: np.ndarray      # (rows, A + 1) per root: the smallest such ``i`` (-1 none)
    journal: np.ndarray    # (jcap, 5)
    reds: np.ndarray       # (cap,) red blocks in promotion order
    conflicts: np.ndarray  # (ccap, 2) (node, node whose transition it contradicted)
    decisions: np.ndarray  # (dcap,) journal index at which each fold decision began
    sc: np.ndarray         # (N_SC,) counters


@njit(cache=True)
def find(uf, x):
    while uf[x] != x:
        x = uf[x]
    return x


@njit(cache=True)
def _log(st, kind, x, a, old, oldc):
    j = st.sc[JLEN]
    st.journal[j, 0] = kind
    st.journal[j, 1] = x
    st.journal[j, 2] = a
    st.journal[j, 3] = old
    st.journal[j, 4] = oldc
    st.sc[JLEN] = j + 1
    st.sc[WORK] += 1


@njit(cache=True)
def _make_root(st, node, t):
    st.uf[node] = node
    st.uf_time[node] = t
    st.just[node] = -1
    r = st.sc[NROWS]  # rows are taken and given back (rollback) last in, first out
    st.sc[NROWS] = r + 1
    st.row[node] = r
    st.delta[r, :] = -1
    st.dchild[r, :] = -1
    st.links[r, :] = 0
    st.first[r, :] = -1
    st.sc[NROOTS] += 1
    _log(st, ROOT, node, -1, -1, -1)


@njit(cache=True)
def _count_link(st, root, a, source):
    r = st.row[root]
    st.links[r, a] += 1
    if st.first[r, a] < 0 or source < st.first[r, a]:
        st.first[r, a] = source


@njit(cache=True)
def _add_links(st, x, y):
    """The link counts of block ``y`` join those of ``x``."""
    x, y = st.row[x], st.row[y]
    for a in range(st.links.shape[1]):
        if st.links[y, a] > 0:
            st.links[x, a] += st.links[y, a]
            if st.first[x, a] < 0 or st.first[y, a] < st.first[x, a]:
                st.first[x, a] = st.first[y, a]


@njit(cache=True)
def count_links(st, n_nodes):
    """Recount ``links`` / ``first`` of every block from the placed nodes ``< n_nodes``."""
    st.links[:st.sc[NROWS]] = 0
    st.first[:st.sc[NROWS]] = -1
    for node in range(1, n_nodes):
        pnode = st.parent[node]
        if st.uf[node] >= 0 and pnode > 0:
            _count_link(st, find(st.uf, pnode), st.action[node], pnode - 1)
    st.sc[LINKS_OK] = 1


@njit(cache=True)
def place_node(st, node):
    """Put a recorded, unplaced node into the block its parent's transition leads to.

    Appends at most two journal rows and one conflict.  Returns 0, or -1 if
    the parent is not placed.
    """
    pnode = st.parent[node]
    if st.uf[pnode] < 0:
        return -1
    p = find(st.uf, pnode)
    a = st.action[node]
    if pnode > 0:
        _count_link(st, p, a, pnode - 1)
    rp = st.row[p]
    q = st.delta[rp, a]
    t = st.sc[JLEN]
    if q >= 0:
        q = find(st.uf, q)
        if st.colour[q] == st.colour[node]:
            st.uf[node] = q
            st.uf_time[node] = t
            st.just[node] = st.dchild[rp, a]
            _log(st, PLACE, node, -1, -1, -1)
            return 0
        # the transition says another colour: a contradiction, resolved at the next sleep
        _make_root(st, node, t)
        c = st.sc[NCONF]
        st.conflicts[c, 0] = node
        st.conflicts[c, 1] = st.dchild[rp, a]
        st.sc[NCONF] = c + 1
        _log(st, CONFLICT, -1, -1, -1, -1)
        st.sc[CONFLICTS] += 1
        return 0
    _make_root(st, node, t)
    _log(st, DELTA, p, a, st.delta[rp, a], st.dchild[rp, a])
    st.delta[rp, a] = node
    st.dchild[rp, a] = node
    return 0


@njit(cache=True)
def place_nodes(st, nodes):
    """Place ``nodes`` in order; returns the index of the first whose parent is unplaced, or -1."""
    for i in range(nodes.shape[0]):
        if place_node(st, nodes[i]) < 0:
            return i
    return -1


@njit(cache=True)
def place_steps(st, states, prev, start, next_state, emission, cluster_of, k0, new_roots, labels, tab, flags):
    """The agent's online placing of the level-1 states of consecutive steps (see ``FoldMerger.place``).

    New states are recorded (parent ``prev``, action read from the link
    ``prev -> h``) and placed; a state joining a block gets that block's
    cluster id in ``cluster_of``; a new block's state is listed in
    ``new_roots`` and will get id ``k0 + its index there`` (its entry in
    ``cluster_of`` is left at -1).  Returns ``(n_new_roots, last state,
    status)``: status 0, or ``1 + i`` if step ``i`` has no link from the
    previous state, ``-1 - i`` if its parent is not placed.
    """
    A = next_state.shape[0]
    n = next_state.shape[1]
    m = 0
    for i in range(states.shape[0]):
        h = states[i]
        node = h + 1
        if st.parent[node] < 0:
            if h == start:  # only a first observation creates the start state
                pnode = 0
                a = A
            else:
                col = prev if prev >= 0 else n + prev
                a = -1
                for b in range(A):
                    if next_state[b, col] == h:
                        a = b
                        break
                if a < 0:
                    return m, prev, 1 + i
                pnode = prev + 1
            st.parent[node] = pnode
            st.action[node] = a
            st.colour[node] = emission[h]
            if place_node(st, node) < 0:
                return m, prev, -1 - i
            root = find(st.uf, node)
            if root == node:
                cluster_of[h] = -1
                st.cid[node] = k0 + m
                c = k0 + m
                new_roots[m] = h
                m += 1
            else:
                c = st.cid[root]
                cluster_of[h] = c
            if flags[1]:
                if labels[h] < 0:
                    flags[0] = 1
                else:
                    tab[c, labels[h]] += 1
        prev = h
    return m, prev, 0


@njit(cache=True)
def rollback(st, t, unplaced):
    """Undo journal rows from index ``t`` on (latest first); returns how many nodes became unplaced.

    The unplaced nodes are written to ``unplaced`` (in undo order) when it is
    long enough (``len(journal) - t`` always is); pass an empty array to skip.
    """
    m = 0
    record = unplaced.shape[0] > 0
    while st.sc[JLEN] > t:
        j = st.sc[JLEN] - 1
        st.sc[JLEN] = j
        kind = st.journal[j, 0]
        x = st.journal[j, 1]
        if kind == PLACE:
            st.uf[x] = -1
            if record:
                unplaced[m] = x
                m += 1
        elif kind == ROOT:
            st.uf[x] = -1
            st.row[x] = -1
            st.sc[NROWS] -= 1
            st.sc[NROOTS] -= 1
            if record:
                unplaced[m] = x
                m += 1
        elif kind == UNION:
            st.uf[x] = x
            st.sc[NROOTS] += 1
        elif kind == DELTA:
            a = st.journal[j, 2]
            st.delta[st.row[x], a] = st.journal[j, 3]
            st.dchild[st.row[x], a] = st.journal[j, 4]
        elif kind == RED:
            st.red[x] = False
            n = st.sc[NRED]
            i = n - 1
            while st.reds[i] != x:
                i -= 1
            for q in range(i, n - 1):
                st.reds[q] = st.reds[q + 1]
            st.sc[NRED] = n - 1
        elif kind == CONFLICT:
            st.sc[NCONF] -= 1
            if st.sc[SETTLED] > st.sc[NCONF]:
                st.sc[SETTLED] = st.sc[NCONF]
    while st.sc[NDEC] > 0 and st.decisions[st.sc[NDEC] - 1] >= t:
        st.sc[NDEC] -= 1
    return m


@njit(cache=True)
def fold(st, r, b, stack):
    """Merge block ``b`` into ``r`` and, recursively, their successors; the evidence, or -1 on a clash.

    The evidence is the number of distinct blocks other than ``r`` that
    blocks of ``b``'s side were compared with and agreed.  Changes are
    journaled (at most ``(A + 2)`` rows per union); the caller rolls back a
    refused or tentative fold.  ``stack`` holds ``1 + (A + 1) * unions`` pairs.
    """
    A1 = st.delta.shape[1]
    uf = st.uf
    st.sc[STAMP] += 1
    s = st.sc[STAMP]
    compared = 0
    top = 0
    stack[0, 0] = r
    stack[0, 1] = b
    top = 1
    while top > 0:
        top -= 1
        st.sc[PRICE] += 2
        x = find(uf, stack[top, 0])
        y = find(uf, stack[top, 1])
        if x == y:
            continue
        if st.colour[x] != st.colour[y]:
            return -1
        if st.red[y] and not st.red[x]:
            x, y = y, x
        if st.stamp[x] != s:
            st.stamp[x] = s
            compared += 1
        uf[y] = x
        st.uf_time[y] = st.sc[JLEN]
        st.just[y] = -1
        st.sc[NROOTS] -= 1
        _log(st, UNION, y, -1, -1, -1)
        rx, ry = st.row[x], st.row[y]
        for a in range(A1):
            ty = st.delta[ry, a]
            if ty < 0:
                continue
            tx = st.delta[rx, a]
            if tx < 0:
                _log(st, DELTA, x, a, -1, st.dchild[rx, a])
                st.delta[rx, a] = ty
                st.dchild[rx, a] = st.dchild[ry, a]
            else:
                stack[top, 0] = tx
                stack[top, 1] = ty
                top += 1
    return compared - 1


@njit(cache=True)
def blues(st, out):
    """Non-red blocks that a red block (or the virtual start) leads to, sorted; returns how many (in ``out``)."""
    st.sc[STAMP] += 1
    s = st.sc[STAMP]
    A1 = st.delta.shape[1]
    m = 0
    n_red = st.sc[NRED]
    for i in range(n_red + 1):
        r = st.reds[i] if i < n_red else 0
        st.sc[WORK] += 1
        if st.row[r] < 0:
            break
        for a in range(A1):
            t = st.delta[st.row[r], a]
            if t >= 0:
                t = find(st.uf, t)
                if not st.red[t] and st.stamp[t] != s:
                    st.stamp[t] = s
                    out[m] = t
                    m += 1
    out[:m].sort()
    return m


@njit(cache=True)
def _over_budget(st):
    """Whether a work limit is set and the work counter passed it, or a price limit and the priced work."""
    if st.sc[WORK_LIMIT] > 0 and st.sc[WORK] > st.sc[WORK_LIMIT]:
        return True
    return st.sc[PRICE_LIMIT] > 0 and st.sc[WORK] + st.sc[PRICE] > st.sc[PRICE_LIMIT]


@njit(cache=True)
def _promote(st, b):
    st.red[b] = True
    st.reds[st.sc[NRED]] = b
    st.sc[NRED] += 1
    _log(st, RED, b, -1, -1, -1)
    st.sc[PROMOTIONS] += 1


@njit(cache=True)
def _merge(st, r, b, stack):
    """Fold ``b`` into ``r`` as a merge decision; True if done (rolled back on a clash)."""
    mark = st.sc[JLEN]
    st.decisions[st.sc[NDEC]] = mark
    st.sc[NDEC] += 1
    if fold(st, r, b, stack) < 0:
        rollback(st, mark, np.zeros(0, dtype=np.int64))
        return False
    st.sc[MERGES] += 1
    for j in range(mark, st.sc[JLEN]):  # the unions of the merge, in order: link counts follow
        if st.journal[j, 0] == UNION:
            y = st.journal[j, 1]
            _add_links(st, st.uf[y], y)
    return True


@njit(cache=True)
def _evaluate(st, b, clashes, stack):
    """Tentative folds of blue block ``b`` into each red block of its colour (clashes remembered):
    ``(consistent red blocks, best evidence, its red block, runner-up's evidence)``."""
    empty = np.zeros(0, dtype=np.int64)
    cb = st.colour[b]
    consistent, ev_b, r_b, runner_up = 0, -1, -1, 0
    j = 0
    while j < st.sc[NRED]:  # promotions earlier in this round join the candidates
        r = st.reds[j]
        j += 1
        st.sc[WORK] += 1
        if st.colour[r] != cb:
            continue
        key = b * _KEY + r
        if key in clashes:
            continue
        mark = st.sc[JLEN]
        st.sc[PRICE] += 16
        ev = fold(st, r, b, stack)
        rollback(st, mark, empty)
        if ev < 0:
            clashes.add(key)
            continue
        consistent += 1
        if ev > ev_b:
            runner_up = max(runner_up, ev_b)
            ev_b, r_b = ev, r
        else:
            runner_up = max(runner_up, ev)
    return consistent, ev_b, r_b, runner_up


@njit(cache=True)
def blue_fringe(st, k, k_single, provisional):
    """Promote, then merge (most evidence first) until every blue block waits for evidence.

    A blue block is merged into the consistent red block of its colour with
    most evidence, and only if that evidence leads the runner-up's by at
    least the evidence minimum ``k`` (lowered to what ``n_red`` red blocks can
    show: ``max(min(k, n_red - 1), min(k, 2))``), or if that red block is the
    only consistent one and the evidence is at least ``k_single`` (``< 0``:
    no such rule); the pair with the largest lead goes first.  Clashes are
    remembered within the call (a clash stays a clash as the automaton
    grows).  ``provisional`` (the provisional pass of a sleep: ``k`` its lead,
    ``k_single`` 0) merges every eligible pair of a round, largest lead first
    (a fold that now clashes is rolled back), and when no pair is eligible
    promotes every waiting blue block, until no blue block is left.  Returns
    0 when done, ``NEED_ROOM`` (before a round, where stopping changes
    nothing) when the journal or the decision list could overflow in the next
    round.
    """
    A1 = st.delta.shape[1]
    clashes = set()
    clashes.add(np.int64(-1))
    stack = np.empty((2 + A1 * (st.sc[NROOTS] + 1), 2), dtype=np.int64)
    out = np.empty(A1 * (st.sc[NRED] + st.sc[NROOTS] + 1), dtype=np.int64)
    while True:
        room = (st.sc[NROOTS] + 1) * (2 * A1 + 4) + 16
        if st.journal.shape[0] - st.sc[JLEN] < room or st.decisions.shape[0] - st.sc[NDEC] < st.sc[NROOTS] + 1:
            return NEED_ROOM
        if _over_budget(st):
            return OVER_BUDGET
        n_red = st.sc[NRED]
        kk = max(min(k, n_red - 1), min(k, 2))
        if out.shape[0] < A1 * (n_red + 1):
            out = np.empty(A1 * (n_red + st.sc[NROOTS] + 1), dtype=np.int64)
        m = blues(st, out)
        if m == 0:
            return 0
        best, best_r, best_b = -1, -1, -1
        elig_b = np.empty(m, dtype=np.int64)
        elig_r = np.empty(m, dtype=np.int64)
        elig_lead = np.empty(m, dtype=np.int64)
        waiting = np.empty(m, dtype=np.int64)
        n_elig, n_wait = 0, 0
        promoted = False
        for i in range(m):
            if _over_budget(st):
                return OVER_BUDGET
            b = out[i]
            consistent, ev_b, r_b, runner_up = _evaluate(st, b, clashes, stack)
            lead = ev_b - runner_up
            eligible = consistent > 0 and (lead >= kk or (consistent == 1 and 0 <= k_single <= ev_b))
            if eligible:
                elig_b[n_elig], elig_r[n_elig], elig_lead[n_elig] = b, r_b, lead
                n_elig += 1
                if lead > best:
                    best, best_r, best_b = lead, r_b, b
            elif consistent > 0:
                waiting[n_wait] = b
                n_wait += 1
            else:
                _promote(st, b)
                promoted = True
        if promoted:
            continue
        if not provisional:
            if best < 0:
                return 0
            if not _merge(st, best_r, best_b, stack):  # cannot happen after a complete tentative fold; kept safe
                clashes.add(best_b * _KEY + best_r)
        elif n_elig > 0:
            order = np.argsort(-elig_lead[:n_elig], kind="mergesort")  # ties in block order
            for i in order:
                b = elig_b[i]
                if find(st.uf, b) == b:  # not merged by an earlier fold of this round
                    _merge(st, find(st.uf, elig_r[i]), b, stack)
        elif n_wait > 0:
            for i in range(n_wait):
                _promote(st, waiting[i])
        else:
            return 0


@njit(cache=True)
def roots_of(uf, n):
    """The root of nodes ``1..n`` (-1 where unplaced), as an array over level-1 states ``0..n-1``."""
    out = np.empty(n, dtype=np.int64)
    for h in range(n):
        x = uf[h + 1]
        if x >= 0:
            x = find(uf, x)
        out[h] = x
    return out


@njit(cache=True)
def find_all(uf, nodes):
    """The root of each of ``nodes``."""
    out = np.empty(nodes.shape[0], dtype=np.int64)
    for i in range(nodes.shape[0]):
        out[i] = find(uf, nodes[i])
    return out


@njit(cache=True)
def level2_rows(st, roots, k, n_actions):
    """Deterministic level-2 transitions as stacked CSR (row ``a * k + c``): one entry of 1.0 per
    (block, action) with a successor, to that successor's cluster (``roots[c]`` is the root of cluster
    ``c``); with the link counts and smallest source state of each entry."""
    indptr = np.zeros(n_actions * k + 1, dtype=np.int64)
    indices = np.empty(n_actions * k, dtype=np.int64)
    counts = np.empty(n_actions * k, dtype=np.int64)
    first = np.empty(n_actions * k, dtype=np.int64)
    m = 0
    for a in range(n_actions):
        for c in range(k):
            x = st.row[roots[c]]
            t = st.delta[x, a]
            if t >= 0:
                indices[m] = st.cid[find(st.uf, t)]
                counts[m] = st.links[x, a]
                first[m] = st.first[x, a]
                m += 1
            indptr[a * k + c + 1] = m
    return indptr, indices[:m].copy(), np.ones(m), counts[:m].copy(), first[:m].copy()


@njit(cache=True)
def label_table(cluster_of, labels, n, k, n_labels):
    """``tab[c, l]``: level-1 states ``< n`` of cluster ``c`` and label ``l``; and whether a label is < 0."""
    tab = np.zeros((k, n_labels), dtype=np.int64)
    unknown = False
    for h in range(n):
        c = cluster_of[h]
        if c >= 0:
            if labels[h] < 0:
                unknown = True
            else:
                tab[c, labels[h]] += 1
    return tab, unknown


@njit(cache=True)
def merge_rows(tab, new_of_old, k_new):
    """Rows of ``tab`` summed into their new ids."""
    out = np.zeros((k_new, tab.shape[1]), dtype=np.int64)
    for c in range(new_of_old.shape[0]):
        out[new_of_old[c]] += tab[c]
    return out


@njit(cache=True)
def reached_blocks(st):
    """The blocks the automaton reaches from the start (every block but the roots of contradicting
    states), sorted; O(blocks)."""
    A1 = st.delta.shape[1]
    st.sc[STAMP] += 1
    s = st.sc[STAMP]
    queue = np.empty(st.sc[NROOTS] + 1, dtype=np.int64)
    queue[0] = 0
    st.stamp[0] = s
    head, tail = 0, 1
    while head < tail:
        r = st.row[queue[head]]
        head += 1
        for a in range(A1):
            t = st.delta[r, a]
            if t >= 0:
                t = find(st.uf, t)
                if st.stamp[t] != s:
                    st.stamp[t] = s
                    queue[tail] = t
                    tail += 1
    return np.sort(queue[1:tail])


@njit(cache=True)
def fold_groups(st, k, stack, blocks, bounds):
    """Fold each group ``blocks[bounds[g]:bounds[g + 1]]`` into one block when the joint fold clashes
    nowhere and its evidence (summed over the folds) is at least ``k``: into the group's first red
    block (else its first block), the others in order; one fold decision per group folded, a clash
    rolls the group back.  Returns the number of groups folded, or -1 (before a group, where stopping
    changes nothing) when the journal or the decision list could overflow, -2 when a work limit is set
    and passed."""
    A1 = st.delta.shape[1]
    empty = np.zeros(0, dtype=np.int64)
    done = 0
    for g in range(bounds.shape[0] - 1):
        lo, hi = bounds[g], bounds[g + 1]
        if hi - lo < 2:
            continue
        n_red = 0
        for i in range(lo, hi):
            n_red += st.red[blocks[i]]
        if n_red > 1:  # red blocks of one colour clash (the later was promoted for clashing): it would clash
            continue
        room = (st.sc[NROOTS] + 1) * (2 * A1 + 4) + 16
        if st.journal.shape[0] - st.sc[JLEN] < room or st.decisions.shape[0] - st.sc[NDEC] < 1:
            return -1
        if _over_budget(st):
            return -2
        mark = st.sc[JLEN]
        st.decisions[st.sc[NDEC]] = mark
        st.sc[NDEC] += 1
        x = blocks[lo]
        for i in range(lo, hi):
            if st.red[blocks[i]]:
                x = blocks[i]
                break
        total = 0
        for i in range(lo, hi):
            if find(st.uf, x) == find(st.uf, blocks[i]):
                continue
            ev = fold(st, find(st.uf, x), find(st.uf, blocks[i]), stack)
            if ev < 0:
                total = -1
                break
            total += ev
        if total < k:
            rollback(st, mark, empty)
        else:
            st.sc[MERGES] += 1
            done += 1
            for j in range(mark, st.sc[JLEN]):  # link counts follow the unions, as in _merge
                if st.journal[j, 0] == UNION:
                    y = st.journal[j, 1]
                    _add_links(st, st.uf[y], y)
    return done
