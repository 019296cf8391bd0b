"""Level 2 as a world: the cognitive map written by ``hmmmerge run --out`` and read back as an Environment."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from hmmmerge import ActionHMM, Environment, TwoLevelMemory, gridworld, random_walk
from hmmmerge.cognitive_map import cognitive_map
from hmmmerge.gallery import world


def _argmax_next(hmm, a, i):
    row = hmm.T[a][i]
    row = row.toarray().ravel() if hasattr(row, "toarray") else np.asarray(row)
    return int(np.flatnonzero(row == row.max())[0]) if row.max() > 0 else -1


@pytest.mark.parametrize("name", ["maze", "torus", "aliased-loop"])
def test_a_world_read_from_its_own_model_is_isomorphic_to_itself(name):
    env = world(name)
    m = cognitive_map(env.to_hmm())
    assert nx.is_isomorphic(env.graph, m.graph, node_match=lambda u, v: u["obs"] == v["obs"],
                            edge_match=lambda e, f: sorted(d["action"] for d in e.values())
                            == sorted(d["action"] for d in f.values()))
    assert m.start == env.start and m.graph.graph["unknown_transitions"] == 0


def test_level2_map_round_trip_through_the_file(tmp_path):
    env = gridworld(5, 5, n_colours=4, seed=1)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", seed=0).fit(random_walk(env, 80, seed=0))
    hmm = agent.level2_hmm()
    m = cognitive_map(hmm)
    path = tmp_path / "level2.json"
    m.save(path)
    back = Environment.load(path)
    assert back.n_states == hmm.n_states and back.n_actions == hmm.n_actions and back.n_obs == hmm.n_obs
    assert (back.obs == hmm.E.argmax(axis=1)).all()
    assert back.start == int(hmm.B.argmax())
    unknown = 0
    for a in range(hmm.n_actions):
        for i in range(hmm.n_states):
            j = _argmax_next(hmm, a, i)
            edges = [d for _, v, d in back.graph.out_edges(i, data=True) if d["action"] == a]
            assert len(edges) == 1
            if j < 0:
                unknown += 1
                assert back.next_state[a, i] == i and edges[0]["known"] is False
            else:
                assert back.next_state[a, i] == j and edges[0]["known"] is True
    assert unknown == m.graph.graph["unknown_transitions"]


def test_unknown_transitions_become_marked_self_loops():
    hmm = ActionHMM.from_deterministic([[1, -1], [-1, 0]], [0, 1], n_obs=2)
    m = cognitive_map(hmm)
    assert m.next_state.tolist() == [[1, 1], [0, 0]]
    known = {(u, d["action"]): d["known"] for u, _, d in m.graph.edges(data=True)}
    assert known == {(0, 0): True, (1, 0): False, (0, 1): False, (1, 1): True}
    assert m.graph.graph["unknown_transitions"] == 2


def test_cli_run_out_writes_a_graph_that_env_reads(tmp_path, capsys):
    from hmmmerge.cli import main

    out = tmp_path / "run"
    assert main(["run", "--grid", "5x5", "--colours", "4", "--episodes", "40", "--eval-episodes", "0",
                 "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["level2_graph"] == str(out / "level2.json")
    assert main(["env", "--graph", report["level2_graph"], "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["n_states"] == report["n_clusters"] and described["n_obs"] == 4


def test_not_a_model():
    with pytest.raises(TypeError, match="ActionHMM"):
        cognitive_map(gridworld(2, 2))


def test_fold_map_of_a_small_room_is_the_world():
    # after enough walks, fold's level 2 read as a world is the world itself (nodes, colours, actions)
    env = world("cscg-room", seed=0)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="fold", seed=0).fit(random_walk(env, 1000, seed=0))
    m = cognitive_map(agent.level2_hmm())
    reach = nx.descendants(m.graph, m.start_node) | {m.start_node}
    assert m.graph.graph["unknown_transitions"] == 0
    assert nx.is_isomorphic(env.graph, m.graph.subgraph(reach), node_match=lambda u, v: u["obs"] == v["obs"],
                            edge_match=lambda e, f: sorted(d["action"] for d in e.values())
                            == sorted(d["action"] for d in f.values()))
