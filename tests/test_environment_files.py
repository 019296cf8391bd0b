"""Environment files as people write them (issue 13) and as they must not be misread (issue 15, item 6).

Round trips through every accepted format, including files written by networkx itself, and one
regression test for each of the five problems of issue 13.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import networkx as nx
import numpy as np
import pytest

from hmmmerge import Environment, gridworld
from hmmmerge.cli import main
from hmmmerge.environment import NoStartWarning, match_node
from hmmmerge.gallery import world


def same_world(a: Environment, b: Environment) -> None:
    """Same labels, observations, transitions and start, compared through labels (not indices)."""
    assert sorted(map(repr, a.nodes)) == sorted(map(repr, b.nodes))
    for node in a.nodes:
        i, j = a.index[node], b.index[node]
        assert a.obs[i] == b.obs[j]
        assert [a.nodes[s] for s in a.next_state[:, i]] == [b.nodes[s] for s in b.next_state[:, j]]
    assert a.start_node == b.start_node
    assert a.n_obs == b.n_obs


def room_graph(start=None) -> nx.MultiDiGraph:
    """A 6x8 room as a plain networkx graph with integer node ids (row * 8 + col), as a user would build it."""
    env = gridworld(6, 8, n_colours=4, seed=3)
    g = nx.MultiDiGraph()
    for (r, c), o in zip(env.nodes, env.obs.tolist()):
        g.add_node(r * 8 + c, obs=o)
    for u, v, a in env.graph.edges(data="action"):
        g.add_edge(u[0] * 8 + u[1], v[0] * 8 + v[1], action=a)
    if start is not None:
        g.graph["start"] = start
    return g


WORLDS = {
    "grid (tuple labels)": lambda: gridworld(4, 5, n_colours=3, seed=1, start=(2, 3)),
    "maze": lambda: world("maze"),
    "integers": lambda: Environment(room_graph(start=40)),
    "strings": lambda: Environment.from_arrays([[1, 2, 0], [2, 0, 1]], [0, 1, 0], start=2, nodes=["a", "b", "c"]),
    "(x, y, direction)": lambda: Environment.from_arrays(
        [[1, 0], [0, 1]], [0, 1], start=1, nodes=[(3, 4, 0), (3, 4, 2)]),
}


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", WORLDS)
@pytest.mark.parametrize("fmt", ["json", "graphml"])
def test_save_load_round_trip(tmp_path, name, fmt):
    env = WORLDS[name]()
    path = tmp_path / f"world.{fmt}"
    env.save(path)
    same_world(env, Environment.load(path))


@pytest.mark.parametrize("name", WORLDS)
@pytest.mark.parametrize("writer", ["node_link edges", "node_link links", "write_graphml"])
def test_files_written_by_networkx_load(tmp_path, name, writer):
    """json.dump(nx.node_link_data(g)) with either key, and nx.write_graphml, of env.graph itself."""
    env = WORLDS[name]()
    if writer == "write_graphml":
        path = tmp_path / "world.graphml"
        nx.write_graphml(env.graph, path)
    else:
        path = tmp_path / "world.json"
        with open(path, "w") as f:
            json.dump(nx.node_link_data(env.graph, edges=writer.split()[1]), f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoStartWarning)  # env.graph carries its start in every format
        back = Environment.load(path)
    same_world(env, back)


def test_explicit_format_overrides_the_extension(tmp_path):
    env = gridworld(3, 3, n_colours=2)
    path = tmp_path / "world.txt"
    env.save(path, format="graphml")
    assert nx.read_graphml(path).number_of_nodes() == 9  # an independent reader agrees it is GraphML
    same_world(env, Environment.load(path, format="graphml"))
    with pytest.raises(ValueError, match="world.txt: not valid JSON"):
        Environment.load(path)  # the extension says JSON
    with pytest.raises(ValueError, match="format must be one of json, graphml"):
        env.save(tmp_path / "x.json", format="yaml")


# ------------------------------------------------------------------ issue 13, problems 1-5
def test_problem1_plain_node_link_json_is_accepted_everywhere(tmp_path, capsys):
    path = tmp_path / "room.json"
    with open(path, "w") as f:
        json.dump(nx.node_link_data(room_graph(start=40)), f)
    assert Environment.load(path).start_node == 40
    for argv in (["env", "--graph", str(path), "--json"],
                 ["run", "--graph", str(path), "--episodes", "4", "--episode-length", "10", "--eval-episodes", "2",
                  "--json"],
                 ["evaluate", "--graph", str(path), "--episodes", "4", "--episode-length", "10",
                  "--eval-episodes", "2", "--models", "oracle,first-order", "--json"]):
        assert main(argv) == 0, argv
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out, argv


def test_problem1_other_json_says_how_to_make_an_environment_file(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match=r"other.json: not an environment file.*nx.node_link_data"):
        Environment.load(path)


def test_problem2_graphml_integer_ids_and_integer_start(tmp_path):
    path = tmp_path / "room.graphml"
    nx.write_graphml(room_graph(start=40), path)
    env = Environment.load(path)
    assert env.start_node == 40 and env.nodes[0] == 0  # ids converted back to integers
    # read by networkx itself the ids are text and the start an int: Environment still matches them
    g = nx.read_graphml(path, force_multigraph=True)
    assert Environment(nx.MultiDiGraph(g)).start_node == "40"


def test_problem3_tuple_start_survives_graphml(tmp_path):
    env = gridworld(6, 8, n_colours=4, seed=0, start=(5, 2))
    assert env.graph.graph["start"] == "(5, 2)"  # GraphML cannot store a tuple; its text names the node
    path = tmp_path / "grid.graphml"
    nx.write_graphml(env.graph, path)  # issue 15: a grid written by networkx keeps its start
    back = Environment.load(path)
    assert back.start_node == (5, 2) and isinstance(back.nodes[0], tuple)


def test_problem4_no_start_warns_and_start_can_be_given(tmp_path, capsys):
    g = room_graph()
    with pytest.warns(NoStartWarning, match="first node 0"):
        assert Environment(g).start_node == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Environment(g, start=40).start_node == 40
    path = tmp_path / "room.json"
    with open(path, "w") as f:
        json.dump(nx.node_link_data(g), f)
    with pytest.warns(NoStartWarning, match="room.json has no 'start'"):
        Environment.load(path)
    assert Environment.load(path, start="40").start_node == 40
    assert main(["env", "--graph", str(path), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning" in err and "--start" in err  # printed once, one line
    assert main(["env", "--graph", str(path), "--start", "40", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["start"] == 40
    assert main(["env", "--world", "cscg-room", "--start", "(5, 0)", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["start"] == [5, 0]
    assert main(["env", "--graph", str(path), "--start", "999"]) == 2
    assert "start node '999' is not in the graph" in capsys.readouterr().err


def test_problem5_grid_from_graphml_is_drawn_on_its_grid(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from hmmmerge.plotting import grid_shape, node_positions

    env = gridworld(6, 8, n_colours=4, seed=0)
    path = tmp_path / "grid.graphml"
    nx.write_graphml(env.graph, path)
    back = Environment.load(path)
    assert grid_shape(back) == (6, 8)
    # even read by networkx alone (text ids "(r, c)"), positions are recovered
    raw = nx.read_graphml(path, force_multigraph=True)
    cells, _ = node_positions(Environment(nx.MultiDiGraph(raw)))
    assert sorted(map(tuple, cells.tolist())) == sorted(env.nodes)
    png = tmp_path / "map.png"
    assert main(["env", "--graph", str(path), "--plot", str(png)]) == 0
    assert png.stat().st_size > 0


# ------------------------------------------------------------------ issue 15, item 6
def node_link(ids):
    return {"nodes": [{"id": i, "obs": 0} for i in ids],
            "edges": [{"source": i, "target": i, "action": 0} for i in ids], "graph": {"start": ids[0]}}


@pytest.mark.parametrize("ids, words", [
    (["a", "b", "a"], "nodes[2] has id 'a', which is listed twice"),
    ([1, 2, 1.0], "nodes[2] has id 1.0, which equals nodes[0]'s id 1"),
    ([[0, 1], [0, 1]], "is listed twice"),
])
def test_duplicate_and_colliding_json_ids_are_refused(tmp_path, ids, words):
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(node_link(ids)))
    with pytest.raises(ValueError) as info:
        Environment.load(path)
    assert str(info.value).startswith(str(path)) and words in str(info.value)


def test_duplicate_graphml_ids_are_refused(tmp_path):
    path = tmp_path / "one.graphml"
    nx.write_graphml(room_graph(start=0), path)
    text = path.read_text()
    first = text.index("<node ")
    node = text[first:text.index("</node>", first) + len("</node>")]
    (tmp_path / "dup.graphml").write_text(text.replace(node, node + node, 1))
    with pytest.raises(ValueError, match=r"dup.graphml: node id '0' is listed twice"):
        Environment.load(tmp_path / "dup.graphml")


def test_graphml_ids_that_would_collide_stay_text(tmp_path):
    g = nx.MultiDiGraph(start="1")
    for n in ("1", "01"):
        g.add_node(n, obs=0)
        g.add_edge(n, n, action=0)
    nx.write_graphml(g, tmp_path / "t.graphml")
    env = Environment.load(tmp_path / "t.graphml")
    assert env.nodes == ["1", "01"] and env.start_node == "1"


def test_save_follows_the_extension(tmp_path):
    env = gridworld(3, 3, n_colours=2)
    env.save(tmp_path / "x.graphml")
    assert nx.read_graphml(tmp_path / "x.graphml").number_of_nodes() == 9
    env.save(tmp_path / "x.json")
    assert json.loads((tmp_path / "x.json").read_text())["format"] == "hmmmerge.environment"


def test_edges_and_links_together_are_ambiguous(tmp_path):
    data = node_link(["a"])
    data["links"] = data["edges"]
    with pytest.raises(ValueError, match="both 'edges' and 'links'"):
        Environment.from_json_dict(data)


def test_match_node_conversions_and_ambiguity():
    index = {(5, 0): 0, 7: 1, "n": 2}
    assert [match_node(v, index) for v in ["(5, 0)", "5,0", [5, 0], "7", 7, "n", "zz"]] == [0, 0, 0, 1, 1, 2, None]
    with pytest.raises(ValueError, match="names two nodes"):
        match_node("1", {"1": 0, 1: 1})


def test_cli_world_names_match_the_gallery():
    from hmmmerge.commands.env import WORLD_NAMES
    from hmmmerge.gallery import WORLDS

    assert WORLD_NAMES == WORLDS


# ------------------------------------------------------------------ imports
def loaded_after(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {m.split(".")[0] for m in out} | {m for m in out if m.startswith(("scipy.stats", "hmmmerge."))}


HEAVY = {"numba", "pgmpy", "matplotlib", "dask", "scipy.stats", "gymnasium", "minigrid"}


@pytest.mark.parametrize("code, allowed", [
    ("import hmmmerge", set()),
    ("from hmmmerge.cli import build_parser; build_parser()", set()),
    ("import hmmmerge; hmmmerge.gridworld(); hmmmerge.Environment", set()),
])
def test_light_imports(code, allowed):
    """What `import hmmmerge`, `hmmmerge --help` and building a world load: nothing heavy (a fact, not a timing)."""
    assert (loaded_after(code) & HEAVY) == allowed
    if code == "import hmmmerge":
        assert not {"numpy", "networkx", "scipy"} & loaded_after(code)
    if "gridworld" in code:  # a grid is built from numpy tables; its graph only when asked for
        assert not {"networkx", "scipy"} & loaded_after(code)


def test_help_lists_the_commands_as_their_modules_describe_them():
    """`hmmmerge --help` lists the sub-commands from cli.SUMMARIES without importing them: same text as the full
    parser's, and not even numpy loaded."""
    from hmmmerge.cli import build_parser

    assert build_parser([]).format_help() == build_parser().format_help()
    assert not {"numpy", "scipy", "networkx", "hmmmerge.commands.evaluate"} & loaded_after(
        "from hmmmerge.cli import build_parser; build_parser([]).format_help()")


