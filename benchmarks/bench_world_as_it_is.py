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
(the world's colouring seed) x ``--seeds`` (the walk's seed); and ``fourrooms-3x3``:
MiniGrid FourRooms with a 3x3 egocentric view (``from_gymnasium``), clean only, episodes of 100 moves
from the start pose.

Learners (``--learners``): ``oracle`` (``env.to_hmm(start=...)``, the true process: the best any
model can do), every catalogue model (``hmmmerge.models.MODELS``: ``first-order``, ``context``,
``em``, ...; EM with 20 clones per colour, 30 with 4 colours or fewer, 100 iterations, as in
``bench_fold.py``), and every merge mode of ``TwoLevelMemory`` (``hmmmerge.models.MERGERS``: ``sf``, ``fold``, ``fold-noisy``,
and any mode registered later: the hook for the new learner is its name).  An online learner lives
the training walk in 100-episode blocks (``partial_fit``); per block its CPU seconds are recorded,
and its online accuracy (the paper's measure, level 2, over the last 50 episodes).  Its held-out
model is the merger's own level 2 when the merger has one (fold-noisy's noise-aware emissions),
else ``agent.level2_hmm()``; both are in the JSON.

Every run: ``--episodes`` (1,000) x ``--episode-length`` (50) training moves, held-out accuracy
and surprise (smoothed with epsilon 1e-3) on ``--eval-episodes`` (100) fresh episodes of the same
process, scored by ``evaluate_model`` with no prediction counted wrong, the oracle's accuracy and
surprise on the same episodes beside it.  Each run is a subprocess on one thread with a CPU-time
limit (``--cpu-limit``, default 300 s, imports and numba loading included; the recorded
``fit_cpu_s`` is the fit alone, after a warm-up fit: 5 episodes, for an online learner 20 -- at
least one sleep, so that the sleep's kernels are loaded too): a run over the limit is recorded as
"> limit" and counts in the tables.  Results: one JSON file per run under ``OUT/runs/`` (atomic;
finished runs are not redone, a run stopped at a lower limit is redone under a higher one),
``OUT/results.csv`` and ``OUT/bench_world_as_it_is.md`` (mean +- sd per learner x condition with
CPU, the gap to the oracle and to EM, and the cost targets of issue 22 for ``--target``).

    nice -n 10 python benchmarks/bench_world_as_it_is.py [--quick] [--out DIR] [--learners oracle,fold,...]
        [--conditions clean,slip-0.05,...] [--worlds paper-grid,maze,...] [--colourings 0,1,2] [--seeds 0,1,2]
        [--cpu-limit 300] [--target fold] [--table-only]
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
WORLDS = ("paper-grid", "maze", "torus", "two-rooms", "cscg-room", "aliased-loop", "random-graph", "fourrooms-3x3")
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
    if name == "fourrooms-3x3":
        from hmmmerge import from_gymnasium

        env = from_gymnasium(MINIGRID, seed=0, agent_view_size=3)
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
    return {"n_clones": 30 if env.n_obs <= 4 else 20, "n_iter": 100}


def run_one(config: dict) -> dict:
    """Fit one learner on one walk and score it; the body of a run's subprocess."""
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.models import MERGERS as MERGE_MODES
    from hmmmerge.models import MODELS, build_model

    env = build_world(config["world"], int(config["colouring"]), config["condition"])
    start = CONDITIONS[config["condition"]]["start"]
    train, fresh = walks(env, config)
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


def execute(config: dict, path: str, cpu_limit: float, memory_gb: float) -> dict:
    """Run ``config`` in a subprocess under the limits; write and return its record."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run-one", json.dumps(config)],
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


def configurations(args) -> list[dict]:
    out = []
    for world in args.worlds:
        conditions = ["clean"] if world == "fourrooms-3x3" else args.conditions
        colourings = [0] if world == "fourrooms-3x3" else args.colourings
        length = 100 if world == "fourrooms-3x3" else args.episode_length
        for condition in conditions:
            for colouring in colourings:
                for seed in args.seeds:
                    for learner in args.learners:
                        out.append({"world": world, "condition": condition, "colouring": colouring, "seed": seed,
                                    "learner": learner, "episodes": args.episodes, "episode_length": length,
                                    "eval_episodes": args.eval_episodes})
    return out


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- tables
def _fmt_cell(values, cpu, limited, n, limit):
    if not values:
        return f"> {limit:g} s ({limited}/{n})" if limited else "-"
    cell = f"{np.mean(values):.3f} ± {np.std(values):.3f} ({np.mean(cpu):.1f} s)"
    if limited:
        cell += f"; {limited}/{n} > {limit:g} s"
    return cell


def tables(records: list[dict], learners, conditions, target: str) -> list[str]:
    """The markdown report: mean +- sd tables and the targets check."""
    by = {}
    for r in records:
        c = r["config"]
        by.setdefault((c["learner"], c["condition"]), []).append(r)
    limit = max((r["cpu_limit"] for r in records), default=0)
    lines = ["### Held-out accuracy, mean ± sd over worlds x runs (mean fit CPU s)", "",
             "| learner | " + " | ".join(conditions) + " |", "|---|" + "---|" * len(conditions)]
    for learner in learners:
        cells = []
        for cond in conditions:
            rs = by.get((learner, cond), [])
            ok = [r for r in rs if r["status"] == "ok"]
            limited = sum(r["status"] == "cpu-limit" for r in rs)
            cells.append(_fmt_cell([r["heldout_accuracy"] for r in ok], [r["fit_cpu_s"] for r in ok], limited,
                                   len(rs), max((r["cpu_limit"] for r in rs), default=limit)))
        lines.append(f"| {learner} | " + " | ".join(cells) + " |")
    online = [lr for lr in learners if any(r["status"] == "ok" and "online_accuracy" in r
                                           for rs in (by.get((lr, c), []) for c in conditions) for r in rs)]
    if online:
        lines += ["", "### Online accuracy (level 2, last 50 training episodes), mean ± sd; "
                  "CPU of the last 100-episode block / the 2nd (max over runs)", "",
                  "| learner | " + " | ".join(conditions) + " |", "|---|" + "---|" * len(conditions)]
        for learner in online:
            cells = []
            for cond in conditions:
                ok = [r for r in by.get((learner, cond), []) if r["status"] == "ok" and "online_accuracy" in r]
                if not ok:
                    cells.append("-")
                    continue
                ratio = max(r["block_cpu_s"][-1] / max(r["block_cpu_s"][1], 1e-3) if len(r["block_cpu_s"]) > 1
                            else 1.0 for r in ok)
                acc = [r["online_accuracy"] for r in ok]
                cells.append(f"{np.mean(acc):.3f} ± {np.std(acc):.3f}; x{ratio:.1f}")
            lines.append(f"| {learner} | " + " | ".join(cells) + " |")
    lines += ["", "### Gap to the oracle (held-out accuracy minus the oracle's on the same episodes): "
              "mean, worst run", "", "| learner | " + " | ".join(conditions) + " |",
              "|---|" + "---|" * len(conditions)]
    for learner in learners:
        if learner == "oracle":
            continue
        cells = []
        for cond in conditions:
            gaps = [r["heldout_accuracy"] - r["oracle_accuracy"] for r in by.get((learner, cond), [])
                    if r["status"] == "ok"]
            cells.append(f"{np.mean(gaps):+.3f}, {min(gaps):+.3f}" if gaps else "-")
        lines.append(f"| {learner} | " + " | ".join(cells) + " |")
    lines += [""] + targets(records, target, conditions)
    return lines


BOUNDS = {"clean": (0.005, None), "slip-0.05": (0.01, 0.02), "noise-0.05": (0.01, 0.02),
          "random-start": (0.01, 0.02), "slip-0.10": (0.01, 0.04)}
"""Issue 22's accuracy targets per condition: (below EM by at most, below the oracle by at most)."""


def targets(records, target: str, conditions) -> list[str]:
    """Issue 22's targets for ``target``, run by run against EM and the oracle of the same data."""
    runs = {}
    for r in records:
        c = r["config"]
        key = (c["world"], c["condition"], c["colouring"], c["seed"])
        runs.setdefault(key, {})[c["learner"]] = r
    lines = [f"### Targets of issue 22 for `{target}` (every run against EM and the oracle on the same data)", "",
             "| condition | runs | worst vs EM | worst vs oracle | accuracy met | max fit CPU s "
             "| max last/2nd block CPU | over the CPU limit |", "|---|---|---|---|---|---|---|---|"]
    for cond in conditions:
        rows = [v for k, v in runs.items() if k[1] == cond and target in v]
        if not rows:
            continue
        em_gap, or_gap, cpu, ratio, limited, met, n = [], [], [], [], 0, True, 0
        for v in rows:
            t = v[target]
            n += 1
            if t["status"] != "ok":
                limited += 1
                met = False
                continue
            world = t["config"]["world"]
            cpu.append(t["fit_cpu_s"])
            if len(t.get("block_cpu_s", [])) > 1:
                ratio.append(t["block_cpu_s"][-1] / max(t["block_cpu_s"][1], 1e-3))
            gap_o = t["heldout_accuracy"] - t["oracle_accuracy"]
            or_gap.append(gap_o)
            em_b, or_b = BOUNDS.get(cond, (0.01, 0.02))
            if world == "fourrooms-3x3":
                em_b, or_b = 0.02, None
            if cond == "clean" and world != "fourrooms-3x3" and t["heldout_accuracy"] < 0.99:
                met = False
            if or_b is not None and gap_o < -or_b:
                met = False
            em = v.get("em")
            if em is not None and em["status"] == "ok":
                gap_e = t["heldout_accuracy"] - em["heldout_accuracy"]
                em_gap.append(gap_e)
                if gap_e < -em_b:
                    met = False
        def worst(xs, spec="+.3f", pick=min):
            return format(pick(xs), spec) if xs else "-"

        lines.append(f"| {cond} | {n} | {worst(em_gap)} | {worst(or_gap)} | {'yes' if met else 'NO'} | "
                     f"{worst(cpu, '.1f', max)} | {worst(ratio, '.1f', max)} | {limited} |")
    lines += ["", "Bounds: clean >= 0.99 and >= EM - 0.005; slip 0.05, noise 0.05, random starts >= EM - 0.01 and "
              ">= oracle - 0.02; slip 0.10 >= EM - 0.01 and >= oracle - 0.04; FourRooms >= EM - 0.02; cost "
              "<= 5 s CPU per 1,000 episodes and the 10th block <= 2x the 2nd."]
    return lines


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
    parser.add_argument("--memory-gb", type=float, default=6.0, help="address-space limit per run (default 6)")
    parser.add_argument("--target", default=None, help="the learner whose issue-22 targets are checked "
                                                        "(default: the last online learner listed)")
    parser.add_argument("--table-only", action="store_true", help="write the tables from finished runs only")
    args = parser.parse_args(argv)
    if args.run_one:
        print(json.dumps(run_one(json.loads(args.run_one)), default=_json_default))
        return 0
    if args.quick:
        args.worlds = [w for w in args.worlds if w in ("paper-grid", "maze")] or args.worlds[:1]
        args.colourings, args.seeds = args.colourings[:1], args.seeds[:1]
        args.episodes, args.eval_episodes, args.cpu_limit = 200, 20, min(args.cpu_limit, 30.0)
    for name in ("episodes", "episode_length", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.episodes % BLOCK:
        parser.error(f"--episodes must be a multiple of {BLOCK}")
    if not args.cpu_limit > 0 or not args.memory_gb > 0:
        parser.error("--cpu-limit and --memory-gb must be positive")
    from hmmmerge.models import MERGERS as MERGE_MODES
    from hmmmerge.models import MODELS

    unknown = [lr for lr in args.learners if lr not in MERGE_MODES and lr not in MODELS]
    if unknown:
        parser.error(f"unknown learners {unknown}; merge modes: {', '.join(MERGE_MODES)}; "
                     f"catalogue: {', '.join(MODELS)}")
    target = args.target or next((lr for lr in reversed(args.learners) if lr in MERGE_MODES), args.learners[-1])

    runs_dir = os.path.join(args.out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    configs = configurations(args)
    records = []
    started = time.time()
    for i, config in enumerate(configs):
        path = os.path.join(runs_dir, run_key(config) + ".json")
        record = load(path)
        stale = record is not None and record["status"] == "cpu-limit" and record["cpu_limit"] < args.cpu_limit
        if (record is None or stale) and not args.table_only:
            record = execute(config, path, args.cpu_limit, args.memory_gb)
            acc = record.get("heldout_accuracy")
            print(f"[{i + 1}/{len(configs)} {time.time() - started:.0f} s] {config['world']} {config['condition']} "
                  f"c{config['colouring']} s{config['seed']} {config['learner']}: {record['status']}"
                  + (f" held-out {acc:.3f} (oracle {record['oracle_accuracy']:.3f}) fit {record['fit_cpu_s']:.1f} s"
                     if acc is not None and record["status"] == "ok" else f" {record.get('message', '')}"),
                  file=sys.stderr, flush=True)
        if record is not None and record["status"] != "error":
            records.append(record)
    write_csv(records, os.path.join(args.out, "results.csv"))
    worlds = sorted({r["config"]["world"] for r in records})
    head = [f"# The world as it is: {len(records)} runs", "",
            f"Worlds: {', '.join(worlds)}; colourings {args.colourings}, walk seeds {args.seeds}; "
            f"{args.episodes:,} training episodes x {args.episode_length} moves (FourRooms: 100), held-out "
            f"{args.eval_episodes} fresh episodes of the same process; CPU limit {args.cpu_limit:g} s per run.", ""]
    md = head + tables(records, args.learners, args.conditions, target)
    for world in worlds if len(worlds) > 1 else ():  # per-world detail
        sub = [r for r in records if r["config"]["world"] == world]
        conds = [c for c in args.conditions if any(r["config"]["condition"] == c for r in sub)]
        md += ["", f"## {world}", ""] + tables(sub, args.learners, conds, target)[:len(args.learners) + 4]
    atomic_write_text(os.path.join(args.out, "bench_world_as_it_is.md"), "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
