"""benchmarks/bench_world_as_it_is.py: runs in subprocesses under a CPU limit, resumes, and its walks are the process."""

import json
import os

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script("bench_world_as_it_is")


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


def _args(bench, argv):
    """The parsed options of ``main`` without running anything (its parser, the protocol's defaults)."""
    import argparse

    ns = argparse.Namespace(worlds=list(bench.WORLDS), conditions=list(bench.CONDITIONS), colourings=[0, 1, 2],
                            seeds=[0, 1, 2], learners=["oracle", "em", "fold"], episodes=1000, episode_length=50,
                            eval_episodes=100, cpu_limit=300.0, pairs=False, capped=[], capped_limit=40.0,
                            capped_runs=1)
    for k, v in argv.items():
        setattr(ns, k, v)
    return ns


def test_pairs_keep_the_paper_grid_full_and_minigrid_on_its_one_layout(bench):
    args = _args(bench, {"pairs": True})
    assert bench.runs_of("paper-grid", args) == [(c, s) for c in range(3) for s in range(3)]
    assert bench.runs_of("maze", args) == [(0, 0), (1, 1), (2, 2)]
    assert bench.runs_of("fourrooms-7x7", args) == [(0, 0), (0, 1), (0, 2)]
    assert bench.runs_of("maze", _args(bench, {})) == bench.runs_of("paper-grid", args)
    configs = bench.configurations(args)
    n_gallery = len(bench.WORLDS) - 1 - len(bench.MINIGRID_VIEWS)
    assert len(configs) == 3 * (9 * 5 + 3 * 5 * n_gallery + 3 * len(bench.MINIGRID_VIEWS))
    assert {c["condition"] for c, _ in configs if c["world"] in bench.MINIGRID_VIEWS} == {"clean"}
    assert {c["episode_length"] for c, _ in configs if c["world"] == "fourrooms-7x7"} == {100}
    keys = [bench.run_key(c) for c, _ in configs]
    assert len(set(keys)) == len(keys)


def test_capped_learners_run_every_clean_run_and_few_others_under_their_limit(bench):
    args = _args(bench, {"pairs": True, "capped": ["fold"], "capped_limit": 25.0, "capped_runs": 2,
                         "worlds": ["paper-grid", "torus", "fourrooms-3x3"]})
    configs = bench.configurations(args)
    fold = [(c, lim) for c, lim in configs if c["learner"] == "fold"]
    assert {lim for _, lim in fold} == {25.0}
    assert {lim for c, lim in configs if c["learner"] != "fold"} == {300.0}
    count = {}
    for c, _ in fold:
        count[(c["world"], c["condition"])] = count.get((c["world"], c["condition"]), 0) + 1
    assert count[("paper-grid", "clean")] == 9 and count[("torus", "clean")] == 3
    assert count[("fourrooms-3x3", "clean")] == 3
    assert all(count[(w, cond)] == 2 for w in ("paper-grid", "torus") for cond in bench.CONDITIONS if cond != "clean")
    # the other learners keep the whole protocol, and the runs a capped learner does make are the first ones
    assert sum(c["learner"] == "em" for c, _ in configs) == 9 * 5 + 3 * 5 + 3
    assert {(c["colouring"], c["seed"]) for c, _ in fold if c["world"] == "torus" and c["condition"] != "clean"} \
        == {(0, 0), (1, 1)}


def test_main_refuses_unpaired_pairs_and_bad_caps(bench, tmp_path, capsys):
    for argv in (["--pairs", "--colourings", "0,1", "--seeds", "0"], ["--capped-limit", "0"],
                 ["--capped-runs", "-1"], ["--capped", "no-such-learner"]):
        with pytest.raises(SystemExit):
            bench.main(["--out", str(tmp_path / "o"), "--table-only"] + argv)
        assert "error" in capsys.readouterr().err


def _record(bench, learner, world, condition, colouring, seed, acc, oracle, cpu=1.0, blocks=None, status="ok"):
    config = {"world": world, "condition": condition, "colouring": colouring, "seed": seed, "learner": learner,
              "episodes": 1000, "episode_length": 50, "eval_episodes": 100}
    if status != "ok":
        return {"config": config, "status": status, "cpu_limit": 40.0, "process_cpu_s": 41.0}
    r = {"config": config, "status": "ok", "cpu_limit": 300.0, "heldout_accuracy": acc, "oracle_accuracy": oracle,
         "fit_cpu_s": cpu}
    if blocks is not None:
        r.update(block_cpu_s=blocks, online_accuracy=acc - 0.01)
    return r


