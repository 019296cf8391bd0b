"""Sweeps: resume after a failure or a kill, corrupt files redone, identical results on every executor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hmmmerge.sweep import (CorruptResult, Sweep, SweepError, example_run, grid, make_executor, read_result,
                            run_sweeps)


def _arrays(results):
    return [{k: v for k, v in r.items() if k != "_meta"} for r in results]


def _same(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(_arrays(a), _arrays(b)):
        assert sorted(ra) == sorted(rb)
        for k in ra:
            np.testing.assert_array_equal(ra[k], rb[k])


def _log_counts(path):
    if not os.path.exists(path):
        return {}
    xs = [int(line) for line in open(path).read().split()]
    return {x: xs.count(x) for x in set(xs)}


def test_resume_after_failure_redoes_nothing_finished(tmp_path):
    log, flag = str(tmp_path / "calls.log"), str(tmp_path / "fail")
    open(flag, "w").close()
    configs = grid(x=list(range(8)), y=[1])
    for c in configs:
        c.update(log=log, fail_flag=flag, fail_at=5)
    sweep = Sweep(tmp_path / "runs", example_run, configs)
    with pytest.raises(SweepError, match="x=5"):
        sweep.run(executor="serial", progress=False)  # runs 0..4 finish, 5 raises, 6..7 never start
    status = sweep.status()
    assert status["done"] == [0, 1, 2, 3, 4] and status["missing"] == [5, 6, 7]
    mtimes = {i: os.stat(sweep.paths[i]).st_mtime_ns for i in status["done"]}
    os.unlink(flag)
    results = sweep.run(executor="threads:2", progress=False)
    assert sweep.last_report["skipped"] == 5 and sweep.last_report["ran"] == 3
    counts = _log_counts(log)
    assert all(counts[x] == 1 for x in range(5)), counts  # finished runs never redone
    assert counts[5] == 2 and counts[6] == 1 and counts[7] == 1
    assert all(os.stat(sweep.paths[i]).st_mtime_ns == mtimes[i] for i in mtimes)
    # identical to a clean sweep of the same configurations
    clean = Sweep(tmp_path / "clean", example_run, [dict(c, log=str(tmp_path / "other.log")) for c in configs])
    fresh = clean.run(executor="serial", progress=False)
    assert [float(r["total"]) for r in results] == [float(r["total"]) for r in fresh]
    np.testing.assert_array_equal(np.array([r["draw"] for r in results]), np.array([r["draw"] for r in fresh]))


_KILL_SCRIPT = textwrap.dedent("""
    import sys
    from hmmmerge.sweep import Sweep, example_run, grid
    configs = grid(x=list(range(12)), y=[2])
    for c in configs:
        c.update(log=sys.argv[2], sleep=0.4)
    Sweep(sys.argv[1], example_run, configs).run(executor="local:2", progress=False)
