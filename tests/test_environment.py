"""Environment: validation of graphs and arrays, JSON / GraphML files."""

import json
import os

import networkx as nx
import numpy as np
import pytest

from hmmmerge import Environment, gridworld


def two_state_graph():
    """a <-> b under action 0, both stay under action 1."""
    g = nx.MultiDiGraph()
    g.add_node("a", obs=0)
    g.add_node("b", obs=1)
    g.add_edge("a", "b", action=0)
    g.add_edge("b", "a", action=0)
    g.add_edge("a", "a", action=1)
    g.add_edge("b", "b", action=1)
    return g


def test_valid_graph_arrays():
    env = Environment(two_state_graph(), start="b")
    assert env.nodes == ["a", "b"]
    assert env.n_states == 2 and env.n_actions == 2 and env.n_obs == 2
    assert env.next_state.tolist() == [[1, 0], [0, 1]]
    assert env.obs.tolist() == [0, 1]
    assert env.start == 1 and env.start_node == "b"
    assert env.index == {"a": 0, "b": 1}
    # the arrays are read-only views of the world
    with pytest.raises(ValueError):
        env.next_state[0, 0] = 1


def test_default_start_and_graph_metadata():
    g = two_state_graph()
    assert Environment(g).start_node == "a"  # the first node
    g.graph["start"] = "b"
    g.graph["n_obs"] = 5
    env = Environment(g)
    assert env.start_node == "b" and env.n_obs == 5
    assert Environment(g, start="a", n_obs=3).start_node == "a"


def test_digraph_is_accepted():
    g = nx.DiGraph()
    g.add_node(0, obs=1)
    g.add_node(1, obs=0)
    g.add_edge(0, 1, action=0)
    g.add_edge(1, 0, action=0)
    env = Environment(g)
    assert env.next_state.tolist() == [[1, 0]]
    assert env.n_obs == 2


def test_numpy_integer_labels_are_accepted():
    g = nx.MultiDiGraph()
    g.add_node(0, obs=np.int64(2))
    g.add_edge(0, 0, action=np.int32(0))
    env = Environment(g)
    assert env.obs.tolist() == [2] and env.n_obs == 3


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda g: g.nodes["b"].pop("obs"), ["'b'", "obs"]),
        (lambda g: g.nodes["b"].update(obs=-1), ["'b'", "obs=-1"]),
        (lambda g: g.nodes["b"].update(obs=1.0), ["'b'", "obs=1.0"]),
        (lambda g: g.nodes["b"].update(obs="1"), ["'b'", "obs='1'"]),
        (lambda g: g.nodes["b"].update(obs=True), ["'b'", "obs=True"]),
        (lambda g: g.edges["a", "b", 0].update(action=-2), ["'a' -> 'b'", "action=-2"]),
        (lambda g: g.edges["a", "b", 0].update(action=0.0), ["'a' -> 'b'", "action=0.0"]),
        (lambda g: g.edges["a", "b", 0].update(action=False), ["'a' -> 'b'", "action=False"]),
        (lambda g: g.edges["a", "b", 0].pop("action"), ["'a' -> 'b'", "action"]),
        (lambda g: g.add_edge("a", "b", action=1), ["'a'", "two edges", "action 1"]),
        (lambda g: g.remove_edge("b", "b", 0), ["'b'", "no edge for action 1"]),
        (lambda g: g.add_edge("c", "a", action=0), ["'c'", "obs"]),  # new node without obs
    ],
    ids=[f"case{i}" for i in range(12)],
)
def test_invalid_graph_names_the_culprit(mutate, words):
    g = two_state_graph()
    mutate(g)
    with pytest.raises(ValueError) as info:
        Environment(g)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_missing_action_in_the_middle():
    g = nx.MultiDiGraph()
    g.add_node(0, obs=0)
    g.add_edge(0, 0, action=0)
    g.add_edge(0, 0, action=2)  # action 1 missing
    with pytest.raises(ValueError, match="node 0 has no edge for action 1"):
        Environment(g)


