"""Long lives (issue: cost linear in experience): seconds per 100 episodes as experience grows.

Measures, in one run on this machine:

1. the paper's agent (size 10, paper world, one process per run) fed 100
   episodes at a time for ``--episodes`` episodes, for each merge mode: seconds
   per 100 episodes, level-1 states, clusters, level-2 accuracy and purity,
   peak memory; side by side with the same runs of another checkout
   (``--baseline-src``, e.g. a worktree of commit d7d86da, the code before the
   incremental work) when given;
2. the 1,000-episode paper run as a whole process, ``hmmmerge run --episodes
   1000 --size 10 --merge sf --json`` (held-out scoring and imports included),
   pinned to one core when ``taskset`` exists, alternating the two checkouts,
   best of ``--repeat``.

Writes ``OUT/long_life.csv`` and the figure ``docs/long_life.png`` (accuracy,
purity, clusters and seconds per 100 episodes against episodes, sf vs random
vs none).  Timings on a shared machine are noisy: compare the columns of one
run, not runs of different days.

    python benchmarks/bench_long_life.py [--episodes 10000] [--baseline-src DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, resource, sys, time
import numpy as np
import hmmmerge as hm
from hmmmerge.agent import TwoLevelMemory
merge, episodes, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = hm.gridworld(seed=0)
warm = TwoLevelMemory(10, 4, merge=merge, seed=1)
getattr(warm, "partial_fit", warm.fit)(hm.random_walk(env, 30, seed=1))   # compile / load the kernels
agent = TwoLevelMemory(10, 4, merge=merge, initial_size=10, seed=0)
live = getattr(agent, "partial_fit", agent.fit)   # the old code's fit continued
walk = np.random.default_rng(0)
done = 0
while done < episodes:
    traj = hm.random_walk(env, block, 50, seed=walk)
    t, c = time.perf_counter(), time.process_time()
    live(traj)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    done += block
    h = agent.history()
    memory = getattr(agent, "memory_", None) or agent.memory
    clusters = getattr(agent, "n_clusters_", None)
    clusters = agent.n_clusters if clusters is None else clusters
    print(json.dumps({"episode": done, "seconds": dt, "cpu_seconds": cpu, "n_states": int(memory.n_states), "n_clusters": int(clusters),
                      "l2_accuracy": float(np.mean(h["l2_accuracy"][-block:])),
                      "purity": float(h["purity"][-1]),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
    if hasattr(agent, "pop_history"):
        agent.pop_history(keep=block)
"""