""")


def test_killed_sweep_loses_at_most_the_runs_in_flight(tmp_path):
    runs, log = str(tmp_path / "runs"), str(tmp_path / "calls.log")
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, runs, log], start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            done = [f for f in os.listdir(runs)] if os.path.isdir(runs) else []
            if len([f for f in done if f.endswith(".npz") and not f.startswith(".tmp")]) >= 3:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep, its pool and its workers: no clean-up at all
    finally:
        proc.wait(timeout=30)
    configs = grid(x=list(range(12)), y=[2])
    for c in configs:
        c.update(log=log, sleep=0.4)
    sweep = Sweep(runs, example_run, configs)
    status = sweep.status()
    finished = status["done"]
    assert 3 <= len(finished) < 12 and not status["corrupt"]
    before = _log_counts(log)
    started = set(before)
    mtimes = {i: os.stat(sweep.paths[i]).st_mtime_ns for i in finished}
    for c in configs:
        c["sleep"] = 0.4  # unchanged: same hashes
    results = sweep.run(executor="threads:4", progress=False)
    after = _log_counts(log)
    assert all(after[x] == 1 for x in finished)  # no finished run repeated
    redone_twice = {x for x in after if after[x] == 2}
    assert redone_twice <= started - set(finished)  # only runs in flight at the kill ran twice
    assert redone_twice == started - set(finished)
    # at most the submission window (2 x the pool's two workers): running, or finished but not yet written
    assert len(redone_twice) <= 4
    assert all(os.stat(sweep.paths[i]).st_mtime_ns == mtimes[i] for i in mtimes)
    assert [float(r["total"]) for r in results] == [x + 2.0 for x in range(12)]
    assert not [f for f in os.listdir(runs) if f.startswith(".tmp")]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "swap", "bad_checksum"])
def test_corrupt_result_is_detected_and_redone(tmp_path, damage):
    log = str(tmp_path / "calls.log")
    configs = [dict(c, log=log) for c in grid(x=[0, 1, 2], y=[5])]
    sweep = Sweep(tmp_path / "runs", example_run, configs)
    first = sweep.run(executor="serial", progress=False)
    path = sweep.paths[1]
    if damage == "truncate":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "garbage":
        open(path, "wb").write(b"not an npz")
    elif damage == "swap":  # a valid file, but another configuration's
        os.replace(sweep.paths[2], path)
    else:  # a valid npz whose arrays do not match the recorded checksum
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
        data["total"] = np.array(99.0)
        np.savez(path, **data)
    with pytest.raises((CorruptResult, FileNotFoundError)):
        sweep.load_one(1)
    status = sweep.status()
    assert 1 in status["corrupt"]
    again = sweep.run(executor="serial", progress=False)
    assert _log_counts(log)[1] == 2 and _log_counts(log)[0] == 1
    _same(first, again)


def test_validator_rejects_implausible_results(tmp_path):
    def must_be_small(config, result):
        if float(result["total"]) > 100:
            raise ValueError("total too large")

    sweep = Sweep(tmp_path, example_run, grid(x=[1, 500]), validate=must_be_small)
    with pytest.raises(CorruptResult, match="too large"):
        sweep.run(executor="serial", progress=False)
    assert sweep.status()["done"] == [0] and sweep.status()["corrupt"] == [1]


def test_configs_and_executors_are_validated(tmp_path):
    with pytest.raises(TypeError, match="'bad'"):
        Sweep(tmp_path, example_run, [{"x": 1, "bad": object()}])
    with pytest.raises(ValueError, match="twice"):
        Sweep(tmp_path, example_run, [{"x": 1}, {"x": 1}])
    with pytest.raises(TypeError, match="module-level"):
        Sweep(tmp_path, lambda c: {}, [{"x": 1}])
    with pytest.raises(ValueError, match="executor"):
        with make_executor("gpu"):
            pass
    with pytest.raises(ValueError, match="positive"):
        with make_executor("local:0"):
            pass
    sweep = Sweep(tmp_path, example_run, [{"x": 1}])
    sweep.run(executor="serial", progress=False)
    with pytest.raises(CorruptResult, match="another configuration"):
        read_result(sweep.paths[0], sweep.function_name, {"x": 2})


def _tiny_agent_configs():
    from hmmmerge.reproduce import runs  # noqa: F401 - the run functions the workers import

    configs = grid(seed=[0, 1], merge=["sf", "random"])
    for c in configs:
        c.update(colouring=0, size=10, episodes=25, structure=True)
    return configs


def test_same_results_on_every_executor(tmp_path):
    from distributed import LocalCluster

    from hmmmerge.reproduce.runs import learning_run

    agent_cfg = _tiny_agent_configs()
    toy_cfg = grid(x=list(range(6)), seed=[3])
    reference = None
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                           dashboard_address=None)
    try:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        for i, ex in enumerate(["serial", "threads:2", "local:2", address]):
            agent = Sweep(tmp_path / f"a{i}", learning_run, agent_cfg)
            toy = Sweep(tmp_path / f"t{i}", example_run, toy_cfg)
            got = run_sweeps([agent, toy], executor=ex, progress=False)
            assert agent.last_report["ran"] == len(agent_cfg)
            if reference is None:
                reference = got
            else:
                _same(reference[0], got[0])
                _same(reference[1], got[1])
    finally:
        cluster.close()
    r = reference[0][0]
    assert r["l2_accuracy"].shape == (25,) and r["structure"].shape == (100, 100)
    # the same run twice in one process is identical too (no hidden global state)
    again = learning_run(agent_cfg[0])
    np.testing.assert_array_equal(again["l2_accuracy"], r["l2_accuracy"])


def test_executor_context_passes_instances_through():
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(1) as pool:
        with make_executor(pool) as ex:
            assert ex is pool
            assert ex.submit(abs, -3).result() == 3
        assert pool.submit(abs, -4).result() == 4  # not shut down by make_executor


def test_code_version_keys_results_and_is_checked_on_workers(tmp_path):
    from hmmmerge.sweep import _call, code_fingerprint

    log = str(tmp_path / "calls.log")
    configs = [{"x": 1, "log": log}]
    a = Sweep(tmp_path, example_run, configs, version="v1")
    a.run(executor="serial", progress=False)
    b = Sweep(tmp_path, example_run, configs, version="v2")  # new code: the old result is not reused
    assert b.status()["missing"] == [0]
    b.run(executor="serial", progress=False)
    assert _log_counts(log)[1] == 2
    # a file renamed to pose as another version's result is caught by its recorded version
    os.replace(a.paths[0], b.paths[0])
    assert b.status()["corrupt"] == [0]
    auto = Sweep(tmp_path, example_run, configs, version="auto")
    assert auto.version == code_fingerprint("hmmmerge")
    with pytest.raises(RuntimeError, match="same version on every worker"):
        _call(auto.function_name, configs[0], "0" * 16)