def test_gaps_are_run_by_run_and_targets_follow_the_issue(bench):
    rng = np.random.default_rng(0)
    records, expect_em, expect_or = [], [], []
    for i, (c, s) in enumerate([(0, 0), (1, 1), (2, 2)]):
        oracle = 0.95 + 0.01 * i
        em, new = rng.uniform(0.9, 0.95, size=2)
        records += [_record(bench, "oracle", "maze", "slip-0.05", c, s, oracle, oracle),
                    _record(bench, "em", "maze", "slip-0.05", c, s, em, oracle, cpu=8.0),
                    _record(bench, "new", "maze", "slip-0.05", c, s, new, oracle, cpu=2.0 + i,
                            blocks=[1.0, 0.5 + i, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5])]
        expect_em.append(new - em)
        expect_or.append(new - oracle)
    records.append(_record(bench, "new", "maze", "noise-0.05", 0, 0, None, None, status="cpu-limit"))
    st = bench.summary([r for r in records if r["config"]["learner"] == "new"], "new", bench.by_run(records))
    assert st["n"] == 4 and st["limited"] == 1 and st["limit"] == 40.0
    assert np.allclose(st["vs_em"], expect_em) and np.allclose(st["vs_oracle"], expect_or)
    assert np.allclose(st["growth"], [1.5 / 0.5, 1.5 / 1.5, 1.5 / 2.5]) and st["cpu"] == [2.0, 3.0, 4.0]
    lines = bench.detail_table(records, ["oracle", "em", "new"], ["slip-0.05", "noise-0.05"])
    row = next(line for line in lines if line.startswith("| slip-0.05 | new |"))
    assert f"{np.mean(expect_em):+.3f}, {min(expect_em):+.3f}" in row and "1/1 > 40 s" in lines[-1]
    # the per-run targets: EM - 0.01 and oracle - 0.02 under slip 0.05; <= 5 s and growth <= 2
    em = records[1]
    near = dict(records[2], heldout_accuracy=em["heldout_accuracy"] - 0.009, oracle_accuracy=0.0)
    far = dict(near, heldout_accuracy=em["heldout_accuracy"] - 0.011)
    assert bench.run_meets(near, em)[0] and not bench.run_meets(far, em)[0]
    assert not bench.run_meets(dict(near, oracle_accuracy=near["heldout_accuracy"] + 0.021), em)[0]
    assert bench.run_meets(dict(near, block_cpu_s=[1, 1, 2.0]), em)[1]
    assert not bench.run_meets(dict(near, block_cpu_s=[1, 1, 2.1]), em)[1]
    assert not bench.run_meets(dict(near, fit_cpu_s=5.1), em)[1]
    assert bench.run_meets(records[-1], em) == (False, False)
    clean = dict(near, config=dict(near["config"], condition="clean"), heldout_accuracy=0.989)
    assert not bench.run_meets(clean, None)[0] and bench.run_meets(dict(clean, heldout_accuracy=0.99), None)[0]
    table = "\n".join(bench.per_world_table(records, "new", ["maze"], ["slip-0.05", "noise-0.05"]))
    met = all(bench.run_meets(r, records[3 * i + 1])[0] for i, r in enumerate(records[2:9:3]))
    assert ("A" if met else "a") + "c" in table.splitlines()[-1].split("|")[2]  # run 0's last block is 3x its 2nd
    assert "> 40 s (1/1) ac" in table
    # MiniGrid has its own rows in the targets (its bound is EM - 0.02, no oracle bound, no 0.99)
    grid = [_record(bench, "em", "fourrooms-3x3", "clean", 0, 0, 0.94, 1.0),
            _record(bench, "new", "fourrooms-3x3", "clean", 0, 0, 0.925, 1.0, blocks=[1.0, 1.0])]
    flat = [_record(bench, "em", "maze", "clean", 0, 0, 0.99, 1.0),
            _record(bench, "new", "maze", "clean", 0, 0, 0.994, 1.0, blocks=[1.0, 1.0])]
    rows = {line.split("|")[1].strip(): line.split("|")[2:6] for line in bench.targets(grid + flat, "new", ["clean"])
            if line.startswith("| ") and not line.startswith("| condition")}
    assert set(rows) == {"clean", "fourrooms-3x3"}
    assert [x.strip() for x in rows["clean"]] == ["1", "+0.004", "-0.006", "yes"]
    assert [x.strip() for x in rows["fourrooms-3x3"]] == ["1", "-0.015", "-0.075", "yes"]


def test_minigrid_large_view_world(bench):
    pytest.importorskip("minigrid")
    small, large = bench.build_world("fourrooms-3x3", 0, "clean"), bench.build_world("fourrooms-7x7", 0, "clean")
    assert small.n_states == large.n_states and large.n_obs > 10 * small.n_obs and large.is_deterministic
    assert bench._em_params(large)["n_clones"] * large.n_obs >= large.n_states
    assert bench._em_params(small) == {"n_clones": 20, "n_iter": 100}  # the reduced run's EM, unchanged


def test_doc_tables_replace_only_the_marked_text(bench, tmp_path, capsys):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"# B\n\nbefore\n{bench.DOC_BEGIN}\nold table\n{bench.DOC_END}\nafter\n")
    bench.update_doc(str(doc), ["| a |", "| 1 |"])
    assert doc.read_text() == f"# B\n\nbefore\n{bench.DOC_BEGIN}\n| a |\n| 1 |\n{bench.DOC_END}\nafter\n"
    bench.update_doc(str(doc), ["| a |", "| 1 |"])  # again: the same file
    assert doc.read_text().count("| a |") == 1
    assert bench.doc_tables(["# T: 3 runs", "", "## S", "### s", "x"]) == ["T: 3 runs.", "", "### S", "#### s", "x"]
    for text in ("no markers\n", f"{bench.DOC_END}\n{bench.DOC_BEGIN}\n", f"{bench.DOC_BEGIN}\n{bench.DOC_BEGIN}\n"
                 f"{bench.DOC_END}\n"):
        doc.write_text(text)
        with pytest.raises(ValueError, match="needs exactly one"):
            bench.update_doc(str(doc), ["x"])
        assert doc.read_text() == text
        with pytest.raises(SystemExit):  # refused before any run
            bench.main(["--out", str(tmp_path / "o"), "--doc", str(doc), "--worlds", "maze"])
        assert "--doc" in capsys.readouterr().err and not (tmp_path / "o").exists()