def test_paper_run_loads_only_what_it_uses():
    """`hmmmerge run` on a grid needs numba and scipy.sparse, not networkx nor the other commands' modules."""
    loaded = loaded_after("import contextlib, io\nfrom hmmmerge.cli import main\n"
                          "with contextlib.redirect_stdout(io.StringIO()):\n"
                          "    main(['run', '--episodes', '3', '--eval-episodes', '2', '--json'])")
    assert loaded & HEAVY == {"numba"}
    assert not {"networkx", "hmmmerge.baselines", "hmmmerge.sweep", "hmmmerge.commands.evaluate"} & loaded


def test_lazy_names_resolve():
    import hmmmerge

    for name in hmmmerge.__all__:
        assert getattr(hmmmerge, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hmmmerge.nope  # noqa: B018


def test_large_alphabet_report_is_a_summary(capsys):
    """`hmmmerge env --colours 1000` summarises clones per observation in one line, not 1,000 entries."""
    assert main(["env", "--grid", "40x40", "--colours", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    clone_lines = [line for line in lines if "clones per observation" in line]
    assert len(clone_lines) == 1 and "1000 observations" in clone_lines[0]
    assert max(map(len, lines)) < 200
    assert "min 1, median 2, mean 1.60, max 2" in clone_lines[0]  # 1,600 cells on 1,000 colours, balanced
    assert main(["env", "--grid", "40x40", "--colours", "1000", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["clones"]) == 1000  # --json keeps every entry
