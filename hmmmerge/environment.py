"""Partially observable environments as networkx graphs.

An :class:`Environment` is the paper's discrete POE (Definitions 2.1 and 2.4):
a directed multigraph whose nodes are the true states ``S`` and carry an
observation ``obs`` (the map ``X: S -> O``), and whose edges carry an
``action``; every node has exactly one out-edge per action (the deterministic
transition ``P: S x A -> S``).  Nodes keep their networkx labels; everything
numeric works on state *indices* ``0..n_states-1`` in the order of
``env.nodes``.
"""

from __future__ import annotations

import ast
import warnings
from numbers import Integral

import numpy as np

__all__ = ["Environment", "NoStartWarning", "match_node"]


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


class Environment:
    """A deterministic partially observable world over a ``networkx.MultiDiGraph``.

    Parameters
    ----------
    graph : networkx.MultiDiGraph (or DiGraph / MultiGraph convertible to one)
        Nodes carry ``obs`` (int >= 0); edges carry ``action`` (int >= 0).
        Every node needs exactly one out-edge for every action ``0..A-1``.
    start : node label, optional
        The start state of every episode.  Defaults to ``graph.graph["start"]``;
        with neither, the first node, with a :class:`NoStartWarning`.  The
        label is matched after the conversions file formats apply (see
        :func:`match_node`), so ``"(5, 0)"`` names the node ``(5, 0)``.
        The chosen start is stored in ``env.graph.graph["start"]`` (as text
        when it is a tuple, so ``nx.write_graphml(env.graph)`` keeps it).
    n_obs : int, optional
        Size of the observation alphabet; defaults to ``max(obs) + 1``.

    Examples
    --------
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("a", obs=0); g.add_node("b", obs=1)
    >>> _ = g.add_edge("a", "b", action=0); _ = g.add_edge("b", "a", action=0)
    >>> env = Environment(g, start="a")
    >>> env.n_states, env.n_actions, env.n_obs
    (2, 1, 2)
    >>> env.next_state.tolist()
    [[1, 0]]
    """

    def __init__(self, graph, start=None, n_obs: int | None = None):
        import networkx as nx

        if not isinstance(graph, nx.Graph):
            raise TypeError(f"graph must be a networkx graph, got {type(graph).__name__}")
        if graph.number_of_nodes() == 0:
            raise ValueError("graph is empty: an environment needs at least one state")
        if not graph.is_directed():
            raise ValueError(
                "graph is undirected: transitions need a direction; build a MultiDiGraph "
                "with one out-edge per (node, action)"
            )
        g = nx.MultiDiGraph(graph)  # a copy: later edits of the caller's graph cannot desynchronise us
        nodes = list(g.nodes)
        index = {node: i for i, node in enumerate(nodes)}

        obs = np.empty(len(nodes), dtype=np.int64)
        for i, node in enumerate(nodes):
            data = g.nodes[node]
            if "obs" not in data:
                raise ValueError(f"node {node!r} has no 'obs' attribute")
            o = data["obs"]
            if not _is_int(o) or o < 0:
                raise ValueError(f"node {node!r} has obs={o!r}; observations must be integers >= 0")
            obs[i] = o

        edges = []
        for u, v, data in g.edges(data=True):
            if "action" not in data:
                raise ValueError(f"edge {u!r} -> {v!r} has no 'action' attribute")
            a = data["action"]
            if not _is_int(a) or a < 0:
                raise ValueError(f"edge {u!r} -> {v!r} has action={a!r}; actions must be integers >= 0")
            edges.append((index[u], int(a), index[v]))
        if not edges:
            raise ValueError("graph has no edges: every node needs one out-edge per action")

        n_actions = 1 + max(a for _, a, _ in edges)
        next_state = np.full((n_actions, len(nodes)), -1, dtype=np.int64)
        for u, a, v in edges:
            if next_state[a, u] != -1:
                raise ValueError(
                    f"node {nodes[u]!r} has two edges for action {a} "
                    f"(to {nodes[next_state[a, u]]!r} and {nodes[v]!r}); transitions must be deterministic"
                )
            next_state[a, u] = v
        missing = np.argwhere(next_state < 0)
        if len(missing):
            a, u = missing[0]
            raise ValueError(
                f"node {nodes[u]!r} has no edge for action {a} "
                f"({len(missing)} (node, action) transitions missing in all)"
            )

        max_obs = int(obs.max()) + 1
        if n_obs is None:
            n_obs = graph.graph.get("n_obs", max_obs)
        if not _is_int(n_obs) or n_obs < max_obs:
            raise ValueError(f"n_obs={n_obs!r} must be an integer >= max(obs) + 1 = {max_obs}")

        start_index = _resolve_start(start, graph.graph.get("start"), nodes, index)
        g.graph["start"] = _graph_attribute_label(nodes[start_index])
        g.graph["n_obs"] = int(n_obs)

        self._graph = g
        self.nodes = nodes
        self.index = index
        self.obs = obs
        self.next_state = next_state
        self.start = int(start_index)
        self.n_obs = int(n_obs)
        for arr in (self.obs, self.next_state):
            arr.flags.writeable = False

    @classmethod
    def _from_tables(cls, nodes: list, obs: np.ndarray, next_state: np.ndarray, start: int, n_obs: int,
                     name: str) -> "Environment":
        """An environment from checked tables, its graph built on first use of :attr:`graph`.

        For builders that make valid tables themselves (:func:`~hmmmerge.worlds.gridworld`):
        a run on them never imports networkx.  ``nodes`` are distinct labels,
        ``obs`` (S) ints in ``0..n_obs-1``, ``next_state`` (A x S) state indices,
        ``start`` an index.  The graph is the one ``Environment(graph)`` would hold
        for a ``MultiDiGraph`` named ``name`` with the nodes in order and each
        node's out-edges in action order.
        """
        env = cls.__new__(cls)
        env._graph = None
        env._graph_name = name
        env.nodes = list(nodes)
        env.index = {node: i for i, node in enumerate(env.nodes)}
        env.obs = np.array(obs, dtype=np.int64)
        env.next_state = np.array(next_state, dtype=np.int64)
        env.start = int(start)
        env.n_obs = int(n_obs)
        for arr in (env.obs, env.next_state):
            arr.flags.writeable = False
        return env

    @property
    def graph(self):
        """The world as a ``networkx.MultiDiGraph``: nodes carry ``obs``, edges ``action``; graph attributes
        ``start`` (the start label, as text when it is a tuple) and ``n_obs``.

        >>> from hmmmerge import gridworld
        >>> g = gridworld(2, 2, n_colours=2, seed=0).graph
        >>> g.graph, g.number_of_edges(), sorted(g.nodes[(1, 0)])
        ({'name': 'gridworld 2x2', 'start': '(1, 0)', 'n_obs': 2}, 16, ['obs'])
        """
        if self._graph is None:
            import networkx as nx

            g = nx.MultiDiGraph(name=self._graph_name)
            for node, o in zip(self.nodes, self.obs.tolist()):
                g.add_node(node, obs=o)
            for u, targets in zip(self.nodes, self.next_state.T.tolist()):
                for a, v in enumerate(targets):
                    g.add_edge(u, self.nodes[v], action=a)
            g.graph["start"] = _graph_attribute_label(self.nodes[self.start])
            g.graph["n_obs"] = self.n_obs
            self._graph = g
        return self._graph

    # ------------------------------------------------------------------ sizes
    @property
    def n_states(self) -> int:
        return len(self.nodes)

    @property
    def n_actions(self) -> int:
        return self.next_state.shape[0]

    @property
    def start_node(self):
        """The label of the start state."""
        return self.nodes[self.start]

    def __repr__(self) -> str:
        return (
            f"Environment(n_states={self.n_states}, n_actions={self.n_actions}, "
            f"n_obs={self.n_obs}, start={self.start_node!r})"
        )

    # ------------------------------------------------------------ builders
    @classmethod
    def from_arrays(cls, next_state, obs, start: int = 0, n_obs: int | None = None, nodes=None):
        """Build an environment from ``next_state`` (A x S) and ``obs`` (S).

        Node labels are ``0..S-1`` unless ``nodes`` gives them.

        >>> env = Environment.from_arrays([[1, 0], [0, 1]], [0, 1])
        >>> env.n_actions, env.n_states, env.start
        (2, 2, 0)
        """
        ns = np.asarray(next_state)
        ob = np.asarray(obs)
        if ns.ndim != 2:
            raise ValueError(f"next_state must be 2-D (n_actions x n_states), got shape {ns.shape}")
        if ob.ndim != 1 or ob.shape[0] != ns.shape[1]:
            raise ValueError(
                f"obs must have shape ({ns.shape[1]},) to match next_state {ns.shape}, got {ob.shape}"
            )
        if ns.size and not np.issubdtype(ns.dtype, np.integer):
            raise ValueError(f"next_state must hold integers, got dtype {ns.dtype}")
        if ob.size and not np.issubdtype(ob.dtype, np.integer):
            raise ValueError(f"obs must hold integers, got dtype {ob.dtype}")
        n = ns.shape[1]
        if n == 0:
            raise ValueError("next_state has no states: an environment needs at least one state")
        if ns.size and (ns.min() < 0 or ns.max() >= n):
            a, u = np.argwhere((ns < 0) | (ns >= n))[0]
            raise ValueError(f"next_state[{a}, {u}] = {ns[a, u]} is not a state index in 0..{n - 1}")
        labels = list(range(n)) if nodes is None else list(nodes)
        if len(labels) != n:
            raise ValueError(f"nodes has {len(labels)} labels for {n} states")
        if len(set(labels)) != n:
            raise ValueError("nodes holds a label twice; state labels must be distinct")
        if not _is_int(start) or not 0 <= start < n:
            raise ValueError(f"start={start!r} is not a state index in 0..{n - 1}")
        import networkx as nx

        g = nx.MultiDiGraph()
        for i, label in enumerate(labels):
            g.add_node(label, obs=int(ob[i]))
        for a in range(ns.shape[0]):
            for u in range(n):
                g.add_edge(labels[u], labels[int(ns[a, u])], action=a)
        return cls(g, start=labels[start], n_obs=n_obs)

    # ------------------------------------------------------------ views
    def clones(self) -> dict[int, list[int]]:
        """Observation -> state indices that emit it (the paper's clones).

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0])
        >>> env.clones()
        {0: [0, 2], 1: [1]}
        """
        out: dict[int, list[int]] = {}
        for s, o in enumerate(self.obs.tolist()):
            out.setdefault(o, []).append(s)
        return dict(sorted(out.items()))

    def clone_counts(self) -> np.ndarray:
        """Number of states per observation, an int array of length ``n_obs``.

        >>> Environment.from_arrays([[1, 2, 0]], [0, 1, 0], n_obs=3).clone_counts().tolist()
        [2, 1, 0]
        """
        return np.bincount(self.obs, minlength=self.n_obs)

    def to_hmm(self):
        """The true world as an :class:`~hmmmerge.hmm.ActionHMM` (the oracle).

        >>> hmm = Environment.from_arrays([[1, 0]], [0, 1]).to_hmm()
        >>> hmm.n_states, hmm.n_obs
        (2, 2)
        """
        from .hmm import ActionHMM  # scipy.sparse: loaded when a model is needed, not to build a world

        return ActionHMM.from_deterministic(self.next_state, self.obs, n_obs=self.n_obs, start=self.start)

    # ------------------------------------------------------------ files
    def to_json_dict(self) -> dict:
        """The JSON-ready node-link dictionary written by :meth:`save` (see :mod:`hmmmerge.environment_files`).

        >>> d = Environment.from_arrays([[1, 0]], [0, 1]).to_json_dict()
        >>> d["format"], d["version"], d["graph"]["graph"], len(d["graph"]["edges"])
        ('hmmmerge.environment', 1, {'start': 0, 'n_obs': 2}, 2)
        """
        from .environment_files import to_json_dict

        return to_json_dict(self)

    def save(self, path, format: str | None = None) -> None:
        """Write the environment atomically as JSON (node-link) or GraphML.

        ``format`` is ``"json"`` or ``"graphml"``; by default it follows the
        extension (``.graphml`` / ``.xml``: GraphML, anything else: JSON), the
        same rule :meth:`load` applies.  Tuple node labels, such as the grid's
        ``(row, col)``, survive both formats (GraphML stores them as text).

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> env = gridworld(3, 3, n_colours=3, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "env.json"); env.save(path); back = Environment.load(path)
        >>> back.start_node, bool((back.next_state == env.next_state).all())
        ((2, 0), True)
        """
        from .environment_files import save

        save(self, path, format)

    @classmethod
    def load(cls, path, format: str | None = None, start=None) -> "Environment":
        """Read an environment: node-link JSON (ours or networkx's) or GraphML.

        ``format`` defaults to the extension (as in :meth:`save`); ``start``
        overrides the file's ``start`` graph attribute.  See
        :mod:`hmmmerge.environment_files` for what each format keeps.

        >>> import os, tempfile
        >>> import networkx as nx
        >>> g = Environment.from_arrays([[1, 2, 0]], [0, 1, 0], start=1).graph
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "ring.graphml"); nx.write_graphml(g, path); env = Environment.load(path)
        >>> env.nodes, env.start_node, env.clones()
        ([0, 1, 2], 1, {0: [0, 2], 1: [1]})
        """
        from .environment_files import load

        return load(path, format=format, start=start)

    @classmethod
    def from_json_dict(cls, payload, source: str = "<dict>", start=None) -> "Environment":
        """Build from node-link data: :meth:`to_json_dict`'s output or ``networkx.node_link_data``'s.

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0], start=1)
        >>> back = Environment.from_json_dict(env.to_json_dict())
        >>> back.start, back.clones(), back.next_state.tolist()
        (1, {0: [0, 2], 1: [1]}, [[1, 2, 0]])
        """
        from .environment_files import from_json_dict

        return from_json_dict(payload, source=source, start=start)


