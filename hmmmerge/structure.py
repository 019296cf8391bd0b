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

from ._limits import check_count
from ._validation import check_int
from .environment import Environment

__all__ = [
    "compact_subgraph",
    "is_markov_subspace",
    "markov_radii",
    "radii_work_bound",
    "markov_radius",
    "transition_adjacency",
    "aliasing_partitions",
    "aliasing_depths",
    "observation_sequence_counts",
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
    check_int(n, "n", low=0)
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


def markov_radii(env: Environment) -> np.ndarray:
    """Markov radius of every state (int array in the order of ``env.nodes``).

    One breadth-first search per state (compiled with numba) that stops at the
    first BFS layer whose new states repeat an observation of the ball, or when
    the ball stops growing (see the module docstring for both cases).  The work
    per state is the size of its largest Markov ball plus one layer, so the cost
    is about ``n_states x`` (typical Markov ball size).

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 3, 0]], [0, 1, 2, 0])  # a 4-cycle, obs 0 twice
    >>> markov_radii(env).tolist()  # state 3's depth-1 ball {3, 0} already repeats obs 0
    [2, 2, 1, 0]
    """
    _check_env(env)
    check_count("markov_radii: the breadth-first search work bound (states x largest Markov ball x actions)",
                radii_work_bound(env), "radius_work")
    adj = transition_adjacency(env)
    radii = np.zeros(env.n_states, dtype=np.int64)
    _radii_kernel()(
        adj.indptr.astype(np.int64), adj.indices.astype(np.int64), env.obs.astype(np.int64), env.n_obs, radii
    )
    return radii


def radii_work_bound(env: Environment) -> int:
    """An upper bound on the edges :func:`markov_radii` follows: a Markov ball shows each
    observation at most once, so the search from a vertex stops after at most
    ``n_obs + 1`` states (or all of them), each with ``n_actions`` out-edges.

    Quadratic in the size of the world when every state has its own observation:
    :func:`markov_radii` refuses such a world above ``COUNT_LIMITS["radius_work"]``
    (:mod:`hmmmerge._limits`) rather than run for minutes.

    >>> from hmmmerge import gridworld
    >>> radii_work_bound(gridworld(10, 10, n_colours=10))   # 100 states x 11 x 4 actions
    4400
    """
    n = env.n_states
    return n * min(n, env.n_obs + 1) * env.n_actions


_RADII_KERNEL = None


def _radii_kernel():
    """The numba-compiled :func:`_radii_bfs` (numba is imported on first use only)."""
    global _RADII_KERNEL
    if _RADII_KERNEL is None:
        from numba import njit

        _RADII_KERNEL = njit(cache=True, nogil=True)(_radii_bfs)
    return _RADII_KERNEL


def _radii_bfs(indptr, indices, obs, n_obs, radii):
    """Per-vertex layered BFS over a CSR adjacency; writes each vertex's Markov radius into ``radii``."""
    n = radii.shape[0]
    seen = np.full(n, -1, np.int64)  # seen[w] == v: w is in the ball of v
    obs_seen = np.full(n_obs, -1, np.int64)  # obs_seen[o] == v: the ball of v shows o
    queue = np.empty(n, np.int64)
    for v in range(n):
        seen[v] = v
        obs_seen[obs[v]] = v
        queue[0] = v
        head = 0
        tail = 1
        depth = 0
        while True:
            depth += 1
            layer_end = tail
            collided = False
            while head < layer_end and not collided:
                u = queue[head]
                head += 1
                for k in range(indptr[u], indptr[u + 1]):
                    w = indices[k]
                    if seen[w] != v:
                        seen[w] = v
                        if obs_seen[obs[w]] == v:
                            collided = True
                            break
                        obs_seen[obs[w]] = v
                        queue[tail] = w
                        tail += 1
            if collided or tail == layer_end:
                # the ball of depth - 1 was the last Markov one (or the last that grew)
                radii[v] = depth - 1
                break


def markov_radius(env: Environment) -> int:
    """The Markov radius of the environment: the minimum of :func:`markov_radii`.

    >>> from hmmmerge import gridworld
    >>> markov_radius(gridworld(10, 10, n_colours=100, seed=0))  # all distinct: min eccentricity
    10
    """
    return int(markov_radii(env).min())


# ---------------------------------------------------------------- aliasing
# What a vertex looks like from the inside: the map from action sequences of k
# moves to the k + 1 observations seen along them (the first is the vertex's
# own).  Two vertices are "k-aliased" when these maps agree.  The k-aliasing
# classes are Moore's partition refinement, as in DFA minimisation:
# u ~_0 v iff obs(u) == obs(v), and u ~_{k+1} v iff u ~_k v and
# next(u, a) ~_k next(v, a) for every action a.


def aliasing_partitions(env: Environment, max_depth: int | None = None) -> np.ndarray:
    """Class labels of the k-aliasing partition for k = 0, 1, ... until it is stable.

    Row ``k`` labels every vertex (in the order of ``env.nodes``) so that two
    vertices share a label exactly when every sequence of ``k`` moves shows
    the same ``k + 1`` observations from both.  Each round is one vectorised
    ``numpy.unique`` over (own class, successor class per action); the rows
    stop at the first round that splits no class (every later round would
    repeat it) or at ``max_depth``.

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 3, 0]], [0, 0, 1, 0])  # a 4-cycle
    >>> aliasing_partitions(env).tolist()  # 1 move tells 1 apart, 2 moves tell 0 from 3
    [[0, 0, 1, 0], [0, 1, 2, 0], [1, 2, 3, 0]]
    """
    _check_env(env)
    check_int(max_depth, "max_depth", low=0, allow_none=True)
    _, labels = np.unique(env.obs, return_inverse=True)
    labels = labels.reshape(-1).astype(np.int64)
    rows = [labels]
    n_classes = int(labels.max()) + 1
    while max_depth is None or len(rows) <= max_depth:
        signature = np.vstack([labels, labels[env.next_state]]).T
        _, new = np.unique(signature, axis=0, return_inverse=True)
        new = new.reshape(-1).astype(np.int64)
        n_new = int(new.max()) + 1
        if n_new == n_classes:
            break
        labels, n_classes = new, n_new
        rows.append(labels)
    return np.vstack(rows)


def aliasing_depths(env: Environment, max_depth: int | None = None) -> np.ndarray:
    """Per vertex: the fewest moves of experience that tell it apart from every other vertex.

    The aliasing depth of ``v`` is the smallest ``k`` such that the map from
    action sequences of ``k`` moves to the observations seen along them
    differs, for some action sequence, from that of every other vertex.
    It is 0 when ``v``'s observation is unique, and ``-1`` when no amount of
    experience identifies ``v`` (another vertex is observationally equivalent
    to it), or when ``max_depth`` is given and ``v`` needs more moves.

    >>> from hmmmerge import Environment
    >>> env = Environment.from_arrays([[1, 2, 3, 0]], [0, 0, 1, 0])  # a 4-cycle, one action
    >>> aliasing_depths(env).tolist()
    [2, 1, 0, 2]
    >>> aliasing_depths(Environment.from_arrays([[1, 0]], [0, 0])).tolist()  # symmetric pair
    [-1, -1]
    """
    parts = aliasing_partitions(env, max_depth=max_depth)
    depth = np.full(env.n_states, -1, dtype=np.int64)
    for k in range(parts.shape[0] - 1, -1, -1):  # smallest k wins
        alone = np.bincount(parts[k])[parts[k]] == 1
        depth[alone] = k
    return depth


def observation_sequence_counts(env: Environment, k: int, max_nodes: int = 5_000_000) -> np.ndarray:
    """Per vertex: how many distinct observation sequences ``k`` moves from it can show.

    Every one of the ``n_actions ** k`` action sequences of ``k`` moves from a
    vertex shows ``k + 1`` observations (the vertex's own first); the count is
    the number of distinct such sequences, between 1 and
    ``min(n_actions ** k, n_obs ** k)``.  Computed as the depth-``k`` level of
    the observation trie of each vertex: a trie node is the set of states
    consistent with an observation prefix, and one sparse product per move
    expands all nodes of all vertices at once.  Memory grows with the number
    of trie nodes, at most ``n_states * n_actions ** k``; a ``ValueError``
    is raised when a level would exceed ``max_nodes`` (choose a smaller ``k``).

    >>> from hmmmerge import gridworld
    >>> env = gridworld(3, 3, n_colours=9, seed=0)  # all colours distinct
    >>> observation_sequence_counts(env, 1).tolist()  # a move into the border stays put
    [3, 4, 3, 4, 4, 4, 3, 4, 3]
    """
    _check_env(env)
    check_int(k, "k", low=0)
    n = env.n_states
    # successor relation including staying in place (self-loops count here)
    src = np.tile(np.arange(n), env.n_actions)
    succ = sp.csr_matrix((np.ones(src.size, dtype=np.int32), (src, env.next_state.ravel())), shape=(n, n))
    succ.sum_duplicates()
    succ.data[:] = 1
    root = np.arange(n)
    nodes = sp.identity(n, dtype=np.int32, format="csr")
    for _ in range(int(k)):
        reach = (nodes @ succ).tocoo()
        key = reach.row.astype(np.int64) * env.n_obs + env.obs[reach.col]
        keys, trie_row = np.unique(key, return_inverse=True)
        if len(keys) > max_nodes:
            raise ValueError(f"k={k} needs more than max_nodes={max_nodes} trie nodes; choose a smaller k")
        nodes = sp.csr_matrix(
            (np.ones(len(key), dtype=np.int32), (trie_row.reshape(-1), reach.col)), shape=(len(keys), n)
        )
        nodes.sum_duplicates()
        nodes.data[:] = 1
        root = root[keys // env.n_obs]
    return np.bincount(root, minlength=n).astype(np.int64)
