"""The paper's figures from sweep results: numbers (CSV) and pictures (PNG).

Each ``*_numbers`` function is plain numpy (tested directly); each figure
function writes ``<name>.png`` and ``<name>.csv`` under the output folder and
returns ``{"files": [...], "summary": {...}}``.  matplotlib is imported inside
the plotting helpers only.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np

from .._io import atomic_write_bytes, atomic_write_text
from ..models import MERGERS
from .paper import PAPER, PAPER_FIRST_ORDER, PAPER_MERGE_ACCURACY

__all__ = ["smooth", "learning_curves", "final_table", "structure_matrices", "cluster_stats",
           "purity_random_numbers", "write_csv"]

MERGE_STYLE = {name: e.colour for name, e in MERGERS.items()}
SIZE_STYLE = {1: ":", 10: "-", 100: "--"}
MERGE_NAME = {name: e.label for name, e in MERGERS.items()}


# --------------------------------------------------------------------------- helpers
def smooth(x, sigma: float) -> np.ndarray:
    """Gaussian smoothing along the last axis (``scipy.ndimage.gaussian_filter1d``), NaN-aware, truncated at the ends.

    The kernel is renormalised over the finite values it covers:
    ``g * x / g * mask`` with zero padding.  So NaN entries (e.g. purity before
    the first sleep) get weight 0, and the last episode's value is a one-sided
    Gaussian average of the last ~2 sigma episodes (padding by repeating the
    last value would give that single noisy episode half the weight).  The
    result stays NaN only where no finite value lies within the kernel.
    ``sigma = 0`` returns ``x``.

    >>> smooth(np.array([1.0, np.nan, 3.0]), 1.0).round(3).tolist()
    [1.238, 2.0, 2.762]
    >>> float(smooth(np.ones(50), 20)[-1])
    1.0
    """
    from scipy.ndimage import gaussian_filter1d

    x = np.asarray(x, dtype=float)
    if sigma <= 0:
        return x.copy()
    mask = np.isfinite(x)
    num = gaussian_filter1d(np.where(mask, x, 0.0), sigma, axis=-1, mode="constant", cval=0.0)
    den = gaussian_filter1d(mask.astype(float), sigma, axis=-1, mode="constant", cval=0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-9, num / np.maximum(den, 1e-300), np.nan)


def write_csv(path, header, rows) -> None:
    """Write a CSV atomically (``csv`` module quoting; numbers with repr precision, NaN as empty)."""
    import csv

    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return "" if not np.isfinite(v) else repr(float(v))
        if isinstance(v, (np.integer,)):
            return str(int(v))
        return str(v)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([fmt(v) for v in r])
    atomic_write_text(path, buf.getvalue())


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _groups(configs) -> list[tuple[str, int]]:
    seen = []
    for c in configs:
        g = (c["merge"], int(c["size"]))
        if g not in seen:
            seen.append(g)
    order = {"random": 0, "sf": 1, "none": 2}
    return sorted(seen, key=lambda g: (order.get(g[0], 9), g[1]))


# --------------------------------------------------------------------------- learning curves
def learning_curves(configs, results, key: str, sigma: float) -> dict:
    """Per (merge, size): smoothed per-run curves of ``key`` -> mean, std over runs, n runs.

    Also ``("first_order", 0)``: the first-order accuracy, one curve per
    distinct (colouring, seed) (it does not depend on merge mode or size).
    """
    out = {}
    for g in _groups(configs):
        runs = np.array([smooth(r[key], sigma) for c, r in zip(configs, results) if (c["merge"], int(c["size"])) == g])
        out[g] = _mean_std(runs)
    if key.endswith("accuracy"):
        seen, runs = set(), []
        for c, r in zip(configs, results):
            k = (c["colouring"], c["seed"])
            if k not in seen:
                seen.add(k)
                runs.append(smooth(r["first_order_accuracy"], sigma))
        out[("first_order", 0)] = _mean_std(np.array(runs))
    return out


def _mean_std(runs: np.ndarray) -> dict:
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, as meant
        mean = np.nanmean(runs, axis=0)
        std = np.nanstd(runs, axis=0)
    return {"mean": mean, "std": std, "n": len(runs), "runs": runs}


def learning_curve_figure(configs, results, key, out_dir, name, sigma, ylabel, logy=False) -> dict:
    """One of ``fig:sf_gw_acc`` / ``sf_gw_purity`` / ``sf_gw_n_clusters``: PNG + CSV of mean and std per episode."""
    curves = learning_curves(configs, results, key, sigma)
    episodes = np.asarray(results[0]["episode"]) + 1
    header, cols = ["episode"], [episodes]
    for (merge, size), c in curves.items():
        tag = "first_order" if merge == "first_order" else f"{merge}_size{size}"
        header += [f"{tag}_mean", f"{tag}_std"]
        cols += [c["mean"], c["std"]]
    csv = os.path.join(out_dir, f"{name}.csv")
    write_csv(csv, header, zip(*cols))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for (merge, size), c in curves.items():
        if merge == "first_order":
            ax.plot(episodes, c["mean"], color="black", ls="-.", lw=1.2, label="first order")
            continue
        ax.plot(episodes, c["mean"], color=MERGE_STYLE.get(merge), ls=SIZE_STYLE.get(size, "-"), lw=1.4,
                label=f"{MERGE_NAME.get(merge, merge)}, size {size}")
        ax.fill_between(episodes, c["mean"] - c["std"], c["mean"] + c["std"], color=MERGE_STYLE.get(merge),
                        alpha=0.12, lw=0)
    n = max(c["n"] for g, c in curves.items() if g[0] != "first_order")
    ax.set_xlabel("episode")
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(f"{ylabel} ({n} runs per curve, Gaussian smoothing sigma={sigma:g}, band: 1 std)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    final = {f"{m}_size{s}" if m != "first_order" else "first_order": float(c["mean"][-1])
             for (m, s), c in curves.items()}
    return {"files": [png, csv], "summary": final}


def final_table(configs, results, sigma: float) -> list[dict]:
    """Final values (last episode of the smoothed mean over runs) against the paper's.

    Rows: per (size, merge) and metric (``accuracy`` = level-2 accuracy, a
    missing prediction counted wrong; ``purity`` = weighted purity without
    singletons, the authors' convention; ``n_clusters``), then the first-order
    accuracy.  ``diff = ours - paper``; ``diff_in_std = diff / std over runs``.
    """
    metrics = {"accuracy": "l2_accuracy", "purity": "purity_no_singletons", "n_clusters": "n_clusters"}
    curves = {m: learning_curves(configs, results, key, sigma) for m, key in metrics.items()}
    rows = []
    for merge, size in _groups(configs):
        for m in metrics:
            c = curves[m][(merge, size)]
            paper = PAPER.get((size, merge), {}).get(m)
            rows.append(_row(size, merge, m, c, paper))
    rows.append(_row("-", "first_order", "accuracy", curves["accuracy"][("first_order", 0)], PAPER_FIRST_ORDER))
    return rows


def _row(size, merge, metric, c, paper) -> dict:
    ours, std = float(c["mean"][-1]), float(c["std"][-1])
    r = {"size": size, "merge": merge, "metric": metric, "ours": ours, "ours_std": std, "runs": c["n"],
         "paper": paper[0] if paper else float("nan"), "paper_text": paper[1] if paper else "-"}
    r["diff"] = ours - r["paper"]
    r["diff_in_std"] = r["diff"] / std if std > 0 else float("nan")
    return r


def write_final_table(rows, out_dir) -> list[str]:
    """``final_values.csv`` and ``final_values.md``."""
    keys = ["size", "merge", "metric", "ours", "ours_std", "runs", "paper", "paper_text", "diff", "diff_in_std"]
    csv = os.path.join(out_dir, "final_values.csv")
    write_csv(csv, keys, [[r[k] for k in keys] for r in rows])
    md = os.path.join(out_dir, "final_values.md")
    atomic_write_text(md, format_table(rows) + "\n")
    return [csv, md]


def format_table(rows) -> str:
    """The final-values table as markdown."""
    def num(v, metric):
        if not np.isfinite(v):
            return "-"
        return f"{v:,.0f}" if metric == "n_clusters" else f"{v:.3f}"

    lines = ["| size | merges | metric | ours (mean ± std) | runs | paper | ours - paper | in std |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        m = r["metric"]
        lines.append(f"| {r['size']} | {r['merge']} | {m} | {num(r['ours'], m)} ± {num(r['ours_std'], m)} | "
                     f"{r['runs']} | {r['paper_text']} | {num(r['diff'], m)} | "
                     f"{'-' if not np.isfinite(r['diff_in_std']) else format(r['diff_in_std'], '+.1f')} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- structure
def true_position_matrix(env) -> np.ndarray:
    """The world's position-to-position transition matrix under the uniform policy (actions averaged).

    >>> from hmmmerge import gridworld
    >>> T = true_position_matrix(gridworld(2, 2))
    >>> T.sum(1).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    S, A = env.n_states, env.n_actions
    T = np.zeros((S, S))
    np.add.at(T, (np.tile(np.arange(S), A), env.next_state.ravel()), 1.0 / A)
    return T


def structure_matrices(configs, results, true_T) -> dict:
    """Position-to-position matrix per merge mode, each row averaged over the runs that have it, with two errors.

    ``off_structure``: mean over positions (rows with mass) of the probability
    put on moves the true world never makes; ``tv``: mean total-variation
    distance of the rows to the true rows.
    """
    out = {}
    for merge in ("none", "random", "sf"):
        mats = [r["structure"] for c, r in zip(configs, results) if c["merge"] == merge and "structure" in r]
        if not mats:
            continue
        M = np.sum(mats, axis=0)  # each run's rows sum to 1 (or 0 where no cluster has that label):
        sums = M.sum(1, keepdims=True)  # renormalising averages a row over the runs that have it
        M = np.divide(M, sums, out=np.zeros_like(M), where=sums > 0)
        out[merge] = dict(matrix=M, runs=len(mats), **_structure_errors(M, true_T))
    out["ground truth"] = dict(matrix=true_T, runs=0, **_structure_errors(true_T, true_T))
    return out


def _structure_errors(M, true_T) -> dict:
    rows = M.sum(1) > 0
    off = (M * (true_T == 0)).sum(1)[rows]
    tv = 0.5 * np.abs(M - true_T).sum(1)[rows]
    return {"off_structure": float(off.mean()), "tv": float(tv.mean()), "rows": int(rows.sum())}


def structure_figure(configs, results, true_T, out_dir, name="sf_gw_structure") -> dict:
    """``fig:sf_gw_structure``: four 100x100 heat maps and a long-format CSV (mode, from, to, p)."""
    data = structure_matrices(configs, results, true_T)
    csv = os.path.join(out_dir, f"{name}.csv")
    rows = []
    for mode, d in data.items():
        nz = np.argwhere(d["matrix"] > 0)
        rows += [(mode, i, j, d["matrix"][i, j]) for i, j in nz]
    write_csv(csv, ["model", "from_position", "to_position", "probability"], rows)
    plt = _plt()
    fig, axes = plt.subplots(1, len(data), figsize=(4.2 * len(data), 4.9), layout="constrained")
    titles = {"none": "no merges", "random": "random merges", "sf": "sf merges", "ground truth": "ground truth"}
    for ax, (mode, d) in zip(np.atleast_1d(axes), data.items()):
        ax.imshow(d["matrix"], cmap="magma", vmin=0, vmax=0.5, interpolation="nearest")
        extra = "" if mode == "ground truth" else f"\noff-structure mass {d['off_structure']:.3f}, TV {d['tv']:.3f}"
        ax.set_title(titles.get(mode, mode) + extra, fontsize=9)
        ax.set_xlabel("to position")
        ax.set_ylabel("from position")
    fig.suptitle("position-to-position transitions of level 2 (size 10, actions averaged, mean over runs)", fontsize=10)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    summary = {m: {"off_structure": d["off_structure"], "tv": d["tv"], "runs": d["runs"]} for m, d in data.items()}
    return {"files": [png, csv], "summary": summary}


# --------------------------------------------------------------------------- Section 3.1
def cluster_stats(configs, results, key: str) -> dict:
    """Mean over positions per run, then mean and 95% interval over runs: arrays (sizes, purities).

    ``key``: ``similarity`` or ``correct`` (merge accuracy).  Also the mean
    chance level of the classification.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per_run = np.array([np.nanmean(r[key], axis=0) for r in results])  # runs x sizes x purities
        chance = np.nanmean(np.array([np.nanmean(r["chance"], axis=0) for r in results]), axis=0)
        purity = np.nanmean(np.array([np.nanmean(r["purity"], axis=0) for r in results]), axis=0)
        n = np.isfinite(per_run).sum(0)
        mean = np.nanmean(per_run, axis=0)
        sd = np.nanstd(per_run, axis=0, ddof=1) if len(results) > 1 else np.zeros_like(mean)
    half = 1.96 * sd / np.sqrt(np.maximum(n, 1))
    return {"mean": mean, "ci95": half, "runs": n, "chance": chance, "purity": purity}


def cluster_figure(configs, results, key, out_dir, name, ylabel, chance_line=False) -> dict:
    """``fig:true_sim`` (key ``similarity``) or ``fig:size_purity_merge_acc`` (key ``correct``)."""
    sizes, purities = configs[0]["sizes"], configs[0]["purities"]
    st = cluster_stats(configs, results, key)
    rows = []
    for si, s in enumerate(sizes):
        for ui, p in enumerate(purities):
            if np.isfinite(st["mean"][si, ui]):
                row = [s, p, st["purity"][si, ui], st["mean"][si, ui], st["ci95"][si, ui], st["runs"][si, ui]]
                if chance_line:
                    paper = PAPER_MERGE_ACCURACY.get(s) if p == 1.0 else None
                    row += [st["chance"][si, ui], paper[0] if paper else float("nan")]
                rows.append(row)
    header = ["size", "purity", "actual_purity", f"{key}_mean", f"{key}_ci95", "runs"]
    if chance_line:
        header += ["random_accuracy", "paper_accuracy"]
    csv = os.path.join(out_dir, f"{name}.csv")
    write_csv(csv, header, rows)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.3))
    cmap = plt.get_cmap("viridis")
    for ui, p in enumerate(purities):
        ok = np.isfinite(st["mean"][:, ui])
        x, y, h = np.asarray(sizes)[ok], st["mean"][ok, ui], st["ci95"][ok, ui]
        col = cmap(ui / max(len(purities) - 1, 1))
        ax.plot(x, y, "o-", color=col, label=f"purity {p:g}")
        ax.fill_between(x, y - h, y + h, color=col, alpha=0.2, lw=0)
    if chance_line:
        ax.axhline(float(np.nanmean(st["chance"])), color="grey", ls="--", label="random merge")
        pts = [(s, v[0]) for s, v in PAPER_MERGE_ACCURACY.items()]
        ax.plot(*zip(*pts), "k*", ms=8, label="paper, purity 1")
    ax.set_xscale("log")
    ax.set_xlabel("cluster size")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} vs cluster size and purity ({len(results)} runs, band: 95% CI)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    pure = purities.index(1.0) if 1.0 in purities else len(purities) - 1
    summary = {f"size{s}_purity{purities[pure]:g}": float(st["mean"][si, pure]) for si, s in enumerate(sizes)}
    if chance_line:
        summary["random"] = float(np.nanmean(st["chance"]))
    return {"files": [png, csv], "summary": summary}


def size_pos_figure(configs, results, out_dir, pos_sizes, name="size_pos_acc") -> dict:
    """``fig:size_pos_acc``: merge accuracy per position (purity 1), one row per map, one column per size."""
    from ..plotting import plot_grid_values
    from .runs import world

    sizes, purities = configs[0]["sizes"], configs[0]["purities"]
    ui = purities.index(1.0) if 1.0 in purities else len(purities) - 1
    maps = sorted({int(c["colouring"]) for c in configs})
    pos_sizes = [s for s in pos_sizes if s in sizes]
    rows, acc = [], {}
    for m in maps:
        runs = [r for c, r in zip(configs, results) if int(c["colouring"]) == m]
        for s in pos_sizes:
            si = sizes.index(s)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                a = np.nanmean(np.array([r["correct"][:, si, ui] for r in runs]), axis=0)
            acc[m, s] = a
            obs = runs[0]["obs"]
            rows += [(m, s, x, x // 10, x % 10, int(obs[x]), a[x], len(runs)) for x in range(len(a))]
    csv = os.path.join(out_dir, f"{name}.csv")
    write_csv(csv, ["map", "size", "position", "row", "col", "colour", "accuracy", "partitions"], rows)
    plt = _plt()
    fig, axes = plt.subplots(len(maps), len(pos_sizes), figsize=(3.3 * len(pos_sizes), 3.1 * len(maps)),
                             squeeze=False, layout="constrained")
    for i, m in enumerate(maps):
        env = world(m)
        for j, s in enumerate(pos_sizes):
            plot_grid_values(env, np.nan_to_num(acc[m, s], nan=0.0), ax=axes[i, j], cmap="viridis",
                             title=f"map {m}, size {s}: mean {np.nanmean(acc[m, s]):.2f}", colorbar=(j == len(pos_sizes) - 1))
            axes[i, j].images[0].set_clim(0, 1)
    fig.suptitle("SF merge accuracy per position (purity 1; numbers: colours)", fontsize=10)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    summary = {f"map{m}_size{s}": float(np.nanmean(a)) for (m, s), a in acc.items()}
    return {"files": [png, csv], "summary": summary}


# --------------------------------------------------------------------------- purity of random partitions
def purity_random_numbers(sizes, clones_list, states_per_clone: int, n_partitions: int, seed=0) -> list[dict]:
    """Simulated purity of the clusters of random partitions vs the exact (hypergeometric) law.

    For each number of clones and cluster size: ``n_partitions`` random
    partitions of ``clones * states_per_clone`` states (equal counts per
    label) into clusters of ``size`` (remainder left out), via
    :func:`hmmmerge.purity.random_partition_purities`; summary statistics of all
    clusters' purities, next to the exact mean and probability of a pure
    cluster from :func:`hmmmerge.purity.random_cluster_purity_distribution`.

    >>> r = purity_random_numbers([2], [2], 50, 200)[0]
    >>> abs(r["sim_mean"] - r["exact_mean"]) < 0.02
    True
    """
    from .._random import as_generator
    from ..purity import random_cluster_purity_distribution, random_partition_purities

    rng = as_generator(seed)
    out = []
    for clones in clones_list:
        counts = np.full(clones, states_per_clone, dtype=np.int64)
        for size in sizes:
            if size > counts.sum():
                continue
            sim = random_partition_purities(counts, size, n_partitions, seed=rng).ravel()
            exact = random_cluster_purity_distribution(size, clones, counts=counts)
            q = np.quantile(sim, [0.05, 0.25, 0.5, 0.75, 0.95])
            out.append({"clones": clones, "size": size, "clusters_sampled": sim.size, "sim_mean": float(sim.mean()),
                        "sim_std": float(sim.std()), "q05": q[0], "q25": q[1], "q50": q[2], "q75": q[3], "q95": q[4],
                        "sim_prob_pure": float((sim == 1.0).mean()), "exact_mean": exact.mean,
                        "exact_prob_pure": exact.prob_pure()})
    return out


def purity_random_figure(out_dir, sizes, clones_list, states_per_clone, n_partitions, name="purity_random") -> dict:
    """``fig:purity_random``: purity distribution of random clusters vs size, one panel per number of clones."""
    rows = purity_random_numbers(sizes, clones_list, states_per_clone, n_partitions)
    keys = list(rows[0])
    csv = os.path.join(out_dir, f"{name}.csv")
    write_csv(csv, keys, [[r[k] for k in keys] for r in rows])
    plt = _plt()
    fig, axes = plt.subplots(1, len(clones_list), figsize=(3.2 * len(clones_list), 3.6), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, clones in zip(axes[0], clones_list):
        rs = [r for r in rows if r["clones"] == clones]
        x = [r["size"] for r in rs]
        ax.fill_between(x, [r["q05"] for r in rs], [r["q95"] for r in rs], alpha=0.2, color="tab:blue", lw=0,
                        label="5-95%")
        ax.fill_between(x, [r["q25"] for r in rs], [r["q75"] for r in rs], alpha=0.35, color="tab:blue", lw=0,
                        label="25-75%")
        ax.plot(x, [r["sim_mean"] for r in rs], "o-", color="tab:blue", ms=3, label="simulated mean")
        ax.plot(x, [r["exact_mean"] for r in rs], "k--", lw=1, label="exact mean")
        ax.plot(x, [1.0 / clones] * len(x), ":", color="grey", lw=1)
        ax.set_xscale("log")
        ax.set_title(f"{clones} clone{'s' if clones > 1 else ''}", fontsize=9)
        ax.set_xlabel("cluster size")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("purity of a random cluster")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"purity of random partitions ({n_partitions} partitions, {states_per_clone} states per clone)",
                 fontsize=10)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    worst = max(abs(r["sim_mean"] - r["exact_mean"]) for r in rows)
    return {"files": [png, csv], "summary": {"max_abs_sim_minus_exact_mean": worst}}


# --------------------------------------------------------------------------- beyond the paper
def beyond_paper_figure(online_cfg, online_res, em_res, context_res, out_dir, sigma,
                        name="beyond_paper") -> dict:
    """``fig:beyond_paper``: online level-2 accuracy of fold / sf / random merges, the context baseline's
    online curve (refitted every 50 episodes), and EM's held-out level, on the paper's world.

    Writes ``beyond_paper.png`` and ``beyond_paper.csv`` (mean and std per episode of each curve, and the EM
    and oracle levels); the summary holds each curve's mean over the last 50 episodes (unsmoothed).
    """
    episodes = np.arange(1, len(online_res[0]["l2_accuracy"]) + 1)
    curves, last50 = {}, {}
    for merge in dict.fromkeys(c["merge"] for c in online_cfg):
        raw = [r["l2_accuracy"] for c, r in zip(online_cfg, online_res) if c["merge"] == merge]
        curves[merge] = _mean_std(np.array([smooth(x, sigma) for x in raw]))
        last50[merge] = float(np.mean([x[-50:].mean() for x in raw]))
    if context_res:
        curves["context"] = _mean_std(np.array([smooth(r["accuracy"], sigma) for r in context_res]))
        last50["context"] = float(np.mean([r["accuracy"][-50:].mean() for r in context_res]))
    em = float(np.mean([r["heldout_accuracy"] for r in em_res])) if em_res else float("nan")
    header, cols = ["episode"], [episodes]
    for k, c in curves.items():
        header += [f"{k}_mean", f"{k}_std"]
        cols += [c["mean"], c["std"]]
    header += ["em_heldout", "oracle"]
    cols += [np.full(len(episodes), em), np.ones(len(episodes))]
    csv = os.path.join(out_dir, f"{name}.csv")
    write_csv(csv, header, zip(*cols))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for k, c in curves.items():
        colour = MERGE_STYLE.get(k, "tab:brown")
        label = {"context": "context (order 4), refitted every 50 episodes"}.get(k, f"{MERGE_NAME.get(k, k)} merges"
                                                                              if k != "fold" else "fold")
        ax.plot(episodes, c["mean"], color=colour, lw=1.5, ls="--" if k == "context" else "-", label=label)
        ax.fill_between(episodes, c["mean"] - c["std"], c["mean"] + c["std"], color=colour, alpha=0.12, lw=0)
    if em_res:
        ax.axhline(em, color="tab:purple", ls=":", lw=1.2, label="EM, held-out after all episodes")
    ax.axhline(1.0, color="grey", ls=":", lw=1, label="oracle")
    n = max(c["n"] for c in curves.values())
    ax.set_xlabel("episode")
    ax.set_ylabel("next-observation accuracy (online)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Beyond the paper: 10x10 world, 10 colours ({n} runs per curve, smoothing sigma={sigma:g})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    png = os.path.join(out_dir, f"{name}.png")
    _save(fig, png)
    summary = {f"{k}_last50": v for k, v in last50.items()}
    summary["em_heldout"] = em
    return {"files": [png, csv], "summary": summary}
