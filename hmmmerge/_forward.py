"""Numba kernels of the scaled forward filter for action-conditioned HMMs.

Imported lazily (numba takes about half a second to import).  Two layouts of
the transition tensor: dense ``T[a, i, j]`` and stacked CSR, where row
``a * H + i`` holds ``T[a][i, :]``.  One step:

    pred    = alpha_{t-1} T[a_t]            (rows of T may be all zero)
    pred   /= sum(pred)                      (no prediction if the sum is 0)
    p(o)    = pred E                         (predictive distribution)
    alpha_t = pred * E[:, o_t] / p(o_t)

When ``p(o_t)`` underflows (below the smallest normal double, e.g. a
predicted probability 1e-200 times an emission 1e-200) the step is redone in
log space, so a probability of 1e-400 scores ``log p = -921``, not a zero.
After a step whose observation had probability 0 (or no prediction) the
belief restarts from the states that emit ``o_t`` (``E[:, o_t]`` normalised),
or from ``B`` if no state emits it.
"""

from __future__ import annotations

import numpy as np
from numba import njit


_TINY = 2.2250738585072014e-308  # smallest normal double: below it a product has lost precision or underflowed


@njit(cache=True)
def _log_step(pj, ej, n):
    """``log sum_q pj[q] * ej[q]`` over the first ``n`` entries, in log space; ``pj`` becomes the
    normalised products.  ``-inf`` if every product is exactly zero."""
    m = -np.inf
    for q in range(n):
        if pj[q] > 0.0 and ej[q] > 0.0:
            v = np.log(pj[q]) + np.log(ej[q])
            if v > m:
                m = v
    if m == -np.inf:
        return m
    s = 0.0
    for q in range(n):
        if pj[q] > 0.0 and ej[q] > 0.0:
            pj[q] = np.exp(np.log(pj[q]) + np.log(ej[q]) - m)
            s += pj[q]
        else:
            pj[q] = 0.0
    for q in range(n):
        pj[q] /= s
    return m + np.log(s)


@njit(cache=True)
def _finish_step(pred, E, o, alpha, logp, nopred, pred_out, post_out, n, t, B):
    H = E.shape[0]
    O = E.shape[1]
    total = pred.sum()
    if total > 0.0:
        for j in range(H):
            pred[j] /= total
        if pred_out.shape[0] > 0:
            for k in range(O):
                acc = 0.0
                for j in range(H):
                    acc += pred[j] * E[j, k]
                pred_out[n, t, k] = acc
        po = 0.0
        for j in range(H):
            alpha[j] = pred[j] * E[j, o]
            po += alpha[j]
        if po < _TINY:  # underflow: redo the step in log space
            for j in range(H):
                alpha[j] = pred[j]
            lp = _log_step(alpha, E[:, o].copy(), H)
            if lp > -np.inf:
                logp[n, t] = lp
                po = -1.0  # done
    else:
        nopred[n, t] = True
        po = 0.0
    if po > 0.0:
        logp[n, t] = np.log(po)
        for j in range(H):
            alpha[j] /= po
    elif po < 0.0:
        pass
    else:
        logp[n, t] = -np.inf
        s = 0.0
        for j in range(H):
            alpha[j] = E[j, o]
            s += alpha[j]
        if s > 0.0:
            for j in range(H):
                alpha[j] /= s
        else:
            for j in range(H):
                alpha[j] = B[j]
    if post_out.shape[0] > 0:
        for j in range(H):
            post_out[n, t, j] = alpha[j]


@njit(cache=True)
def forward_dense(T, E, B, obs, actions, logp, nopred, pred_out, post_out):
    """Fill ``logp`` (N, L) and ``nopred`` (N, L); optionally ``pred_out`` (N, L, O), ``post_out`` (N, L, H)."""
    N, L = obs.shape
    H = E.shape[0]
    alpha = np.empty(H)
    pred = np.empty(H)
    for n in range(N):
        for j in range(H):
            pred[j] = B[j]
        _finish_step(pred, E, obs[n, 0], alpha, logp, nopred, pred_out, post_out, n, 0, B)
        for t in range(1, L):
            a = actions[n, t]
            pred[:] = 0.0
            for i in range(H):
                w = alpha[i]
                if w != 0.0:
                    row = T[a, i]
                    for j in range(H):
                        pred[j] += w * row[j]
            _finish_step(pred, E, obs[n, t], alpha, logp, nopred, pred_out, post_out, n, t, B)


