"""``hmmmerge demo``: the main job on defaults -- a small version of the paper's headline comparison.

On the paper's world (10x10 grid, 10 balanced colours, colouring 0), for one
seed (``--seeds`` for more) and 1,000 episodes of 50 random moves:

* the two-level agent with SF merges, random merges and no merges, initial
  cluster size 10 and 1 (online next-observation accuracy of level 2, as the
  paper measures it; then the final level-2 model scored on 100 fresh episodes);
* the same agent with the fold consolidation (``merge="fold"``, beyond the paper),
  when this version has it;
* the first-order model (online, and fitted offline then scored on the same fresh episodes);
* the context baseline (longest matching context of up to 4 (action, colour) pairs), fitted on
  the same episodes and scored on the fresh ones;
* EM (the action-conditioned clone HMM, 20 clones per colour, 100 iterations), fitted on the
  same episodes and scored on the fresh ones -- if :mod:`hmmmerge.baselines.em` is available;
* the oracle (the true world) for the physical limit.

Writes ``world.png``, ``demo_accuracy.png`` (accuracy curves), ``demo_table.csv``
and ``demo_table.md`` under ``--out``; runs are cached under ``OUT/runs`` (a
re-run only redraws).
"""

from __future__ import annotations

import os

SIZES = (10, 1)
_MERGE_TEXT = {"sf": "SF merges", "random": "random merges", "none": "no merges",
               "fold": "fold consolidation (beyond the paper)"}


def paper_merges() -> tuple:
    """The paper's merge modes of the demo (every size), from the catalogue: sf, random, none."""
    from ..models import MERGERS, select

    return tuple(m for m in select("demo") if MERGERS[m].paper)


def extra_merges() -> tuple:
    """Merge modes beyond the paper in the demo (one row each, size 10), from the catalogue."""
    from ..models import MERGERS, select

    return tuple(m for m in select("demo") if not MERGERS[m].paper)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the main job: a small paper comparison (sf / random / no merge / first order / EM)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--out", default="hmmmerge-demo", help="output folder (default ./hmmmerge-demo)")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds (default 1)")
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--colouring", type=int, default=0, help="seed of the world's colouring (default 0)")
    p.add_argument("--executor", default="local", help="local (default), local:N, serial, dask://HOST:PORT")
    p.add_argument("--no-em", action="store_true", help="skip the EM baseline")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _em_available() -> bool:
    try:
        from ..baselines.em import CloneHMM  # noqa: F401
    except ImportError:
        return False
    return True


def sweeps(out, seeds, episodes, colouring, with_em=True):
    """The demo's two sweeps: agent runs and offline baselines."""
    from ..reproduce.runs import baseline_run, learning_run, validate_learning
    from ..sweep import Sweep, grid

    agent = grid(seed=list(range(seeds)), size=SIZES, merge=list(paper_merges()))
    agent += grid(seed=list(range(seeds)), size=[SIZES[0]], merge=list(extra_merges()))
    for c in agent:
        c.update(colouring=colouring, episodes=episodes, eval_episodes=100)
    models = ["first-order", "context", "oracle"] + (["em"] if with_em else [])
    base = grid(seed=list(range(seeds)), model=models)
    for c in base:
        c.update(colouring=colouring, episodes=episodes, eval_episodes=100)
        if c["model"] == "em":
            c.update(n_clones=20, n_iter=100)  # below the registry's 30 / 150: the demo stays within two minutes
    return (Sweep(os.path.join(out, "runs", "demo-agent"), learning_run, agent, validate=validate_learning,
                  version="auto"),
            Sweep(os.path.join(out, "runs", "demo-baselines"), baseline_run, base, version="auto"))


def _order(sweep_index, config):
    if sweep_index == 1:
        return -20.0 if config["model"] == "em" else 0.0
    return -{(1, "sf"): 40.0, (1, "random"): 12.0}.get((config["size"], config["merge"]), 6.0)


def _mean_of(results, key) -> float:
    """Mean of ``key`` over the results that have it (NaN if none has).

    >>> _mean_of([{"a": 1.0}, {"a": 3.0}, {}], "a"), _mean_of([{}], "a")
    (2.0, nan)
    """
    import numpy as np

    values = [r[key] for r in results if key in r]
    return float(np.mean(values)) if values else float("nan")


