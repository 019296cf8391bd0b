"""Hold-out checks of `replay` on worlds that no benchmark set uses (issue 22; BENCHMARKS.md "Hold-out worlds of
2-3 colours, session 13" and "Worlds at the gates' edges, session 14").

Each set's worlds are added to ``bench_unseen_worlds.PROBE_WORLDS`` (one set at a time: a world's index there
seeds its walks) and run with the probe set's walks, warm-ups and scoring (``run_one``):

* ``--set few``: six worlds of 2-3 colours (<= 3 views: 45 clones per view and deep sleeps), under slip 0.05,
  slip 0.10, noise 0.05 and random starts;
* ``--set edges``: grids, a torus and a random graph with 4, 5, 8, 9, 13, 14, 24, 25, 28 and 29 colours, placed on both
  sides of each of replay's size gates (even layout: 4 views = 120 clones, deep sleeps; 5-8 views = 150-240
  clones, light deep sleeps; 9-13 views = 270-390 clones, neither; 14-24 views = 420-600 clones with >= 25 per
  view, slow sleeps; 25 views = 24 per view, not slow), clean and under the four conditions above.

One JSON line per run is appended to OUT; a run already in OUT is not redone (the sweep resumes).

    PYTHONPATH=$PWD python analysis/holdout_worlds.py OUT.jsonl --set edges --learners oracle,replay,em --seeds 0
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

FEW_WORLDS = {
    "h-grid-9x9-c3": ("gridworld", {"rows": 9, "cols": 9, "n_colours": 3}),
    "h-grid-12x12-c3": ("gridworld", {"rows": 12, "cols": 12, "n_colours": 3}),
    "h-maze-11x11-c3": ("maze", {"rows": 11, "cols": 11, "loops": 3, "n_colours": 3}),
    "h-torus-10x10-c2": ("torus", {"rows": 10, "cols": 10, "n_colours": 2}),
    "h-graph-60-a4-c3": ("random_graph", {"n_states": 60, "n_actions": 4, "n_colours": 3}),
    "h-torus-8x8-c3": ("torus", {"rows": 8, "cols": 8, "n_colours": 3}),
}
"""``--set few``: worlds of 2-3 colours (session 13)."""
EDGE_WORLDS = {
    "e-grid-14x14-c4": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 4}),
    "e-grid-14x14-c5": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 5}),
    "e-grid-14x14-c8": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 8}),
    "e-grid-14x14-c9": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 9}),
    "e-grid-14x14-c13": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 13}),
    "e-grid-14x14-c14": ("gridworld", {"rows": 14, "cols": 14, "n_colours": 14}),
    "e-grid-16x16-c24": ("gridworld", {"rows": 16, "cols": 16, "n_colours": 24}),
    "e-grid-16x16-c25": ("gridworld", {"rows": 16, "cols": 16, "n_colours": 25}),
    "e-torus-12x12-c9": ("torus", {"rows": 12, "cols": 12, "n_colours": 9}),
    "e-graph-120-a4-c13": ("random_graph", {"n_states": 120, "n_actions": 4, "n_colours": 13}),
    "e-grid-16x16-c28": ("gridworld", {"rows": 16, "cols": 16, "n_colours": 28}),
    "e-grid-16x16-c29": ("gridworld", {"rows": 16, "cols": 16, "n_colours": 29}),
    "e-grid-20x20-c40": ("gridworld", {"rows": 20, "cols": 20, "n_colours": 40}),
    "e-grid-24x24-c60": ("gridworld", {"rows": 24, "cols": 24, "n_colours": 60}),
}
"""``--set edges``: worlds on both sides of replay's size gates (session 14)."""
HOLDOUT_CONDITIONS = ("noise-0.05", "slip-0.05", "slip-0.10", "random-start")
SETS = {"few": (FEW_WORLDS, HOLDOUT_CONDITIONS), "edges": (EDGE_WORLDS, ("clean", *HOLDOUT_CONDITIONS))}
"""Set name -> (its worlds, its conditions)."""


def _csv(parser, option: str, text: str, allowed=None, integer=False) -> list:
    items = [x for x in text.split(",") if x]
    if not items:
        parser.error(f"{option}: {text!r} names nothing")
    if integer:
        try:
            items = [int(x) for x in items]
        except ValueError:
            parser.error(f"{option}: {text!r} is not a comma-separated list of integers")
        if min(items) < 0:
            parser.error(f"{option}: {text!r} holds a negative seed")
    elif allowed is not None:
        unknown = [x for x in items if x not in allowed]
        if unknown:
            parser.error(f"{option}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return items


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON-lines file the runs are appended to")
    parser.add_argument("--set", default="few", choices=sorted(SETS), help="the worlds (default: few)")
    parser.add_argument("--learners", default="oracle,replay,em")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--worlds", default=None, help="a comma-separated subset of the set's worlds")
    parser.add_argument("--conditions", default=None, help="a comma-separated subset of the set's conditions")
    args = parser.parse_args(argv)
    import bench_unseen_worlds as unseen

    worlds, conditions = SETS[args.set]
    learners = _csv(parser, "--learners", args.learners, unseen.W.LEARNERS)
    seeds = _csv(parser, "--seeds", args.seeds, integer=True)
    chosen = _csv(parser, "--worlds", args.worlds, list(worlds)) if args.worlds is not None else list(worlds)
    conditions = _csv(parser, "--conditions", args.conditions, conditions) \
        if args.conditions is not None else conditions

    unseen.PROBE_WORLDS.update(worlds)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            done = {(r["world"], r["condition"], r["seed"], r["learner"]) for r in map(json.loads, f)}
    for world in [w for w in worlds if w in chosen]:
        for condition in conditions:
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
                    if "block_cpu_s" in r:
                        record.update(blocks=r["block_cpu_s"], online=r["online_accuracy"])
                    print(record, flush=True)
                    with open(args.out, "a") as f:   # one whole line per finished run
                        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
