"""Hostile inputs (issue 15): no crash, no runaway, no silent wrong answer.

Absurd sizes run in a subprocess under an address-space cap, so that a check
that fails allocates nothing it should have refused.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmmmerge import ActionHMM, Environment
from hmmmerge._io import atomic_write_bytes, atomic_write_text
from hmmmerge._limits import SizeLimitError, check_memory, no_limits
from hmmmerge.evaluate import cluster_labels, weighted_purity
from hmmmerge.sweep import make_executor, max_local_workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAP = 3 << 30  # address-space cap of the subprocesses


def _capped():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _run(args, timeout=120, **kw):
    """Run ``args`` with the worktree on the path, under the memory cap; returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("HMMMERGE_MAX_MEMORY", None)
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=_capped,
                          cwd=ROOT, **kw)


def _one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- executors
def test_executor_refuses_more_workers_than_the_cap():
    with pytest.raises(ValueError, match=r"100000 workers is more than the limit of \d+"):
        with make_executor("local:100000"):
            pass
    with pytest.raises(ValueError, match="more than the limit"):
        with make_executor("threads", max_workers=max_local_workers() + 1):
            pass


def test_executor_starts_no_more_workers_than_tasks():
    with make_executor(f"local:{max_local_workers()}", n_tasks=1) as ex:
        assert ex._max_workers == 1
        assert ex.submit(abs, -3).result() == 3


_SWEEP_SCRIPT = textwrap.dedent("""
    import sys
    from hmmmerge.sweep import Sweep, example_run, grid
    configs = grid(x=list(range(8)), y=[1])
    for c in configs:
        c.update(sleep=30)
    Sweep(sys.argv[1], example_run, configs).run(executor="local:2", progress=False)
""")


