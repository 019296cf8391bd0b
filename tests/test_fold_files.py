"""Damaged fold / fold-noisy agent files and absurd fold parameters (issue 24): every load is a working agent
or one line naming the file and the field -- no signal, no traceback, no hang.

Loads run in a subprocess under the address-space cap of ``test_adversarial.py``: a kernel fed an index
out of range would kill it with a signal, which fails the test instead of the test session.
"""

import json
import os
import sys
import textwrap

import numpy as np
import pytest

from hmmmerge import gridworld
from hmmmerge._agent_file import write_agent_file
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.fold import FoldMerger, StatisticalFoldMerger, pair_llr
from hmmmerge.reproduce.beyond import bench_walks

sys.path.insert(0, os.path.dirname(__file__))
from test_adversarial import _run  # noqa: E402  (the capped subprocess)

# load each file, then use the agent: a file that loads must give an agent that learns on
_BATCH = textwrap.dedent("""
    import json, sys, traceback
    from hmmmerge import gridworld, random_walk
    from hmmmerge.agent import TwoLevelMemory
    walk = random_walk(gridworld(), 3, 20, seed=1)
    out = []
    for path in json.loads(sys.argv[1]):
        try:
            agent = TwoLevelMemory.load(path)
        except ValueError as e:
            out.append(["error", str(e)])
            continue
        except BaseException:
            out.append(["traceback", traceback.format_exc()[-1500:]])
            continue
        try:
            agent.partial_fit(walk); agent.sleep(); agent.level2_hmm()
            out.append(["ok", ""])
        except BaseException:
            out.append(["failed after loading", traceback.format_exc()[-1500:]])
    print(json.dumps(out))
""")


def _agent(merge: str, tmp_path_factory) -> str:
    env = gridworld()
    train, _ = bench_walks(env, {"world": "grid", "seed": 0, "episodes": 40, "episode_length": 30,
                                 "noise": 0.05 if merge == "fold-noisy" else 0.0})
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, sleep_every=300, seed=0).fit(train)
    path = str(tmp_path_factory.mktemp(merge) / "agent.npz")
    agent.save(path)
    return path


@pytest.fixture(scope="module")
def fold_file(tmp_path_factory):
    return _agent("fold", tmp_path_factory)


@pytest.fixture(scope="module")
def noisy_file(tmp_path_factory):
    return _agent("fold-noisy", tmp_path_factory)


def _read(path) -> tuple[dict, dict]:
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    return arrays, json.loads(str(arrays.pop("meta")))


def _write(path, arrays, meta, legacy: bool) -> str:
    """A file with the checksum recomputed (``legacy=False``) or as written before the format had one."""
    if legacy:
        meta = {k: v for k, v in meta.items() if k not in ("format", "version", "checksum")}
        np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    else:
        write_agent_file(path, meta, **arrays)
    return str(path)


def _outcomes(paths) -> list:
    res = _run([sys.executable, "-c", _BATCH, json.dumps(paths)], timeout=600)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])   # a signal: a kernel fed a bad array
    return json.loads(res.stdout.strip().splitlines()[-1])


def _is_one_line_error(kind, message, path) -> bool:
    return kind == "error" and len(message.splitlines()) == 1 and message.startswith(path) and len(message) < 400


