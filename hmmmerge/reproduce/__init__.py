"""Reproduce every figure of the paper from scratch: sweeps, numbers, pictures.

Two sweeps feed all figures (each run one result file under ``OUT/runs/``,
resumable, see :mod:`hmmmerge.sweep`):

* ``learning`` -- Section 4: {random, sf, none} x initial size {1, 10, 100} x
  seeds x colourings, per-episode metrics; feeds ``fig:sf_gw_acc``,
  ``fig:sf_gw_purity``, ``fig:sf_gw_n_clusters``, ``fig:sf_gw_structure``
  (size-10 runs carry the level-2 position matrix) and the final-values table;
* ``clusters`` -- Section 3.1: colourings x partitions; feeds ``fig:true_sim``,
  ``fig:size_purity_merge_acc`` and ``fig:size_pos_acc``.

``fig:purity_random`` needs no agent (random partitions, exact law).
``fig:beyond_paper`` (not in the paper) runs the ``beyond`` sweeps of
:mod:`hmmmerge.reproduce.beyond` on the paper's world: the agent with fold
(when this version has it), SF and random merges, EM, and the context
baseline as an online learner.

>>> sorted(FIGURES)[:3]
['beyond_paper', 'final_values', 'purity_random']
>>> PROTOCOLS["full"].n_learning_runs
135
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

__all__ = ["Protocol", "PROTOCOLS", "FIGURES", "reproduce", "learning_sweep", "cluster_sweep", "figure_main"]


@dataclass(frozen=True)
class Protocol:
    """Everything that sets the size of a reproduction."""

    name: str
    seeds: tuple = (0, 1, 2, 3, 4)
    colourings: tuple = (0, 1, 2)
    episodes: int = 1000
    episode_length: int = 50
    sizes: tuple = (1, 10, 100)
    merges: tuple = ("random", "sf", "none")
    sigma: float = 20.0
    structure_size: int = 10
    partitions: tuple = (0, 1, 2, 3, 4)
    cluster_colourings: tuple = (0, 1, 2)
    memory_episodes: int = 5000
    cluster_sizes: tuple = (1, 2, 5, 10, 20, 40, 70)
    cluster_purities: tuple = (0.25, 0.5, 0.75, 1.0)
    pos_sizes: tuple = (1, 10, 40)
    purity_sizes: tuple = (1, 2, 3, 5, 10, 20, 50, 100)
    purity_clones: tuple = (1, 2, 3, 5, 10)
    purity_states_per_clone: int = 200
    purity_partitions: int = 1000
    notes: dict = field(default_factory=dict)

    @property
    def n_learning_runs(self) -> int:
        return len(self.seeds) * len(self.colourings) * len(self.sizes) * len(self.merges)


PROTOCOLS = {
    "full": Protocol("full"),
    "quick": Protocol("quick", seeds=(0, 1), colourings=(0,), episodes=300, partitions=(0,), memory_episodes=1500,
                      cluster_sizes=(1, 5, 10, 20, 40), cluster_purities=(0.5, 0.75, 1.0), purity_partitions=300,
                      purity_sizes=(1, 2, 5, 10, 20, 50)),
}


def learning_sweep(out_dir, protocol: Protocol, authors_sf: bool = False):
    """The Section 4 sweep (seeds x colourings x sizes x merges) under ``OUT/runs/learning``.

    ``authors_sf`` runs the agent with the authors' successor-feature weighting
    (:data:`hmmmerge.reproduce.runs.AUTHORS_SF`) instead of Algorithm 2's.
    """
    from ..sweep import Sweep, grid
    from .runs import learning_run, validate_learning

    configs = grid(colouring=protocol.colourings, seed=protocol.seeds, size=protocol.sizes, merge=protocol.merges)
    for c in configs:
        c.update(episodes=protocol.episodes, episode_length=protocol.episode_length,
                 structure=c["size"] == protocol.structure_size)
        if authors_sf:
            c["authors_sf"] = True
    return Sweep(os.path.join(out_dir, "runs", "learning"), learning_run, configs, validate=validate_learning,
                 version="auto")


def cluster_sweep(out_dir, protocol: Protocol):
    """The Section 3.1 sweep (colourings x partitions) under ``OUT/runs/clusters``."""
    from ..sweep import Sweep, grid
    from .runs import cluster_run, validate_cluster

    configs = grid(colouring=protocol.cluster_colourings, partition=protocol.partitions)
    for c in configs:
        c.update(memory_episodes=protocol.memory_episodes, sizes=list(protocol.cluster_sizes),
                 purities=list(protocol.cluster_purities))
    return Sweep(os.path.join(out_dir, "runs", "clusters"), cluster_run, configs, validate=validate_cluster,
                 version="auto")


def beyond_sweeps(out_dir, protocol: Protocol) -> dict:
    """``fig:beyond_paper``'s sweeps under ``OUT/runs/beyond-*``: online agents, EM, context curves."""
    from ..models import select
    from ..sweep import Sweep, grid
    from .beyond import context_curve_run, offline_run, online_run

    base = grid(colouring=protocol.colourings, seed=protocol.seeds)
    for c in base:
        c.update(world="grid", episodes=protocol.episodes, episode_length=protocol.episode_length)
    merges = list(select("beyond"))
    online = [dict(c, merge=m, eval_episodes=100) for c in base for m in merges]
    em = [dict(c, model="em", n_clones=20, n_iter=100, eval_episodes=100) for c in base]
    ctx = [dict(c, refit_every=50) for c in base]
    root = os.path.join(out_dir, "runs")
    return {"beyond_online": Sweep(os.path.join(root, "beyond-online"), online_run, online, version="auto"),
            "beyond_em": Sweep(os.path.join(root, "beyond-em"), offline_run, em, version="auto"),
            "beyond_context": Sweep(os.path.join(root, "beyond-context"), context_curve_run, ctx, version="auto")}