def _children(pid: int) -> set:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(x) for x in f.read().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_sweep(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", _SWEEP_SCRIPT, str(tmp_path / "runs")], env=env, cwd=ROOT)
    try:
        deadline = time.time() + 60
        workers = set()
        while time.time() < deadline and len(workers) < 2:
            workers = _children(proc.pid)
            time.sleep(0.1)
        assert len(workers) == 2, "the sweep did not start its two workers"
        proc.kill()  # SIGKILL the parent only: no clean-up code runs in it
        proc.wait(timeout=30)
        deadline = time.time() + 5
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their parent"
    finally:
        for w in _children(proc.pid):
            os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


# --------------------------------------------------------------------------- atomic writes
@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_atomic_write_refuses_a_device_and_leaves_it_a_device():
    import stat

    with pytest.raises(ValueError, match="is a device"):
        atomic_write_text("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_atomic_write_refuses_a_folder_and_a_fifo(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        atomic_write_text(tmp_path / "d", "x")
    os.mkfifo(tmp_path / "f")
    with pytest.raises(ValueError, match="is a FIFO"):
        atomic_write_text(tmp_path / "f", "x")
    assert sorted(os.listdir(tmp_path)) == ["d", "f"]  # no temporary file left


def test_atomic_write_through_symlinks(tmp_path):
    target = tmp_path / "sub" / "target.txt"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.txt"
    link2 = tmp_path / "link2.txt"
    os.symlink(target, link)
    os.symlink(link, link2)  # a chain of links: the final target is written
    atomic_write_text(link2, "new")
    assert os.path.islink(link) and os.path.islink(link2)
    assert target.read_text() == "new"
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "sub" / "fresh.txt", dangling)  # a link to a new path creates the target
    atomic_write_text(dangling, "made")
    assert os.path.islink(dangling) and (tmp_path / "sub" / "fresh.txt").read_text() == "made"
    os.symlink("/dev/null", tmp_path / "to_device")
    with pytest.raises(ValueError, match="target of the link"):
        atomic_write_text(tmp_path / "to_device", "x")


def test_temporary_file_removed_when_the_write_fails(tmp_path, monkeypatch):
    def broken_replace(src, dst):
        raise OSError("disk said no")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk said no"):
        atomic_write_text(tmp_path / "a.txt", "x")
    monkeypatch.undo()
    with pytest.raises(TypeError):
        atomic_write_bytes(tmp_path / "b.txt", "not bytes")
    assert os.listdir(tmp_path) == []


def test_temporary_file_of_a_killed_writer_removed_by_the_next_write(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".tmp-{dead.pid}-abcdefgh-out.npz"
    stale.write_bytes(b"half a file")
    live = tmp_path / f".tmp-{os.getppid()}-abcdefgh-out.npz"  # a process that runs: kept
    live.write_bytes(b"in progress")
    atomic_write_bytes(tmp_path / "out.npz", b"whole")
    assert sorted(os.listdir(tmp_path)) == sorted(["out.npz", live.name])


# --------------------------------------------------------------------------- size limits
_LIMIT_CASES = [
    (["env", "--grid", "100000x100000"], "states 10000000000 is over the limit"),
    (["run", "--episodes", "1000000000"], "--episodes 1000000000 x --episode-length 50 needs about"),
    (["run", "--episode-length", "1000000000"], "--episode-length 1000000000 needs about"),
    (["run", "--eval-episodes", "1000000000"], "--eval-episodes 1000000000"),
    (["run", "--grid", "10x10", "--colours", "90000"], "first-order counts of 90000 observations"),
    (["run", "--merge-iterations", "1000000000", "--episodes", "20"], "--merge-iterations 1000000000 is over"),
    (["evaluate", "--clones", "1000000", "--models", "em", "--episodes", "5"], "EM on 10000000 clone states"),
    (["demo", "--seeds", "1000000000", "--out", "{tmp}/demo"], "--seeds 1000000000 is over the limit"),
    (["env", "--colours", "1000000000"], "1000000000 colours needs about"),
    (["reproduce", "--quick", "--only", "true_sim", "--executor", "local:100000", "--out", "{tmp}/r"],
     "100000 workers is more than the limit"),
    (["run", "--agent-seed", "-5"], "--agent-seed must be >= 0"),
]

_BATCH = textwrap.dedent("""
    import contextlib, io, json, sys
    from hmmmerge.cli import main
    out = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
        out.append([code, err.getvalue()])
    print(json.dumps(out))
""")


def test_absurd_sizes_refused_before_allocating(tmp_path):
    argvs = [[a.replace("{tmp}", str(tmp_path)) for a in argv] for argv, _ in _LIMIT_CASES]
    res = _run([sys.executable, "-c", _BATCH, json.dumps(argvs)], timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    for (argv, message), (code, err) in zip(_LIMIT_CASES, json.loads(res.stdout.strip().splitlines()[-1])):
        assert code == 2, (argv, err)
        assert _one_line(err) and message in err, (argv, err)


def test_check_memory_names_estimate_and_limit_and_can_be_lifted():
    with pytest.raises(SizeLimitError, match=r"--thing needs about 1\.0e\+06 TiB|--thing needs about .* over the limit"):
        check_memory("--thing", 2.0**60)
    with no_limits():
        check_memory("--thing", 2.0**60)


# --------------------------------------------------------------------------- command-line error paths
def test_closed_stdout_is_not_an_error():
    cmd = [sys.executable, "-m", "hmmmerge", "env", "--world", "aliased-loop", "--per-vertex"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    proc.stdout.close()  # the reader went away before the first line (like `| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert err == ""


def test_failed_sweep_run_is_one_line(monkeypatch, capsys):
    from hmmmerge import cli, reproduce
    from hmmmerge.sweep import SweepError

    def failing(*args, **kwargs):
        raise SweepError("1 run(s) failed; first: {'x': 1}: RuntimeError: injected\nsecond line")

    monkeypatch.setattr(reproduce, "reproduce", failing)
    assert cli.main(["reproduce", "--quick", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and "injected second line" in err


# --------------------------------------------------------------------------- numerical edges
def test_purity_with_huge_labels_equals_purity_of_relabelled():
    rng = np.random.default_rng(0)
    asg = rng.integers(0, 6, size=200)
    small = rng.integers(0, 4, size=200)
    huge = np.array([2**61, 2**62, 2**62 + 7, 2**63 - 1])[small]
    want = sum(np.bincount(small[asg == c]).max() for c in np.unique(asg)) / 200  # brute force
    assert weighted_purity(asg, huge, include_singletons=True) == pytest.approx(want)
    assert weighted_purity(asg * (2**60), small, include_singletons=True) == pytest.approx(want)
    modes = cluster_labels(asg, huge)
    assert [int(m) for m in modes] == [int(np.array([2**61, 2**62, 2**62 + 7, 2**63 - 1])[np.bincount(
        small[asg == c], minlength=4).argmax()]) for c in range(6)]


@pytest.mark.parametrize("sparse", [False, True])
def test_tiny_step_probability_is_not_a_zero(sparse):
    T = np.array([[[1.0, 1e-200], [0.0, 1.0]]])  # state 1 reached with probability 1e-200 ...
    E = np.array([[1.0, 0.0], [1.0, 1e-200]])  # ... and shows observation 1 with probability 1e-200
    E[1, 0] = 1.0 - 1e-200
    model = ActionHMM([sp.csr_matrix(T[0])] if sparse else T, E, [1.0, 0.0])
    res = model.run_filter([[0, 1, 1]], [[-1, 0, 0]])
    exact = np.array([0.0, 2 * np.log(1e-200), np.log(1e-200)])  # log(1e-400) = -921.03...
    np.testing.assert_allclose(res.log_probs[0], exact, rtol=1e-12)
    assert not np.isinf(res.log_probs).any()


def test_complex_and_fractional_inputs_refused():
    with pytest.raises(TypeError, match="real numbers"):
        ActionHMM(np.ones((1, 1, 1)) + 0j, np.ones((1, 1)), [1.0])
    with pytest.raises(TypeError, match="real numbers"):
        ActionHMM(np.ones((1, 1, 1)), np.ones((1, 1)), np.array([1 + 1j]))
    with pytest.raises(ValueError, match="next_state must hold integers, got 1.5"):
        ActionHMM.from_deterministic([[1.5, 0]], [0, 1], n_obs=2)
    with pytest.raises(ValueError, match="emission must hold integers"):
        ActionHMM.from_deterministic([[1, 0]], [0, 0.999], n_obs=2)
    whole = ActionHMM.from_deterministic([[1.0, 0.0]], [0.0, 1.0], n_obs=2)  # whole floats are fine
    assert whole.log_likelihood([0, 1], [-1, 0]) == 0.0


def test_fitting_no_episodes_says_so():
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.baselines.bfmm import BestFirstMerging
    from hmmmerge.baselines.em import CloneHMM
    from hmmmerge.episodic import EpisodicMemory
    from hmmmerge.rollouts import Trajectories

    empty = Trajectories(np.zeros((0, 5), dtype=np.int64), np.full((0, 5), -1, dtype=np.int64))
    for fit in (lambda: CloneHMM(n_clones=2).fit(empty, 10, 4), lambda: BestFirstMerging().fit(empty, 10, 4),
                lambda: EpisodicMemory(10, 4).observe_trajectories(empty)):
        with pytest.raises(ValueError, match="no episodes"):
            fit()
    with pytest.raises(ValueError, match="fit got no episodes"):  # fit starts afresh: it would learn nothing
        TwoLevelMemory(10, 4).fit(empty)
    agent = TwoLevelMemory(10, 4).partial_fit(empty)  # online: living no episode changes nothing
    assert agent.episodes_ == 0 and agent.steps_ == 0 and agent.memory_.n_states == 0


# --------------------------------------------------------------------------- large worlds
def test_markov_radii_refuses_quadratic_work_quickly():
    from hmmmerge.structure import markov_radii

    n = 40_000  # a ring with every state its own colour: every search would cover the whole ring
    env = Environment.from_arrays([np.roll(np.arange(n), -1), np.roll(np.arange(n), 1)], np.arange(n))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="over the limit"):
        markov_radii(env)
    assert time.perf_counter() - start < 30  # refused up front (a generous bound on a loaded machine)
    small = Environment.from_arrays([np.roll(np.arange(50), -1), np.roll(np.arange(50), 1)], np.arange(50))
    assert markov_radii(small).tolist() == [25] * 50  # all distinct: the radius is the eccentricity


def test_env_report_loses_one_line_only(monkeypatch, capsys):
    from hmmmerge import structure
    from hmmmerge.cli import main

    def refuse(env):
        raise SizeLimitError("markov_radii: too much work")

    monkeypatch.setattr(structure, "markov_radii", refuse)
    assert main(["env", "--world", "aliased-loop"]) == 0
    out = capsys.readouterr().out
    assert "Markov radius: not computed (markov_radii: too much work)" in out
    assert "aliasing depth" in out and "distinct observation sequences" in out
    assert main(["env", "--world", "aliased-loop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["markov_radius"] is None and "markov_radius" in report["not_computed"]
    assert report["aliasing_depth"]["unidentifiable"] == 12


def test_large_grid_plot_has_no_per_cell_text():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hmmmerge import gridworld
    from hmmmerge.plotting import MAX_ANNOTATED_STATES, plot_grid_values

    small, large = gridworld(5, 5, n_colours=3), gridworld(60, 60, n_colours=3)
    assert large.n_states > MAX_ANNOTATED_STATES
    ax_small, ax_large = plot_grid_values(small, small.obs), plot_grid_values(large, large.obs)
    assert len(ax_small.texts) == 25 and len(ax_large.texts) == 0
    plt.close("all")


# --------------------------------------------------------------------------- agent files
@pytest.fixture(scope="module")
def agent_file(tmp_path_factory, paper_world):
    from hmmmerge.agent import TwoLevelMemory

    path = tmp_path_factory.mktemp("agent") / "agent.npz"
    TwoLevelMemory(10, 4, initial_size=5).run(paper_world, 12, seed=0).save(path)
    return path


def _damaged_variants(good, out_dir):
    """The damaged files of the issue, each also without format, version and checksum (validation alone)."""
    with np.load(good, allow_pickle=False) as f:
        base = {k: f[k] for k in f.files}
    meta = json.loads(str(base["meta"]))
    legacy = {k: v for k, v in meta.items() if k not in ("format", "version", "checksum")}
    history_key = next(k for k in base if k.startswith("history_") and k != "history_episode")
    changes = {
        "t2-indices-out-of-range": {"t2_indices": base["t2_indices"] + 10**5},
        "t2-data-nan": {"t2_data": np.full_like(base["t2_data"], np.nan)},
        "t2-data-negative": {"t2_data": -base["t2_data"] - 0.1},
        "fo-counts-negative": {"fo_counts": base["fo_counts"] - 5},
        "next-state-float": {"l1_next_state": base["l1_next_state"] + 0.5},
        "next-state-out-of-range": {"l1_next_state": base["l1_next_state"] + 10**6},
        "assignment-huge": {"assignment": base["assignment"] + 2**40},
        "history-short": {history_key: base[history_key][:-1]},
        "emission-out-of-range": {"l1_emission": base["l1_emission"] + 100},
        "fo-prev-out-of-range": {"meta": dict(legacy, fo_prev=99)},
        "unknown-setting": {"meta": dict(legacy, params=dict(legacy["params"], bogus=1))},
        "bad-rng": {"meta": dict(legacy, rng={"bit_generator": "PCG64", "state": "nope"})},
    }
    paths = {}
    for name, change in changes.items():
        for flavour, m in (("checked", meta), ("legacy", legacy)):
            d = dict(base, meta=np.array(json.dumps(change.get("meta", m))))
            d.update({k: v for k, v in change.items() if k != "meta"})
            paths[f"{name}-{flavour}"] = str(out_dir / f"{name}-{flavour}.npz")
            np.savez_compressed(paths[f"{name}-{flavour}"], **d)
    unknown = dict(base, meta=np.array(json.dumps(dict(meta, version=999))))
    paths["unknown-version"] = str(out_dir / "unknown-version.npz")
    np.savez_compressed(paths["unknown-version"], **unknown)
    raw = open(good, "rb").read()
    for name, data in (("empty", b""), ("truncated", raw[: len(raw) // 2]), ("json", b'{"a": 1}'),
                       ("png", b"\x89PNG\r\n\x1a\n" + bytes(64))):
        paths[name] = str(out_dir / f"{name}.npz")
        open(paths[name], "wb").write(data)
    return paths


def test_damaged_agent_files_are_one_line_errors(agent_file, tmp_path):
    paths = _damaged_variants(agent_file, tmp_path)
    argvs = [["run", "--resume", p, "--episodes", "2", "--episode-length", "5", "--eval-episodes", "0"]
             for p in paths.values()]
    argvs.append(["run", "--resume", str(agent_file), "--episodes", "2", "--episode-length", "5",
                  "--eval-episodes", "0"])
    res = _run([sys.executable, "-c", _BATCH, json.dumps(argvs)], timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]  # a signal here would be a kernel fed a bad array
    outcomes = json.loads(res.stdout.strip().splitlines()[-1])
    for name, (code, err) in zip(paths, outcomes):
        assert code == 2 and _one_line(err), (name, code, err)
    assert outcomes[-1] == [0, ""]  # the intact file still resumes
    assert "checksum mismatch" in outcomes[0][1] and "t2_indices" in outcomes[1][1]


def test_agent_file_round_trip_keeps_format_and_checksum(agent_file):
    from hmmmerge._agent_file import FORMAT, VERSION, read_agent_file

    data, meta = read_agent_file(agent_file)
    assert meta["format"] == FORMAT and meta["version"] == VERSION and len(meta["checksum"]) == 64
    assert "meta" not in data and data["l1_emission"].ndim == 1


_FUZZ = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_FLIPS = st.lists(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=6),
                  min_size=1, max_size=5)


def _fuzz(good, tmp_path, flip_sets, argv_of, xor: bool):
    """Write one damaged copy of ``good`` per flip set and load them all in one capped subprocess (one
    process per hypothesis example keeps the test fast); each load must end with exit code 0 or 2 and,
    on 2, one line on stderr -- a signal kills the subprocess and fails the test."""
    raw = open(good, "rb").read()
    argvs = []
    for i, flips in enumerate(flip_sets):
        b = bytearray(raw)
        for where, value in flips:
            pos = int(where * len(b))
            b[pos] = b[pos] ^ value if xor else value
        bad = tmp_path / f"fuzzed-{i}{os.path.splitext(str(good))[1]}"
        bad.write_bytes(bytes(b))
        argvs.append(argv_of(str(bad)))
    res = _run([sys.executable, "-c", _BATCH, json.dumps(argvs)], timeout=300)
    assert res.returncode == 0, (res.returncode, res.stderr[-1000:])
    for code, err in json.loads(res.stdout.strip().splitlines()[-1]):
        assert code in (0, 2), (code, err)
        assert code == 0 or _one_line(err), err


@_FUZZ
@given(flip_sets=_FLIPS)
def test_fuzz_agent_file_bytes(agent_file, tmp_path, flip_sets):
    _fuzz(agent_file, tmp_path, flip_sets, xor=True, argv_of=lambda p: [
        "run", "--resume", p, "--episodes", "1", "--episode-length", "5", "--eval-episodes", "0", "--json"])


@pytest.fixture(scope="module")
def env_file(tmp_path_factory):
    from hmmmerge import gridworld

    path = tmp_path_factory.mktemp("env") / "world.json"
    gridworld(3, 3, n_colours=3).save(path)
    return path


@_FUZZ
@given(flip_sets=_FLIPS)
def test_fuzz_environment_file_bytes(env_file, tmp_path, flip_sets):
    _fuzz(env_file, tmp_path, flip_sets, xor=False, argv_of=lambda p: ["env", "--graph", p, "--json"])