@njit(cache=True)
def csr_propagate(alpha, sup, m_s, a, n_rows, indptr, indices, data, pred, touched, tlist):
    """One sparse prediction step: ``pred += alpha T[a]`` over the support ``sup[:m_s]`` of ``alpha``.

    ``T`` is stacked CSR (row ``a * n_rows + i``).  ``alpha`` is zeroed on its
    support; the states reached are marked in ``touched`` and listed in
    ``tlist`` in the order first reached; returns their number.  The caller
    clears the scratch with :func:`clear_touched`.  Shared by
    :func:`forward_csr` and the level-2 filters of the online agent.
    """
    m_t = 0
    for q in range(m_s):
        i = sup[q]
        w = alpha[i]
        alpha[i] = 0.0
        r = a * n_rows + i
        for k in range(indptr[r], indptr[r + 1]):
            j = indices[k]
            if not touched[j]:
                touched[j] = True
                tlist[m_t] = j
                m_t += 1
            pred[j] += w * data[k]
    return m_t


@njit(cache=True)
def clear_touched(pred, touched, tlist, m_t):
    """Reset the scratch left by :func:`csr_propagate`."""
    for q in range(m_t):
        j = tlist[q]
        pred[j] = 0.0
        touched[j] = False


@njit(cache=True)
def forward_csr(indptr, indices, data, E, B, em_ptr, em_idx, obs, actions, logp, nopred, pred_out, post_out):
    """As :func:`forward_dense` with T as stacked CSR (row ``a * H + i``).

    Work per step is proportional to the belief's support and its successors,
    not to H, so a deterministic 500,000-state memory filters as fast as a
    small model.  ``em_ptr``/``em_idx`` list the states emitting each
    observation (CSR by observation), used for the restart after a
    zero-probability step.
    """
    N, L = obs.shape
    H, O = E.shape
    pred = np.zeros(H)
    alpha = np.zeros(H)
    touched = np.zeros(H, dtype=np.bool_)
    tlist = np.empty(H, dtype=np.int64)
    sup = np.empty(H, dtype=np.int64)
    pbuf = np.empty(H)
    ebuf = np.empty(H)
    b_sup = np.empty(H, dtype=np.int64)  # the support of B, increasing (a loop: numba's flatnonzero would
    n_b = 0                              # load its array-math module at start-up)
    for j in range(H):
        if B[j] != 0:
            b_sup[n_b] = j
            n_b += 1
    b_sup = b_sup[:n_b]
    for n in range(N):
        m_s = 0
        for t in range(L):
            o = obs[n, t]
            # ---- prediction into pred over tlist[:m_t]
            m_t = 0
            if t == 0:
                for q in range(b_sup.shape[0]):
                    j = b_sup[q]
                    pred[j] = B[j]
                    touched[j] = True
                    tlist[m_t] = j
                    m_t += 1
            else:
                m_t = csr_propagate(alpha, sup, m_s, actions[n, t], H, indptr, indices, data, pred, touched, tlist)
            total = 0.0
            for q in range(m_t):
                total += pred[tlist[q]]
            po = 0.0
            m_s = 0
            if total > 0.0:
                for q in range(m_t):
                    j = tlist[q]
                    pj = pred[j] / total
                    if pred_out.shape[0] > 0:
                        for k in range(O):
                            pred_out[n, t, k] += pj * E[j, k]
                    v = pj * E[j, o]
                    if pj > 0.0 and E[j, o] > 0.0:  # v may have underflowed to 0: kept for the log-space redo
                        alpha[j] = v
                        po += v
                        pbuf[m_s] = pj
                        ebuf[m_s] = E[j, o]
                        sup[m_s] = j
                        m_s += 1
            else:
                nopred[n, t] = True
            clear_touched(pred, touched, tlist, m_t)
            if m_s > 0 and po < _TINY:  # underflow: redo the step in log space
                logp[n, t] = _log_step(pbuf, ebuf, m_s)
                for q in range(m_s):
                    alpha[sup[q]] = pbuf[q]
            elif po > 0.0:
                logp[n, t] = np.log(po)
                for q in range(m_s):
                    alpha[sup[q]] /= po
            else:
                logp[n, t] = -np.inf
                for q in range(m_s):
                    alpha[sup[q]] = 0.0
                m_s = 0
                s = 0.0
                for k in range(em_ptr[o], em_ptr[o + 1]):
                    j = em_idx[k]
                    alpha[j] = E[j, o]
                    s += alpha[j]
                    sup[m_s] = j
                    m_s += 1
                if s > 0.0:
                    for q in range(m_s):
                        alpha[sup[q]] /= s
                else:
                    m_s = 0
                    for q in range(b_sup.shape[0]):
                        j = b_sup[q]
                        alpha[j] = B[j]
                        sup[m_s] = j
                        m_s += 1
            if post_out.shape[0] > 0:
                for q in range(m_s):
                    post_out[n, t, sup[q]] = alpha[sup[q]]
        for q in range(m_s):
            alpha[sup[q]] = 0.0
