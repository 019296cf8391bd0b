"""benchmarks/bench_unseen_worlds.py: its worlds and conditions, its runs, and its tables (the main benchmark's)."""

import argparse

import pytest


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script("bench_unseen_worlds")


def test_worlds_and_conditions(bench):
    sizes = {name: bench.build_world(name, 0, "clean").n_states for name in bench.WORLDS}
    assert sizes == {"grid-15x15-c8": 225, "grid-20x20-c15": 400, "grid-30x30-c20": 900, "torus-12x12-c6": 144,
                     "rooms-7-c6": 100, "graph-100-a4-c12": 100}
    assert bench.build_world("graph-100-a4-c12", 1, "clean").n_actions == 4
    both = bench.build_world("torus-12x12-c6", 1, bench.COMBINED)
    assert not both.is_deterministic and both.obs_noise == 0.05
    assert set(bench.TARGET_CONDITIONS) == set(bench.CONDITIONS) - {bench.COMBINED}
    config = {"world": "rooms-7-c6", "colouring": 1, "seed": 1, "episodes": 20, "episode_length": 10,
              "eval_episodes": 5}
    clean = bench.build_world("rooms-7-c6", 1, "clean")
    a, _ = bench.walks(clean, dict(config, condition="clean"))
    b, _ = bench.walks(clean, dict(config, condition="random-start"))
    assert (a.states[:, 0] == clean.start).all() and len(set(b.states[:, 0].tolist())) > 5
    with pytest.raises(ValueError, match="unknown world"):
        bench.build_world("grid-99", 0, "clean")


def test_runs_cap_fold_and_tables_leave_the_combined_condition_out_of_the_targets(bench):
    args = argparse.Namespace(worlds=["grid-15x15-c8"], conditions=list(bench.CONDITIONS), seeds=[0, 1],
                              learners=["oracle", "em", "fold", "replay"], cpu_limit=120.0, capped=["fold"],
                              capped_limit=20.0, capped_runs=1, episodes=1000, episode_length=50, eval_episodes=100)
    configs = bench.configurations(args)
    fold = [(c, lim) for c, lim in configs if c["learner"] == "fold"]
    assert len(fold) == 2 + 5 and {lim for _, lim in fold} == {20.0}
    assert len(configs) == 6 * 2 * 3 + len(fold)
    keys = {bench.W.run_key(c) for c, _ in configs}
    assert len(keys) == len(configs)
    records = []
    for c, _ in configs:
        acc = {"oracle": 0.95, "em": 0.9, "fold": 0.8, "replay": 0.93}[c["learner"]]
        records.append({"config": c, "status": "ok", "cpu_limit": 120.0, "heldout_accuracy": acc,
                        "oracle_accuracy": 0.95, "fit_cpu_s": 2.0, "block_cpu_s": [0.2] * 10,
                        "online_accuracy": acc})
    md = "\n".join(bench.report(records, args.learners, args.conditions, "replay"))
    targets = md.split("targets for `replay`")[1].split("\n", 1)[1]
    assert "| slip-0.05 | 2 | +0.030 | -0.020 | yes |" in targets and bench.COMBINED not in targets.split("Bounds")[0]
    assert "| grid-15x15-c8 |" in md and f"| {bench.COMBINED} | replay | 2 | 0.930 ± 0.000" in md


def test_doc_markers_are_its_own(bench, tmp_path):
    doc = tmp_path / "B.md"
    doc.write_text(f"x\n{bench.W.DOC_BEGIN}\nmain\n{bench.W.DOC_END}\n{bench.DOC_BEGIN}\nold\n{bench.DOC_END}\ny\n")
    bench.W.update_doc(str(doc), ["new"], bench.DOC_BEGIN, bench.DOC_END)
    assert doc.read_text() == (f"x\n{bench.W.DOC_BEGIN}\nmain\n{bench.W.DOC_END}\n{bench.DOC_BEGIN}\nnew\n"
                               f"{bench.DOC_END}\ny\n")


def _open_graph(layout):
    """The open cells of a maze layout and their 4-neighbour edges (an independent reading of the layout)."""
    import networkx as nx

    g = nx.Graph()
    cells = {(r, c) for r, line in enumerate(layout) for c, ch in enumerate(line) if ch == "."}
    g.add_nodes_from(cells)
    g.add_edges_from(((r, c), (r + dr, c + dc)) for r, c in cells for dr, dc in ((0, 1), (1, 0))
                     if (r + dr, c + dc) in cells)
    return g


@pytest.mark.parametrize("rows,cols,seed,loops", [(5, 5, 0, 0), (13, 13, 1, 4), (7, 11, 3, 2), (1, 9, 0, 0)])
def test_maze_layout_is_a_spanning_tree_of_the_rooms_plus_loops(bench, rows, cols, seed, loops):
    import networkx as nx

    layout = bench.maze_layout(rows, cols, seed=seed, loops=loops)
    assert len(layout) == rows and {len(line) for line in layout} == {cols}
    g = _open_graph(layout)
    rooms = {(r, c) for r in range(0, rows, 2) for c in range(0, cols, 2)}
    assert rooms <= set(g) and nx.is_connected(g)
    # every open cell besides the rooms is a passage between two rooms; a tree has one cycle per loop added
    assert all(r % 2 != c % 2 for r, c in set(g) - rooms)
    assert g.number_of_edges() - g.number_of_nodes() + 1 == loops
    assert len(set(g)) == 2 * len(rooms) - 1 + loops
    assert bench.maze_layout(rows, cols, seed=seed, loops=loops) == layout   # seeded


