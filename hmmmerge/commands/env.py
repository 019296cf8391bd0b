"""``hmmmerge env``: characterise an environment.

The report: states, actions, observations, clones per observation, the Markov
radius (minimum and per vertex), the aliasing depth (moves of experience that
identify each vertex) and the number of distinct observation sequences ``k``
moves from each vertex; ``--plot`` draws it.
"""

from __future__ import annotations

import argparse
import sys

WORLD_NAMES = ("paper-grid", "maze", "torus", "two-rooms", "aliased-loop", "cscg-room")
"""The gallery's world names (``hmmmerge.gallery.WORLDS``), kept here so that ``--help`` imports nothing heavy."""


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
    """The options that pick a world: ``--grid/--colours/--seed/--colouring``, ``--world NAME`` or ``--graph FILE``,
    and ``--start NODE`` for any of them.

    ``--colours`` and ``--colouring`` default to ``None``: :func:`world_from_args`
    resolves them (10 colours, balanced, for ``--grid``; the gallery world's own
    defaults for ``--world``).
    """
    src = p.add_mutually_exclusive_group()
    src.add_argument("--grid", type=parse_grid, default=(10, 10), metavar="RxC", help="gridworld size (default 10x10)")
    src.add_argument("--world", metavar="NAME",
                     help="a gallery world by name: " + ", ".join(WORLD_NAMES) + " (see hmmmerge.gallery)")
    src.add_argument("--graph", metavar="FILE",
                     help="an environment file: node-link JSON (Environment.save, or json.dump(nx.node_link_data(g))) "
                          "or GraphML (.graphml / .xml, e.g. nx.write_graphml)")
    p.add_argument("--start", metavar="NODE",
                   help="start node, e.g. 7, n3 or '(5, 0)' / 5,0 for a grid cell; default: the file's 'start' "
                        "graph attribute, else its first node (with a warning); the world's own for --grid / --world")
    p.add_argument("--colours", type=int, default=None,
                   help="number of floor colours (default 10 for --grid, the world's own for --world)")
    p.add_argument("--colouring", choices=["balanced", "iid"], default=None,
                   help="random colouring (default balanced; the world's own for --world)")
    p.add_argument("--seed", type=int, default=0, help="seed of the colouring (default 0)")
    p.add_argument("--slip", type=float, default=0.0, metavar="P",
                   help="moves slip: with probability P a uniformly random action is made, the intended one "
                        "recorded (default 0)")
    p.add_argument("--obs-noise", type=float, default=0.0, metavar="Q",
                   help="noisy views: each observation replaced by a uniformly random colour with probability Q "
                        "(default 0)")


