"""benchmarks/bench_world_as_it_is.py: runs in subprocesses under a CPU limit, resumes, and its walks are the process."""

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_world_as_it_is.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_world_as_it_is", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_walks_follow_the_condition(bench):
    config = {"world": "cscg-room", "colouring": 1, "seed": 0, "episodes": 100, "episode_length": 30,
              "eval_episodes": 10}
    clean = bench.build_world("cscg-room", 1, "clean")
    train, _ = bench.walks(clean, dict(config, condition="clean"))
    assert (train.states[:, 0] == clean.start).all() and clean.is_deterministic
    env = bench.build_world("cscg-room", 1, "random-start")
    train, fresh = bench.walks(env, dict(config, condition="random-start"))
    assert len(set(train.states[:, 0].tolist())) > 20 and not np.array_equal(train.obs[:10], fresh.obs)
    slip = bench.build_world("cscg-room", 1, "slip-0.10")
    train, _ = bench.walks(slip, dict(config, condition="slip-0.10"))
    intended = clean.next_state[train.actions[:, 1:], train.states[:, :-1]]
    share = (intended != train.states[:, 1:]).mean()   # a slip lands elsewhere with 0.1 * (1 - P(same cell))
    assert 0.03 < share < 0.1
    noisy = bench.build_world("cscg-room", 1, "noise-0.05")
    train, _ = bench.walks(noisy, dict(config, condition="noise-0.05"))
    wrong = (noisy.obs[train.states] != train.obs).mean()  # replaced by another of 4 colours: 0.05 * 3/4
    assert 0.025 < wrong < 0.05


@pytest.mark.slow
def test_runs_resume_and_stop_at_the_cpu_limit(bench, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--out", str(out), "--worlds", "cscg-room", "--conditions", "slip-0.05", "--learners", "oracle,fold",
            "--colourings", "0", "--seeds", "0", "--episodes", "100", "--eval-episodes", "5", "--cpu-limit", "120"]
    assert bench.main(argv) == 0
    runs = sorted((out / "runs").iterdir())
    records = [json.loads(p.read_text()) for p in runs]
    assert {r["config"]["learner"] for r in records} == {"oracle", "fold"}
    oracle = next(r for r in records if r["config"]["learner"] == "oracle")
    fold = next(r for r in records if r["config"]["learner"] == "fold")
    assert oracle["status"] == "ok" and oracle["heldout_accuracy"] == oracle["oracle_accuracy"]
    assert fold["oracle_accuracy"] == oracle["oracle_accuracy"]  # the same held-out episodes
    assert len(fold["block_cpu_s"]) == 1 and 0 <= fold["online_accuracy"] <= 1
    stamps = [os.stat(p).st_mtime_ns for p in runs]
    assert bench.main(argv) == 0  # finished runs are not redone
    assert [os.stat(p).st_mtime_ns for p in runs] == stamps
    table = (out / "bench_world_as_it_is.md").read_text()
    assert f"| oracle | {oracle['heldout_accuracy']:.3f} ± 0.000" in table and "| fold |" in table
    # a run over its CPU limit is stopped and recorded as such
    config = dict(records[0]["config"], learner="em", episodes=1000)
    record = bench.execute(config, str(tmp_path / "limited.json"), cpu_limit=1, memory_gb=4)
    assert record["status"] == "cpu-limit" and record["process_cpu_s"] >= 0.9  # clock ticks
    assert json.loads((tmp_path / "limited.json").read_text())["status"] == "cpu-limit"
    capsys.readouterr()