class NoStartWarning(UserWarning):
    """An environment was built without a start: it starts at its first node."""


def _resolve_start(start, attribute, nodes, index) -> int:
    """The index of the start node: ``start`` if given, else the graph attribute, else node 0 (warned)."""
    if start is None and attribute is None:
        warnings.warn(
            f"no start given and the graph has no 'start' attribute: starting at its first node {nodes[0]!r} "
            "(pass start=NODE, --start NODE, or set graph.graph['start'])",
            NoStartWarning,
            stacklevel=3,
        )
        return 0
    value = attribute if start is None else start
    found = match_node(value, index)
    if found is None:
        where = "" if start is not None else " (from the graph attribute 'start')"
        sample = ", ".join(repr(n) for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        raise ValueError(f"start node {value!r}{where} is not in the graph (nodes: {sample})")
    return found


def match_node(value, index: dict):
    """The index of the node ``value`` names, matched after the conversions file formats apply; else ``None``.

    ``value`` matches a node equal to it, or to it converted back from text
    (``"(5, 0)"`` or ``"5,0"`` -> ``(5, 0)``, ``"7"`` -> ``7``), or to its
    text (``7`` -> ``"7"``, as GraphML stores ids), or a JSON list as a tuple.
    Two different nodes matching is an error.

    >>> match_node("(1, 0)", {(1, 0): 0, (0, 0): 1}), match_node(3, {"3": 0}), match_node("x", {"y": 0})
    (0, 0, None)
    """
    candidates = [value]
    if isinstance(value, list):
        candidates.append(_to_label(value))
    elif isinstance(value, str):
        converted = _parse_label(value)
        if converted is not None:
            candidates.append(converted)
    else:
        candidates.append(str(value))
    found = {}
    for c in candidates:
        try:
            i = index.get(c)
        except TypeError:  # unhashable
            continue
        if i is not None:
            found[i] = c
    if len(found) > 1:
        raise ValueError(f"{value!r} names two nodes: {' and '.join(repr(c) for c in found.values())}")
    return next(iter(found), None)


def _parse_label(text: str):
    """``"7"`` -> 7, ``"(5, 0)"`` / ``"5,0"`` -> ``(5, 0)``, ``"1.5"`` -> 1.5; ``None`` if not a number or tuple."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, list):
        value = tuple(value)
    if _is_plain_label(value):
        return value
    return None


def _is_plain_label(value) -> bool:
    """A number (not bool) or a tuple of them, the labels text conversion restores."""
    if isinstance(value, tuple):
        return all(_is_plain_label(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _graph_attribute_label(label):
    """The start label in a form every format can store: scalars as they are, anything else as ``str``.

    GraphML writes node ids with ``str``, so ``str`` of a tuple label names the same node after loading.
    """
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, (str, int, float)) and not isinstance(label, bool):
        return label
    return str(label)


def _to_label(value):
    """JSON lists back to tuples, recursively."""
    if isinstance(value, list):
        return tuple(_to_label(x) for x in value)
    return value