def test_empty_undirected_edgeless_and_non_graphs():
    with pytest.raises(ValueError, match="empty"):
        Environment(nx.MultiDiGraph())
    g = nx.MultiGraph()
    g.add_node(0, obs=0)
    g.add_edge(0, 0, action=0)
    with pytest.raises(ValueError, match="undirected"):
        Environment(g)
    h = nx.MultiDiGraph()
    h.add_node(0, obs=0)
    with pytest.raises(ValueError, match="no edges"):
        Environment(h)
    with pytest.raises(TypeError, match="graph"):
        Environment({"a": 1})


def test_bad_start_and_n_obs():
    g = two_state_graph()
    with pytest.raises(ValueError, match="start node 'z'"):
        Environment(g, start="z")
    with pytest.raises(ValueError, match="start node"):
        Environment(g, start=["a"])  # unhashable
    with pytest.raises(ValueError, match="n_obs=1"):
        Environment(g, n_obs=1)
    with pytest.raises(ValueError, match="n_obs"):
        Environment(g, n_obs=2.0)
    g.graph["start"] = "nowhere"
    with pytest.raises(ValueError, match="'nowhere'"):
        Environment(g)


# ---------------------------------------------------------------- from_arrays


def test_from_arrays_matches_graph():
    ns = [[1, 2, 0], [0, 0, 2]]
    env = Environment.from_arrays(ns, [2, 0, 2], start=1, n_obs=4, nodes=["x", "y", "z"])
    assert env.next_state.tolist() == ns
    assert env.obs.tolist() == [2, 0, 2]
    assert env.start_node == "y" and env.n_obs == 4
    g = env.graph
    assert sorted((u, v, d["action"]) for u, v, d in g.edges(data=True)) == sorted(
        [("x", "y", 0), ("y", "z", 0), ("z", "x", 0), ("x", "x", 1), ("y", "x", 1), ("z", "z", 1)]
    )
    assert env.clones() == {0: [1], 2: [0, 2]}
    assert env.clone_counts().tolist() == [1, 0, 2, 0]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(next_state=[1, 0], obs=[0, 1]), "2-D"),
        (dict(next_state=[[1, 0]], obs=[0, 1, 2]), "obs must have shape (2,)"),
        (dict(next_state=[[1.0, 0.0]], obs=[0, 1]), "next_state must hold integers"),
        (dict(next_state=[[1, 0]], obs=[0.5, 1]), "obs must hold integers"),
        (dict(next_state=[[1, 0]], obs=[True, False]), "obs must hold integers"),
        (dict(next_state=[[1, 2]], obs=[0, 1]), "next_state[0, 1] = 2"),
        (dict(next_state=[[1, -1]], obs=[0, 1]), "next_state[0, 1] = -1"),
        (dict(next_state=[[1, 0]], obs=[0, -1]), "obs=-1"),
        (dict(next_state=[[1, 0]], obs=[0, 1], start=2), "start=2"),
        (dict(next_state=[[1, 0]], obs=[0, 1], start=True), "start=True"),
        (dict(next_state=[[1, 0]], obs=[0, 1], nodes=["a"]), "nodes has 1 labels"),
        (dict(next_state=[[1, 0]], obs=[0, 1], nodes=["a", "a"]), "twice"),
        (dict(next_state=[[1, 0]], obs=[0, 1], n_obs=1), "n_obs=1"),
        (dict(next_state=np.zeros((1, 0), int), obs=np.zeros(0, int)), "no states"),  # no states
        (dict(next_state=np.zeros((0, 2), int), obs=[0, 1]), "no edges"),
    ],
)
def test_from_arrays_validation(kwargs, words):
    with pytest.raises(ValueError) as info:
        Environment.from_arrays(**kwargs)
    assert words in str(info.value)


