"""``hmmmerge env``: characterise an environment (states, clones, Markov radius)."""

from __future__ import annotations

import argparse


def parse_grid(text: str) -> tuple[int, int]:
    """``"10x10"`` -> ``(10, 10)``."""
    try:
        rows, cols = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--grid must look like ROWSxCOLS (e.g. 10x10), got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"--grid sizes must be positive, got {text!r}")
    return rows, cols


def add_world_arguments(p: argparse.ArgumentParser) -> None:
    """The options that pick a world: ``--grid/--colours/--seed/--colouring`` or ``--graph FILE``."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--grid", type=parse_grid, default=(10, 10), metavar="RxC", help="gridworld size (default 10x10)")
    src.add_argument("--graph", metavar="FILE", help="an environment saved as JSON (hmmmerge) or GraphML")
    p.add_argument("--colours", type=int, default=10, help="number of floor colours (default 10)")
    p.add_argument("--colouring", choices=["balanced", "iid"], default="balanced")
    p.add_argument("--seed", type=int, default=0, help="seed of the colouring (default 0)")


def world_from_args(args):
    """Build the Environment the world options describe."""
    from ..environment import Environment
    from ..worlds import gridworld

    if args.graph:
        return Environment.load(args.graph)
    if args.colours < 1:
        raise ValueError(f"--colours must be >= 1, got {args.colours}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    rows, cols = args.grid
    return gridworld(rows, cols, n_colours=args.colours, seed=args.seed, colouring=args.colouring)


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="describe an environment: clones, Markov radius",
                       description="Characterise an environment: states, actions, observations, clones per "
                                   "observation, Markov radius and its distribution.")
    add_world_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE", help="save a PNG: the map and the per-vertex Markov radius")
    p.set_defaults(run=run)


def describe(env) -> dict:
    """The report ``hmmmerge env`` prints, as a dictionary."""
    import numpy as np

    from ..structure import markov_radii

    radii = markov_radii(env)
    counts = env.clone_counts()
    values, freq = np.unique(radii, return_counts=True)
    return {
        "n_states": env.n_states,
        "n_actions": env.n_actions,
        "n_obs": env.n_obs,
        "start": list(env.start_node) if isinstance(env.start_node, tuple) else env.start_node,
        "clones": {str(o): int(c) for o, c in enumerate(counts)},
        "markov_radius": int(radii.min()),
        "markov_radius_mean": float(radii.mean()),
        "markov_radius_distribution": {str(int(v)): int(f) for v, f in zip(values, freq)},
    }


def run(args) -> int:
    from ..cli import print_json

    env = world_from_args(args)
    report = describe(env)
    if args.plot:
        save_plot(env, args.plot)
        report["plot"] = args.plot
    if args.json:
        print_json(report)
        return 0
    print(f"states {report['n_states']}, actions {report['n_actions']}, observations {report['n_obs']}")
    print("clones per observation: " + ", ".join(f"{o}:{c}" for o, c in report["clones"].items()))
    print(f"Markov radius {report['markov_radius']} (mean over vertices {report['markov_radius_mean']:.2f})")
    print("radius distribution: " + ", ".join(f"{r}:{n}" for r, n in report["markov_radius_distribution"].items()))
    if args.plot:
        print(f"picture saved to {args.plot}")
    return 0


def save_plot(env, path) -> None:
    """Save the map (colour numbers in cells) and the per-vertex Markov radius heat map."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import grid_shape, plot_environment, plot_grid_values
    from ..structure import markov_radii

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    plot_environment(env, ax=axes[0], title="observation map")
    if grid_shape(env) is not None:
        plot_grid_values(env, markov_radii(env), ax=axes[1], cmap="magma", title="Markov radius per vertex")
    else:
        import numpy as np

        radii = markov_radii(env)
        axes[1].hist(radii, bins=np.arange(radii.max() + 2) - 0.5)
        axes[1].set_xlabel("Markov radius")
        axes[1].set_ylabel("vertices")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
