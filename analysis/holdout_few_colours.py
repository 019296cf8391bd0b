"""Hold-out check of `replay` on worlds of 2-3 colours that no benchmark set uses (issue 22, BENCHMARKS.md
"Hold-out worlds of 2-3 colours, session 13").

Six worlds (a 9x9 and a 12x12 grid, an 11x11 maze and an 8x8 torus with 3 colours, a 10x10 torus with 2, a
random graph of 60 states with 4 actions and 3 colours) are added to ``bench_unseen_worlds.PROBE_WORLDS`` and run
with its own walks, warm-ups and scoring (``run_one``), under slip 0.05, slip 0.10, noise 0.05 and random starts.
One JSON line per run is appended to OUT; a run already in OUT is not redone (the sweep resumes).

    PYTHONPATH=$PWD python analysis/holdout_few_colours.py OUT.jsonl --learners oracle,replay,em --seeds 0,1
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

HOLDOUT_WORLDS = {
    "h-grid-9x9-c3": ("gridworld", {"rows": 9, "cols": 9, "n_colours": 3}),
    "h-grid-12x12-c3": ("gridworld", {"rows": 12, "cols": 12, "n_colours": 3}),
    "h-maze-11x11-c3": ("maze", {"rows": 11, "cols": 11, "loops": 3, "n_colours": 3}),
    "h-torus-10x10-c2": ("torus", {"rows": 10, "cols": 10, "n_colours": 2}),
    "h-graph-60-a4-c3": ("random_graph", {"n_states": 60, "n_actions": 4, "n_colours": 3}),
    "h-torus-8x8-c3": ("torus", {"rows": 8, "cols": 8, "n_colours": 3}),
}
"""Name -> (builder, its arguments), appended to the probe set's worlds (their index seeds the walks)."""
CONDITIONS = ("noise-0.05", "slip-0.05", "slip-0.10", "random-start")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON-lines file the runs are appended to")
    parser.add_argument("--learners", default="oracle,replay,em")
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args(argv)
    import bench_unseen_worlds as unseen

    learners = args.learners.split(",")
    unknown = [x for x in learners if x not in unseen.W.LEARNERS]
    if unknown:
        parser.error(f"--learners: unknown {', '.join(unknown)}; choose from {', '.join(unseen.W.LEARNERS)}")
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: {args.seeds!r} is not a comma-separated list of integers")
    if min(seeds) < 0:
        parser.error(f"--seeds: {args.seeds!r} holds a negative seed")

    unseen.PROBE_WORLDS.update(HOLDOUT_WORLDS)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            done = {(r["world"], r["condition"], r["seed"], r["learner"]) for r in map(json.loads, f)}
    for world in HOLDOUT_WORLDS:
        for condition in CONDITIONS:
            for seed in seeds:
                for learner in learners:
                    if (world, condition, seed, learner) in done:
                        continue
                    config = {"world": world, "condition": condition, "colouring": seed, "seed": seed,
                              "learner": learner, "episodes": 1000, "episode_length": 50, "eval_episodes": 100,
                              "bench": "unseen"}
                    r = unseen.run_one(config)
                    record = {"world": world, "condition": condition, "seed": seed, "learner": learner,
                              "acc": r["heldout_accuracy"], "cpu": r["fit_cpu_s"], "n_obs": r["n_obs"],
                              "n": r["n_world_states"]}
                    print(record, flush=True)
                    with open(args.out, "a") as f:   # one whole line per finished run
                        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
