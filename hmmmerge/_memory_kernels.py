"""Numba kernels of the two-level memory: Algorithm 1, Algorithm 2 and the online agent loop.

Imported lazily by :mod:`hmmmerge.episodic`, :mod:`hmmmerge.successor` and
:mod:`hmmmerge.agent`.  Level-1 scalars travel in a small int array
``scal = [n_states, current_state, root_next]``: ``current_state == -1`` is the
fixed start state of an episode (before its first observation), and
``root_next`` is its one transition ``T(start, -1)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

N_STATES, CURRENT, ROOT = 0, 1, 2


@njit(cache=True)
def l1_observe(next_state, emission, labels, scal, a, o, label):
    """Algorithm 1 for one observation; returns the new current state.

    ``a == -1`` is the first observation of an episode (from the start state).
    """
    cur = scal[CURRENT]
    if a < 0:
        h = scal[ROOT]
    else:
        h = next_state[a, cur]
    if h < 0 or emission[h] != o:
        h = scal[N_STATES]
        scal[N_STATES] = h + 1
        emission[h] = o
        labels[h] = label
        for b in range(next_state.shape[0]):
            next_state[b, h] = -1
        if a < 0:
            scal[ROOT] = h
        else:
            next_state[a, cur] = h
    scal[CURRENT] = h
    return h


@njit(cache=True)
def observe_batch(obs, actions, states, next_state, emission, labels, scal, out_states, out_pred):
    """Algorithm 1 over episodes (N, L); ``actions[:, 0] == -1`` starts each episode.

    ``out_states`` gets the level-1 state after each observation, ``out_pred``
    the observation level 1 predicted before it (-1: no prediction).
    """
    N, L = obs.shape
    for n in range(N):
        for t in range(L):
            a = actions[n, t]
            if a < 0:
                h = scal[ROOT]
            else:
                h = next_state[a, scal[CURRENT]]
            out_pred[n, t] = emission[h] if h >= 0 else -1
            label = states[n, t] if states.shape[0] > 0 else -1
            out_states[n, t] = l1_observe(next_state, emission, labels, scal, a, obs[n, t], label)


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
def _l2_predict(bel, sup, m, a, k, t2_ptr, t2_idx, t2_val, pred, touched, tlist, cluster_obs, obs_dist):
    """Propagate a sparse belief through T2[a]; fill ``obs_dist``; return (#touched, total mass)."""
    mt = 0
    for q in range(m):
        i = sup[q]
        w = bel[i]
        r = a * k + i
        for p in range(t2_ptr[r], t2_ptr[r + 1]):
            j = t2_idx[p]
            if not touched[j]:
                touched[j] = True
                tlist[mt] = j
                mt += 1
            pred[j] += w * t2_val[p]
    obs_dist[:] = 0.0
    total = 0.0
    for q in range(mt):
        j = tlist[q]
        obs_dist[cluster_obs[j]] += pred[j]
        total += pred[j]
    return mt, total


@njit(cache=True)
def _l2_update(bel, sup, m, mt, total, o, pred, touched, tlist, cluster_obs):
    """Condition the propagated belief on ``o``; clear scratch; return the new support size (0 = lost)."""
    for q in range(m):
        bel[sup[q]] = 0.0
    m_new = 0
    z = 0.0
    if total > 0.0:
        for q in range(mt):
            j = tlist[q]
            if cluster_obs[j] == o and pred[j] > 0.0:
                bel[j] = pred[j]
                z += pred[j]
                sup[m_new] = j
                m_new += 1
    for q in range(mt):
        j = tlist[q]
        pred[j] = 0.0
        touched[j] = False
    if z > 0.0:
        for q in range(m_new):
            bel[sup[q]] /= z
    else:
        for q in range(m_new):
            bel[sup[q]] = 0.0
        m_new = 0
    return m_new


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
def _set_onehot(bel, sup, m, c):
    for q in range(m):
        bel[sup[q]] = 0.0
    bel[c] = 1.0
    sup[0] = c
    return 1


@njit(cache=True)
def _set_emitters(bel, sup, m, o, em_ptr, em_idx):
    for q in range(m):
        bel[sup[q]] = 0.0
    n = em_ptr[o + 1] - em_ptr[o]
    for q in range(n):
        c = em_idx[em_ptr[o] + q]
        bel[c] = 1.0 / n
        sup[q] = c
    return n


@njit(cache=True)
def _connect_online(h, o, cluster_of, bel, sup, m, em_ptr, u_connect, u_choose):
    """Connect level-1 state ``h`` to a cluster drawn from the belief, with probability 1 - exp(H)/n_o."""
    entropy = 0.0
    for q in range(m):
        p = bel[sup[q]]
        if p > 0.0:
            entropy -= p * np.log(p)
    n_o = em_ptr[o + 1] - em_ptr[o]
    if n_o == 0:
        return
    p_connect = 1.0 - np.exp(entropy) / n_o
    if p_connect <= 1e-12 or u_connect >= p_connect:  # a uniform belief never connects (round-off aside)
        return
    acc = 0.0
    chosen = sup[m - 1]
    for q in range(m):
        acc += bel[sup[q]]
        if u_choose < acc:
            chosen = sup[q]
            break
    cluster_of[h] = chosen


@njit(cache=True)
def agent_chunk(
    obs, actions, states, g0, g1,
    next_state, emission, labels, scal, cluster_of,
    fo_counts, fo_prev,
    k, t2_ptr, t2_idx, t2_val, cluster_obs, em_ptr, em_idx,
    bel_a, sup_a, m_a, bel_f, sup_f, m_f,
    pred, touched, tlist, dist,
    out_l1, out_fo, out_l2, out_l2f, out_h1,
    online, uniforms,
):
    """The online agent over flat steps ``g0 <= g < g1`` (see :class:`hmmmerge.agent.TwoLevelMemory`).

    Before each observation of a move it records the observation predicted by
    level 1, the first-order model, level 2 anchored to the current level-1
    state (the paper's predictor) and the pure level-2 filter (-1: none); then
    it learns level 1 (Algorithm 1) and the first-order counts, and updates the
    two level-2 beliefs.  ``m_a``/``m_f``/``fo_prev`` are 1-element arrays.

    With ``online``, a level-1 state without a cluster is connected to a
    cluster drawn from the anchored level-2 posterior ``q`` (over the clusters
    emitting the observation) with probability ``1 - exp(H(q)) / n_o``, where
    ``n_o`` is the number of clusters emitting it; ``uniforms[g]`` holds the
    two uniform draws of step ``g``.  The belief stays the posterior that step.
    """
    for g in range(g0, g1):
        a = actions[g]
        o = obs[g]
        if a >= 0:
            # ---- predictions before seeing o
            h = next_state[a, scal[CURRENT]]
            out_l1[g] = emission[h] if h >= 0 else -1
            row_total = 0
            best = -1
            for j in range(fo_counts.shape[2]):
                c = fo_counts[fo_prev[0], a, j]
                row_total += c
                if best < 0 or c > fo_counts[fo_prev[0], a, best]:
                    best = j
            out_fo[g] = best if row_total > 0 else -1
            fo_counts[fo_prev[0], a, o] += 1
            if k > 0:
                mt, total = _l2_predict(bel_a, sup_a, m_a[0], a, k, t2_ptr, t2_idx, t2_val,
                                        pred, touched, tlist, cluster_obs, dist)
                out_l2[g] = _argmax_or_none(dist, total)
                m_a[0] = _l2_update(bel_a, sup_a, m_a[0], mt, total, o, pred, touched, tlist, cluster_obs)
                mt, total = _l2_predict(bel_f, sup_f, m_f[0], a, k, t2_ptr, t2_idx, t2_val,
                                        pred, touched, tlist, cluster_obs, dist)
                out_l2f[g] = _argmax_or_none(dist, total)
                m_f[0] = _l2_update(bel_f, sup_f, m_f[0], mt, total, o, pred, touched, tlist, cluster_obs)
                if m_f[0] == 0:  # the pure filter restarts from the clusters that emit o
                    m_f[0] = _set_emitters(bel_f, sup_f, 0, o, em_ptr, em_idx)
            else:
                out_l2[g] = -1
                out_l2f[g] = -1
        fo_prev[0] = o
        h1 = l1_observe(next_state, emission, labels, scal, a, o, states[g])
        out_h1[g] = h1
        if k > 0:
            c = cluster_of[h1]
            if c < 0 and online and a >= 0 and m_a[0] > 0:
                _connect_online(h1, o, cluster_of, bel_a, sup_a, m_a[0], em_ptr, uniforms[g, 0], uniforms[g, 1])
            elif c >= 0:
                m_a[0] = _set_onehot(bel_a, sup_a, m_a[0], c)
            elif a < 0:
                m_a[0] = _set_emitters(bel_a, sup_a, m_a[0], o, em_ptr, em_idx)
            if a < 0:
                if c >= 0:
                    m_f[0] = _set_onehot(bel_f, sup_f, m_f[0], c)
                else:
                    m_f[0] = _set_emitters(bel_f, sup_f, m_f[0], o, em_ptr, em_idx)


@njit(cache=True)
def level2_transitions(next_state, n, assignment, k):
    """Row-normalised level-2 transitions as stacked CSR (row ``a * k + c``).

    Counts the level-1 links ``i -a-> j`` with both ends connected to clusters
    (``T2[a] ∝ C^T T1[a] C`` for a hard C) in two passes over the states.
    Column indices within a row are unsorted.
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
    for a in range(A):
        for i in range(n):
            j = next_state[a, i]
            if j >= 0 and assignment[i] >= 0 and assignment[j] >= 0:
                r = a * k + assignment[i]
                cols[fill[r]] = assignment[j]
                fill[r] += 1
    # merge duplicate columns row by row
    seen = np.full(max(k, 1), -1, dtype=np.int64)
    slot = np.zeros(max(k, 1), dtype=np.int64)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indices = np.empty(raw[rows], dtype=np.int64)
    data = np.empty(raw[rows], dtype=np.float64)
    m = 0
    for r in range(rows):
        start = m
        for p in range(raw[r], raw[r + 1]):
            c = cols[p]
            if seen[c] != r:
                seen[c] = r
                slot[c] = m
                indices[m] = c
                data[m] = 1.0
                m += 1
            else:
                data[slot[c]] += 1.0
        total = raw[r + 1] - raw[r]
        for p in range(start, m):
            data[p] /= total
        indptr[r + 1] = m
    return indptr, indices[:m].copy(), data[:m].copy()
