"""Environment files: node-link JSON and GraphML, as hmmmerge and networkx write them.

Formats (the same rule for saving and loading):

* **JSON** (any extension but the GraphML ones, or ``format="json"``):
  networkx node-link data, exactly as ``json.dump(nx.node_link_data(g), f)``
  writes it, with the edge list under ``"edges"`` (networkx >= 3.4) or
  ``"links"`` (older networkx, or ``edges="links"``), either bare or inside
  hmmmerge's envelope ``{"format": "hmmmerge.environment", "version": 1,
  "graph": ...}`` that :meth:`Environment.save` writes.  JSON has no tuples:
  tuple labels are written as lists and read back as tuples.
* **GraphML** (``.graphml`` / ``.xml``, or ``format="graphml"``): node ids are
  text (networkx writes ``str(node)``).  On loading, if every id is the text
  of an integer or of a tuple of integers (``"7"``, ``"(5, 0)"``), and no two
  ids convert to the same label, the ids are converted back: a grid keeps its
  ``(row, col)`` labels and an integer graph its integers.  Otherwise the ids
  stay strings.  GraphML cannot hold a tuple as an attribute value, so a
  tuple start is stored as its text (``"(5, 0)"``), which names the same node
  after loading; :class:`~hmmmerge.environment.Environment` does this itself
  in ``env.graph.graph["start"]``, so ``nx.write_graphml(env.graph, path)``
  keeps the start.

Stochastic worlds (see :mod:`hmmmerge.environment`) keep their edge
probabilities ``p`` in both formats and ``obs_noise`` as a graph attribute;
a node's ``obs`` distribution is a JSON object ``{"colour": probability}``
in JSON files and, in GraphML (which holds scalars only), JSON text -- then
every node's ``obs`` is written as such text (a plain colour 3 as ``{"3": 1.0}``).

The start is the ``start`` graph attribute unless ``start=`` overrides it, and
it is matched after the same conversion as the node ids
(:func:`~hmmmerge.environment.match_node`).  A file without one starts at its
first node with a :class:`~hmmmerge.environment.NoStartWarning`.  Refused with
a ``ValueError`` naming the file: a node id listed twice, and two ids equal
after conversion (JSON ``1`` and ``1.0``).
"""

from __future__ import annotations

import io
import json
import os
import warnings
import xml.etree.ElementTree as ET

import networkx as nx
import numpy as np

from ._io import atomic_write_bytes, atomic_write_text, open_regular
from .environment import Environment, NoStartWarning, _parse_label, _to_label

__all__ = ["FORMATS", "file_format", "load", "save", "to_json_dict", "from_json_dict"]

FORMAT = "hmmmerge.environment"
FORMAT_VERSION = 1
FORMATS = ("json", "graphml")
_GRAPHML_EXTENSIONS = (".graphml", ".xml")


def file_format(path, format: str | None = None) -> str:
    """``format`` if given (checked), else ``"graphml"`` for ``.graphml`` / ``.xml`` paths and ``"json"`` otherwise.

    >>> file_format("world.graphml"), file_format("world.json"), file_format("world.txt", "graphml")
    ('graphml', 'json', 'graphml')
    """
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        return format
    return "graphml" if os.fspath(path).lower().endswith(_GRAPHML_EXTENSIONS) else "json"


# ---------------------------------------------------------------------------- writing
def to_json_dict(env: Environment) -> dict:
    """hmmmerge's envelope around ``nx.node_link_data(env.graph)``, tuples as lists.

    >>> d = to_json_dict(Environment.from_arrays([[1, 0]], [0, 1], nodes=[(0, 0), (0, 1)]))
    >>> d["graph"]["nodes"][1], d["graph"]["graph"]
    ({'obs': 1, 'id': [0, 1]}, {'start': [0, 0], 'n_obs': 2})
    """
    data = nx.node_link_data(env.graph, edges="edges")
    for node in data["nodes"]:
        node["id"] = _to_json_label(node["id"])
    for edge in data["edges"]:
        edge["source"] = _to_json_label(edge["source"])
        edge["target"] = _to_json_label(edge["target"])
    data["graph"] = {"start": _to_json_label(env.start_node), "n_obs": env.n_obs}
    if env.obs_noise > 0:
        data["graph"]["obs_noise"] = env.obs_noise
    return {"format": FORMAT, "version": FORMAT_VERSION, "graph": data}


def save(env: Environment, path, format: str | None = None) -> None:
    """Write ``env`` to ``path`` atomically, as JSON or GraphML (:func:`file_format` decides).

    >>> import os, tempfile
    >>> from hmmmerge import gridworld
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "g.graphml"); save(gridworld(2, 2, n_colours=2), p); text = open(p).read()
    >>> text.startswith("<?xml version"), '<node id="(1, 0)">' in text
    (True, True)
    """
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    if file_format(path, format) == "graphml":
        buf = io.BytesIO()
        try:
            nx.write_graphml(_graphml_ready(env.graph), buf)
        except nx.NetworkXError as e:  # an attribute value GraphML cannot hold
            raise ValueError(f"{os.fspath(path)}: cannot write GraphML: {e}") from None
        atomic_write_bytes(path, buf.getvalue())
    else:
        atomic_write_text(path, json.dumps(to_json_dict(env), default=_json_scalar))


