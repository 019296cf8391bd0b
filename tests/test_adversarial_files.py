"""Hostile files and values (issue 25): nothing lost on a damaged checkpoint, only regular files read or
written, sizes and values of world files, Gymnasium and recording inputs checked before anything is allocated.

Cases that could allocate or block run in a subprocess under an address-space
cap and a timeout, so that a regression fails instead of exhausting memory or
hanging; FIFOs are made with ``os.mkfifo`` under ``tmp_path`` and nothing is
ever written to a device path.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hmmmerge._agent_file import write_agent_file
from hmmmerge.cli import main

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


def _cli(*argv, timeout=120):
    return _run([sys.executable, "-m", "hmmmerge", *map(str, argv)], timeout=timeout)


def _one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def _refused(capsys, argv, match=None) -> str:
    """``main(argv)`` exits 2 with one line on stderr (containing ``match``); returns that line."""
    try:
        code = main(list(map(str, argv)))
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and _one_line(err), (argv, code, err)
    if match is not None:
        assert match in err, err
    return err


# --------------------------------------------------------------------------- damaged checkpoints
RUN = ["run", "--episodes", "12", "--episode-length", "20", "--checkpoint-every", "4", "--eval-episodes", "0",
       "--json"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run of 12 episodes checkpointed every 4: checkpoint.npz at episode 8, history.csv of 12 rows."""
    d = tmp_path_factory.mktemp("ck") / "run"
    assert main([*RUN, "--out", str(d)]) == 0
    return d


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _rewrite_meta(path, change):
    """Rewrite the agent file ``path`` with ``change(meta)`` applied, checksum recomputed (a valid file)."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays.pop("meta")))
    for k in ("format", "version", "checksum"):
        meta.pop(k)
    change(meta)
    write_agent_file(path, meta, **arrays)


def _snapshot(d):
    return {p: (d / p).read_bytes() for p in sorted(os.listdir(d))}


def _set(key, value):
    return lambda m: m["extra"].__setitem__(key, value)


DAMAGED_EXTRA = {
    "history_rows -1": (_set("history_rows", -1), "'history_rows' -1 is outside 0..8"),
    "history_rows 5": (_set("history_rows", 5), "holds 8 rows of the episodes before the checkpoint"),
    "history_rows 9": (_set("history_rows", 9), "'history_rows' 9 is outside 0..8"),
    "history_rows 2.0": (_set("history_rows", 2.0), "'history_rows' is 2.0, expected an integer"),
    "history_rows true": (_set("history_rows", True), "'history_rows' is True, expected an integer"),
    "target_episodes 10**12": (_set("target_episodes", 10**12), "'target_episodes' 1000000000000 is too many"),
    "target_episodes 8": (_set("target_episodes", 8), "'target_episodes' 8 is not more than the 8 episodes"),
    "target_episodes '12'": (_set("target_episodes", "12"), "'target_episodes' is '12', expected an integer"),
    "walk_rng 'x'": (_set("walk_rng", "x"), "'walk_rng' is not a state of the walk's random generator"),
    "walk_rng of MT19937": (_set("walk_rng", {"bit_generator": "MT19937", "state": {}}), "'walk_rng' is not"),
    "walk_rng state 'x'": (lambda m: m["extra"]["walk_rng"].__setitem__("state", "x"), "'walk_rng' is not"),
    "walk_rng state 2**200": (lambda m: m["extra"]["walk_rng"]["state"].__setitem__("state", 2**200),
                              "'walk_rng' is not"),
    "extra a list": (lambda m: m.__setitem__("extra", [1, 2]), "meta 'extra' is a list"),
    "extra a string": (lambda m: m.__setitem__("extra", "walk_rng"), "meta 'extra' is a str"),
    "extra a number": (lambda m: m.__setitem__("extra", 3), "meta 'extra' is a int"),
    "no target_episodes": (lambda m: m["extra"].pop("target_episodes"), "run state has no 'target_episodes'"),
    "no walk_rng": (lambda m: m["extra"].pop("walk_rng"), "run state has no 'walk_rng'"),
    "other episode length": (_set("episode_length", 30), "has --episode-length 30; resume it with the same"),
    "popped 4": (lambda m: m.__setitem__("popped", 4), "history up to episode 4, not its last episode 8"),
    "popped a list": (lambda m: m.__setitem__("popped", [1]), "meta 'popped' is [1]"),
    "popped 100": (lambda m: m.__setitem__("popped", 100), "meta 'popped' is 100"),
}


_BATCH = textwrap.dedent("""
    import contextlib, io, json, sys
    from hmmmerge.cli import main
    out = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
        out.append([code, err.getvalue()])
    print(json.dumps(out))
