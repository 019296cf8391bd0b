"""Successor features (Algorithm 2) and similarities between them.

``SF(IS)[o] = sum_{l=1..horizon} gamma^(l-1) P_l(o)`` where ``P_l`` is the
normalised count of observations over the *set* of states at BFS depth ``l``
from the initial set ``IS`` (successors under every action, i.e. a uniform
policy).  When the frontier becomes empty at some depth the BFS has died out:
later depths add nothing, and the last non-empty depth is reported as the
depth reached (0 if the initial set has no successor at all).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import xlogy

from ._validation import check_int
from .environment import Environment

__all__ = [
    "successor_features",
    "true_successor_features",
    "pairwise_similarity",
    "SIMILARITIES",
]


def _transition_arrays(model) -> tuple[np.ndarray, np.ndarray, int]:
    """(next_state A x N with -1 unknown, emission N, n_obs) of a memory or an environment."""
    if isinstance(model, Environment):
        return np.asarray(model.next_state, dtype=np.int64), np.asarray(model.obs, dtype=np.int64), model.n_obs
    if hasattr(model, "kernel_arrays"):  # EpisodicMemory: its buffers, without copying
        return model.kernel_arrays()
    if hasattr(model, "next_state") and hasattr(model, "emission"):
        return (np.ascontiguousarray(model.next_state, dtype=np.int64),
                np.ascontiguousarray(model.emission, dtype=np.int64), int(model.n_obs))
    raise TypeError(f"expected an EpisodicMemory or an Environment, got {type(model).__name__}")


def _as_sets(state_sets, n_states: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr, idx) of the initial sets from a list of index arrays or a sparse (m x N) indicator."""
    if sp.issparse(state_sets):
        m = sp.csr_matrix(state_sets)
        if m.shape[1] != n_states:
            raise ValueError(f"state_sets has {m.shape[1]} columns for {n_states} states")
        m.eliminate_zeros()
        return m.indptr.astype(np.int64), m.indices.astype(np.int64)
    sets = [np.unique(np.asarray(s, dtype=np.int64).ravel()) for s in state_sets]
    ptr = np.zeros(len(sets) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(s) for s in sets])
    idx = np.concatenate(sets) if sets else np.zeros(0, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n_states):
        raise ValueError(f"state_sets refer to states outside 0..{n_states - 1}")
    return ptr, idx


def successor_features(memory, state_sets, gamma: float = 0.8, horizon: int = 25, return_depth: bool = False):
    """Algorithm 2 for many initial sets at once.

    Parameters
    ----------
    memory : an :class:`~hmmmerge.episodic.EpisodicMemory` (or an Environment:
        the set form of Algorithm 2 on the true world).
    state_sets : a list of arrays of state indices (one initial set each), or a
        sparse (m x n_states) indicator matrix.
    gamma, horizon : discount in (0, 1) and number of BFS depths.
    return_depth : also return the depth each BFS reached (int array, m).

    Returns
    -------
    (m, n_obs) array, and the depths if asked.

    Examples
    --------
    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 2])   # a 3-cycle, one action
    >>> sf, depth = successor_features(env, [[0]], gamma=0.5, horizon=3, return_depth=True)
    >>> sf.tolist(), depth.tolist()
    ([[0.25, 1.0, 0.5]], [3])
    """
    from ._successor_kernels import set_successor_features

    next_state, emission, n_obs = _transition_arrays(memory)
    if not 0.0 < float(gamma) < 1.0:
        raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}")
    check_int(horizon, "horizon", low=1)
    n_states = memory.n_states if hasattr(memory, "kernel_arrays") else emission.shape[0]
    ptr, idx = _as_sets(state_sets, n_states)
    m = len(ptr) - 1
    sf = np.zeros((m, n_obs))
    depth = np.zeros(m, dtype=np.int64)
    if m and n_states:
        set_successor_features(next_state, emission, n_obs, ptr, idx, float(gamma), int(horizon), sf, depth)
    return (sf, depth) if return_depth else sf