# ---------------------------------------------------------------- files


def same_world(a: Environment, b: Environment) -> None:
    assert a.nodes == b.nodes
    assert np.array_equal(a.next_state, b.next_state)
    assert np.array_equal(a.obs, b.obs)
    assert a.start == b.start and a.start_node == b.start_node
    assert a.n_obs == b.n_obs


def test_json_round_trip_grid_with_tuple_labels(tmp_path):
    env = gridworld(4, 5, n_colours=6, seed=3, start=(1, 2), obstacles=[(0, 0), (2, 3)])
    path = tmp_path / "grid.json"
    env.save(path)
    back = Environment.load(path)
    same_world(env, back)
    assert all(isinstance(x, tuple) for x in back.nodes)
    assert back.start_node == (1, 2)
    assert os.listdir(tmp_path) == ["grid.json"]  # atomic: no temp file left behind
    payload = json.loads(path.read_text())
    assert payload["format"] == "hmmmerge.environment"


def test_json_round_trip_mixed_labels_and_numpy_attributes(tmp_path):
    g = nx.MultiDiGraph()
    g.add_node("s", obs=np.int64(0))
    g.add_node(7, obs=1)
    g.add_node(("a", (1, 2)), obs=2)
    for a, (u, v) in enumerate([("s", 7), (7, ("a", (1, 2)))]):
        g.add_edge(u, v, action=np.int64(0) if a == 0 else 0)
    g.add_edge(("a", (1, 2)), "s", action=0)
    env = Environment(g, start=("a", (1, 2)), n_obs=9)
    env.save(tmp_path / "mixed.json")
    back = Environment.load(str(tmp_path / "mixed.json"))
    same_world(env, back)
    assert back.start_node == ("a", (1, 2))
    # saving again over the file is fine and still atomic
    back.save(tmp_path / "mixed.json")
    assert os.listdir(tmp_path) == ["mixed.json"]