def _cost(sweep_index, config) -> float:
    """Submission order: slow runs first (size-1 SF runs dominate)."""
    if "merge" not in config:
        return -1.0
    size, merge = config.get("size", 10), config["merge"]
    return -{(1, "sf"): 40.0, (1, "random"): 12.0}.get((size, merge), 6.0)


def _learning_figures(out, protocol, configs, results):
    from . import figures as F

    return {
        "sf_gw_acc": F.learning_curve_figure(configs, results, "l2_accuracy", out, "sf_gw_acc", protocol.sigma,
                                             "level-2 next-observation accuracy"),
        "sf_gw_purity": F.learning_curve_figure(configs, results, "purity_no_singletons", out, "sf_gw_purity",
                                                protocol.sigma, "weighted purity (clusters of size > 1)"),
        "sf_gw_n_clusters": F.learning_curve_figure(configs, results, "n_clusters", out, "sf_gw_n_clusters",
                                                    protocol.sigma, "number of clusters", logy=True),
    }


FIGURES = {
    "true_sim": "clusters",
    "size_purity_merge_acc": "clusters",
    "size_pos_acc": "clusters",
    "purity_random": None,
    "sf_gw_acc": "learning",
    "sf_gw_purity": "learning",
    "sf_gw_n_clusters": "learning",
    "sf_gw_structure": "learning",
    "final_values": "learning",
    "beyond_paper": "beyond",
}
"""Figure name (the paper's ``\\label`` without ``fig:``) -> the sweep it needs."""


