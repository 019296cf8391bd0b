"""Fingerprints of the fold family, to show that a refactoring left every result as it was.

Runs fold (``FoldMerger``), fold-noisy (``StatisticalFoldMerger``) and the pure-Python reference
(``tests/fold_reference.py``) in the agent on clean, noisy, slipping, randomly started, long-walk and
MiniGrid FourRooms runs (when ``minigrid`` is installed), with parameter variants, and the mergers
alone (observe + sleep, observe_tree + sleep, fold-noisy's re-test); per run a digest of the history,
C, level 2 (T and E), the predictions, the merger's ``state_dict`` (and again after save / load),
the summary, plus the cluster count and the counters.  Writes them as JSON; with ``--against``
compares with an earlier file and exits 1 on any difference.  About 1.5 minutes of CPU.

    python analysis/fold_fingerprints.py OUT.json [--against BEFORE.json]

Run it on the commit before a change (with that tree first on ``PYTHONPATH``), keep the file outside
the repository, and again after each step of the change with ``--against``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.clusters import Clusters
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.fold import FoldMerger, StatisticalFoldMerger
from hmmmerge.reproduce.beyond import bench_walks, bench_world

CONFIGS = {
    "paper": dict(world="grid", colouring=0, seed=0, episodes=300),
    "grid4": dict(world="grid", colours=4, colouring=1, seed=1, episodes=150),
    "maze": dict(world="maze", colouring=0, seed=0, episodes=150),
    "noise": dict(world="grid", colouring=0, seed=0, noise=0.05, episodes=200),
    "slip": dict(world="maze", colouring=1, seed=1, slip=0.1, episodes=80),
    "nostart": dict(world="grid", colouring=1, seed=1, start="random", episodes=60),
    "torus-noise": dict(world="torus", colouring=0, seed=2, noise=0.05, episodes=150),
}
FOLD_VARIANTS = ({"provisional_lead": None}, {"provisional_lead": 2}, {"min_evidence": 2, "single_evidence": 3},
                 {"colour_evidence": None})
NOISY_VARIANTS = ({"provisional_lead": None}, {"noise": 0.05, "min_visits": 1}, {"retest_growth": None},
                  {"patience": 1, "risk": 0.01})


def reference_merger():
    """The class of ``tests/fold_reference.py`` of the tree that holds the imported package."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["hmmmerge"].__file__)))
    spec = importlib.util.spec_from_file_location("fold_reference", os.path.join(root, "tests", "fold_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FoldMerger


def digest(obj) -> str:
    """A short hash of arrays, dicts (by sorted key) and lists of them: dtype, shape and bytes."""
    m = hashlib.sha256()
    if isinstance(obj, dict):
        for key in sorted(obj):
            m.update(str(key).encode() + digest(obj[key]).encode())
    elif isinstance(obj, (list, tuple)) and obj and not isinstance(obj[0], (int, float)):
        for x in obj:
            m.update(digest(x).encode())
    else:
        a = np.ascontiguousarray(obj)
        m.update(f"{a.dtype}{a.shape}".encode() + (repr(obj).encode() if a.dtype == object else a.tobytes()))
    return m.hexdigest()[:16]


def agent_prints(agent) -> dict:
    """The fingerprints of a fitted agent (a catalogue merger also saved and loaded again)."""
    n = agent.memory_.n_states
    hmm = agent.level2_hmm()
    T2 = [T.toarray() if hasattr(T, "toarray") else T for T in hmm.T]
    out = {"history": digest(agent.history()), "C": digest(agent.clusters_.assignment[:n]),
           "n_clusters": int(agent.n_clusters_), "T2": digest(T2),
           "E2": digest(np.asarray(hmm.E)), "pred": digest(agent.last_predictions_),
           "state": digest(agent.merger_.state_dict()), "stats": repr(agent.merger_.stats),
           "summary": digest(agent.summary())}
    if isinstance(agent.merger_, (FoldMerger, StatisticalFoldMerger)):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.npz")
            agent.save(path)
            out["reload_state"] = digest(TwoLevelMemory.load(path).merger_.state_dict())
    return out


def fitted(env, traj, merger):
    return TwoLevelMemory(env.n_obs, env.n_actions, merger=merger, seed=0).fit(traj)


def merger_prints(env, traj, make) -> dict:
    """A merger alone: observe and sleep every 40 episodes."""
    mem, merger, cl, reports = EpisodicMemory(env.n_obs, env.n_actions), make(), Clusters(n_states=0), []
    for e in range(0, len(traj.obs), 40):
        part = type(traj)(traj.obs[e:e + 40], traj.actions[e:e + 40], traj.states[e:e + 40])
        states, _ = mem.observe_trajectories(part)
        merger.observe(mem, states, part.actions)
        reports.append(merger.sleep(mem, cl))
    out = {"reports": digest(json.dumps(reports, sort_keys=True, default=str)),
           "C": digest(cl.assignment[:mem.n_states]), "state": digest(merger.state_dict()),
           "blocks": digest(merger.block_of(mem.n_states))}
    if isinstance(merger, StatisticalFoldMerger):
        merger._retest(keep=True)
        out["retest"] = digest(merger.state_dict())
    return out


def fingerprints() -> dict:
    Reference = reference_merger()
    prints = {}
    for name, config in CONFIGS.items():
        env = bench_world(config)
        traj, _ = bench_walks(env, config)
        prints[f"fold:{name}"] = agent_prints(fitted(env, traj, FoldMerger()))
        prints[f"noisy:{name}"] = agent_prints(fitted(env, traj, StatisticalFoldMerger()))
        if name in ("paper", "noise", "nostart"):
            prints[f"ref:{name}"] = agent_prints(fitted(env, traj, Reference()))
    env = gridworld(6, 6, n_colours=20, seed=1)   # long walks: the colour fold
    traj = random_walk(env, 3, 600, seed=3)
    for past in (0, 1, 3):
        prints[f"fold:long:{past}"] = agent_prints(fitted(env, traj, FoldMerger(colour_past=past, colour_evidence=10)))
        prints[f"ref:long:{past}"] = agent_prints(fitted(env, traj, Reference(colour_past=past, colour_evidence=10)))
    prints["noisy:long"] = agent_prints(fitted(env, traj, StatisticalFoldMerger()))
    env = bench_world(CONFIGS["grid4"])
    traj, _ = bench_walks(env, CONFIGS["grid4"])
    for params in FOLD_VARIANTS:
        prints[f"fold:grid4:{params}"] = agent_prints(fitted(env, traj, FoldMerger(**params)))
    for params in NOISY_VARIANTS:
        prints[f"noisy:grid4:{params}"] = agent_prints(fitted(env, traj, StatisticalFoldMerger(**params)))
    try:
        from hmmmerge import from_gymnasium

        env = from_gymnasium("MiniGrid-FourRooms-v0", seed=0)
        prints["fold:minigrid"] = agent_prints(fitted(env, random_walk(env, 5, 1000, seed=0), FoldMerger()))
        prints["noisy:minigrid"] = agent_prints(fitted(env, random_walk(env, 10, 200, seed=1), StatisticalFoldMerger()))
    except ImportError:
        print("minigrid is not installed: no MiniGrid runs", file=sys.stderr)
    for name in ("paper", "noise"):
        env = bench_world(CONFIGS[name])
        traj, _ = bench_walks(env, CONFIGS[name])
        for label, make in (("fold", FoldMerger), ("noisy", StatisticalFoldMerger), ("ref", Reference)):
            prints[f"api:{label}:{name}"] = merger_prints(env, traj, make)
    env = bench_world(CONFIGS["paper"])
    traj, _ = bench_walks(env, CONFIGS["paper"])
    for label, make in (("fold", FoldMerger), ("ref", Reference)):   # observe_tree at the sleep
        mem = EpisodicMemory(env.n_obs, env.n_actions)
        mem.observe_trajectories(traj)
        merger = make()
        report = merger.sleep(mem, Clusters(n_states=0))
        prints[f"api:{label}:tree"] = {"reports": digest(json.dumps(report, sort_keys=True, default=str)),
                                       "state": digest(merger.state_dict())}
    return prints


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="JSON file to write")
    p.add_argument("--against", help="an earlier file to compare with")
    args = p.parse_args(argv)
    prints = fingerprints()
    with open(args.out, "w") as f:
        json.dump(prints, f, indent=1, sort_keys=True)
    print(f"{len(prints)} runs, {sum(len(v) for v in prints.values())} fingerprints -> {args.out}")
    if not args.against:
        return 0
    with open(args.against) as f:
        old = json.load(f)
    diff = sorted({(run, key) for run in old.keys() | prints.keys() for key in old.get(run, {}).keys() |
                   prints.get(run, {}).keys() if old.get(run, {}).get(key) != prints.get(run, {}).get(key)})
    print("identical" if not diff else f"{len(diff)} differ: {diff}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