def test_failed_save_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    import hmmmerge._io

    path = tmp_path / "env.json"
    gridworld(3, 3, n_colours=3, seed=0).save(path)
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(hmmmerge._io.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        gridworld(4, 4, n_colours=4, seed=1).save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["env.json"]


def test_unserialisable_attribute_is_a_clear_type_error(tmp_path):
    g = two_state_graph()
    g.nodes["a"]["extra"] = object()
    with pytest.raises(TypeError, match="not JSON serialisable"):
        Environment(g).save(tmp_path / "x.json")
    assert os.listdir(tmp_path) == []


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def valid_payload():
    return Environment.from_arrays([[1, 0]], [0, 1], nodes=["a", "b"]).to_json_dict()


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda p: p.update(format="something.else"), "'format'"),
        (lambda p: p.update(version=99), "version 99"),
        (lambda p: p.update(graph=[]), "'graph'"),
        (lambda p: p["graph"].update(nodes={}), "'nodes'"),
        (lambda p: p["graph"]["nodes"][1].pop("obs"), "node 'b' has no 'obs'"),
        (lambda p: p["graph"]["nodes"][1].update(obs=-3), "obs=-3"),
        (lambda p: p["graph"]["nodes"][1].pop("id"), "nodes[1] has no 'id'"),
        (lambda p: p["graph"]["nodes"][1].update(id={"x": 1}), "nodes[1]"),
        (lambda p: p["graph"]["edges"][0].update(target="zz"), "unknown node 'zz'"),
        (lambda p: p["graph"]["edges"][0].update(target={"x": 1}), "edges[0]"),
        (lambda p: p["graph"]["edges"][0].pop("source"), "edges[0] needs"),
        (lambda p: p["graph"]["edges"][0].pop("action"), "has no 'action'"),
        (lambda p: p["graph"]["edges"].pop(), "no edge for action 0"),
        (lambda p: p["graph"]["edges"].append(dict(p["graph"]["edges"][0])), "two edges"),
        (lambda p: p["graph"]["graph"].update(start="nope"), "start node 'nope'"),
        (lambda p: p["graph"]["graph"].update(n_obs=1), "n_obs=1"),
        (lambda p: p["graph"].update(graph=[1]), "'graph.graph'"),
    ],
    ids=[f"case{i}" for i in range(17)],
)
def test_hand_edited_json_gives_clear_error(tmp_path, edit, words):
    payload = valid_payload()
    edit(payload)
    path = write(tmp_path, "env.json", json.dumps(payload))
    with pytest.raises(ValueError) as info:
        Environment.load(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg  # names the file
    assert words in msg, msg


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", "null", b"\xff\xfe\x00\x01"])
def test_malformed_json(tmp_path, text):
    path = write(tmp_path, "bad.json", text)
    with pytest.raises(ValueError, match="bad.json"):
        Environment.load(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        Environment.load(tmp_path / "absent.json")


def test_graphml_load(tmp_path):
    g = nx.MultiDiGraph()
    for i, o in enumerate([0, 1, 1]):
        g.add_node(f"n{i}", obs=o)
    for i in range(3):
        g.add_edge(f"n{i}", f"n{(i + 1) % 3}", action=0)
        g.add_edge(f"n{i}", f"n{(i - 1) % 3}", action=1)
    path = tmp_path / "cycle.graphml"
    nx.write_graphml(g, path)
    env = Environment.load(path)
    assert env.nodes == ["n0", "n1", "n2"]
    assert env.obs.tolist() == [0, 1, 1]
    assert env.next_state.tolist() == [[1, 2, 0], [2, 0, 1]]
    assert env.start_node == "n0"


def test_graphml_from_simple_digraph(tmp_path):
    g = nx.DiGraph()
    g.add_node(0, obs=0)
    g.add_node(1, obs=1)
    g.add_edge(0, 1, action=0)
    g.add_edge(1, 0, action=0)
    nx.write_graphml(g, tmp_path / "d.graphml")
    env = Environment.load(tmp_path / "d.graphml")
    assert env.next_state.tolist() == [[1, 0]] and env.obs.tolist() == [0, 1]


def test_graphml_errors(tmp_path):
    g = nx.MultiDiGraph()
    g.add_node("u", obs=0)
    g.add_node("v")  # no obs
    g.add_edge("u", "v", action=0)
    g.add_edge("v", "u", action=0)
    nx.write_graphml(g, tmp_path / "noobs.graphml")
    with pytest.raises(ValueError, match=r"noobs.graphml: node 'v' has no 'obs'"):
        Environment.load(tmp_path / "noobs.graphml")
    u = nx.MultiGraph()
    u.add_node("u", obs=0)
    u.add_edge("u", "u", action=0)
    nx.write_graphml(u, tmp_path / "undirected.graphml")
    with pytest.raises(ValueError, match="undirected"):
        Environment.load(tmp_path / "undirected.graphml")
    bad = write(tmp_path, "broken.graphml", "<graphml><unclosed>")
    with pytest.raises(ValueError, match="broken.graphml"):
        Environment.load(bad)


def test_repr_mentions_sizes():
    r = repr(gridworld(3, 3, n_colours=3))
    assert "n_states=9" in r and "start=(2, 0)" in r


def test_graph_is_copied_and_empty_arrays_rejected():
    import networkx as nx

    from hmmmerge import Environment

    g = nx.MultiDiGraph()
    g.add_node("a", obs=0)
    g.add_edge("a", "a", action=0)
    env = Environment(g)
    g.nodes["a"]["obs"] = 5           # editing the caller's graph later does not touch the environment
    assert env.graph.nodes["a"]["obs"] == 0 and env.obs.tolist() == [0]
    with pytest.raises(ValueError, match="no states"):
        Environment.from_arrays(np.zeros((1, 0), dtype=int), np.zeros(0, dtype=int))
