"""``hmmmerge demo``: the main job on defaults."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the main job: a small paper comparison with figures",
                       description="Run the main job on defaults and save its figures under --out.")
    p.add_argument("--out", default="hmmmerge-demo", help="output folder (default ./hmmmerge-demo)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    import os

    from ..cli import print_json
    from ..worlds import gridworld
    from .env import describe, save_plot

    os.makedirs(args.out, exist_ok=True)
    env = gridworld(10, 10, n_colours=10, seed=args.seed)
    report = describe(env)
    picture = os.path.join(args.out, "world.png")
    save_plot(env, picture)
    report["figures"] = [picture]
    if args.json:
        print_json(report)
    else:
        print(f"10x10 gridworld, 10 colours, seed {args.seed}: Markov radius {report['markov_radius']}")
        print(f"figure: {picture}")
    return 0
