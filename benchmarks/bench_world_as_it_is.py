"""Issue 22's targets: every learner x every condition of the world as it is, scored by the one evaluator.

Conditions (:data:`CONDITIONS`; the training and the held-out walks come from
the same process, ``random_walk`` on the stochastic world):

* ``clean`` -- the deterministic world, episodes from its start;
* ``slip-0.05`` / ``slip-0.10`` -- with that probability the move made is a
  uniformly random action, the intended one recorded (``world(..., slip=p)``);
* ``noise-0.05`` -- each view replaced by a uniformly random colour with
  probability 0.05 (``obs_noise=0.05``);
* ``random-start`` -- each episode starts at a uniformly random node.

Worlds (:data:`WORLDS`): the paper's grid and the gallery (``hmmmerge.gallery.WORLDS``) plus a random
60-state, 3-action graph (``hmmmerge.reproduce.beyond.random_graph``), each with ``--colourings``
(the world's colouring seed) x ``--seeds`` (the walk's seed), or with ``--pairs`` (every world but the
paper's grid) the i-th colouring with the i-th seed; and MiniGrid FourRooms with a 3x3 egocentric view
(``fourrooms-3x3``: few distinct views, each seen in many places) and with MiniGrid's default 7x7 view
(``fourrooms-7x7``: 360 views), one layout, every walk seed, clean only, episodes of 100 moves from the
start pose.

Learners (``--learners``): ``oracle`` (``env.to_hmm(start=...)``, the true process: the best any
model can do), every catalogue model (``hmmmerge.models.MODELS``: ``first-order``, ``context``,
``em``, ...; EM with 20 clones per colour, 30 with 4 colours or fewer, 100 iterations, as in
``bench_fold.py``; 5 clones per view with more than 100 views), and every merge mode of
``TwoLevelMemory`` (``hmmmerge.models.MERGERS``: ``sf``, ``fold``, ``fold-noisy``, and any mode
registered later: the hook for the new learner is its name).  An online learner lives
the training walk in 100-episode blocks (``partial_fit``); per block its CPU seconds are recorded,
and its online accuracy (the paper's measure, level 2, over the last 50 episodes).  Its held-out
model is the merger's own level 2 when the merger has one (fold-noisy's noise-aware emissions),
else ``agent.level2_hmm()``; both are in the JSON.

Every run: ``--episodes`` (1,000) x ``--episode-length`` (50) training moves, held-out accuracy
and surprise (smoothed with epsilon 1e-3) on ``--eval-episodes`` (100) fresh episodes of the same
process, scored by ``evaluate_model`` with no prediction counted wrong, the oracle's accuracy and
surprise on the same episodes beside it.  Each run is a subprocess on one thread with a CPU-time
limit (``--cpu-limit``, default 300 s; ``--capped`` learners, known to blow up, ``--capped-limit``,
on every clean run and the first ``--capped-runs`` runs of a world under the other conditions; imports
and numba loading included; the recorded
``fit_cpu_s`` is the fit alone, after a warm-up fit: 5 episodes, for an online learner 20 -- at
least one sleep, so that the sleep's kernels are loaded too): a run over the limit is recorded as
"> limit" and counts in the tables.  Results: one JSON file per run under ``OUT/runs/`` (atomic;
finished runs are not redone, a run stopped at a lower limit is redone under a higher one),
``OUT/results.csv`` and ``OUT/bench_world_as_it_is.md``: per learner x condition, held-out mean +- sd,
online accuracy, CPU per 1,000 episodes, the gap to the oracle and to EM run by run, the growth of a
block's CPU over the life, runs over the limit; MiniGrid apart; per world for ``--target`` (and
``--per-world``) with issue 22's targets checked run by run.

    nice -n 10 python benchmarks/bench_world_as_it_is.py [--quick] [--out DIR] [--learners oracle,fold,...]
        [--conditions clean,slip-0.05,...] [--worlds paper-grid,maze,...] [--colourings 0,1,2] [--seeds 0,1,2]
        [--cpu-limit 300] [--pairs] [--capped fold,fold-noisy --capped-limit 40 --capped-runs 1]
        [--target fold] [--per-world em,...] [--table-only]

The issue-22 protocol (BENCHMARKS.md, "The world as it is"):

    nice -n 10 python benchmarks/bench_world_as_it_is.py --out OUT --pairs --capped fold,fold-noisy
        --learners oracle,first-order,context,em,sf,fold-noisy,fold,replay --target replay --per-world em,fold
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hmmmerge._io import atomic_write_text  # noqa: E402

VERSION = 1
"""Part of every run's key: bump it when what a run measures changes (results are keyed by configuration,
not by the code: delete ``OUT/runs`` to recompute after changing a learner)."""

CONDITIONS = {
    "clean": {"slip": 0.0, "obs_noise": 0.0, "start": None},
    "slip-0.05": {"slip": 0.05, "obs_noise": 0.0, "start": None},
    "slip-0.10": {"slip": 0.10, "obs_noise": 0.0, "start": None},
    "noise-0.05": {"slip": 0.0, "obs_noise": 0.05, "start": None},
    "random-start": {"slip": 0.0, "obs_noise": 0.0, "start": "random"},
}
WORLDS = ("paper-grid", "maze", "torus", "two-rooms", "cscg-room", "aliased-loop", "random-graph", "fourrooms-3x3",
          "fourrooms-7x7")
"""Appended only: a world's index is part of its walks' seed."""
MINIGRID_VIEWS = {"fourrooms-3x3": 3, "fourrooms-7x7": 7}
"""MiniGrid FourRooms worlds and their egocentric view (7x7 is MiniGrid's default); clean only, 100-move episodes."""
LEARNERS = ("oracle", "first-order", "context", "em", "sf", "fold-noisy", "fold", "replay")
"""The default learners; ``--target`` defaults to the last merge mode listed, so a new mode appended is checked."""
MINIGRID = "MiniGrid-FourRooms-v0"
SMOOTHING = 1e-3
BLOCK = 100
ONLINE_WINDOW = 50


# --------------------------------------------------------------------------- one run (in a subprocess)
def build_world(name: str, colouring: int, condition: str):
    """The world of a run with its condition's slip and noise applied."""
    c = CONDITIONS[condition]
    if name in MINIGRID_VIEWS:
        from hmmmerge import from_gymnasium

        env = from_gymnasium(MINIGRID, seed=0, agent_view_size=MINIGRID_VIEWS[name])
    else:
        from hmmmerge.reproduce.beyond import bench_world

        env = bench_world({"world": "grid" if name == "paper-grid" else name, "colouring": colouring})
    if c["slip"] or c["obs_noise"]:
        env = env.with_noise(slip=c["slip"], obs_noise=c["obs_noise"])
    return env


def walks(env, config: dict):
    """(training walk, held-out walk): the same for every learner of a (world, colouring, seed, condition)."""
    from hmmmerge import random_walk

    cond = list(CONDITIONS).index(config["condition"])
    salt = [int(config["colouring"]), int(config["seed"]), cond, WORLDS.index(config["world"])]
    start = CONDITIONS[config["condition"]]["start"]
    length = int(config["episode_length"])
    train = random_walk(env, int(config["episodes"]), length, seed=salt + [0], start=start)
    fresh = random_walk(env, int(config["eval_episodes"]), length, seed=salt + [1], start=start)
    return train, fresh


def _score(env, model, fresh, start) -> dict:
    from hmmmerge.evaluate import evaluate_model

    r = evaluate_model(env, model, trajectories=fresh, smoothing=SMOOTHING, start=start)
    return {"heldout_accuracy": r.accuracy, "heldout_surprise": r.surprise, "oracle_accuracy": r.oracle_accuracy,
            "oracle_surprise": r.oracle_surprise, "no_prediction_share": r.no_prediction_share,
            "n_states": int(r.n_states)}


def _em_params(env) -> dict:
    """20 clones per view, 30 with 4 or fewer, 5 with more than 100 (MiniGrid's 7x7 view: 360 views)."""
    return {"n_clones": 30 if env.n_obs <= 4 else 20 if env.n_obs <= 100 else 5, "n_iter": 100}


def run_one(config: dict) -> dict:
    """Fit one learner on one walk and score it; the body of a run's subprocess."""
    env = build_world(config["world"], int(config["colouring"]), config["condition"])
    train, fresh = walks(env, config)
    return fit_and_score(config, env, train, fresh, CONDITIONS[config["condition"]]["start"])


def fit_and_score(config: dict, env, train, fresh, start) -> dict:
    """Fit ``config["learner"]`` on the walk ``train`` of ``env`` and score it on ``fresh`` (episodes from
    ``start``); the record of a run (also used by ``bench_unseen_worlds.py``, with its own worlds)."""
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.models import MERGERS as MERGE_MODES
    from hmmmerge.models import MODELS, build_model

    learner = config["learner"]
    seed = [int(config["colouring"]), int(config["seed"]), 2]
    out = {"n_world_states": env.n_states, "n_obs": env.n_obs}
    if learner == "oracle":
        c = time.process_time()
        model = env.to_hmm(start=start)
        out["fit_cpu_s"] = time.process_time() - c
    elif learner in MERGE_MODES:
        def agent():
            return TwoLevelMemory(env.n_obs, env.n_actions, merge=learner,
                                  seed=[int(config["colouring"]), int(config["seed"]), 1])

        agent().fit(train[:20])  # warm-up past the first sleep: numba kernels loaded before the clock starts
        if learner == "replay":  # and past an exact phase (replay's own kernels, loaded where the phase ends);
            from hmmmerge.replay import ReplayMerger   # the even layout: many views' first sleep waits longer

            TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(exact=False, alloc="even")).fit(train[:20])
        a = agent()
        blocks = []
        for b in range(0, train.n_episodes, BLOCK):
            c = time.process_time()
            a.partial_fit(train[b:b + BLOCK])
            blocks.append(time.process_time() - c)
        out["fit_cpu_s"] = float(sum(blocks))
        out["block_cpu_s"] = blocks
        hist = a.history()
        out["online_accuracy"] = float(np.mean(hist["l2_accuracy"][-ONLINE_WINDOW:]))
        out["n_first_level_states"] = int(a.memory_.n_states)
        if not a.n_clusters_:
            return dict(out, heldout_accuracy=0.0, heldout_surprise=math.inf, no_prediction_share=1.0)
        model = a.level2_hmm()
        if hasattr(a.merger_, "level2_hmm"):  # the merger's own level 2 (fold-noisy's noise-aware emissions)
            out.update({f"agent_level2_{k}": v for k, v in _score(env, model, fresh, start).items()})
            model = a.merger_.level2_hmm(a.memory_, a.clusters_)
            out["own_level2"] = True
    elif learner in MODELS:
        params = _em_params(env) if learner == "em" else {}
        build_model(learner, train[:5], env=env, seed=seed, **(dict(params, n_iter=1) if learner == "em" else params))
        c = time.process_time()
        model = build_model(learner, train, env=env, seed=seed, **params)
        out["fit_cpu_s"] = time.process_time() - c
        out.update({k: v for k, v in params.items()})
    else:
        raise ValueError(f"unknown learner {learner!r}: neither a merge mode ({', '.join(MERGE_MODES)}) "
                         f"nor a catalogue model ({', '.join(MODELS)})")
    c = time.process_time()
    out.update(_score(env, model, fresh, start))
    out["score_cpu_s"] = time.process_time() - c
    return out


