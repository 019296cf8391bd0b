"""Numba kernels of Baum-Welch and Viterbi for action-conditioned clone HMMs.

Imported lazily by :mod:`hmmmerge.baselines.em` (numba is slow to import).

Layout shared by every kernel.  Observation ``o`` owns the clone block
``starts[o] .. starts[o] + sizes[o] - 1`` (deterministic emission), so at step
``t`` only the ``sizes[obs[t]]`` clones of the observed block can carry
probability.  Episodes are concatenated into one sequence ``obs``/``acts``
(length N); ``acts[t] < 0`` marks an episode start, where the belief restarts
from ``B``.  Per-step vectors (forward messages, backward messages,
back-pointers) are stored flat: the block of step ``t`` lives at
``off[t] .. off[t] + sizes[obs[t]]``.

Scaling (no underflow):

    alpha_t   = normalise( alpha_{t-1} T[a_t][blk_{t-1}, blk_t] ),  c_t = the normaliser
    beta_t    = T[a_{t+1}][blk_t, blk_{t+1}] beta_{t+1} / c_{t+1},  beta = 1 at episode ends
    bk_t      = beta_t / c_t                                 (what :func:`backward` stores)
    gamma_t   = alpha_t * beta_t
    xi_t(i,j) = alpha_{t-1}(i) T[a_t](i, j) bk_t(j)
    log P(X)  = sum_t log c_t

Work per step is ``sizes[obs[t-1]] * sizes[obs[t]]``, never ``H**2``.  The
expected counts ``sum_t xi_t = T * sum_t alpha_{t-1} bk_t^T`` are summed per
(action, previous observation, observation) group of steps
(:func:`transition_counts`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Reassociation lets LLVM vectorise the dot products; no flag that assumes
# finite values (the kernels test for zero / -inf probabilities).
_FAST = {"reassoc", "contract"}


@njit(cache=True)
def step_offsets(obs, sizes):
    """``off`` (N + 1,): start of each step's block in the flat per-step arrays."""
    N = obs.shape[0]
    off = np.empty(N + 1, dtype=np.int64)
    off[0] = 0
    for t in range(N):
        off[t + 1] = off[t] + sizes[obs[t]]
    return off


@njit(cache=True, fastmath=_FAST)
def forward(T, B, starts, sizes, obs, acts, off, alpha, scale, max_size):
    """Scaled forward pass; fills ``alpha`` (flat) and ``scale`` (N,), returns log P(X).

    Returns ``-inf`` (and stops) at the first step whose observation has
    probability 0 under the model.
    """
    N = obs.shape[0]
    ll = 0.0
    buf = np.empty(max_size)
    for t in range(N):
        o = obs[t]
        s0 = starts[o]
        n = sizes[o]
        base = off[t]
        if acts[t] < 0:
            for k in range(n):
                buf[k] = B[s0 + k]
        else:
            po = obs[t - 1]
            p0 = starts[po]
            pb = off[t - 1]
            Ta = T[acts[t]]
            for k in range(n):
                buf[k] = 0.0
            for i in range(sizes[po]):
                w = alpha[pb + i]
                row = Ta[p0 + i, s0:s0 + n]
                for k in range(n):
                    buf[k] += w * row[k]
        c = 0.0
        for k in range(n):
            c += buf[k]
        scale[t] = c
        if not c > 0.0:
            return -np.inf
        inv = 1.0 / c
        for k in range(n):
            alpha[base + k] = buf[k] * inv
        ll += np.log(c)
    return ll


@njit(cache=True, fastmath=_FAST)
def backward(T, starts, sizes, obs, acts, off, scale, bk):
    """Scaled backward pass; fills ``bk`` (flat) with ``beta_t / c_t``.

    ``scale`` comes from :func:`forward` (which must have returned a finite value).
    """
    N = obs.shape[0]
    for t in range(N - 1, -1, -1):
        o = obs[t]
        s0 = starts[o]
        n = sizes[o]
        base = off[t]
        inv = 1.0 / scale[t]
        if t == N - 1 or acts[t + 1] < 0:
            for i in range(n):
                bk[base + i] = inv
        else:
            o2 = obs[t + 1]
            s2 = starts[o2]
            n2 = sizes[o2]
            nb = off[t + 1]
            nxt = bk[nb:nb + n2]
            Ta = T[acts[t + 1]]
            for i in range(n):
                row = Ta[s0 + i, s2:s2 + n2]
                acc = 0.0
                for k in range(n2):
                    acc += row[k] * nxt[k]
                bk[base + i] = acc * inv