def _env(src: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("PYTHONSTARTUP", None)
    return env


def _pin() -> list[str]:
    return ["taskset", "-c", "0"] if shutil.which("taskset") else []


def life(src: str, merge: str, episodes: int, block: int = 100, timeout: float | None = None,
         stream: str | None = None) -> list[dict]:
    """Per-block rows of one long life run by the checkout at ``src`` (in its own process).

    With ``stream``, every row is also appended to that JSON-lines file as it
    arrives (a long life stopped early keeps what it measured; ``--from-files``
    makes the tables from these files).
    """
    cmd = [sys.executable, "-c", CHILD, merge, str(episodes), str(block)]
    rows = []
    sink = open(stream, "w") if stream else None
    with tempfile.TemporaryDirectory() as cwd, subprocess.Popen(cmd, cwd=cwd, env=_env(src), text=True,
                                                                 stdout=subprocess.PIPE) as p:
        start = time.perf_counter()
        for line in p.stdout:
            rows.append(json.loads(line))
            if sink:
                sink.write(line)
                sink.flush()
            if timeout and time.perf_counter() - start > timeout:
                p.kill()
                break
    if sink:
        sink.close()
    return rows


def _stream_path(out: str, label: str) -> str:
    return os.path.join(out, "life_" + label.replace(" ", "_").replace("(", "").replace(")", "") + ".jsonl")


def process_time(src: str) -> float:
    """(wall, CPU) seconds of ``hmmmerge run --episodes 1000 --size 10 --merge sf --json`` from the checkout ``src``."""
    cmd = [*_pin(), sys.executable, "-m", "hmmmerge", "run", "--episodes", "1000", "--size", "10", "--merge", "sf",
           "--json"]
    import resource

    with tempfile.TemporaryDirectory() as cwd:
        t = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, cwd=cwd, env=_env(src), check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return time.perf_counter() - t, cpu


def per_100_at(rows: list[dict], episode: int, key: str = "cpu_seconds") -> float | None:
    """CPU seconds per 100 episodes around ``episode`` (mean of the blocks ending within 500 episodes after it).

    CPU time of the process, not wall time: on a shared machine it barely
    depends on what else runs; wall seconds are in the CSV too.
    """
    near = [r[key] for r in rows if episode < r["episode"] <= episode + 500]
    return sum(near) / len(near) if near else None


def figure(series: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    panels = [("l2_accuracy", "level-2 accuracy (per 100 episodes)"), ("purity", "purity (with singletons)"),
              ("n_clusters", "clusters"), ("cpu_seconds", "CPU seconds per 100 episodes")]
    for ax, (key, title) in zip(axes, panels):
        for label, rows in series.items():
            ax.plot([r["episode"] for r in rows], [r[key] for r in rows], label=label,
                    linestyle="--" if "before" in label else "-")
        ax.set_title(title)
        ax.set_xlabel("episodes")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--modes", nargs="+", default=["sf", "random", "none"])
    parser.add_argument("--baseline-src", metavar="DIR", help="another checkout to run side by side")
    parser.add_argument("--baseline-episodes", type=int, default=None,
                        help="episodes for the baseline lives (default: --episodes)")
    parser.add_argument("--jobs", type=int, default=1, help="lives run at the same time (one process each)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of the whole-process timing")
    parser.add_argument("--skip-process", action="store_true", help="skip the 1,000-episode process timing")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--figure", default=os.path.join(ROOT, "docs", "long_life.png"))
    parser.add_argument("--from-files", action="store_true",
                        help="no new lives: tables and figure from the rows streamed to OUT/life_*.jsonl")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    runs = {}
    for merge in args.modes:
        runs[merge] = (ROOT, merge, args.episodes)
        if args.baseline_src:
            runs[f"{merge} (before)"] = (args.baseline_src, merge, args.baseline_episodes or args.episodes)
    from concurrent.futures import ThreadPoolExecutor

    if args.from_files:
        series = {}
        for label in runs:
            path = _stream_path(args.out, label)
            if os.path.exists(path):
                with open(path) as f:
                    series[label] = [json.loads(line) for line in f if line.strip()]
    else:
        with ThreadPoolExecutor(max(args.jobs, 1)) as pool:  # concurrent lives share the machine's load alike
            futures = {label: pool.submit(life, *run, stream=_stream_path(args.out, label))
                       for label, run in runs.items()}
            series = {label: f.result() for label, f in futures.items()}
    with open(os.path.join(args.out, "long_life.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "episode", "seconds", "cpu_seconds", "n_states", "n_clusters", "l2_accuracy", "purity",
                    "peak_rss_mb"])
        for label, rows in series.items():
            for r in rows:
                w.writerow([label, r["episode"], r["seconds"], r["cpu_seconds"], r["n_states"], r["n_clusters"], r["l2_accuracy"],
                            r["purity"], r["peak_rss_mb"]])
    figure({k: v for k, v in series.items()}, args.figure)

    marks = [m for m in (1000, 2000, 5000, 9500, 20_000, 50_000, 99_500) if m < args.episodes]
    print(f"{'run':16s} " + " ".join(f"{'cpu/100 @' + str(m):>13s}" for m in marks)
          + f" {'cpu s':>9s} {'wall s':>9s} {'l1 states':>10s} {'peak MB':>8s}")
    for label, rows in series.items():
        cells = [per_100_at(rows, m) for m in marks]
        print(f"{label:16s} " + " ".join(f"{c:13.3f}" if c is not None else f"{'-':>13s}" for c in cells)
              + f" {sum(r['cpu_seconds'] for r in rows):9.1f} {sum(r['seconds'] for r in rows):9.1f}"
              + f" {rows[-1]['n_states']:10d} {rows[-1]['peak_rss_mb']:8.0f}")

    if not args.skip_process and not args.from_files:
        srcs = {"now": ROOT, **({"before": args.baseline_src} if args.baseline_src else {})}
        times = {k: [] for k in srcs}
        process_time(ROOT)  # warm the numba cache of both checkouts once
        if args.baseline_src:
            process_time(args.baseline_src)
        for _ in range(args.repeat):
            for k, src in srcs.items():
                times[k].append(process_time(src))
        for k, ts in times.items():
            wall, cpu = min(t[0] for t in ts), min(t[1] for t in ts)
            print(f"hmmmerge run --episodes 1000 --merge sf ({k}): best wall {wall:.2f} s, best CPU {cpu:.2f} s; "
                  f"the authors' published 127 s / 72 s are {127 / cpu:.0f}x / {72 / cpu:.0f}x that CPU time")
        if args.baseline_src:
            ratio = min(t[1] for t in times["before"]) / min(t[1] for t in times["now"])
            print(f"CPU ratio before / now: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