def table(agent_cfg, agent_res, base_cfg, base_res, last=50) -> list[dict]:
    """One row per model: online accuracy (last ``last`` episodes), held-out accuracy and surprise, states."""
    import numpy as np

    rows = []
    for size, merge in _agent_rows(agent_cfg):
        rs = [r for c, r in zip(agent_cfg, agent_res) if c["size"] == size and c["merge"] == merge]
        rows.append({
            "model": f"two-level, {_MERGE_TEXT.get(merge, merge)}" + ("" if merge in extra_merges() else f", size {size}"),
            "online_accuracy": float(np.mean([r["l2_accuracy"][-last:].mean() for r in rs])),
            "online_no_prediction": float(np.mean([r["l2_no_prediction"][-last:].mean() for r in rs])),
            # a run whose agent has no level 2 yet (no sleep in very short lives) has no held-out score
            "heldout_accuracy": _mean_of(rs, "l2_heldout_accuracy"),
            "heldout_surprise": _mean_of(rs, "l2_heldout_surprise"),
            "states": float(np.mean([r["n_clusters"][-1] for r in rs])),
            "purity": float(np.mean([r["purity_no_singletons"][-1] for r in rs])),
            "seeds": len(rs)})
    online_fo = float(np.mean([r["first_order_accuracy"][-last:].mean() for c, r in zip(agent_cfg, agent_res)
                               if c["size"] == SIZES[0] and c["merge"] == paper_merges()[0]]))
    level1 = float(np.mean([r["l1_accuracy"][-last:].mean() for c, r in zip(agent_cfg, agent_res)
                            if c["size"] == SIZES[0] and c["merge"] == paper_merges()[0]]))
    names = {"first-order": "first order", "context": "context (order 4)", "em": "EM (clone HMM, 20 clones/colour)",
             "oracle": "oracle (true world)"}
    for model in names:
        rs = [r for c, r in zip(base_cfg, base_res) if c["model"] == model]
        if not rs:
            continue
        rows.append({"model": names[model], "online_accuracy": online_fo if model == "first-order" else float("nan"),
                     "online_no_prediction": float("nan"),
                     "heldout_accuracy": float(np.mean([r["heldout_accuracy"] for r in rs])),
                     "heldout_surprise": float(np.mean([r["heldout_surprise"] for r in rs])),
                     "states": float(np.mean([r["heldout_states"] for r in rs])), "purity": float("nan"),
                     "seeds": len(rs)})
    rows.append({"model": "level 1 (episodic memory)", "online_accuracy": level1, "online_no_prediction": float("nan"),
                 "heldout_accuracy": float("nan"), "heldout_surprise": float("nan"),
                 "states": float(np.mean([r["n_states"][-1] for c, r in zip(agent_cfg, agent_res)
                                          if c["size"] == SIZES[0] and c["merge"] == paper_merges()[0]])),
                 "purity": float("nan"), "seeds": 0})
    return rows


def _agent_rows(agent_cfg) -> list[tuple[int, str]]:
    """(size, merge) of the agent rows, in table order: the paper's modes, then the modes beyond it."""
    present = {(c["size"], c["merge"]) for c in agent_cfg}
    order = [(s, m) for s in SIZES for m in paper_merges()] + [(SIZES[0], m) for m in extra_merges()]
    return [k for k in order if k in present]


def format_rows(rows) -> str:
    """The demo table as markdown."""
    import math

    def f(v, spec):
        return "-" if isinstance(v, float) and math.isnan(v) else format(v, spec)

    out = ["| model | online accuracy (last 50 episodes) | held-out accuracy | held-out surprise (nats/step) | "
           "states | purity |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['model']} | {f(r['online_accuracy'], '.3f')} | {f(r['heldout_accuracy'], '.3f')} | "
                   f"{f(r['heldout_surprise'], '.3f')} | {f(r['states'], ',.0f')} | {f(r['purity'], '.3f')} |")
    return "\n".join(out)