def test_maze_layout_and_four_rooms_refuse_bad_sizes(bench):
    with pytest.raises(ValueError, match="rows must be odd"):
        bench.maze_layout(4, 5)
    with pytest.raises(ValueError, match="only 2 walls left"):
        bench.maze_layout(5, 3, loops=5)
    with pytest.raises(ValueError, match="size must be odd"):
        bench.four_rooms_obstacles(10)


def test_four_rooms_are_four_rooms_joined_by_doorways(bench):
    import networkx as nx

    walls = set(bench.four_rooms_obstacles(11))
    layout = ["".join("#" if (r, c) in walls else "." for c in range(11)) for r in range(11)]
    g = _open_graph(layout)
    assert nx.is_connected(g) and len(g) == 121 - 17
    doors = [cell for cell in g if cell[0] == 5 or cell[1] == 5]
    assert len(doors) == 4
    rooms = nx.connected_components(g.subgraph(set(g) - set(doors)))
    assert sorted(len(room) for room in rooms) == [25, 25, 25, 25]


def test_probe_set_worlds_conditions_and_walks(bench):
    sizes = {name: bench.build_world(name, 0, "clean").n_states for name in bench.PROBE_WORLDS}
    assert sizes == {"grid-10x10-c4": 100, "grid-30x30-c10": 900, "maze-13x13-c6": 101, "torus-9x9-c3": 81,
                     "four-rooms-11-c8": 104, "graph-200-a3-c10": 200, "minigrid-fourrooms-5x5": 1040,
                     "minigrid-fourrooms-7x7": 1040}
    # coloured with seed 100 + i: not the colouring i that other benchmarks use
    from hmmmerge import gridworld

    grid = bench.build_world("grid-10x10-c4", 1, "clean")
    assert (grid.obs == gridworld(10, 10, n_colours=4, seed=101).obs).all()
    assert not (grid.obs == gridworld(10, 10, n_colours=4, seed=1).obs).all()
    assert bench.build_world("graph-200-a3-c10", 0, "slip-0.05").n_actions == 3
    five = bench.build_world("minigrid-fourrooms-5x5", 0, "clean")
    seven = bench.build_world("minigrid-fourrooms-7x7", 0, "clean")
    assert five.n_actions == 3 and five.n_obs < seven.n_obs
    args = argparse.Namespace(worlds=["torus-9x9-c3", "minigrid-fourrooms-7x7"], conditions=list(bench.CONDITIONS),
                              seeds=[0], learners=["oracle"], cpu_limit=120.0, capped=[], capped_limit=20.0,
                              capped_runs=1, episodes=1000, episode_length=50, eval_episodes=100)
    configs = [c for c, _ in bench.configurations(args)]
    assert [c["condition"] for c in configs if c["world"] == "minigrid-fourrooms-7x7"] == ["random-start"]
    assert {c["episode_length"] for c in configs} == {50, 100} and len(configs) == len(bench.CONDITIONS) + 1
    # walks seeded apart from the default set's: the same colouring, seed and condition give other walks
    config = {"colouring": 0, "seed": 0, "condition": "clean", "episodes": 5, "episode_length": 10,
              "eval_episodes": 2}
    env = bench.build_world("torus-12x12-c6", 0, "clean")
    a, _ = bench.walks(env, dict(config, world="torus-12x12-c6"))
    bench.PROBE_WORLDS["torus-12x12-c6-probe"] = ("torus", {"rows": 12, "cols": 12, "n_colours": 6})
    try:
        b, _ = bench.walks(env, dict(config, world="torus-12x12-c6-probe"))
    finally:
        del bench.PROBE_WORLDS["torus-12x12-c6-probe"]
    assert not (a.actions == b.actions).all()


def test_probe_set_option_and_its_own_doc_markers(bench, tmp_path):
    doc = tmp_path / "B.md"
    doc.write_text(f"x\n{bench.PROBE_DOC_BEGIN}\nOLD-TABLES\n{bench.PROBE_DOC_END}\ny\n")
    out = str(tmp_path / "out")
    assert bench.main(["--set", "probe", "--out", out, "--table-only", "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "OLD-TABLES" not in text and "Unseen worlds, probe set: 0 runs." in text
    assert text.endswith(f"{bench.PROBE_DOC_END}\ny\n")
    with pytest.raises(SystemExit):   # the default set's markers are not in that file
        bench.main(["--out", out, "--table-only", "--doc", str(doc)])
    with pytest.raises(SystemExit):   # a default-set world is not in the probe set
        bench.main(["--set", "probe", "--worlds", "grid-15x15-c8", "--out", out, "--table-only"])