""")


def _batch(argvs, timeout=300):
    """Run each command line in one capped subprocess (a hang or a runaway fails the test); [[code, stderr]]."""
    res = _run([sys.executable, "-c", _BATCH, json.dumps([[str(a) for a in argv] for argv in argvs])],
               timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_damaged_checkpoints_are_refused_before_any_file_changes(finished_run, tmp_path):
    argvs, folders = [], {}
    for case, (change, _) in DAMAGED_EXTRA.items():
        d = folders[case] = _copy(finished_run, tmp_path / case.replace(" ", "_").replace("*", "^"))
        _rewrite_meta(d / "checkpoint.npz", change)
        argvs.append([*RUN, "--out", d, "--resume", d / "checkpoint.npz"])
    before = {case: _snapshot(d) for case, d in folders.items()}
    for (case, (_, message)), (code, err) in zip(DAMAGED_EXTRA.items(), _batch(argvs)):
        assert code == 2 and _one_line(err) and message in err, (case, code, err)
        assert _snapshot(folders[case]) == before[case], case  # history.csv, agent.npz, level2.json untouched


def _history_rows(path):
    return [line.split(",", 1)[0] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("damage", ["a foreign row", "a gap", "a text row", "not a history", "rows cut"])
def test_history_not_of_this_checkpoint_is_refused_and_kept(finished_run, tmp_path, capsys, damage):
    d = _copy(finished_run, tmp_path / "run")
    lines = (d / "history.csv").read_text().splitlines(keepends=True)
    if damage == "a foreign row":
        lines[3] = "77" + lines[3][lines[3].index(","):]
    elif damage == "a gap":
        del lines[4]
    elif damage == "a text row":
        lines[2] = "x" + lines[2]
    elif damage == "not a history":
        lines[0] = "step" + lines[0][len("episode"):]
    else:
        lines = lines[:5]  # 4 rows: fewer than the checkpoint's 8
    (d / "history.csv").write_text("".join(lines))
    before = _snapshot(d)
    _refused(capsys, [*RUN, "--out", d, "--resume", d / "checkpoint.npz"], "history.csv")
    assert _snapshot(d) == before


def test_intact_checkpoint_resumes_to_the_same_history(finished_run, tmp_path, capsys):
    d = _copy(finished_run, tmp_path / "run")
    before = _snapshot(d)
    assert main([*RUN, "--out", str(d), "--resume", str(d / "checkpoint.npz")]) == 0
    capsys.readouterr()
    assert (d / "history.csv").read_bytes() == before["history.csv"]  # rows 8..11 cut, then lived again
    assert _history_rows(d / "history.csv") == ["episode", *map(str, range(12))]


def test_checkpoint_resumed_into_another_folder_writes_a_new_history(finished_run, tmp_path, capsys):
    other = tmp_path / "other"
    assert main([*RUN, "--out", str(other), "--resume", str(finished_run / "checkpoint.npz")]) == 0
    capsys.readouterr()
    assert _history_rows(other / "history.csv") == ["episode", "8", "9", "10", "11"]


def test_saved_memory_resumed_into_its_folder_continues_its_history(finished_run, tmp_path, capsys):
    d = _copy(finished_run, tmp_path / "run")
    argv = ["run", "--episodes", "3", "--episode-length", "20", "--eval-episodes", "0", "--json"]
    assert main([*argv, "--out", str(d), "--resume", str(d / "agent.npz")]) == 0
    assert _history_rows(d / "history.csv") == ["episode", *map(str, range(15))]  # 12 kept, 3 added
    other = tmp_path / "other"  # another folder: its history starts with the new episodes
    assert main([*argv, "--out", str(other), "--resume", str(finished_run / "agent.npz")]) == 0
    assert _history_rows(other / "history.csv") == ["episode", "12", "13", "14"]
    capsys.readouterr()