# --------------------------------------------------------------------------- the cases of the issue
def _set(arrays, key, value):
    a = arrays[key].copy()
    a.flat[len(a.flat) // 2] = value
    return {key: a}


CASES = {   # (merger, change, the field the error must name)
    "fold_uf": ("fold", lambda a: _set(a, "fold_uf", 10**6), "fold_uf"),
    "fold_parent": ("fold", lambda a: _set(a, "fold_parent", 10**6), "fold_parent"),
    "fold_delta": ("fold", lambda a: _set(a, "fold_delta", 10**6), "fold_delta"),
    "fold_journal": ("fold", lambda a: _set(a, "fold_journal", 10**6), "fold_journal"),
    "fold_reds": ("fold", lambda a: _set(a, "fold_reds", 10**6), "fold_reds"),
    "fold_cid": ("fold", lambda a: _set(a, "fold_cid", 10**6), "fold_cid"),
    "fold_pending": ("fold", lambda a: {"fold_pending": np.array([10**6])}, "fold_pending"),
    "fold_stats-short": ("fold", lambda a: {"fold_stats": a["fold_stats"][:3]}, "fold_stats"),
    "fold_uf-cycle": ("fold", lambda a: {"fold_uf": np.where(np.isin(np.arange(len(a["fold_uf"])), [1, 2]),
                                                              [0, 2, 1] + [0] * (len(a["fold_uf"]) - 3),
                                                              a["fold_uf"])}, "fold_uf"),
    "fold_sizes-float": ("fold", lambda a: {"fold_sizes": a["fold_sizes"] + 0.5}, "fold_sizes"),
    "foldnoisy_delta": ("fold-noisy", lambda a: _set(a, "foldnoisy_delta", 10**6), "foldnoisy_delta"),
    "foldnoisy_reds": ("fold-noisy", lambda a: _set(a, "foldnoisy_reds", 10**6), "foldnoisy_reds"),
    "foldnoisy_uf": ("fold-noisy", lambda a: _set(a, "foldnoisy_uf", 10**6), "foldnoisy_uf"),
    "foldnoisy_cid": ("fold-noisy", lambda a: _set(a, "foldnoisy_cid", -5), "foldnoisy_cid"),
    "foldnoisy_counts": ("fold-noisy", lambda a: _set(a, "foldnoisy_counts", 7), "foldnoisy_counts"),
}
META_CASES = {   # meta fields of the wrong type
    "popped": ({"popped": "many"}, "popped"),
    "steps": ({"steps": [1]}, "steps"),
    "merge_params": ({"params": "merge_params", "value": {"min_evidence": "x"}}, "min_evidence"),
    "colour_past": ({"params": "merge_params", "value": {"colour_past": 10**6}}, "colour_past"),
}


def test_the_damaged_files_of_the_issue_are_one_line_errors(fold_file, noisy_file, tmp_path):
    good = {"fold": _read(fold_file), "fold-noisy": _read(noisy_file)}
    paths, fields = [], []
    for name, (merge, change, field) in CASES.items():
        arrays, meta = good[merge]
        for legacy in (False, True):
            paths.append(_write(tmp_path / f"{name}-{legacy}.npz", dict(arrays, **change(arrays)), meta, legacy))
            fields.append(field)
    for name, (change, field) in META_CASES.items():
        arrays, meta = good["fold"]
        if "params" in change:
            change = {"params": dict(meta["params"], merge_params=change["value"])}
        for legacy in (False, True):
            paths.append(_write(tmp_path / f"meta-{name}-{legacy}.npz", arrays, dict(meta, **change), legacy))
            fields.append(field)
    for path, field, (kind, message) in zip(paths, fields, _outcomes(paths + [fold_file, noisy_file])):
        assert _is_one_line_error(kind, message, path) and field in message, (path, kind, message)
    assert _outcomes([fold_file, noisy_file]) == [["ok", ""], ["ok", ""]]


def _mutations(arrays, meta, prefix, rng, n):
    """``n`` damaged copies: one entry of a merger array set to an odd value, or a meta field of a wrong type."""
    keys = sorted(k for k in arrays if k.startswith(prefix) and arrays[k].size)
    for _ in range(n):
        if rng.random() < 0.15:
            field = rng.choice(["steps", "episodes", "sleeps", "fo_prev", "popped", "sleep_pending", "purity"])
            yield arrays, dict(meta, **{field: [None, "x", 1.5, -1, 10**30, [1, 2]][rng.integers(6)]})
            continue
        key = keys[rng.integers(len(keys))]
        a = arrays[key].copy()
        i = rng.integers(a.size)
        old = int(np.nan_to_num(a.flat[i]))
        values = [10**6, -1, -2, 0, 1, old + 1, old - 1, int(rng.integers(-3, a.size + 3)), 2**62]
        a.flat[i] = values[rng.integers(len(values))] if a.dtype != bool else not a.flat[i]
        yield dict(arrays, **{key: a}), meta


@pytest.mark.parametrize("merge", ["fold", "fold-noisy"])
def test_fuzz_fold_agent_files(merge, fold_file, noisy_file, tmp_path):
    good = fold_file if merge == "fold" else noisy_file
    arrays, meta = _read(good)
    prefix = "fold_" if merge == "fold" else "foldnoisy_"
    rng = np.random.default_rng(24)
    paths = []
    for i, (a, m) in enumerate(_mutations(arrays, meta, prefix, rng, 40)):
        paths.append(_write(tmp_path / f"fuzz-{i}.npz", a, m, legacy=bool(i % 2)))
    outcomes = _outcomes(paths)
    for path, (kind, message) in zip(paths, outcomes):
        assert kind == "ok" or _is_one_line_error(kind, message, path), (path, kind, message)
    assert sum(kind == "error" for kind, _ in outcomes) >= len(paths) // 2   # most damage is seen


# --------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("merger, params, name", [
    (FoldMerger, {"colour_past": 10**6}, "colour_past"),
    (FoldMerger, {"colour_past": 2**63}, "colour_past"),
    (FoldMerger, {"colour_evidence": 10**30}, "colour_evidence"),
    (FoldMerger, {"min_evidence": 10**30}, "min_evidence"),
    (FoldMerger, {"single_evidence": 2**63}, "single_evidence"),
    (FoldMerger, {"max_undo_rounds": 2**63}, "max_undo_rounds"),
    (FoldMerger, {"provisional_lead": 2**63}, "provisional_lead"),
    (StatisticalFoldMerger, {"risk": 5e-324}, "risk"),
    (StatisticalFoldMerger, {"noise": 5e-324}, "noise"),
    (StatisticalFoldMerger, {"min_visits": 2**63}, "min_visits"),
    (StatisticalFoldMerger, {"patience": 2**63}, "patience"),
    (StatisticalFoldMerger, {"retest_growth": float("inf")}, "retest_growth"),
    (StatisticalFoldMerger, {"provisional_lead": 1e400}, "provisional_lead"),
])
def test_absurd_parameters_are_one_line_errors_at_first_use(merger, params, name):
    mem = EpisodicMemory(2, 1)
    _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 0, 1])]
    fold = merger(**params)    # stored as given (get_params shows it)
    assert fold.get_params()[name] == params[name]
    with pytest.raises(ValueError, match=f"^{name} must be") as e:
        fold.observe_tree(mem)
    assert len(str(e.value).splitlines()) == 1 and len(str(e.value)) < 200


