"""The cost of the online learner ``merge="replay"`` (issue 22's cost targets), side by side with another checkout.

Runs, each in a subprocess on one thread, for this checkout and ``--baseline-src`` (another checkout,
e.g. a worktree of the commit before a change) when given, on the walks of
``bench_world_as_it_is.py`` (same worlds, same seeds):

* ``long-life``: the paper's world with slip 0.05 (colouring 0, walk seed 0), ``--long-episodes``
  (10,000) episodes of 50 moves in blocks of 500 after a 20-episode warm-up: fit CPU per block and in
  all, level-1 states, held-out accuracy on 100 fresh episodes against the oracle's;
* ``fourrooms-7x7``, ``fourrooms-3x3``: MiniGrid FourRooms with the 7x7 view (360 views) or the 3x3 view (30
  views x 20 clones: the benchmark's most costly run), walk seeds ``--seeds``, 1,000 episodes of 100 moves in
  blocks of 100: fit CPU, the 10th block over the 2nd, held-out;
* ``paper-grid``: the paper's world, every condition, colouring 0 and walk seed 0, 1,000 episodes of
  50 moves in blocks of 100: fit CPU, the 10th block over the 2nd, held-out;
* ``many-views``: the grids of ``bench_unseen_worlds.py`` with the most views (30x30 with 20 colours, clean,
  slip 0.05, noise 0.05 and random starts; 20x20 with 15 colours, clean and slip 0.05; 600 and 450 clones,
  nearly every pair of views seen), its walks of seeds ``--seeds``, 1,000 episodes of 50 moves;
* ``minigrid-5x5``: the probe set's MiniGrid FourRooms with the 5x5 view (149 views of very uneven
  frequency: clones by visits), clean, noise 0.05 (the view pairs that noise makes) and random starts,
  seeds ``--seeds``, 1,000 episodes of 100 moves;
* ``many-clones``: every run of the unseen and probe sets whose fit was over 5 s per 1,000 episodes on
  main 87d8783 (issue 22's cost misses): the 30x30 grid with 20 colours under every condition, the 20x20
  grid with 15 colours under slip 0.10, noise, slip with noise and random starts, MiniGrid 5x5 with
  noise and with slip and noise, MiniGrid 7x7 from random poses, the 30x30 grid with 10 colours from
  random starts; seeds ``--seeds``.

CPU is ``time.process_time`` of the fit alone (``partial_fit`` calls), as in ``bench_world_as_it_is.py``.
Writes ``OUT/replay_cost.json`` and ``OUT/replay_cost.md``.  Timings on a shared machine are noisy:
compare the columns of one run.

    nice -n 10 python benchmarks/bench_replay_cost.py [--baseline-src DIR] [--out DIR] [--sections long-life,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("long-life", "fourrooms-7x7", "fourrooms-3x3", "paper-grid", "many-views", "minigrid-5x5", "many-clones")

CHILD = r"""
import json, sys, time
src, root, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, src)
import numpy as np
import hmmmerge                     # the measured checkout's, before the benchmark module puts its own first
from hmmmerge.agent import TwoLevelMemory
sys.path.insert(0, root + "/benchmarks")
import bench_world_as_it_is as W
B = __import__("bench_unseen_worlds") if spec.get("bench") == "unseen" else W
assert hmmmerge.__file__.startswith(src), hmmmerge.__file__
cfg = dict(spec, learner="replay", eval_episodes=100)
env = B.build_world(cfg["world"], cfg["colouring"], cfg["condition"])
train, fresh = B.walks(env, cfg)
def agent():
    return TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", seed=[cfg["colouring"], cfg["seed"], 1])
agent().fit(train[:20])
from hmmmerge.replay import ReplayMerger
if "exact" in ReplayMerger().get_params():   # past an exact phase too: replay's own kernels loaded before the clock
    TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(exact=False)).fit(train[:20])
a, blocks = agent(), []
for b in range(0, train.n_episodes, spec["block"]):
    c = time.process_time()
    a.partial_fit(train[b:b + spec["block"]])
    blocks.append(time.process_time() - c)
r = W._score(env, a.merger_.level2_hmm(a.memory_, a.clusters_), fresh, B.CONDITIONS[cfg["condition"]]["start"])
print(json.dumps({"blocks": blocks, "fit_cpu_s": sum(blocks), "n_states": int(a.memory_.n_states),
                  "heldout": r["heldout_accuracy"], "oracle": r["oracle_accuracy"]}))