@njit(cache=True)
def viterbi(logT, logB, starts, sizes, obs, acts, off, max_size, path):
    """Max-product decoding restricted to clone blocks.

    Fills ``path`` (N,) with the most probable clone sequence of every episode
    (ties go to the lowest clone index) and returns the sum over episodes of
    ``log P(path, X)``; ``-inf`` if some episode has no path of positive
    probability.  The forward sweep keeps only the max-product messages
    ``delta`` (flat, a branch-free max that vectorises); the back-pointer of
    each decoded clone is recomputed during the backtrack (one block column
    per step) instead of storing a pointer per clone and step.
    """
    N = obs.shape[0]
    delta = np.empty(off[N])
    total = 0.0
    for t in range(N):
        o = obs[t]
        s0 = starts[o]
        n = sizes[o]
        base = off[t]
        if acts[t] < 0:
            for k in range(n):
                delta[base + k] = logB[s0 + k]
        else:
            po = obs[t - 1]
            p0 = starts[po]
            pb = off[t - 1]
            La = logT[acts[t]]
            cur = delta[base:base + n]
            for k in range(n):
                cur[k] = -np.inf
            for i in range(sizes[po]):
                d = delta[pb + i]
                if d == -np.inf:
                    continue
                row = La[p0 + i, s0:s0 + n]
                for k in range(n):
                    v = d + row[k]
                    cur[k] = v if v > cur[k] else cur[k]
        if t == N - 1 or acts[t + 1] < 0:
            best = 0
            for k in range(1, n):
                if delta[base + k] > delta[base + best]:
                    best = k
            total += delta[base + best]
            # backtrack to this episode's start, re-deriving each back-pointer
            s = t
            k = best
            while True:
                path[s] = starts[obs[s]] + k
                if acts[s] < 0:
                    break
                target = delta[off[s] + k]
                po = obs[s - 1]
                p0 = starts[po]
                pb = off[s - 1]
                col = starts[obs[s]] + k
                La = logT[acts[s]]
                arg = 0
                bestv = -np.inf
                for i in range(sizes[po]):
                    v = delta[pb + i] + La[p0 + i, col]
                    if v > bestv:
                        bestv = v
                        arg = i
                        if v == target:
                            break
                k = arg
                s -= 1
    return total


@njit(cache=True, fastmath=_FAST)
def transition_counts(T, starts, sizes, obs, acts, off, alpha, bk, order, bounds, C):
    """Expected transition counts ``C[a] += T[a] * sum_t alpha_{t-1} bk_t^T``.

    ``order`` lists the move steps sorted by group (action, previous
    observation, observation) and ``bounds`` (n_groups + 1,) cuts it; each
    group's outer products are summed in a small local block (cache-resident)
    and written once into its block of ``C``.
    """
    max_size = 0
    for o in range(sizes.shape[0]):
        max_size = max(max_size, sizes[o])
    G = np.empty((max_size, max_size))
    for g in range(bounds.shape[0] - 1):
        t0 = order[bounds[g]]
        a = acts[t0]
        po = obs[t0 - 1]
        oc = obs[t0]
        p0 = starts[po]
        c0 = starts[oc]
        npv = sizes[po]
        nc = sizes[oc]
        for i in range(npv):
            for k in range(nc):
                G[i, k] = 0.0
        # four steps at a time: one load/store of G per four multiply-adds
        q = bounds[g]
        end = bounds[g + 1]
        while q + 4 <= end:
            t1, t2, t3, t4 = order[q], order[q + 1], order[q + 2], order[q + 3]
            b1 = bk[off[t1]:off[t1] + nc]
            b2 = bk[off[t2]:off[t2] + nc]
            b3 = bk[off[t3]:off[t3] + nc]
            b4 = bk[off[t4]:off[t4] + nc]
            x1, x2, x3, x4 = off[t1 - 1], off[t2 - 1], off[t3 - 1], off[t4 - 1]
            for i in range(npv):
                w1, w2, w3, w4 = alpha[x1 + i], alpha[x2 + i], alpha[x3 + i], alpha[x4 + i]
                Gi = G[i]
                for k in range(nc):
                    Gi[k] += w1 * b1[k] + w2 * b2[k] + w3 * b3[k] + w4 * b4[k]
            q += 4
        while q < end:
            t = order[q]
            cur = bk[off[t]:off[t] + nc]
            x = off[t - 1]
            for i in range(npv):
                w = alpha[x + i]
                Gi = G[i]
                for k in range(nc):
                    Gi[k] += w * cur[k]
            q += 1
        Ta = T[a]
        Ca = C[a]
        for i in range(npv):
            for k in range(nc):
                Ca[p0 + i, c0 + k] += Ta[p0 + i, c0 + k] * G[i, k]
