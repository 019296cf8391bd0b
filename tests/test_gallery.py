"""The gallery of named worlds and the ``hmmmerge env`` report."""

import json

import networkx as nx
import numpy as np
import pytest

from hmmmerge import Environment, gridworld
from hmmmerge.cli import main
from hmmmerge.gallery import MAZE_LAYOUT, WORLDS, cycle_world, maze, torus, two_rooms, world
from hmmmerge.structure import aliasing_depths, markov_radii, markov_radius, observation_sequence_counts


@pytest.mark.parametrize("name", WORLDS)
def test_every_world_is_a_connected_environment(name):
    env = world(name, seed=3)
    assert isinstance(env, Environment)
    assert nx.is_strongly_connected(nx.DiGraph(env.graph))
    again = world(name, seed=3)
    assert env.nodes == again.nodes and env.obs.tolist() == again.obs.tolist()
    assert env.next_state.tolist() == again.next_state.tolist()
    # counts are balanced: colours differ in use by at most one
    counts = env.clone_counts()
    assert counts.max() - counts.min() <= 1


def test_required_names_and_errors():
    assert {"paper-grid", "maze", "torus", "two-rooms", "aliased-loop", "cscg-room"} <= set(WORLDS)
    with pytest.raises(ValueError, match="choose one of: paper-grid, maze"):
        world("labyrinth")
    with pytest.raises(TypeError, match="no option 'rows'"):
        world("maze", rows=3)


def test_named_worlds_match_their_definitions():
    paper = world("paper-grid", seed=4)
    ref = gridworld(10, 10, n_colours=10, seed=4)
    assert paper.obs.tolist() == ref.obs.tolist() and paper.start == ref.start
    room = world("cscg-room", seed=2)
    assert (room.n_states, room.n_obs) == (48, 4) and room.clone_counts().tolist() == [12] * 4
    assert world("paper-grid", seed=1, colouring="iid").obs.tolist() == gridworld(
        10, 10, n_colours=10, seed=1, colouring="iid").obs.tolist()


def test_maze_walls():
    env = maze(seed=0)
    walls = {(r, c) for r, row in enumerate(MAZE_LAYOUT) for c, ch in enumerate(row) if ch == "#"}
    assert not walls & set(env.nodes)
    assert env.n_states == 81 - len(walls)
    for i, (r, c) in enumerate(env.nodes):  # a move into a wall or the border stays put
        for a, (dr, dc) in enumerate([(0, -1), (0, 1), (-1, 0), (1, 0)]):
            target = (r + dr, c + dc)
            expected = target if target in env.index else (r, c)
            assert env.nodes[env.next_state[a, i]] == expected
    with pytest.raises(ValueError, match="only '#' and '.'"):
        maze(layout=("..x",))


def test_torus_wraps_and_is_homogeneous():
    env = torus(5, 5, n_colours=25, seed=0)
    for a in range(4):  # every action permutes the cells
        assert sorted(env.next_state[a].tolist()) == list(range(25))
    left, right, up, down = env.next_state
    assert (right[left] == np.arange(25)).all() and (down[up] == np.arange(25)).all()
    # all colours distinct: the radius is the eccentricity, 2 + 2 on a 5x5 torus, the same everywhere
    assert markov_radii(env).tolist() == [4] * 25
    assert env.nodes[env.next_state[2, env.index[(0, 3)]]] == (4, 3)


def test_two_rooms_meet_only_through_the_corridor():
    env = two_rooms(room=5, corridor=3)
    assert env.n_states == 53
    g = nx.Graph(nx.DiGraph(env.graph))
    g.remove_edges_from(nx.selfloop_edges(g))
    corridor = [(2, 5), (2, 6), (2, 7)]
    assert all(c in env.index for c in corridor)
    g.remove_node((2, 6))
    assert nx.number_connected_components(g) == 2


@pytest.mark.parametrize("length,colours", [(12, 3), (10, 5), (8, 2), (9, 3)])
def test_aliased_loop(length, colours):
    env = cycle_world(length, n_colours=colours)
    assert markov_radius(env) == (colours - 1) // 2
    assert (aliasing_depths(env) == -1).all()  # rotation by `colours` is a symmetry
    # a forward/back walk of k moves on a periodic ring shows at most 2**k sequences
    assert (observation_sequence_counts(env, 3) <= 8).all()