"""


def runs(args) -> list[tuple[str, dict]]:
    out = []
    if "long-life" in args.sections:
        out.append(("long-life", {"world": "paper-grid", "condition": "slip-0.05", "colouring": 0, "seed": 0,
                                  "episodes": args.long_episodes, "episode_length": 50, "block": 500}))
    for world in ("fourrooms-7x7", "fourrooms-3x3"):
        if world in args.sections:
            out += [(world, {"world": world, "condition": "clean", "colouring": 0, "seed": s, "episodes": 1000,
                             "episode_length": 100, "block": 100}) for s in args.seeds]
    if "paper-grid" in args.sections:
        from bench_world_as_it_is import CONDITIONS

        out += [("paper-grid", {"world": "paper-grid", "condition": c, "colouring": 0, "seed": 0, "episodes": 1000,
                                "episode_length": 50, "block": 100}) for c in CONDITIONS]
    if "many-views" in args.sections:
        cells = [("grid-30x30-c20", "clean"), ("grid-20x20-c15", "clean"), ("grid-20x20-c15", "slip-0.05"),
                 ("grid-30x30-c20", "slip-0.05"), ("grid-30x30-c20", "noise-0.05"), ("grid-30x30-c20", "random-start")]
        out += [("many-views", {"world": w, "condition": c, "colouring": s, "seed": s, "episodes": 1000,
                                "episode_length": 50, "block": 100, "bench": "unseen"})
                for w, c in cells for s in args.seeds]
    if "minigrid-5x5" in args.sections:
        out += [("minigrid-5x5", {"world": "minigrid-fourrooms-5x5", "condition": c, "colouring": s, "seed": s,
                                  "episodes": 1000, "episode_length": 100, "block": 100, "bench": "unseen"})
                for c in ("clean", "noise-0.05", "random-start") for s in args.seeds]
    if "many-clones" in args.sections:
        grid30 = ("clean", "slip-0.05", "slip-0.10", "noise-0.05", "slip+noise", "random-start")
        cells = [("grid-30x30-c20", c, 50) for c in grid30] + \
            [("grid-20x20-c15", c, 50) for c in ("slip-0.10", "noise-0.05", "slip+noise", "random-start")] + \
            [("minigrid-fourrooms-5x5", c, 100) for c in ("noise-0.05", "slip+noise")] + \
            [("minigrid-fourrooms-7x7", "random-start", 100), ("grid-30x30-c10", "random-start", 50)]
        out += [("many-clones", {"world": w, "condition": c, "colouring": s, "seed": s, "episodes": 1000,
                                 "episode_length": n, "block": 100, "bench": "unseen"})
                for w, c, n in cells for s in args.seeds]
    return out


def measure(src: str, spec: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(src), ROOT, json.dumps(spec)],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(results) -> str:
    lines = ["| section | world / condition / seed | checkout | fit CPU s | block 10 / block 2 | CPU per block "
             "(first .. last) | level-1 states | held-out | oracle |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, b = r["spec"], r["blocks"]
        curve = " ".join(f"{x:.2f}" for x in b) if len(b) <= 10 else " ".join(f"{x:.2f}" for x in b[:3]) + \
            " .. " + " ".join(f"{x:.2f}" for x in b[-3:])
        ratio = b[9] / b[1] if len(b) >= 10 else float("nan")
        lines.append(f"| {r['section']} | {s['world']} / {s['condition']} / {s['seed']} | {r['checkout']} | "
                     f"{r['fit_cpu_s']:.2f} | {ratio:.2f} | {curve} | {r['n_states']:,} | {r['heldout']:.4f} | "
                     f"{r['oracle']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", metavar="DIR", help="another checkout to run side by side")
    parser.add_argument("--out", default="bench_replay_cost")
    parser.add_argument("--sections", type=lambda s: s.split(","), default=list(SECTIONS))
    parser.add_argument("--long-episodes", type=int, default=10000)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    args = parser.parse_args(argv)
    bad = set(args.sections) - set(SECTIONS)
    if bad:
        parser.error(f"unknown sections {sorted(bad)}: choose among {', '.join(SECTIONS)}")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    os.makedirs(args.out, exist_ok=True)
    checkouts = [("this", ROOT)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    results = []
    for section, spec in runs(args):
        for name, src in checkouts:   # side by side: the two checkouts one after the other, run by run
            r = dict(measure(src, spec), section=section, checkout=name, spec=spec)
            results.append(r)
            print(f"{section} {spec['condition']} seed {spec['seed']} [{name}]: fit {r['fit_cpu_s']:.2f} s, "
                  f"held-out {r['heldout']:.4f}", flush=True)
    from hmmmerge._io import atomic_write_text

    atomic_write_text(os.path.join(args.out, "replay_cost.json"), json.dumps(results, indent=1))
    atomic_write_text(os.path.join(args.out, "replay_cost.md"), table(results))
    print(table(results))


if __name__ == "__main__":
    main()
