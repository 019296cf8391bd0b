"""Long lives: checkpoints that survive SIGKILL, history streamed to disk, resume equals an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from hmmmerge.cli import main

# long enough that the run is still going well after its first checkpoint, even on a fast idle machine
ARGS = ["run", "--episodes", "2000", "--episode-length", "30", "--merge", "sf", "--size", "10",
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
    assert 0 < saved["episodes"] < 2000 and saved["episodes"] % 40 == 0
    resumed = _cli(*ARGS, "--out", str(killed), "--resume", str(checkpoint))
    out_resumed, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    out_ref, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err
    a, b = json.loads(out_ref), json.loads(out_resumed)
    for key in a:
        if key not in ("wall_s", "out", "level2_graph"):  # paths differ
            assert a[key] == b[key], key
    assert (whole / "history.csv").read_text() == (killed / "history.csv").read_text()
    assert len((whole / "history.csv").read_text().splitlines()) == 2001
    assert (whole / "level2.json").read_text() == (killed / "level2.json").read_text()
    x, y = _arrays(whole / "agent.npz"), _arrays(killed / "agent.npz")
    assert x.keys() == y.keys()
    for key in x:
        assert np.array_equal(x[key], y[key], equal_nan=True), key


def test_checkpoint_needs_out(capsys):
    assert main(["run", "--episodes", "5", "--checkpoint-every", "2", "--json"]) == 2
    assert "--out" in capsys.readouterr().err


def _full_features(memory, clusters, merger, ids, states):
    """Reference: features of every cluster of the colour recomputed from scratch (no cache), members found
    by a scan of C (kept member lists must equal them)."""
    import scipy.sparse as sp

    from hmmmerge.merging import cluster_sets

    n = memory.n_states
    ptr, idx = cluster_sets(clusters.assignment[:n], ids, states)
    if clusters.keeps_members:
        assert all(np.array_equal(clusters.members(c), idx[ptr[r]:ptr[r + 1]]) for r, c in enumerate(ids))
    sets = sp.csr_matrix((np.ones(len(idx)), idx, ptr), shape=(len(ids), n))
    return (*merger.features(memory, sets), ptr, idx)


def _same_agent(a, b):
    ha, hb = a.history(), b.history()
    assert ha.keys() == hb.keys()
    for key in ha:
        assert np.array_equal(ha[key], hb[key], equal_nan=True), key
    n = a.memory_.n_states
    assert n == b.memory_.n_states
    assert np.array_equal(a.clusters_.assignment[:n], b.clusters_.assignment[:n])
    for x, y in zip(a.level2_.arrays, b.level2_.arrays):
        if isinstance(x, np.ndarray) and x.ndim == 1 and len(x) != len(y):  # cluster_of: compare the states
            x, y = x[:n], y[:n]
        assert np.array_equal(x, y)


@pytest.mark.parametrize("merge", ["sf", "random", "none", "fold"])
def test_incremental_equals_full_recomputation(merge, monkeypatch, tmp_path):
    """Kept per-cluster counts and T2 updated by the new links give exactly the run that recomputes
    features and T2 from all of level 1 each time, across save/load too."""
    import hmmmerge.merging as merging
    from hmmmerge import gridworld, random_walk
    from hmmmerge.agent import TwoLevelMemory

    import hmmmerge.agent
    import hmmmerge.level2

    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_ENTRIES_PER_STATE", 1e9)  # always update T2 after sleeps
    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_MOVED_SHARE", 1.0)
    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_SCANNED_SHARE", 1.0)
    monkeypatch.setattr(hmmmerge.agent, "KEEP_TABLES_FROM_STATES", 3000)  # member lists from mid-life on
    env = gridworld(seed=1)
    for seed in (0, 1, 2):
        traj = random_walk(env, 200, seed=seed)
        fast = TwoLevelMemory(10, 4, merge=merge, seed=seed).partial_fit(traj[:90])
        fast.save(tmp_path / "mid.npz")
        fast.partial_fit(traj[90:])
        resumed = TwoLevelMemory.load(tmp_path / "mid.npz").partial_fit(traj[90:])
        with monkeypatch.context() as m:
            m.setattr(merging, "_cluster_features", _full_features)
            m.setattr(TwoLevelMemory, "_refresh_level2", TwoLevelMemory._set_level2)
            m.setattr(hmmmerge.level2.Level2, "after_sleep", lambda self, *args: None)  # T2 counted afresh
            full = TwoLevelMemory(10, 4, merge=merge, seed=seed).fit(traj)
        _same_agent(fast, full)
        _same_agent(resumed, full)
        for name in full.last_predictions_:
            assert np.array_equal(fast.last_predictions_[name], full.last_predictions_[name][90:])


def _noisy_walk(env, episodes, rng, noise):
    from hmmmerge import random_walk

    traj = random_walk(env, episodes, 50, seed=rng)
    flip = rng.random(traj.obs.shape) < noise
    traj.obs[flip] = rng.integers(0, env.n_obs, int(flip.sum()))
    return traj


@pytest.mark.parametrize("merge,noise", [("sf", 0.0), ("random", 0.0), ("sf", 0.05)])
def test_kept_counts_and_t2_match_a_recount_after_every_block(merge, noise, monkeypatch):
    """After every chunk of experience (new states, online joins, replaced links with noise, sleeps,
    merges with splits), each valid kept row equals a fresh count of its cluster's states, and T2 equals
    :func:`level2_transitions` on level 1 (column order included), also right after every sleep."""
    from hmmmerge import gridworld
    from hmmmerge._agent_kernels import level2_transitions
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.evaluate import weighted_purity
    from hmmmerge.merging import depth_counts

    import hmmmerge.agent
    import hmmmerge.level2

    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_ENTRIES_PER_STATE", 1e9)  # always update T2 after sleeps
    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_MOVED_SHARE", 1.0)
    monkeypatch.setattr(hmmmerge.level2, "T2_UPDATE_MAX_SCANNED_SHARE", 1.0)
    monkeypatch.setattr(hmmmerge.agent, "KEEP_TABLES_FROM_STATES", 0)  # member lists from the start
    env, rng = gridworld(seed=2), np.random.default_rng(7)
    agent = TwoLevelMemory(10, 4, merge=merge, seed=3, sleep_every=137, refresh_every=61)
    sleeps = []

    def purity_recount(self):
        n = self.memory_.n_states
        args = (self.clusters_.assignment[:n], self.memory_.labels)
        return weighted_purity(*args, include_singletons=True), weighted_purity(*args)

    def sleep_then_compare(self):
        reports = TwoLevelMemory.sleep(self)
        full = level2_transitions(self.memory_.kernel_arrays()[0], self.memory_.n_states, self.clusters_.assignment,
                                  self.clusters_.n_clusters)
        sleeps.append(all(np.array_equal(x, y) for x, y in zip(full, self.level2_.t2))
                      and self._labels_kept is not None and self._purity == purity_recount(self))
        return reports

    agent.sleep = sleep_then_compare.__get__(agent)
    checked = refreshed = 0
    for _ in range(12):
        agent.partial_fit(_noisy_walk(env, 10, rng, noise))
        n, cl = agent.memory_.n_states, agent.clusters_
        for valid, counts in cl.kept_depth_counts():
            ids = np.flatnonzero(valid)
            ref = depth_counts(agent.memory_, [np.flatnonzero(cl.assignment[:n] == c) for c in ids], counts.shape[1])
            assert np.array_equal(ref, counts[ids])
            checked += len(ids)
        refreshed += bool(agent.level2_.joined)  # a refresh by the joined states' links (None: full)
        agent._refresh_level2()
        full = level2_transitions(agent.memory_.kernel_arrays()[0], n, cl.assignment, cl.n_clusters)
        for x, y in zip(full, agent.level2_.t2):
            assert np.array_equal(x, y)
        assert agent._current_purity() == purity_recount(agent)  # label counts kept through online joins
        assert all(np.array_equal(cl.members(c), np.flatnonzero(cl.assignment[:n] == c)) for c in range(cl.n_clusters))
    assert checked > 500 and (refreshed > 5 or noise)
    assert len(sleeps) > 10 and all(sleeps)