def test_largest_accepted_parameters_run():
    mem = EpisodicMemory(2, 1)
    states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 10)]
    fold = FoldMerger(colour_past=64, colour_evidence=2**62, min_evidence=2**62)
    from hmmmerge.clusters import Clusters
    fold.observe(mem, [states])
    assert fold.sleep(mem, Clusters(n_states=mem.n_states))[0]["clusters"] >= 2
    noisy = StatisticalFoldMerger(risk=1e-300, noise=1e-300, min_visits=1)
    noisy.observe(mem, [states], [[-1] + [0] * 19])
    assert noisy.sleep(mem, Clusters(n_states=mem.n_states))[0]["clusters"] >= 2
    assert np.isfinite(pair_llr([1, 0], [0, 1], 1e-300))


@pytest.mark.parametrize("merge, config", [
    ("fold", {"world": "grid", "colouring": 0, "seed": 0, "noise": 0.05}),     # contradictions and undos
    ("fold", {"world": "maze", "colouring": 1, "seed": 1, "slip": 0.1}),
    ("fold", {"world": "grid", "colouring": 1, "seed": 1, "start": "random"}),
    ("fold-noisy", {"world": "torus", "colouring": 2, "seed": 2, "noise": 0.05}),
    ("fold-noisy", {"world": "grid", "colouring": 0, "seed": 0}),
])
def test_every_saved_state_passes_the_checks_and_resumes_exactly(merge, config, tmp_path):
    """No false alarm: states saved after every chunk of a run (undos, slips, no common start, re-tests)
    load, and the run resumed from each file is the uninterrupted run."""
    from hmmmerge.reproduce.beyond import bench_world

    env = bench_world(config)
    train, _ = bench_walks(env, dict(config, episodes=60, episode_length=30))
    whole = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, sleep_every=150, seed=0).fit(train)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, sleep_every=150, seed=0)
    for lo in range(0, 60, 15):
        agent.partial_fit(train[lo:lo + 15])
        agent.save(tmp_path / "a.npz")
        agent = TwoLevelMemory.load(tmp_path / "a.npz")
    a, b = agent.history(), whole.history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    n = whole.memory_.n_states
    np.testing.assert_array_equal(agent.clusters_.assignment[:n], whole.clusters_.assignment[:n])
