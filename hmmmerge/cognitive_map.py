"""A learned model read as a world: the cognitive map of level 2 as an :class:`~hmmmerge.environment.Environment`.

Level 2 of the two-level memory (or any :class:`~hmmmerge.hmm.ActionHMM`)
becomes a networkx ``MultiDiGraph`` in the format every tool here reads
(``Environment.load``, ``hmmmerge env --graph``): node ``i`` is hidden state
``i`` with ``obs`` its most likely observation; for each action the edge goes
to the most likely successor (``action``, and ``model_p`` its probability under
the model; not ``p``, which would make the map a stochastic world); the
start is the most likely initial state.  An environment needs one edge per
(node, action): where the model knows no successor the edge is a self-loop
marked ``known=False`` (and ``model_p=0``), and the graph attribute
``unknown_transitions`` counts them.  The map can then be characterised like
a world (states, clones, Markov radius) and compared with the true one.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .environment import Environment

__all__ = ["cognitive_map"]


def _argmax_rows(M) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the column of the largest entry (smallest on ties) and its value; (-1, 0) for zero rows."""
    if sp.issparse(M):
        M = sp.csr_matrix(M)
        H = M.shape[0]
        best = np.full(H, -1, dtype=np.int64)
        value = np.zeros(H)
        for i in range(H):
            lo, hi = M.indptr[i], M.indptr[i + 1]
            if hi > lo:
                cols, vals = M.indices[lo:hi], M.data[lo:hi]
                top = vals.max()
                if top > 0:
                    best[i] = cols[vals == top].min()
                    value[i] = top
        return best, value
    M = np.asarray(M)
    best = M.argmax(axis=1).astype(np.int64)
    value = M[np.arange(M.shape[0]), best]
    best[value <= 0] = -1
    return best, np.maximum(value, 0.0)


def cognitive_map(model, name: str = "cognitive map") -> Environment:
    """The most likely transitions and observations of ``model`` as an :class:`Environment`.

    Parameters
    ----------
    model : an :class:`~hmmmerge.hmm.ActionHMM`, e.g. ``agent.level2_hmm()``.
    name : the graph's ``name`` attribute.

    Examples
    --------
    The true world read back from its own model is the world:

    >>> from hmmmerge import gridworld
    >>> env = gridworld(3, 3, n_colours=3, seed=0)
    >>> m = cognitive_map(env.to_hmm())
    >>> bool((m.next_state == env.next_state).all() and (m.obs == env.obs).all()), m.start == env.start
    (True, True)
    >>> m.graph.graph["unknown_transitions"]
    0
    """
    for attr in ("T", "E", "B", "n_states", "n_actions", "n_obs"):
        if not hasattr(model, attr):
            raise TypeError(f"model must be an ActionHMM, got {type(model).__name__}")
    H = model.n_states
    obs = model.E.argmax(axis=1)
    g = nx.MultiDiGraph(name=name)
    for i in range(H):
        g.add_node(i, obs=int(obs[i]))
    unknown = 0
    for a in range(model.n_actions):
        best, value = _argmax_rows(model.T[a])
        for i in range(H):
            if best[i] < 0:
                unknown += 1
                g.add_edge(i, i, action=a, model_p=0.0, known=False)
            else:
                g.add_edge(i, int(best[i]), action=a, model_p=float(value[i]), known=True)
    g.graph["unknown_transitions"] = unknown
    return Environment(g, start=int(np.argmax(model.B)), n_obs=model.n_obs)
