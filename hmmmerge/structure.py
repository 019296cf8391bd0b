"""Structure of an environment: compact subgraphs, Markov subspaces, Markov radius.

These are the paper's Definitions 2.5-2.7 as functions over an
:class:`~hmmmerge.environment.Environment`.  Balls follow transitions
(out-edges): the compact subgraph of size ``n`` around ``v`` holds every state
reachable from ``v`` in at most ``n`` moves, with all edges among them.

Markov radius of a vertex ``v``: the largest ``n`` such that the ball of depth
``n`` around ``v`` is a Markov subspace (no two of its states share an
observation).  Two edge cases are fixed here:

* the ball of depth 0 is ``{v}``, always Markov, so the radius is at least 0;
  it is 0 exactly when the ball of depth 1 already repeats an observation;
* if the whole reachable set of ``v`` is Markov, every depth is, and the radius
  is the depth at which the ball stops growing (the eccentricity of ``v``,
  the largest shortest-path distance from ``v``).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp

from .environment import Environment

__all__ = [
    "compact_subgraph",
    "is_markov_subspace",
    "markov_radii",
    "markov_radius",
    "transition_adjacency",
]


def _check_env(env) -> None:
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")


def compact_subgraph(env: Environment, v, n: int) -> nx.MultiDiGraph:
    """The compact subgraph of size ``n`` centred at node ``v`` (Definition 2.5).

    >>> from hmmmerge import gridworld
    >>> env = gridworld(5, 5, n_colours=5, seed=0)
    >>> sorted(compact_subgraph(env, (2, 2), 1).nodes)
    [(1, 2), (2, 1), (2, 2), (2, 3), (3, 2)]
    """
    _check_env(env)
    if v not in env.index:
        raise ValueError(f"node {v!r} is not in the environment")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    ball = nx.single_source_shortest_path_length(env.graph, v, cutoff=int(n))
    return env.graph.subgraph(ball).copy()


def is_markov_subspace(env: Environment, nodes) -> bool:
    """Whether the observation map is injective on ``nodes`` (labels or a subgraph).

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0])
    >>> is_markov_subspace(env, [0, 1]), is_markov_subspace(env, [0, 1, 2])
    (True, False)
    """
    _check_env(env)
    labels = list(nodes.nodes) if isinstance(nodes, nx.Graph) else list(nodes)
    try:
        idx = [env.index[u] for u in labels]
    except KeyError as e:
        raise ValueError(f"node {e.args[0]!r} is not in the environment") from None
    if len(set(idx)) != len(idx):
        raise ValueError("nodes contains a node twice")
    obs = env.obs[idx]
    return len(np.unique(obs)) == len(obs)


def transition_adjacency(env: Environment) -> sp.csr_matrix:
    """Boolean S x S matrix with ``[u, v]`` true when some action moves ``u`` to ``v != u``.

    >>> transition_adjacency(Environment.from_arrays([[1, 1]], [0, 1])).toarray().astype(int).tolist()
    [[0, 1], [0, 0]]
    """
    _check_env(env)
    n = env.n_states
    src = np.tile(np.arange(n), env.n_actions)
    dst = env.next_state.ravel()
    keep = src != dst
    adj = sp.csr_matrix((np.ones(int(keep.sum()), dtype=bool), (src[keep], dst[keep])), shape=(n, n))
    adj.sum_duplicates()
    return adj


def markov_radii(env: Environment, chunk_size: int | None = None) -> np.ndarray:
    """Markov radius of every state (int array in the order of ``env.nodes``).

    Balls of all states grow together, one BFS layer per sparse product;
    a state leaves the computation once its ball repeats an observation or
    stops growing (see the module docstring for both cases).

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 3, 0]], [0, 1, 2, 0])  # a 4-cycle
    >>> markov_radii(env).tolist()
    [2, 2, 2, 2]
    """
    _check_env(env)
    n = env.n_states
    adj = transition_adjacency(env).astype(np.int32)
    onehot = sp.csr_matrix(
        (np.ones(n, dtype=np.int32), (np.arange(n), env.obs)), shape=(n, env.n_obs)
    )
    radii = np.zeros(n, dtype=np.int64)
    if chunk_size is None:
        chunk_size = int(np.clip(20_000_000 // max(n, 1), 1, n))
    for lo in range(0, n, chunk_size):
        rows = np.arange(lo, min(lo + chunk_size, n))
        reached = sp.csr_matrix(
            (np.ones(len(rows), dtype=np.int32), (np.arange(len(rows)), rows)), shape=(len(rows), n)
        )
        front = reached
        depth = 0
        while len(rows):
            depth += 1
            new = (front @ adj) > 0
            new = (new.astype(np.int32) - new.multiply(reached)).tocsr()
            new.eliminate_zeros()
            grew = np.diff(new.indptr) > 0
            reached = reached + new
            collide = ((reached @ onehot).max(axis=1).toarray().ravel() > 1) & grew
            done = collide | ~grew
            # radius = last depth whose ball was Markov and still growing
            radii[rows[done]] = depth - 1
            keep = np.flatnonzero(~done)
            rows, reached, front = rows[keep], reached[keep], new[keep]
    return radii


def markov_radius(env: Environment) -> int:
    """The Markov radius of the environment: the minimum of :func:`markov_radii`.

    >>> from hmmmerge import gridworld
    >>> markov_radius(gridworld(10, 10, n_colours=100, seed=0))  # all colours distinct
    18
    """
    return int(markov_radii(env).min())
