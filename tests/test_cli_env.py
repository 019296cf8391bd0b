"""``hmmmerge env``: JSON contract, pictures, saved worlds, argument errors."""

import json
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from hmmmerge import Environment, gridworld, markov_radii, markov_radius
from hmmmerge.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(argv, capsys):
    """Run the CLI in-process: (exit code, stdout, stderr); argparse errors exit via SystemExit."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_env_json_matches_library(capsys):
    code, out, err = run_cli(["env", "--grid", "7x9", "--colours", "6", "--seed", "4", "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    env = gridworld(7, 9, n_colours=6, seed=4)
    for key in ("n_states", "n_actions", "n_obs", "markov_radius", "clones"):
        assert key in report
    assert report["n_states"] == 63 and report["n_actions"] == 4 and report["n_obs"] == 6
    assert report["markov_radius"] == markov_radius(env)
    assert report["clones"] == {str(o): int(c) for o, c in enumerate(np.bincount(env.obs, minlength=6))}
    radii = markov_radii(env)
    if "markov_radius_distribution" in report:
        values, freq = np.unique(radii, return_counts=True)
        assert report["markov_radius_distribution"] == {str(v): int(f) for v, f in zip(values, freq)}
    if "markov_radius_mean" in report:
        assert report["markov_radius_mean"] == pytest.approx(radii.mean())
    assert out.count("\n") == 1  # one JSON object on one line


def test_env_defaults_are_the_paper_world(capsys, paper_world):
    code, out, _ = run_cli(["env", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    env = paper_world
    assert report["n_states"] == 100 and report["n_obs"] == 10
    assert report["clones"] == {str(o): 10 for o in range(10)}
    assert report["markov_radius"] == markov_radius(env)


def test_env_text_output(capsys):
    code, out, _ = run_cli(["env", "--grid", "4x4", "--colours", "4"], capsys)
    assert code == 0
    env = gridworld(4, 4, n_colours=4)
    assert "states 16, actions 4, observations 4" in out
    assert f"Markov radius {markov_radius(env)}" in out


def test_env_plot_writes_png(tmp_path, capsys):
    path = tmp_path / "map.png"
    code, out, err = run_cli(["env", "--grid", "5x5", "--colours", "5", "--plot", str(path), "--json"], capsys)
    assert code == 0, err
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.png"]  # no temp files left


def test_env_graph_json_file(tmp_path, capsys):
    env = gridworld(4, 6, n_colours=8, seed=9, obstacles=[(1, 1)], start=(0, 5))
    env.save(tmp_path / "world.json")
    code, out, err = run_cli(["env", "--graph", str(tmp_path / "world.json"), "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["n_states"] == 23 and report["n_obs"] == 8
    assert report["markov_radius"] == markov_radius(env)
    assert report["clones"] == {str(o): int(c) for o, c in enumerate(env.clone_counts())}


def test_env_graph_non_grid_with_plot(tmp_path, capsys):
    g = nx.MultiDiGraph()
    for i in range(6):
        g.add_node(f"s{i}", obs=i % 3)
        g.add_edge(f"s{i}", f"s{(i + 1) % 6}", action=0)
        g.add_edge(f"s{i}", f"s{(i + 2) % 6}", action=1)
    nx.write_graphml(g, tmp_path / "ring.graphml")
    png = tmp_path / "ring.png"
    code, out, err = run_cli(["env", "--graph", str(tmp_path / "ring.graphml"), "--json", "--plot", str(png)], capsys)
    assert code == 0, err
    report = json.loads(out)
    env = Environment.load(tmp_path / "ring.graphml")
    assert report["n_states"] == 6 and report["n_actions"] == 2 and report["n_obs"] == 3
    assert report["markov_radius"] == markov_radius(env) == 1  # depth-1 balls show 0, 1, 2; depth 2 repeats
    assert report["clones"] == {"0": 2, "1": 2, "2": 2}
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    "argv, words",
    [
        (["env", "--grid", "10y"], "--grid"),
        (["env", "--grid", "0x5"], "--grid"),
        (["env", "--grid", "3x3x3"], "--grid"),
        (["env", "--colours", "0"], "--colours"),
        (["env", "--colours", "ten"], "--colours"),
        (["env", "--seed", "-1"], "--seed"),
        (["env", "--colouring", "stripes"], "--colouring"),
        (["env", "--graph", "/nonexistent/world.json"], "/nonexistent/world.json"),
        (["env", "--grid", "3x3", "--graph", "w.json"], "not allowed"),
        (["env", "--bogus"], "--bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, words, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert words in lines[0] and "error" in lines[0]
    assert "Traceback" not in err


def test_bad_graph_files_exit_2(tmp_path, capsys):
    (tmp_path / "broken.json").write_text("{oops")
    payload = Environment.from_arrays([[1, 0]], [0, 1]).to_json_dict()
    del payload["graph"]["nodes"][0]["obs"]
    (tmp_path / "noobs.json").write_text(json.dumps(payload))
    cases = [(tmp_path / "broken.json", "broken.json"), (tmp_path / "noobs.json", "'obs'"), (tmp_path, str(tmp_path))]
    for path, words in cases:
        code, out, err = run_cli(["env", "--graph", str(path)], capsys)
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


def test_console_entry_point_subprocess(tmp_path):
    """The one out-of-process check: ``python -m hmmmerge env --json`` prints JSON and exits 0."""
    ok = subprocess.run([sys.executable, "-m", "hmmmerge", "env", "--grid", "3x4", "--colours", "3", "--json"],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["n_states"] == 12