def world_from_args(args):
    """Build the Environment the world options describe."""
    import warnings

    from ..environment import Environment

    start = getattr(args, "start", None)
    slip, obs_noise = getattr(args, "slip", 0.0) or 0.0, getattr(args, "obs_noise", 0.0) or 0.0
    for flag, value in (("--slip", slip), ("--obs-noise", obs_noise)):
        if not 0 <= value <= 1:
            raise ValueError(f"{flag} must be a probability in [0, 1], got {value}")
    if getattr(args, "graph", None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = Environment.load(args.graph, start=start)
        command = getattr(args, "command", None)
        for w in caught:  # one line each, e.g. the NoStartWarning of a file without a start
            print(f"hmmmerge{' ' + command if command else ''}: warning: {w.message}", file=sys.stderr)
    else:
        env = _built_world(args)
        if start is not None:
            env = Environment(env.graph, start=start, n_obs=env.n_obs)
    if slip or obs_noise:
        env = env.with_noise(slip=slip, obs_noise=obs_noise)
    return env


def _built_world(args):
    from ..worlds import gridworld

    colours = getattr(args, "colours", None)
    colouring = getattr(args, "colouring", None)
    if colours is not None and colours < 1:
        raise ValueError(f"--colours must be >= 1, got {colours}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if getattr(args, "world", None):
        from ..gallery import world

        options = {}
        if colours is not None:
            options["n_colours"] = colours
        if colouring is not None:
            options["colouring"] = colouring
        return world(args.world, seed=args.seed, **options)
    rows, cols = args.grid
    return gridworld(rows, cols, n_colours=10 if colours is None else colours, seed=args.seed,
                     colouring=colouring or "balanced")


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="describe an environment: clones, Markov radius, aliasing",
                       description="Characterise an environment: states, actions, observations, clones per "
                                   "observation, Markov radius per vertex, aliasing depth (moves of experience "
                                   "that identify a vertex) and the number of distinct observation sequences "
                                   "K moves from each vertex.")
    add_world_arguments(p)
    p.add_argument("--k", type=int, default=3, metavar="K",
                   help="moves for the count of distinct observation sequences per vertex (default 3)")
    p.add_argument("--per-vertex", action="store_true",
                   help="add every vertex's label, observation, Markov radius, aliasing depth and sequence count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE",
                   help="save a PNG: the map, per-vertex Markov radius, aliasing depth and sequence counts, clones")
    p.set_defaults(run=run)


def vertex_statistics(env, k: int = 3) -> dict:
    """Per-vertex arrays: ``markov_radius``, ``aliasing_depth`` (-1: never) and ``observation_sequences`` (k moves).

    A statistic over its size limit is ``None``, with the reason in ``errors`` (the
    report then loses that line only).
    """
    from ..structure import aliasing_depths, markov_radii, observation_sequence_counts

    if not isinstance(k, int) or k < 0:
        raise ValueError(f"--k must be an integer >= 0, got {k!r}")
    stats, errors = {}, {}
    for name, compute in (("markov_radius", lambda: markov_radii(env)),
                          ("aliasing_depth", lambda: aliasing_depths(env)),
                          ("observation_sequences", lambda: observation_sequence_counts(env, k))):
        try:
            stats[name] = compute()
        except (ValueError, MemoryError) as e:
            stats[name], errors[name] = None, str(e) or type(e).__name__
    stats["errors"] = errors
    return stats


def _label(node):
    if isinstance(node, tuple):
        return [_label(x) for x in node]
    return node.item() if hasattr(node, "item") else node


def _distribution(values) -> dict:
    import numpy as np

    v, f = np.unique(values, return_counts=True)
    return {str(int(a)): int(b) for a, b in zip(v, f)}


def describe(env, k: int = 3, per_vertex: bool = False, stats: dict | None = None) -> dict:
    """The report ``hmmmerge env`` prints, as a dictionary.

    Keys: ``n_states``, ``n_actions``, ``n_obs``, ``start``, ``clones``
    (observation -> number of states), ``clone_histogram`` (number of clones ->
    number of observations), ``markov_radius`` (the minimum over vertices),
    ``markov_radius_mean``, ``markov_radius_distribution``, ``aliasing_depth``
    (min / mean / max over identifiable vertices, ``unidentifiable`` count,
    ``distribution`` with ``-1`` for never) and ``observation_sequences``
    (``k`` and min / mean / max of the per-vertex count), ``process``
    (``deterministic``; ``obs_noise``; ``stochastic_moves``: (state, action)
    pairs with more than one successor; ``max_successors``;
    ``min_main_move_probability``: the smallest probability of a most likely
    successor; ``stochastic_views``: states whose own colour is a
    distribution).  In a stochastic world the structure statistics are those
    of the most likely moves and colours (``env.next_state``, ``env.obs``).

    >>> from hmmmerge.gallery import world
    >>> r = describe(world("aliased-loop"))
    >>> r["markov_radius"], r["aliasing_depth"]["unidentifiable"], r["observation_sequences"]["max"]
    (1, 12, 8)
    """
    import numpy as np

    from .._limits import check_memory

    # the report lists every observation of the alphabet: a dict entry and its JSON text each
    check_memory(f"the report of clones per observation of an alphabet of {env.n_obs} observations (largest "
                 f"observation {int(env.obs.max())})",
                 REPORT_BYTES_PER_OBSERVATION * env.n_obs)
    if stats is None:
        stats = vertex_statistics(env, k)
    radii = stats["markov_radius"]
    depth = stats["aliasing_depth"]
    seqs = stats["observation_sequences"]
    counts = env.clone_counts()
    missing = {"not_computed": True}
    known = depth[depth >= 0] if depth is not None else None
    report = {
        "n_states": env.n_states,
        "n_actions": env.n_actions,
        "n_obs": env.n_obs,
        "start": _label(env.start_node),
        "clones": {str(o): int(c) for o, c in enumerate(counts)},
        "clone_histogram": _distribution(counts),
        "markov_radius": int(radii.min()) if radii is not None else None,
        "markov_radius_mean": float(radii.mean()) if radii is not None else None,
        "markov_radius_distribution": _distribution(radii) if radii is not None else missing,
        "aliasing_depth": {
            "min": int(known.min()) if known.size else None,
            "mean": float(known.mean()) if known.size else None,
            "max": int(known.max()) if known.size else None,
            "unidentifiable": int((depth < 0).sum()),
            "distribution": _distribution(depth),
        } if depth is not None else dict(missing, min=None, mean=None, max=None, unidentifiable=None),
        "observation_sequences": {
            "k": int(k),
            "min": int(seqs.min()),
            "mean": float(seqs.mean()),
            "max": int(seqs.max()),
        } if seqs is not None else dict(missing, k=int(k), min=None, mean=None, max=None),
    }
    report["process"] = process_summary(env)
    if stats.get("errors"):
        report["not_computed"] = dict(stats["errors"])
    if per_vertex:
        def value(a, i):
            return int(a[i]) if a is not None else None

        report["vertices"] = [
            {"node": _label(node), "obs": int(env.obs[i]), "markov_radius": value(radii, i),
             "aliasing_depth": value(depth, i), "observation_sequences": value(seqs, i)}
            for i, node in enumerate(env.nodes)
        ]
    return report


def process_summary(env) -> dict:
    """How stochastic the world is: the ``process`` entry of :func:`describe`.

    >>> from hmmmerge import gridworld
    >>> process_summary(gridworld(3, 3, slip=0.2, obs_noise=0.1))  # doctest: +NORMALIZE_WHITESPACE
    {'deterministic': False, 'obs_noise': 0.1, 'stochastic_moves': 36, 'max_successors': 4,
     'min_main_move_probability': 0.85, 'stochastic_views': 0}
    """
    import numpy as np

    indptr, _, probs = env.transitions
    degree = np.diff(indptr)
    top = np.maximum.reduceat(probs, indptr[:-1])
    views = 0 if env._obs_dist is None else int((np.diff(env._obs_dist[0]) > 1).sum())
    return {"deterministic": env.is_deterministic, "obs_noise": env.obs_noise,
            "stochastic_moves": int((degree > 1).sum()), "max_successors": int(degree.max()),
            "min_main_move_probability": round(float(top.min()), 12), "stochastic_views": views}


#: memory of one observation's entry in the report (the dict entry, its copies and JSON text while printing)
REPORT_BYTES_PER_OBSERVATION = 400

MAX_LISTED_OBSERVATIONS = 30
"""Above this many observations the text report summarises the clones instead of listing them."""


def clones_line(clones: dict) -> str:
    """The report's line on clones per observation: every entry for small alphabets, a summary for large ones.

    >>> clones_line({"0": 2, "1": 1})
    'clones per observation: 0:2, 1:1'
    >>> print(clones_line({str(o): 1 + o % 3 for o in range(1000)}))  # doctest: +NORMALIZE_WHITESPACE
    clones per observation (1000 observations; all of them with --json): min 1, median 2, mean 2.00, max 3;
    most cloned: 2:3, 5:3, 8:3, 11:3, 14:3
    """
    if len(clones) <= MAX_LISTED_OBSERVATIONS:
        return "clones per observation: " + ", ".join(f"{o}:{c}" for o, c in clones.items())
    import numpy as np

    counts = np.fromiter(clones.values(), dtype=np.int64, count=len(clones))
    unused = int((counts == 0).sum())
    top = sorted(clones.items(), key=lambda oc: -oc[1])[:5]  # stable: ties keep observation order
    return (f"clones per observation ({len(clones)} observations; all of them with --json): min {counts.min()}, "
            f"median {np.median(counts):g}, mean {counts.mean():.2f}, max {counts.max()}"
            + (f", {unused} unused" if unused else "")
            + (";\nmost cloned: " + ", ".join(f"{o}:{c}" for o, c in top) if counts.max() > 1 else ""))


def run(args) -> int:
    from ..cli import print_json

    env = world_from_args(args)
    stats = vertex_statistics(env, args.k)
    report = describe(env, k=args.k, per_vertex=args.per_vertex, stats=stats)
    if args.plot:
        save_plot(env, args.plot, k=args.k, stats=stats)
        report["plot"] = args.plot
    if args.json:
        print_json(report)
        return 0
    ad, seq = report["aliasing_depth"], report["observation_sequences"]
    print(f"states {report['n_states']}, actions {report['n_actions']}, observations {report['n_obs']}")
    process = report["process"]
    if not process["deterministic"]:
        print(f"stochastic world: {process['stochastic_moves']} (state, action) pairs with several successors "
              f"(at most {process['max_successors']}; most likely successor p >= "
              f"{process['min_main_move_probability']:.4g}), {process['stochastic_views']} states with a colour "
              f"distribution, observation noise {process['obs_noise']:g}; the structure below is that of the "
              "most likely moves and colours")
    print(clones_line(report["clones"]))
    print("observations with n clones: " + ", ".join(f"{n}:{c}" for n, c in report["clone_histogram"].items()))
    errors = report.get("not_computed", {})
    if "markov_radius" in errors:
        print(f"Markov radius: not computed ({errors['markov_radius']})")
    else:
        print(f"Markov radius {report['markov_radius']} (mean over vertices {report['markov_radius_mean']:.2f})")
        print("radius distribution: " + ", ".join(f"{r}:{n}" for r, n in report["markov_radius_distribution"].items()))
    if "aliasing_depth" in errors:
        print(f"aliasing depth: not computed ({errors['aliasing_depth']})")
    elif ad["max"] is None:
        print(f"aliasing depth: no vertex is ever identifiable ({ad['unidentifiable']} vertices)")
    else:
        print(f"aliasing depth (moves that identify a vertex): min {ad['min']}, mean {ad['mean']:.2f}, "
              f"max {ad['max']}; never identifiable: {ad['unidentifiable']} vertices")
    if "observation_sequences" in errors:
        print(f"distinct observation sequences over {seq['k']} moves: not computed ({errors['observation_sequences']})")
    else:
        print(f"distinct observation sequences over {seq['k']} moves per vertex: "
              f"min {seq['min']}, mean {seq['mean']:.2f}, max {seq['max']}")
    if args.per_vertex:
        print("vertex  obs  radius  depth  sequences")
        for v in report["vertices"]:
            print(f"{str(v['node']):>6}  {v['obs']:>3}  {v['markov_radius']:>6}  {v['aliasing_depth']:>5}  "
                  f"{v['observation_sequences']:>9}")
    if args.plot:
        print(f"picture saved to {args.plot}")
    return 0


def _plot_values(env, values, ax, title, cmap):
    """Per-vertex values: a heat map on grids, else the graph drawn with nodes coloured by value."""
    import networkx as nx

    if values is None:  # over its size limit: an empty panel that says so
        ax.text(0.5, 0.5, "not computed\n(over the size limit)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        ax.set_title(title)
        return ax

    from ..plotting import grid_shape, plot_grid_values

    if grid_shape(env) is not None:
        return plot_grid_values(env, values, ax=ax, cmap=cmap, title=title)
    simple = nx.DiGraph(env.graph)
    simple.remove_edges_from(nx.selfloop_edges(simple))
    pos = nx.spring_layout(simple, seed=0)  # the layout plot_environment uses
    order = list(simple.nodes)
    colours = [float(values[env.index[n]]) for n in order]
    drawn = nx.draw_networkx_nodes(simple, pos, nodelist=order, ax=ax, node_color=colours, cmap=cmap,
                                   node_size=220)
    nx.draw_networkx_edges(simple, pos, ax=ax, arrows=False, alpha=0.4)
    nx.draw_networkx_labels(simple, pos, ax=ax, labels={n: str(env.obs[env.index[n]]) for n in order},
                            font_size=7)
    ax.figure.colorbar(drawn, ax=ax, fraction=0.046, pad=0.04)
    ax.set_axis_off()
    ax.set_title(title)
    return ax


def _bars(ax, x, heights, width=0.8, **style):
    """A bar chart; above 200 bars, one line per bar in a single artist (thousands of bar patches
    take minutes to draw)."""
    if len(x) <= 200:
        return ax.bar(x, heights, width=width, **style)
    return ax.vlines(x, 0, heights, **style)


def save_plot(env, path, k: int = 3, stats: dict | None = None) -> None:
    """Save the report's picture: the observation map, per-vertex Markov radius, aliasing depth
    and observation-sequence count, and the clones per observation."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .._io import atomic_write_bytes
    from ..plotting import plot_environment

    if stats is None:
        stats = vertex_statistics(env, k)
    fig, axes = plt.subplots(2, 3, figsize=(15, 9))
    plot_environment(env, ax=axes[0, 0], title="observation map")
    _plot_values(env, stats["markov_radius"], axes[0, 1], "Markov radius per vertex", "magma")
    _plot_values(env, stats["aliasing_depth"], axes[0, 2], "aliasing depth per vertex (-1: never)", "viridis")
    _plot_values(env, stats["observation_sequences"], axes[1, 0],
                 f"distinct observation sequences, {k} moves", "cividis")
    counts = env.clone_counts()
    _bars(axes[1, 1], np.arange(env.n_obs), counts, color="tab:blue")
    axes[1, 1].set_xlabel("observation")
    axes[1, 1].set_ylabel("states (clones)")
    axes[1, 1].set_title("clones per observation")
    for name, values, offset in (("Markov radius", stats["markov_radius"], -0.2),
                                 ("aliasing depth", stats["aliasing_depth"], 0.2)):
        if values is None:
            continue
        v, f = np.unique(values, return_counts=True)
        _bars(axes[1, 2], v + offset, f, width=0.4, label=name)
    axes[1, 2].set_xlabel("value (-1: never identifiable)")
    axes[1, 2].set_ylabel("vertices")
    axes[1, 2].set_title("distributions over vertices")
    axes[1, 2].legend()
    ticks = np.union1d(*(np.zeros(0) if stats[x] is None else stats[x] for x in ("markov_radius", "aliasing_depth")))
    axes[1, 2].set_xticks(ticks if len(ticks) <= 20 else ticks[:: int(np.ceil(len(ticks) / 20))])
    if not env.is_deterministic:
        p = process_summary(env)
        fig.suptitle(f"stochastic world: {p['stochastic_moves']} (state, action) pairs with several successors "
                     f"(most likely p >= {p['min_main_move_probability']:.3g}), {p['stochastic_views']} states "
                     f"with a colour distribution, observation noise {p['obs_noise']:g}\n"
                     "the panels show the most likely moves and colours")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
