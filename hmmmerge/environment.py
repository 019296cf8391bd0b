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

import json
import os
from numbers import Integral

import networkx as nx
import numpy as np

from ._io import atomic_write_text
from .hmm import ActionHMM

__all__ = ["Environment"]

_FORMAT = "hmmmerge.environment"
_FORMAT_VERSION = 1


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
        The start state of every episode.  Defaults to ``graph.graph["start"]``
        if present, else the first node.
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

        if start is None:
            start = graph.graph.get("start", nodes[0])
            if isinstance(start, list):  # JSON turns tuple labels into lists
                start = _to_label(start)
        try:
            start_index = index[start]
        except (KeyError, TypeError):
            raise ValueError(f"start node {start!r} is not in the graph") from None

        self.graph = g
        self.nodes = nodes
        self.index = index
        self.obs = obs
        self.next_state = next_state
        self.start = int(start_index)
        self.n_obs = int(n_obs)
        for arr in (self.obs, self.next_state):
            arr.flags.writeable = False

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
        return ActionHMM.from_deterministic(self.next_state, self.obs, n_obs=self.n_obs, start=self.start)

    # ------------------------------------------------------------ files
    def to_json_dict(self) -> dict:
        """The JSON-ready node-link dictionary written by :meth:`save`.

        >>> d = Environment.from_arrays([[1, 0]], [0, 1]).to_json_dict()
        >>> d["format"], d["version"], d["graph"]["graph"], len(d["graph"]["edges"])
        ('hmmmerge.environment', 1, {'start': 0, 'n_obs': 2}, 2)
        """
        data = nx.node_link_data(self.graph, edges="edges")
        for node in data["nodes"]:
            node["id"] = _to_json_label(node["id"])
        for edge in data["edges"]:
            edge["source"] = _to_json_label(edge["source"])
            edge["target"] = _to_json_label(edge["target"])
        data["graph"] = {"start": _to_json_label(self.start_node), "n_obs": self.n_obs}
        return {"format": _FORMAT, "version": _FORMAT_VERSION, "graph": data}

    def save(self, path) -> None:
        """Write the environment as JSON (networkx node-link form), atomically.

        Tuple node labels, such as the grid's ``(row, col)``, survive the round trip.

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> env = gridworld(3, 3, n_colours=3, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "env.json"); env.save(path); back = Environment.load(path)
        >>> back.start_node, bool((back.next_state == env.next_state).all())
        ((2, 0), True)
        """
        text = json.dumps(self.to_json_dict(), default=_json_scalar)
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path) -> "Environment":
        """Read an environment written by :meth:`save` (or GraphML, by extension).

        >>> import os, tempfile
        >>> import networkx as nx
        >>> g = Environment.from_arrays([[1, 2, 0]], [0, 1, 0]).graph
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "ring.graphml"); nx.write_graphml(g, path); env = Environment.load(path)
        >>> env.n_states, env.n_actions, env.clones()
        (3, 1, {0: [0, 2], 1: [1]})
        """
        path = os.fspath(path)
        if path.endswith((".graphml", ".xml")):
            return cls._load_graphml(path)
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        return cls.from_json_dict(payload, source=path)

    @classmethod
    def from_json_dict(cls, payload, source: str = "<dict>") -> "Environment":
        """Build from the dictionary :meth:`to_json_dict` returns; errors name ``source``.

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0], start=1)
        >>> back = Environment.from_json_dict(env.to_json_dict())
        >>> back.start, back.clones(), back.next_state.tolist()
        (1, {0: [0, 2], 1: [1]}, [[1, 2, 0]])
        """
        if not isinstance(payload, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(payload).__name__}")
        if payload.get("format") != _FORMAT:
            raise ValueError(f"{source}: 'format' must be {_FORMAT!r}, got {payload.get('format')!r}")
        if payload.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{source}: unsupported version {payload.get('version')!r}")
        data = payload.get("graph")
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(
            data.get("edges"), list
        ):
            raise ValueError(f"{source}: 'graph' must hold lists 'nodes' and 'edges'")
        g = nx.MultiDiGraph()
        for k, node in enumerate(data["nodes"]):
            if not isinstance(node, dict) or "id" not in node:
                raise ValueError(f"{source}: nodes[{k}] has no 'id'")
            attrs = {key: val for key, val in node.items() if key != "id"}
            try:
                g.add_node(_to_label(node["id"]), **attrs)
            except TypeError:
                raise ValueError(f"{source}: nodes[{k}] has id {node['id']!r}, not a valid node label") from None
        for k, edge in enumerate(data["edges"]):
            if not isinstance(edge, dict) or "source" not in edge or "target" not in edge:
                raise ValueError(f"{source}: edges[{k}] needs 'source' and 'target'")
            u, v = _to_label(edge["source"]), _to_label(edge["target"])
            for end in (u, v):
                try:
                    known = end in g
                except TypeError:  # an unhashable label (a JSON object)
                    known = False
                if not known:
                    raise ValueError(f"{source}: edges[{k}] refers to unknown node {end!r}")
            attrs = {key: val for key, val in edge.items() if key not in ("source", "target", "key")}
            g.add_edge(u, v, **attrs)
        meta = data.get("graph") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"{source}: 'graph.graph' must be an object, got {type(meta).__name__}")
        start = _to_label(meta["start"]) if "start" in meta else None
        try:
            return cls(g, start=start, n_obs=meta.get("n_obs"))
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def _load_graphml(cls, path: str) -> "Environment":
        try:
            g = nx.read_graphml(path, force_multigraph=True)
        except Exception as e:  # networkx raises several parser errors
            raise ValueError(f"{path}: not a readable GraphML file ({e})") from None
        if not g.is_directed():
            raise ValueError(f"{path}: GraphML graph is undirected; environments need directed edges")
        try:
            return cls(nx.MultiDiGraph(g))
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None


def _json_scalar(x):
    """``json.dumps`` fallback: numpy scalars/arrays in node or edge attributes."""
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    raise TypeError(f"attribute value {x!r} of type {type(x).__name__} is not JSON serialisable")


def _to_json_label(label):
    if isinstance(label, tuple):
        return [_to_json_label(x) for x in label]
    if isinstance(label, np.integer):
        return int(label)
    return label


def _to_label(value):
    if isinstance(value, list):
        return tuple(_to_label(x) for x in value)
    return value