def reproduce(out_dir, quick: bool = False, executor="local", progress=None, only=None,
              max_workers: int | None = None, authors_sf: bool = False) -> dict:
    """Run the sweeps the chosen figures need (resuming), then write every figure and table.

    Returns ``{"protocol", "figures": {name: {"files", "summary"}}, "table": rows,
    "files": [...], "runs": {...}, "timing": {...}}``.
    """
    from .._io import make_folder
    from ..sweep import run_sweeps
    from . import figures as F
    from .runs import world

    protocol = PROTOCOLS["quick" if quick else "full"]
    names = list(FIGURES) if only is None else list(only)
    for n in names:
        if n not in FIGURES:
            raise ValueError(f"unknown figure {n!r}; choose from {sorted(FIGURES)}")
    make_folder(out_dir, "output folder")
    needs = {FIGURES[n] for n in names} - {None}
    sweeps = {}
    if "learning" in needs:
        sweeps["learning"] = learning_sweep(out_dir, protocol, authors_sf)
    if "clusters" in needs:
        sweeps["clusters"] = cluster_sweep(out_dir, protocol)
    if "beyond" in needs:
        sweeps.update(beyond_sweeps(out_dir, protocol))
    t0 = time.perf_counter()
    results = dict(zip(sweeps, run_sweeps(list(sweeps.values()), executor=executor, progress=progress,
                                          max_workers=max_workers, order=_cost))) if sweeps else {}
    t_runs = time.perf_counter() - t0
    figs = {}
    if "learning" in results:
        cfg, res = sweeps["learning"].configs, results["learning"]
        wanted = [n for n in ("sf_gw_acc", "sf_gw_purity", "sf_gw_n_clusters") if n in names]
        if wanted:
            figs.update({k: v for k, v in _learning_figures(out_dir, protocol, cfg, res).items() if k in wanted})
        if "sf_gw_structure" in names:
            figs["sf_gw_structure"] = F.structure_figure(cfg, res, F.true_position_matrix(world(0)), out_dir)
        if "final_values" in names:
            rows = F.final_table(cfg, res, protocol.sigma)
            figs["final_values"] = {"files": F.write_final_table(rows, out_dir), "summary": {}, "table": rows}
    if "clusters" in results:
        cfg, res = sweeps["clusters"].configs, results["clusters"]
        if "true_sim" in names:
            figs["true_sim"] = F.cluster_figure(cfg, res, "similarity", out_dir, "true_sim",
                                                "similarity to the true SF")
        if "size_purity_merge_acc" in names:
            figs["size_purity_merge_acc"] = F.cluster_figure(cfg, res, "correct", out_dir, "size_purity_merge_acc",
                                                             "merge accuracy", chance_line=True)
        if "size_pos_acc" in names:
            figs["size_pos_acc"] = F.size_pos_figure(cfg, res, out_dir, protocol.pos_sizes)
    if "beyond_online" in results and "beyond_paper" in names:
        figs["beyond_paper"] = F.beyond_paper_figure(sweeps["beyond_online"].configs, results["beyond_online"],
                                                     results["beyond_em"], results["beyond_context"], out_dir,
                                                     protocol.sigma)
    if "purity_random" in names:
        figs["purity_random"] = F.purity_random_figure(out_dir, protocol.purity_sizes, protocol.purity_clones,
                                                       protocol.purity_states_per_clone, protocol.purity_partitions)
    t_all = time.perf_counter() - t0
    runs = {}
    for k, s in sweeps.items():
        walls = [r["_meta"]["wall_s"] for r in results[k]]
        runs[k] = dict(s.last_report, run_cpu_s=float(sum(walls)), longest_run_s=float(max(walls)))
    files = [f for n in names if n in figs for f in figs[n]["files"]]
    return {"protocol": protocol.name, "out": os.path.abspath(out_dir), "figures": figs,
            "table": figs.get("final_values", {}).get("table", []), "files": files, "runs": runs,
            "timing": {"runs_s": t_runs, "total_s": t_all}}


def figure_main(name: str, argv=None) -> int:
    """Command line of one ``analysis/<name>.py`` script: ``--out DIR [--quick] [--executor SPEC]``."""
    import argparse

    p = argparse.ArgumentParser(description=f"Regenerate the paper's fig:{name} (runs are cached under OUT/runs).")
    p.add_argument("--out", default="reproduce-out", help="output folder (default ./reproduce-out)")
    p.add_argument("--quick", action="store_true", help="reduced seeds and episodes, same figure")
    p.add_argument("--executor", default="local", help="local[:N], threads[:N], serial or dask://HOST:PORT")
    args = p.parse_args(argv)
    res = reproduce(args.out, quick=args.quick, executor=args.executor, only=[name])
    for f in res["files"]:
        print(f)
    if name == "final_values":
        from .figures import format_table

        print(format_table(res["table"]))
    else:
        for k, v in res["figures"][name]["summary"].items():
            print(f"  {k}: {v}")
    return 0