def test_aliased_loop_with_a_seam_is_identifiable():
    env = cycle_world(7, n_colours=3)  # 0 1 2 0 1 2 0: the seam 0, 0 breaks the symmetry
    assert (aliasing_depths(env) >= 0).all()


def test_world_round_trips_through_json(tmp_path):
    env = world("torus", rows=4, cols=3, n_colours=5, seed=1)
    env.save(tmp_path / "torus.json")
    back = Environment.load(tmp_path / "torus.json")
    assert back.nodes == env.nodes and back.next_state.tolist() == env.next_state.tolist()


# ------------------------------------------------------------------ CLI


def run_json(capsys, *argv):
    assert main(["env", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_env_report_keys_and_values(capsys):
    report = run_json(capsys, "--grid", "4x5", "--colours", "3", "--seed", "2", "--k", "2")
    env = gridworld(4, 5, n_colours=3, seed=2)
    for key in ("n_states", "n_actions", "n_obs", "markov_radius", "clones"):
        assert key in report
    assert report["n_states"] == 20 and report["n_obs"] == 3
    assert report["clones"] == {str(o): int(c) for o, c in enumerate(env.clone_counts())}
    assert report["markov_radius"] == markov_radius(env)
    seqs = observation_sequence_counts(env, 2)
    assert report["observation_sequences"] == {"k": 2, "min": int(seqs.min()), "mean": float(seqs.mean()),
                                               "max": int(seqs.max())}
    depth = aliasing_depths(env)
    assert report["aliasing_depth"]["unidentifiable"] == int((depth < 0).sum())
    assert sum(report["aliasing_depth"]["distribution"].values()) == 20


def test_env_world_option(capsys):
    report = run_json(capsys, "--world", "aliased-loop")
    assert report["n_states"] == 12 and report["markov_radius"] == 1
    assert report["aliasing_depth"]["unidentifiable"] == 12 and report["aliasing_depth"]["max"] is None
    report = run_json(capsys, "--world", "cscg-room", "--colours", "6", "--per-vertex")
    assert report["n_obs"] == 6 and len(report["vertices"]) == 48
    assert report["vertices"][0]["node"] == [0, 0]


def test_env_default_is_still_the_paper_grid(capsys):
    report = run_json(capsys)
    assert report["n_states"] == 100 and report["n_obs"] == 10
    assert report["clones"] == {str(o): 10 for o in range(10)}


def test_env_graphml_and_plot(tmp_path, capsys):
    env = cycle_world(6, n_colours=2)
    g = nx.MultiDiGraph()
    for i, node in enumerate(env.nodes):
        g.add_node(str(node), obs=int(env.obs[i]))
    for u, v, d in env.graph.edges(data=True):
        g.add_edge(str(u), str(v), action=d["action"])
    nx.write_graphml(g, tmp_path / "ring.graphml")
    picture = tmp_path / "ring.png"
    report = run_json(capsys, "--graph", str(tmp_path / "ring.graphml"), "--plot", str(picture))
    assert report["n_states"] == 6 and report["markov_radius"] == 0
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_env_errors(capsys):
    assert main(["env", "--world", "nowhere"]) == 2
    assert "choose one of" in capsys.readouterr().err
    assert main(["env", "--grid", "3x3", "--k", "-1"]) == 2
    assert "--k" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["env", "--world", "maze", "--grid", "3x3"])  # mutually exclusive


def test_env_rejects_graphs_that_are_not_environments(tmp_path, capsys):
    g = nx.MultiDiGraph()
    g.add_node("a", obs=0)
    g.add_node("b", obs=1)
    g.add_edge("a", "b", action=0)  # b has no move for action 0
    nx.write_graphml(g, tmp_path / "broken.graphml")
    assert main(["env", "--graph", str(tmp_path / "broken.graphml")]) == 2
    err = capsys.readouterr().err
    assert "broken.graphml" in err and "no edge for action 0" in err