# --------------------------------------------------------------------------- the runner
def run_key(config: dict) -> str:
    text = json.dumps(dict(config, version=VERSION), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _limits(cpu_limit: float, memory_gb: float):
    def apply():
        resource.setrlimit(resource.RLIMIT_CPU, (int(math.ceil(cpu_limit)), int(math.ceil(cpu_limit)) + 10))
        mem = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    return apply


def execute(config: dict, path: str, cpu_limit: float, memory_gb: float, script: str | None = None) -> dict:
    """Run ``config`` in a subprocess under the limits (``script --run-one CONFIG``, this file by default);
    write and return its record."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, os.path.abspath(script or __file__), "--run-one", json.dumps(config)],
                          capture_output=True, text=True, env=env, preexec_fn=_limits(cpu_limit, memory_gb))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    record = {"config": config, "cpu_limit": cpu_limit, "process_cpu_s": process_cpu}
    if proc.returncode == 0:
        record.update(status="ok", **json.loads(proc.stdout.strip().splitlines()[-1]))
    elif proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL) or process_cpu >= cpu_limit:
        record.update(status="cpu-limit")
    else:
        tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        record.update(status="memory" if "MemoryError" in tail else "error", message=tail)
    if record["status"] != "error":  # errors are not cached: fix and rerun
        atomic_write_text(path, json.dumps(record, default=_json_default))
    return record


def _json_default(x):
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    raise TypeError(type(x).__name__)


def runs_of(world: str, args) -> list[tuple[int, int]]:
    """The (colouring, walk seed) runs of one world: MiniGrid has one layout (colouring 0) and every seed;
    with ``--pairs`` a world other than the paper's grid pairs the i-th colouring with the i-th seed."""
    if world in MINIGRID_VIEWS:
        return [(0, s) for s in args.seeds]
    if args.pairs and world != "paper-grid":
        return list(zip(args.colourings, args.seeds))
    return [(c, s) for c in args.colourings for s in args.seeds]


def cpu_limit(learner: str, condition: str, run: int, args) -> float | None:
    """The CPU limit of a learner's ``run``-th run of a world under ``condition``: ``--capped`` learners get
    ``--capped-limit`` on every clean run and on the first ``--capped-runs`` runs of the other conditions, and
    are not run (None) beyond them; every other run gets ``--cpu-limit``."""
    if learner not in args.capped:
        return args.cpu_limit
    if condition != "clean" and run >= args.capped_runs:
        return None
    return min(args.cpu_limit, args.capped_limit)


def configurations(args) -> list[dict]:
    """Every run of the protocol, with its CPU limit: ``--capped`` learners run under ``--capped-limit``,
    on every run of the clean condition and on the first ``--capped-runs`` runs of a world under the others."""
    out = []
    for world in args.worlds:
        conditions = ["clean"] if world in MINIGRID_VIEWS else args.conditions
        length = 100 if world in MINIGRID_VIEWS else args.episode_length
        runs = runs_of(world, args)
        for condition in conditions:
            for i, (colouring, seed) in enumerate(runs):
                for learner in args.learners:
                    limit = cpu_limit(learner, condition, i, args)
                    if limit is None:
                        continue
                    out.append(({"world": world, "condition": condition, "colouring": colouring, "seed": seed,
                                 "learner": learner, "episodes": args.episodes, "episode_length": length,
                                 "eval_episodes": args.eval_episodes}, limit))
    return out


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_all(configs: list, args, script: str | None = None) -> list[dict]:
    """Every run of ``configs`` (``(config, cpu_limit)`` pairs): a stored record is reused, a missing one (or
    one stopped under a lower CPU limit) is run by :func:`execute` unless ``args.table_only``; returns the
    records that are not errors, in order."""
    runs_dir = os.path.join(args.out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    records = []
    started = time.time()
    for i, (config, limit) in enumerate(configs):
        path = os.path.join(runs_dir, run_key(config) + ".json")
        record = load(path)
        stale = record is not None and record["status"] == "cpu-limit" and record["cpu_limit"] < limit
        if (record is None or stale) and not args.table_only:
            record = execute(config, path, limit, args.memory_gb, script=script)
            acc = record.get("heldout_accuracy")
            print(f"[{i + 1}/{len(configs)} {time.time() - started:.0f} s] {config['world']} {config['condition']} "
                  f"c{config['colouring']} s{config['seed']} {config['learner']}: {record['status']}"
                  + (f" held-out {acc:.3f} (oracle {record['oracle_accuracy']:.3f}) fit {record['fit_cpu_s']:.1f} s"
                     if acc is not None and record["status"] == "ok" else f" {record.get('message', '')}"),
                  file=sys.stderr, flush=True)
        if record is not None and record["status"] != "error":
            records.append(record)
    return records


# --------------------------------------------------------------------------- tables
def cpu_per_1000(record: dict) -> float:
    """Fit CPU seconds per 1,000 training episodes."""
    return record["fit_cpu_s"] * 1000.0 / record["config"]["episodes"]


def block_growth(record: dict) -> float | None:
    """CPU of the last 100-episode block over that of the 2nd (block 10 / block 2 for 1,000 episodes)."""
    blocks = record.get("block_cpu_s") or []
    return blocks[-1] / max(blocks[1], 1e-3) if len(blocks) > 1 else None


def by_run(records) -> dict:
    """(world, condition, colouring, seed) -> {learner: record}: the learners that saw the same data."""
    runs = {}
    for r in records:
        c = r["config"]
        runs.setdefault((c["world"], c["condition"], c["colouring"], c["seed"]), {})[c["learner"]] = r
    return runs


def summary(records, learner: str, runs: dict) -> dict:
    """Statistics of ``learner``'s records of one cell; gaps to the oracle and EM are per run (same data)."""
    ok = [r for r in records if r["status"] == "ok"]
    limited = [r for r in records if r["status"] != "ok"]
    out = {"n": len(records), "limited": len(limited),
           "limit": max((r["cpu_limit"] for r in limited), default=None),
           "heldout": [r["heldout_accuracy"] for r in ok], "cpu": [cpu_per_1000(r) for r in ok],
           "online": [r["online_accuracy"] for r in ok if "online_accuracy" in r],
           "growth": [g for g in map(block_growth, ok) if g is not None],
           "vs_oracle": [r["heldout_accuracy"] - r["oracle_accuracy"] for r in ok], "vs_em": []}
    if learner != "em":
        for r in ok:
            c = r["config"]
            em = runs.get((c["world"], c["condition"], c["colouring"], c["seed"]), {}).get("em")
            if em is not None and em["status"] == "ok":
                out["vs_em"].append(r["heldout_accuracy"] - em["heldout_accuracy"])
    return out


def _mean_sd(xs) -> str:
    return f"{np.mean(xs):.3f} ± {np.std(xs):.3f}" if xs else "-"


def _mean_worst(xs) -> str:
    return f"{np.mean(xs):+.3f}, {min(xs):+.3f}" if xs else "-"


def _mean_max(xs, spec=".1f") -> str:
    return f"{format(np.mean(xs), spec)}, {format(max(xs), spec)}" if xs else "-"


def _limited(st) -> str:
    return f"{st['limited']}/{st['n']} > {st['limit']:g} s" if st["limited"] else "0"


def heldout_table(records, learners, conditions) -> list[str]:
    """Learner x condition: held-out accuracy mean ± sd over the finished runs, and the runs over the limit."""
    runs = by_run(records)
    lines = ["| learner | " + " | ".join(conditions) + " |", "|---|" + "---|" * len(conditions)]
    for learner in learners:
        cells = []
        for cond in conditions:
            st = summary([r for r in records if r["config"]["learner"] == learner
                          and r["config"]["condition"] == cond], learner, runs)
            if not st["n"]:
                cells.append("not run")
            elif not st["heldout"]:
                cells.append(f"> {st['limit']:g} s ({st['limited']}/{st['n']})")
            else:
                cells.append(_mean_sd(st["heldout"]) + (f"; {_limited(st)}" if st["limited"] else ""))
        lines.append(f"| {learner} | " + " | ".join(cells) + " |")
    return lines


def detail_table(records, learners, conditions, group: str = "condition") -> list[str]:
    """One row per (``group`` value, learner): every number the owners judge a learner by."""
    runs = by_run(records)
    lines = [f"| {group} | learner | runs | held-out | online, last 50 | CPU s / 1,000 episodes: mean, max "
             "| vs oracle: mean, worst | vs EM: mean, worst | last block / 2nd: mean, max | over the limit |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for value in conditions:
        for learner in learners:
            rs = [r for r in records if r["config"]["learner"] == learner and r["config"][group] == value]
            if not rs:
                continue
            st = summary(rs, learner, runs)
            lines.append(f"| {value} | {learner} | {st['n']} | {_mean_sd(st['heldout'])} | {_mean_sd(st['online'])} "
                         f"| {_mean_max(st['cpu'], '.2f')} | {_mean_worst(st['vs_oracle'])} "
                         f"| {_mean_worst(st['vs_em'])} | {_mean_max(st['growth'])} | {_limited(st)} |")
    return lines


BOUNDS = {"clean": (0.005, None), "slip-0.05": (0.01, 0.02), "noise-0.05": (0.01, 0.02),
          "random-start": (0.01, 0.02), "slip-0.10": (0.01, 0.04)}
"""Issue 22's accuracy targets per condition: (below EM by at most, below the oracle by at most)."""
COST_PER_1000 = 5.0
GROWTH = 2.0


def run_meets(record: dict, em: dict | None) -> tuple[bool, bool]:
    """(accuracy target met, cost target met) for one run of a learner, against EM of the same data."""
    if record["status"] != "ok":
        return False, False
    c = record["config"]
    em_b, or_b = BOUNDS.get(c["condition"], (0.01, 0.02))
    minigrid = c["world"] in MINIGRID_VIEWS
    if minigrid:
        em_b, or_b = 0.02, None
    acc = record["heldout_accuracy"]
    ok = not (c["condition"] == "clean" and not minigrid and acc < 0.99)
    ok &= or_b is None or acc - record["oracle_accuracy"] >= -or_b - 1e-12
    ok &= em is None or em["status"] != "ok" or acc - em["heldout_accuracy"] >= -em_b - 1e-12
    growth = block_growth(record)
    cost = cpu_per_1000(record) <= COST_PER_1000 and (growth is None or growth <= GROWTH)
    return bool(ok), bool(cost)


def per_world_table(records, learner: str, worlds, conditions) -> list[str]:
    """World x condition for one learner: held-out mean; worst run vs EM and vs the oracle; max CPU per 1,000
    episodes; whether every run met issue 22's accuracy (A) and cost (C) targets."""
    runs = by_run(records)
    lines = ["| world | " + " | ".join(conditions) + " |", "|---|" + "---|" * len(conditions)]
    for world in worlds:
        cells = []
        for cond in conditions:
            rs = [r for r in records if r["config"]["learner"] == learner and r["config"]["world"] == world
                  and r["config"]["condition"] == cond]
            if not rs:
                cells.append("")
                continue
            st = summary(rs, learner, runs)
            met = [run_meets(r, runs[(world, cond, r["config"]["colouring"], r["config"]["seed"])].get("em"))
                   for r in rs]
            flags = ("A" if all(m[0] for m in met) else "a") + ("C" if all(m[1] for m in met) else "c")
            if not st["heldout"]:
                cells.append(f"> {st['limit']:g} s ({st['limited']}/{st['n']}) {flags}")
                continue
            worst = lambda xs: f"{min(xs):+.3f}" if xs else "-"  # noqa: E731
            cells.append(f"{np.mean(st['heldout']):.3f}; {worst(st['vs_em'])} / {worst(st['vs_oracle'])}; "
                         f"{max(st['cpu']):.1f} s" + (f"; {_limited(st)}" if st["limited"] else "") + f" {flags}")
        lines.append(f"| {world} | " + " | ".join(cells) + " |")
    return lines


def targets(records, target: str, conditions) -> list[str]:
    """Issue 22's targets for ``target``, run by run against EM and the oracle on the same data."""
    runs = by_run(records)
    lines = ["| condition (MiniGrid: world) | runs | worst vs EM | worst vs oracle | accuracy met "
             "| max CPU s / 1,000 episodes | max last / 2nd block | cost met | over the CPU limit |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups = [(cond, lambda k, c=cond: k[1] == c and k[0] not in MINIGRID_VIEWS) for cond in conditions]
    groups += [(world, lambda k, w=world: k[0] == w) for world in MINIGRID_VIEWS]
    for label, member in groups:
        rows = [v for k, v in runs.items() if member(k) and target in v]
        if not rows:
            continue
        st = summary([v[target] for v in rows], target, runs)
        met = [run_meets(v[target], v.get("em")) for v in rows]
        worst = lambda xs, spec="+.3f", pick=min: format(pick(xs), spec) if xs else "-"  # noqa: E731
        lines.append(f"| {label} | {st['n']} | {worst(st['vs_em'])} | {worst(st['vs_oracle'])} | "
                     f"{'yes' if all(m[0] for m in met) else 'NO'} | {worst(st['cpu'], '.2f', max)} | "
                     f"{worst(st['growth'], '.1f', max)} | {'yes' if all(m[1] for m in met) else 'NO'} | "
                     f"{st['limited']} |")
    lines += ["", "Bounds, every run: clean >= 0.99 and >= EM - 0.005; slip 0.05, noise 0.05, random starts "
              ">= EM - 0.01 and >= oracle - 0.02; slip 0.10 >= EM - 0.01 and >= oracle - 0.04; MiniGrid >= EM - 0.02; "
              f"cost <= {COST_PER_1000:g} s CPU per 1,000 episodes and the last block <= {GROWTH:g}x the 2nd. "
              "A run over the CPU limit meets nothing."]
    return lines


def report(records, learners, conditions, target: str, per_world=(), every_world=True) -> list[str]:
    """The markdown report of ``records``: the 50-move worlds, MiniGrid, the per-world breakdowns, the targets."""
    flat = [r for r in records if r["config"]["world"] not in MINIGRID_VIEWS]
    grid = [r for r in records if r["config"]["world"] in MINIGRID_VIEWS]
    worlds = [w for w in WORLDS if any(r["config"]["world"] == w for r in records)]
    md = []
    if flat:
        flat_worlds = [w for w in worlds if w not in MINIGRID_VIEWS]
        md += [f"## The paper's grid and the gallery ({', '.join(flat_worlds)}), {len(flat)} runs", "",
               "### Held-out accuracy, mean ± sd over worlds x runs (finished runs; runs over the CPU limit counted "
               "beside)", ""] + heldout_table(flat, learners, conditions)
        md += ["", "### Every learner x every condition: held-out, online (level 2, the paper's measure), CPU, "
               "the gap to the oracle and to EM of the same run, and how a block's cost grows over the life", ""]
        md += detail_table(flat, learners, conditions)
    if grid:
        md += ["", f"## MiniGrid FourRooms from the start pose, 100-move episodes, clean ({len(grid)} runs)", ""]
        md += detail_table(grid, learners, [w for w in worlds if w in MINIGRID_VIEWS], group="world")
    for learner in dict.fromkeys([target, *per_world]):
        if any(r["config"]["learner"] == learner for r in records):
            md += ["", f"### Per world: `{learner}` (held-out mean; worst run vs EM / vs the oracle; max CPU s per "
                   "1,000 episodes; A/C = every run met the accuracy/cost target, a/c = not)", ""]
            md += per_world_table(records, learner, worlds, conditions)
    if any(r["config"]["learner"] == target for r in records):
        md += ["", f"### Targets of issue 22 for `{target}` (every run against EM and the oracle on the same data)", ""]
        md += targets(records, target, conditions)
    for world in worlds if len(worlds) > 1 and every_world else ():
        sub = [r for r in records if r["config"]["world"] == world]
        conds = [c for c in conditions if any(r["config"]["condition"] == c for r in sub)]
        md += ["", f"### {world}: held-out accuracy, mean ± sd", ""] + heldout_table(sub, learners, conds)
    return md


def write_csv(records, path: str) -> None:
    keys = ["world", "condition", "colouring", "seed", "learner", "episodes", "episode_length", "eval_episodes"]
    values = ["status", "heldout_accuracy", "oracle_accuracy", "heldout_surprise", "oracle_surprise",
              "online_accuracy", "no_prediction_share", "n_states", "fit_cpu_s", "score_cpu_s", "process_cpu_s",
              "cpu_limit", "block_cpu_s"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(keys + values)
    for r in records:
        row = [r["config"][k] for k in keys]
        for k in values:
            v = r.get(k)
            row.append(" ".join(f"{x:.3f}" for x in v) if isinstance(v, list) else v)
        w.writerow(row)
    atomic_write_text(path, buf.getvalue())


# --------------------------------------------------------------------------- main
def _csv_list(kind, known=None):
    def parse(text):
        items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if known is not None:
            bad = [x for x in items if x not in known]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(known)}")
        return items
    return parse


DOC_BEGIN = "<!-- bench_world_as_it_is.py tables: begin -->"
DOC_END = "<!-- bench_world_as_it_is.py tables: end -->"


def doc_parts(path: str, begin: str = DOC_BEGIN, end: str = DOC_END) -> tuple[str, str]:
    """The text of ``path`` before ``begin`` and after ``end`` (default :data:`DOC_BEGIN`, :data:`DOC_END`;
    a clear error without them)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: needs exactly one line {begin!r} followed by one line {end!r}")
    head, rest = text.split(begin)
    return head, rest.split(end)[1]


def update_doc(path: str, lines: list[str], begin: str = DOC_BEGIN, end: str = DOC_END) -> None:
    """Replace the text between ``begin`` and ``end`` in ``path`` by ``lines`` (atomically)."""
    head, tail = doc_parts(path, begin, end)
    atomic_write_text(path, head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)


def doc_tables(md: list[str]) -> list[str]:
    """The report for a section of BENCHMARKS.md: its title a plain line, every heading one level down."""
    return [md[0].lstrip("# ") + "."] + ["#" + line if line.startswith("#") else line for line in md[1:]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="bench_world_as_it_is")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: paper grid and maze, 200 episodes, 20 held out, 30 s CPU limit")
    parser.add_argument("--learners", type=_csv_list(str), default=list(LEARNERS),
                        help="comma-separated: oracle, catalogue models, merge modes (default: %(default)s)")
    parser.add_argument("--conditions", type=_csv_list(str, CONDITIONS), default=list(CONDITIONS))
    parser.add_argument("--worlds", type=_csv_list(str, WORLDS), default=list(WORLDS))
    parser.add_argument("--colourings", type=_csv_list(int), default=[0, 1, 2])
    parser.add_argument("--seeds", type=_csv_list(int), default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--episode-length", type=int, default=50)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--cpu-limit", type=float, default=300.0, help="CPU seconds per run (default 300)")
    parser.add_argument("--pairs", action="store_true",
                        help="on every world but the paper's grid, pair the i-th colouring with the i-th seed "
                             "(3 runs per cell instead of 9)")
    parser.add_argument("--capped", type=_csv_list(str), default=[],
                        help="learners known to blow up: run under --capped-limit, on every clean run and on "
                             "the first --capped-runs runs of each world under the other conditions")
    parser.add_argument("--capped-limit", type=float, default=40.0, help="CPU seconds per capped run (default 40)")
    parser.add_argument("--capped-runs", type=int, default=1,
                        help="runs per world of a capped learner under conditions other than clean (default 1)")
    parser.add_argument("--memory-gb", type=float, default=6.0, help="address-space limit per run (default 6)")
    parser.add_argument("--target", default=None, help="the learner whose issue-22 targets are checked "
                                                        "(default: the last online learner listed)")
    parser.add_argument("--per-world", type=_csv_list(str), default=[],
                        help="learners with a per-world table besides the target (default: the target only)")
    parser.add_argument("--doc", default=None,
                        help="also write the tables into this markdown file, between its two marker lines "
                             f"({DOC_BEGIN} ... {DOC_END})")
    parser.add_argument("--table-only", action="store_true", help="write the tables from finished runs only")
    args = parser.parse_args(argv)
    if args.run_one:
        print(json.dumps(run_one(json.loads(args.run_one)), default=_json_default))
        return 0
    if args.quick:
        args.worlds = [w for w in args.worlds if w in ("paper-grid", "maze")] or args.worlds[:1]
        args.colourings, args.seeds = args.colourings[:1], args.seeds[:1]
        args.episodes, args.eval_episodes, args.cpu_limit = 200, 20, min(args.cpu_limit, 30.0)
        args.capped_limit = min(args.capped_limit, 30.0)
    for name in ("episodes", "episode_length", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.episodes % BLOCK:
        parser.error(f"--episodes must be a multiple of {BLOCK}")
    if not args.cpu_limit > 0 or not args.memory_gb > 0 or not args.capped_limit > 0:
        parser.error("--cpu-limit, --capped-limit and --memory-gb must be positive")
    if args.capped_runs < 0:
        parser.error("--capped-runs must be >= 0")
    if args.pairs and len(args.colourings) != len(args.seeds):
        parser.error(f"--pairs needs as many colourings as seeds, got {len(args.colourings)} and {len(args.seeds)}")
    from hmmmerge.models import MERGERS as MERGE_MODES
    from hmmmerge.models import MODELS

    unknown = [lr for lr in args.learners + args.capped if lr not in MERGE_MODES and lr not in MODELS]
    if unknown:
        parser.error(f"unknown learners {unknown}; merge modes: {', '.join(MERGE_MODES)}; "
                     f"catalogue: {', '.join(MODELS)}")
    if args.doc:
        try:
            doc_parts(args.doc)
        except (OSError, ValueError) as e:
            parser.error(f"--doc: {e}")
    target = args.target or next((lr for lr in reversed(args.learners) if lr in MERGE_MODES), args.learners[-1])

    records = run_all(configurations(args), args)
    write_csv(records, os.path.join(args.out, "results.csv"))
    worlds = [w for w in WORLDS if any(r["config"]["world"] == w for r in records)]
    runs = ("colouring i paired with walk seed i" if args.pairs else "colourings x walk seeds")
    head = [f"# The world as it is: {len(records)} runs", "",
            f"Worlds: {', '.join(worlds)}. The paper's grid: colourings {args.colourings} x walk seeds {args.seeds}; "
            f"the other worlds: {runs}; MiniGrid: its one layout, walk seeds {args.seeds}. "
            f"{args.episodes:,} training episodes x {args.episode_length} moves (MiniGrid: 100), held-out on "
            f"{args.eval_episodes} fresh episodes of the same process; CPU limit {args.cpu_limit:g} s per run"
            + (f"; {', '.join(args.capped)}: {args.capped_limit:g} s, every clean run and the first "
               f"{args.capped_runs} run(s) of a world under the other conditions" if args.capped else "") + ".", ""]
    md = head + report(records, args.learners, args.conditions, target, args.per_world)
    atomic_write_text(os.path.join(args.out, "bench_world_as_it_is.md"), "\n".join(md) + "\n")
    if args.doc:
        short = report(records, args.learners, args.conditions, target, args.per_world, every_world=False)
        update_doc(args.doc, doc_tables(head + short))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
