"""Long lives: checkpoints that survive SIGKILL, history streamed to disk, resume equals an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from hmmmerge.cli import main

ARGS = ["run", "--episodes", "400", "--episode-length", "30", "--merge", "sf", "--size", "10",
        "--eval-episodes", "0", "--json", "--checkpoint-every", "40"]


def _cli(*argv, **kw):
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "hmmmerge", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def _arrays(path):
    with np.load(path, allow_pickle=False) as d:
        return {k: d[k] for k in d.files if k != "meta"}


def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    ref = _cli(*ARGS, "--out", str(whole))
    victim = _cli(*ARGS, "--out", str(killed))
    checkpoint = killed / "checkpoint.npz"
    deadline = time.time() + 120
    while not checkpoint.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # let it run past the checkpoint: these episodes are lost and redone
    assert victim.poll() is None, "the run ended before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    with np.load(checkpoint, allow_pickle=False) as d:
        saved = json.loads(str(d["meta"]))
    assert 0 < saved["episodes"] < 400 and saved["episodes"] % 40 == 0
    resumed = _cli(*ARGS, "--out", str(killed), "--resume", str(checkpoint))
    out_resumed, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    out_ref, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err
    a, b = json.loads(out_ref), json.loads(out_resumed)
    for key in a:
        if key not in ("wall_s", "out"):
            assert a[key] == b[key], key
    assert (whole / "history.csv").read_text() == (killed / "history.csv").read_text()
    assert len((whole / "history.csv").read_text().splitlines()) == 401
    x, y = _arrays(whole / "agent.npz"), _arrays(killed / "agent.npz")
    assert x.keys() == y.keys()
    for key in x:
        assert np.array_equal(x[key], y[key], equal_nan=True), key


def test_checkpoint_needs_out(capsys):
    assert main(["run", "--episodes", "5", "--checkpoint-every", "2", "--json"]) == 2
    assert "--out" in capsys.readouterr().err