def accuracy_figure(agent_cfg, agent_res, rows, path, sigma=20.0) -> None:
    """Smoothed online level-2 accuracy per configuration, first order, and held-out EM / oracle lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..reproduce.figures import MERGE_NAME, MERGE_STYLE, SIZE_STYLE, _save, smooth

    fig, ax = plt.subplots(figsize=(8, 4.8))
    episodes = np.asarray(agent_res[0]["episode"]) + 1
    for size, merge in _agent_rows(agent_cfg):
        runs = np.array([smooth(r["l2_accuracy"], sigma) for c, r in zip(agent_cfg, agent_res)
                         if c["size"] == size and c["merge"] == merge])
        label = MERGE_NAME[merge] if merge in extra_merges() else f"{MERGE_NAME[merge]}, size {size}"
        ax.plot(episodes, runs.mean(0), color=MERGE_STYLE[merge], ls=SIZE_STYLE[size], label=label)
    fo = np.array([smooth(r["first_order_accuracy"], sigma) for c, r in zip(agent_cfg, agent_res)
                   if c["size"] == SIZES[0] and c["merge"] == paper_merges()[0]])
    ax.plot(episodes, fo.mean(0), color="black", ls="-.", label="first order")
    for r in rows:
        if r["model"].startswith("context"):
            ax.axhline(r["heldout_accuracy"], color="tab:brown", ls="--", lw=1, label="context (held-out, after training)")
        if r["model"].startswith("EM"):
            ax.axhline(r["heldout_accuracy"], color="tab:purple", ls="--", lw=1, label="EM (held-out, after training)")
        if r["model"].startswith("oracle"):
            ax.axhline(r["heldout_accuracy"], color="grey", ls=":", lw=1, label="oracle")
    ax.set_xlabel("episode")
    ax.set_ylabel("level-2 next-observation accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"10x10 world, 10 colours: online accuracy (smoothed, sigma {sigma:g}; {len(fo)} seed(s))", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    _save(fig, path)


def run(args) -> int:
    import time

    from .._io import atomic_write_text, make_folder
    from .._limits import check_count
    from ..cli import print_json
    from ..reproduce.figures import write_csv
    from ..reproduce.runs import world
    from ..sweep import check_executor, run_sweeps
    from .env import describe, save_plot
    from .run import check_run_memory

    check_executor(args.executor)  # refused even when every run is done already
    for name, low in (("seeds", 1), ("episodes", 1), ("colouring", 0)):
        if getattr(args, name) < low:
            raise ValueError(f"--{name} must be >= {low}, got {getattr(args, name)}")
    check_count("--seeds", args.seeds, "seeds")
    check_run_memory(world(args.colouring), args.episodes, 50, 100, min(SIZES))  # one run, in one worker
    start = time.perf_counter()
    make_folder(args.out, "--out folder")
    env = world(args.colouring)
    report = describe(env)
    picture = os.path.join(args.out, "world.png")
    save_plot(env, picture)
    with_em = not args.no_em and _em_available()
    agent_sweep, base_sweep = sweeps(args.out, args.seeds, args.episodes, args.colouring, with_em)
    agent_res, base_res = run_sweeps([agent_sweep, base_sweep], executor=args.executor,
                                     progress=False if args.json else None, order=_order)
    rows = table(agent_sweep.configs, agent_res, base_sweep.configs, base_res)
    keys = list(rows[0])
    csv = os.path.join(args.out, "demo_table.csv")
    write_csv(csv, keys, [[r[k] for k in keys] for r in rows])
    md = os.path.join(args.out, "demo_table.md")
    atomic_write_text(md, format_rows(rows) + "\n")
    fig = os.path.join(args.out, "demo_accuracy.png")
    accuracy_figure(agent_sweep.configs, agent_res, rows, fig)
    wall = time.perf_counter() - start
    files = [picture, fig, csv, md]
    if args.json:
        print_json({"world": {k: report[k] for k in ("n_states", "n_actions", "n_obs", "markov_radius")},
                    "table": rows, "files": files, "em": with_em, "wall_s": round(wall, 2),
                    "runs": {"agent": agent_sweep.last_report, "baselines": base_sweep.last_report}})
        return 0
    print(f"10x10 gridworld, 10 colours (colouring {args.colouring}), Markov radius {report['markov_radius']}; "
          f"{args.episodes} episodes x 50 moves, {args.seeds} seed(s); {wall:.1f} s")
    print(format_rows(rows))
    if not with_em:
        print("(EM baseline skipped)")
    print("online accuracy: the paper's measure (predictions made while learning; no prediction counts as wrong);")
    print("held-out: the final model scored on 100 fresh episodes (surprise smoothed with epsilon 1e-3).")
    print("files: " + ", ".join(files))
    return 0
