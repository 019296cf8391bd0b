"""analysis/holdout_worlds.py: one-line errors on bad arguments, the few-colour set's walks unchanged by the
generalised runner (a world's index among the probe worlds seeds its walks), and a sweep that resumes."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "analysis"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_unseen_worlds as unseen  # noqa: E402
import holdout_worlds as hw  # noqa: E402


@pytest.fixture
def probe_worlds(monkeypatch):
    """The probe set's worlds as the runner finds them, restored afterwards (the runner adds a set to them)."""
    monkeypatch.setattr(unseen, "PROBE_WORLDS", dict(unseen.PROBE_WORLDS))
    return unseen.PROBE_WORLDS


@pytest.mark.parametrize("args, option", [
    (["--seeds", "0,x"], "--seeds"), (["--seeds", "-1"], "--seeds"), (["--seeds", ""], "--seeds"),
    (["--learners", "replay,bogus"], "--learners"), (["--worlds", "h-grid-9x9-c3"], "--worlds"),
    (["--conditions", "slip-0.50"], "--conditions"), (["--set", "many"], "--set")])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, probe_worlds, args, option):
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as e:
        hw.main([str(out), "--set", "edges", *args])
    assert e.value.code == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("holdout_worlds.py: error:") or "error:" in err[-1]
    assert option in err[-1]


def test_the_few_colour_worlds_keep_their_walks(probe_worlds):
    # session 13's script appended its six worlds after the eight probe worlds: same index, same walks
    base = len(probe_worlds)
    assert base == 8
    probe_worlds.update(hw.FEW_WORLDS)
    assert [list(probe_worlds).index(w) for w in hw.FEW_WORLDS] == list(range(8, 14))
    assert list(hw.FEW_WORLDS) == ["h-grid-9x9-c3", "h-grid-12x12-c3", "h-maze-11x11-c3", "h-torus-10x10-c2",
                                   "h-graph-60-a4-c3", "h-torus-8x8-c3"]   # session 13's order
    assert hw.SETS["few"][1] == ("noise-0.05", "slip-0.05", "slip-0.10", "random-start")


def test_edge_worlds_have_the_views_of_their_gate(probe_worlds):
    # the name's colour count is the number of views the learner sees (each side of a gate as intended)
    probe_worlds.update(hw.EDGE_WORLDS)
    for name in hw.EDGE_WORLDS:
        colours = int(name.rsplit("-c", 1)[1])
        assert unseen.build_world(name, 0, "clean").n_obs == colours, name


def test_the_sweep_appends_one_line_per_run_and_resumes(tmp_path, probe_worlds):
    out = tmp_path / "out.jsonl"
    argv = [str(out), "--set", "edges", "--worlds", "e-torus-12x12-c9", "--conditions", "clean,slip-0.05",
            "--learners", "oracle", "--seeds", "0"]
    hw.main(argv)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["world"], r["condition"], r["learner"]) for r in rows] == \
        [("e-torus-12x12-c9", "clean", "oracle"), ("e-torus-12x12-c9", "slip-0.05", "oracle")]
    assert rows[0]["acc"] == 1.0 and 0.8 < rows[1]["acc"] < 1.0   # a clean world's oracle is exact
    hw.main(argv)                                                     # resumed: nothing is redone
    assert len(out.read_text().splitlines()) == 2