def _graphml_ready(g: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """``g``, or a copy whose ``obs`` are JSON text when a node's ``obs`` is a distribution (GraphML holds scalars
    of one type per attribute, so a plain colour ``c`` is then written as ``{"c": 1.0}``).

    >>> g = nx.MultiDiGraph(); g.add_node(0, obs={0: 0.9, 1: 0.1}); g.add_node(1, obs=1)
    >>> [o for _, o in _graphml_ready(g).nodes(data="obs")]
    ['{"0": 0.9, "1": 0.1}', '{"1": 1.0}']
    """
    if all(not isinstance(o, dict) for _, o in g.nodes(data="obs")):
        return g
    out = g.copy()
    for _, data in out.nodes(data=True):
        o = data["obs"]
        data["obs"] = json.dumps(o if isinstance(o, dict) else {int(o): 1.0})
    return out


def _json_scalar(x):
    """``json.dumps`` fallback: numpy scalars/arrays in node or edge attributes."""
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    raise TypeError(f"attribute value {x!r} of type {type(x).__name__} is not JSON serialisable")


def _to_json_label(label):
    if isinstance(label, tuple):
        return [_to_json_label(x) for x in label]
    if isinstance(label, np.generic):
        return label.item()
    return label


# ---------------------------------------------------------------------------- reading
def load(path, format: str | None = None, start=None) -> Environment:
    """Read an environment file (JSON or GraphML, :func:`file_format` decides); ``start`` overrides the file's.

    >>> import json, os, tempfile
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(start=1)
    >>> g.add_nodes_from([(0, {"obs": 0}), (1, {"obs": 1})])
    >>> _ = g.add_edges_from([(0, 1, {"action": 0}), (1, 0, {"action": 0})])
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "g.json")
    ...     with open(p, "w") as f:
    ...         json.dump(nx.node_link_data(g), f)
    ...     env = load(p)
    >>> env.start_node, env.next_state.tolist()
    (1, [[1, 0]])
    """
    path = os.fspath(path)
    try:
        if file_format(path, format) == "graphml":
            return _load_graphml(path, start)
        try:
            with open_regular(path, "r", what="world file", encoding="utf-8") as f:
                payload = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        return from_json_dict(payload, source=path, start=start)
    except RecursionError:  # JSON arrays or objects nested thousands deep
        raise ValueError(f"{path}: nested too deeply to be a world file") from None


def from_json_dict(payload, source: str = "<dict>", start=None) -> Environment:
    """An environment from node-link data, bare (networkx's) or in hmmmerge's envelope; errors name ``source``.

    >>> data = {"nodes": [{"id": "a", "obs": 0}], "links": [{"source": "a", "target": "a", "action": 0}],
    ...         "graph": {"start": "a"}}
    >>> from_json_dict(data).n_states
    1
    """
    if not isinstance(payload, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(payload).__name__}")
    if "format" in payload:
        if payload["format"] != FORMAT:
            raise ValueError(f"{source}: 'format' must be {FORMAT!r}, got {payload['format']!r}")
        if payload.get("version") != FORMAT_VERSION:
            raise ValueError(f"{source}: unsupported version {payload.get('version')!r}")
        data = payload.get("graph")
        if not isinstance(data, dict):
            raise ValueError(f"{source}: 'graph' must hold lists 'nodes' and 'edges'")
    elif "nodes" in payload:
        data = payload
    else:
        raise ValueError(
            f"{source}: not an environment file: expected networkx node-link JSON "
            "(json.dump(nx.node_link_data(graph), f)) or a file written by Environment.save"
        )
    if "edges" in data and "links" in data:
        raise ValueError(f"{source}: node-link data has both 'edges' and 'links'; keep one")
    key = "links" if "links" in data else "edges"
    if not isinstance(data.get("nodes"), list) or not isinstance(data.get(key), list):
        raise ValueError(f"{source}: 'graph' must hold lists 'nodes' and 'edges' (or 'links')")
    if data.get("directed") is False:
        raise ValueError(f"{source}: the node-link graph is undirected; environments need directed edges")

    g = nx.MultiDiGraph()
    first_seen = {}
    for k, node in enumerate(data["nodes"]):
        if not isinstance(node, dict) or "id" not in node:
            raise ValueError(f"{source}: nodes[{k}] has no 'id'")
        label = _to_label(node["id"])
        try:
            j = first_seen.get(label)
        except TypeError:
            raise ValueError(f"{source}: nodes[{k}] has id {node['id']!r}, not a valid node label") from None
        if j is not None:
            other = data["nodes"][j]["id"]
            same = "is listed twice" if repr(other) == repr(node["id"]) else f"equals nodes[{j}]'s id {other!r}"
            raise ValueError(f"{source}: nodes[{k}] has id {node['id']!r}, which {same}; node ids must be distinct")
        first_seen[label] = k
        g.add_node(label, **{a: v for a, v in node.items() if a != "id"})
    for k, edge in enumerate(data[key]):
        if not isinstance(edge, dict) or "source" not in edge or "target" not in edge:
            raise ValueError(f"{source}: {key}[{k}] needs 'source' and 'target'")
        u, v = _to_label(edge["source"]), _to_label(edge["target"])
        for end in (u, v):
            try:
                known = end in g
            except TypeError:  # an unhashable label (a JSON object)
                known = False
            if not known:
                raise ValueError(f"{source}: {key}[{k}] refers to unknown node {end!r}")
        g.add_edge(u, v, **{a: val for a, val in edge.items() if a not in ("source", "target", "key")})
    meta = data.get("graph") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{source}: 'graph.graph' must be an object, got {type(meta).__name__}")
    g.graph.update({a: val for a, val in meta.items() if a not in ("start", "n_obs")})
    if "start" in meta:
        g.graph["start"] = meta["start"]
    return _build(g, source, start, meta.get("n_obs"))


def _load_graphml(path: str, start) -> Environment:
    with open_regular(path, "rb", what="world file") as f:
        raw = f.read()
    try:
        _check_distinct_graphml_ids(raw, path)
        g = nx.read_graphml(io.BytesIO(raw), force_multigraph=True)
    except (ET.ParseError, nx.NetworkXError, KeyError, ValueError, TypeError, IndexError) as e:
        if isinstance(e, ValueError) and str(e).startswith(path):
            raise
        raise ValueError(f"{path}: not a readable GraphML file ({e})") from None
    if not g.is_directed():
        raise ValueError(f"{path}: GraphML graph is undirected; environments need directed edges")
    g = _restore_graphml_ids(nx.MultiDiGraph(g))
    _apply_graphml_defaults(g)
    return _build(g, path, start, g.graph.pop("n_obs", None))


def _apply_graphml_defaults(g: nx.MultiDiGraph) -> None:
    """GraphML's ``<default>`` of a ``<key>`` is the value of every node (edge) without that data: networkx
    keeps the defaults in ``graph["node_default"]`` / ``["edge_default"]``; give them to the nodes and edges.

    >>> g = nx.MultiDiGraph(node_default={"obs": 2}, edge_default={}); g.add_node("a"); g.add_node("b", obs=0)
    >>> _apply_graphml_defaults(g); dict(g.nodes(data="obs")), g.graph
    ({'a': 2, 'b': 0}, {})
    """
    node_default = g.graph.pop("node_default", None) or {}
    edge_default = g.graph.pop("edge_default", None) or {}
    for attrs, defaults in ((d for _, d in g.nodes(data=True)), node_default), \
                           ((d for *_, d in g.edges(keys=True, data=True)), edge_default):
        if defaults:
            for data in attrs:
                for key, value in defaults.items():
                    data.setdefault(key, value)


def _check_distinct_graphml_ids(raw: bytes, path: str) -> None:
    """networkx merges repeated ``<node id=...>`` silently; refuse them instead."""
    seen = set()
    for _, elem in ET.iterparse(io.BytesIO(raw)):
        if elem.tag.rsplit("}", 1)[-1] == "node":
            node_id = elem.get("id")
            if node_id in seen:
                raise ValueError(f"{path}: node id {node_id!r} is listed twice; node ids must be distinct")
            seen.add(node_id)
        elem.clear()


def _restore_graphml_ids(g: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """Convert text ids back to integers / tuples of integers when every id is one, one-to-one.

    >>> g = nx.MultiDiGraph(); g.add_nodes_from(["(0, 1)", "(2, 3)"])
    >>> list(_restore_graphml_ids(g).nodes)
    [(0, 1), (2, 3)]
    >>> g.add_node("04"); list(_restore_graphml_ids(g).nodes)  # "04" is not how an integer is written
    ['(0, 1)', '(2, 3)', '04']
    """
    mapping = {}
    for node in g.nodes:
        value = _parse_label(node) if isinstance(node, str) else None
        if value is None or not _is_int_label(value) or str(value) != node:
            return g
        mapping[node] = value
    if len(set(mapping.values())) != len(mapping):
        return g
    out = nx.relabel_nodes(g, mapping, copy=True)
    start = out.graph.get("start")
    if isinstance(start, str) and start in mapping:
        out.graph["start"] = mapping[start]
    return out


def _is_int_label(value) -> bool:
    if isinstance(value, tuple):
        return len(value) > 0 and all(_is_int_label(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def _build(g: nx.MultiDiGraph, source: str, start, n_obs) -> Environment:
    if start is None and g.graph.get("start") is None and g.number_of_nodes():
        start = next(iter(g.nodes))
        warnings.warn(
            f"{source} has no 'start' graph attribute: starting at its first node {start!r} "
            "(pass --start NODE, or start=NODE to Environment.load)",
            NoStartWarning,
            stacklevel=3,
        )
    try:
        return Environment(g, start=start, n_obs=n_obs)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