def true_successor_features(env: Environment, states, gamma: float = 0.8, horizon: int = 25,
                            policy=None, form: str = "expected") -> np.ndarray:
    """Successor features of true states.

    ``form="expected"``: ``sum_{l=0}^{horizon-1} gamma^l P(o_{t+l+1} | s_t = s)``
    under ``policy`` (S x A action probabilities, uniform if omitted), the
    paper's SF definition.  ``form="set"``: Algorithm 2's set-valued BFS run on
    the environment graph, with each entry of ``states`` an initial set (an int
    or a list of ints).

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 2])
    >>> true_successor_features(env, [0], gamma=0.5, horizon=3).tolist()
    [[0.25, 1.0, 0.5]]
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    sets = [np.atleast_1d(np.asarray(s, dtype=np.int64)) for s in states]
    if form == "set":
        return successor_features(env, sets, gamma=gamma, horizon=horizon)
    if form != "expected":
        raise ValueError(f"form must be 'expected' or 'set', got {form!r}")
    S, A = env.n_states, env.n_actions
    pol = np.full((S, A), 1.0 / A) if policy is None else np.asarray(policy, dtype=float)
    if pol.shape != (S, A):
        raise ValueError(f"policy must have shape ({S}, {A}), got {pol.shape}")
    rows = np.repeat(np.arange(S), A)
    P = sp.csr_matrix((pol.ravel(), (rows, env.next_state.T.ravel())), shape=(S, S))
    onehot = np.zeros((S, env.n_obs))
    onehot[np.arange(S), env.obs] = 1.0
    start = np.zeros((len(sets), S))
    for i, s in enumerate(sets):
        start[i, s] = 1.0 / len(s)
    dist = start
    out = np.zeros((len(sets), env.n_obs))
    for l in range(horizon):
        dist = np.asarray(P.T @ dist.T).T
        out += gamma**l * dist @ onehot
    return out


# ---------------------------------------------------------------- similarities
def _euclidean(X, Y):
    d2 = (X**2).sum(1)[:, None] + (Y**2).sum(1)[None, :] - 2.0 * X @ Y.T
    return np.exp(-np.sqrt(np.maximum(d2, 0.0)))


def _cosine(X, Y):
    nx = np.linalg.norm(X, axis=1)[:, None]
    ny = np.linalg.norm(Y, axis=1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        s = (X @ Y.T) / (nx * ny)
    return np.nan_to_num(s, nan=0.0)


def _kl(X, Y):
    """exp(-KL(x || y)) of the SFs normalised to distributions (0 where y misses x's support)."""
    P = X / np.maximum(X.sum(1, keepdims=True), 1e-300)
    Q = Y / np.maximum(Y.sum(1, keepdims=True), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        logQ = np.log(Q)
        cross = np.where(P[:, None, :] > 0, P[:, None, :] * logQ[None, :, :], 0.0).sum(-1)
    ent = xlogy(P, P).sum(1)[:, None]
    return np.exp(-(ent - cross))


def _correlation(X, Y):
    return _cosine(X - X.mean(1, keepdims=True), Y - Y.mean(1, keepdims=True))


SIMILARITIES = {"euclidean": _euclidean, "cosine": _cosine, "kl": _kl, "correlation": _correlation}
"""Name -> function ``(X (n x d), Y (k x d)) -> (n x k)``; ``euclidean`` is exp(-||x - y||)."""


def pairwise_similarity(X, Y, metric="euclidean") -> np.ndarray:
    """Similarity matrix between the rows of ``X`` and ``Y``.

    ``metric``: ``"euclidean"`` (exp(-euclidean distance), the paper's),
    ``"cosine"``, ``"kl"`` (exp(-KL) of the normalised SFs), ``"correlation"``,
    or a callable ``f(X, Y) -> (n x k)``.

    >>> import numpy as np
    >>> pairwise_similarity(np.array([[0., 1.]]), np.array([[0., 1.], [3., 5.]])).round(3).tolist()
    [[1.0, 0.007]]
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y have {X.shape[1]} and {Y.shape[1]} columns")
    if callable(metric):
        out = np.asarray(metric(X, Y), dtype=float)
    else:
        try:
            out = SIMILARITIES[metric](X, Y)
        except KeyError:
            raise ValueError(f"unknown similarity {metric!r}; choose from {sorted(SIMILARITIES)} or pass a callable") from None
    if out.shape != (X.shape[0], Y.shape[0]):
        raise ValueError(f"similarity returned shape {out.shape}, expected {(X.shape[0], Y.shape[0])}")
    return out
