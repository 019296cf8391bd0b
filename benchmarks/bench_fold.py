"""The targets of issue 10: the fold consolidation next to every other learner, on the same data.

Sections (every learner of a seed sees the same training walk and is scored
on the same fresh walk by the one evaluator; a step without prediction is
wrong; surprise smoothed with epsilon 1e-3):

1. ``paper`` -- the paper's world (10x10, 10 colours), 5 seeds x 3 colourings,
   1,000 x 50 moves: online level-2 accuracy over the last 50 episodes (mean,
   worst run), over episodes 100-200, purity with singletons, clusters;
   side by side: SF merges, random merges, EM (clone HMM), the context
   baseline, first order, oracle, AALpy's RPNI and ALERGIA.
2. ``grid4`` -- 10x10 with 4 colours (heavy aliasing).
3. ``gallery`` -- maze, torus, two-rooms, cscg-room, aliased-loop and a random
   60-state graph with 3 actions, 3 colourings each: online and held-out,
   against EM on the same data.
4. ``noise`` -- each observation replaced by a random colour with probability
   0.05 (training and fresh walks): held-out accuracy against the noisy
   stream vs EM; clusters vs world states; online accuracy next to what a
   perfect map scores on a noisy stream (0.95 + 0.05 / colours).  The
   statistical fold (``fold-noisy``) runs here next to the learner under
   test; its level 2 (``agent.level2_hmm()``) is the merger's model with
   noise-aware emissions (the "own level 2" column repeats it); the same
   learners also run on the paper's world without noise (the price of the
   statistical test on clean data).
5. ``nostart`` -- episodes starting at uniformly random states (no common
   start): where a prefix-tree method does not hold.
5b. ``slip`` -- a non-deterministic world: with probability 0.1 the move made
   is a random one (the agent records the move it chose).
6. ``speed`` -- the learner alone on one core: 1,000 and 10,000 episodes of
   the paper's world; side by side the pure-Python fold merger
   (``tests/fold_reference.py``) in this agent, the package at ``--before``
   (default 0b8663b, the last commit without fold's kernels; ``git archive``)
   and SF merges.
7. ``evidence`` -- fold's ``min_evidence`` from 2 to 6 on the paper's world
   (3 colourings x 2 seeds) and with 4 colours (3 runs), the optional
   ``single_evidence`` rule (1, 2) and ``provisional_lead`` (off, 1, 2, 3)
   there and on the random graph: accuracy, clusters, merges, undos, CPU
   time.
8. ``minigrid`` -- MiniGrid FourRooms (1,040 states, 360 egocentric views):
   fold (and fold with the colour fold on colours only, without the colour
   fold, and without the provisional pass) next to EM (3 clones / 20
   iterations and 5 / 50) and the context baseline, on walks of 20 x 1,000
   moves (walk seeds 0-3) and 200 x 100 moves; held-out on 10 fresh walks of
   200 moves.

Results are cached per run under ``--out`` (one atomic file each, see
:mod:`hmmmerge.sweep`): an interrupted run resumes where it stopped.  They
are keyed by configuration, not by the code, so that the slow baselines are
not redone when the learner changes: delete ``OUT/runs/SECTION`` to redo a
section after changing code.  The
tables go to ``OUT/bench_fold.md`` and stdout.

    python benchmarks/bench_fold.py [--quick] [--out DIR] [--learner fold] [--executor serial]
        [--sections paper,grid4,gallery,noise,nostart,slip,speed,evidence,minigrid] [--models fold,em,...]

``--learner`` defaults to ``fold`` when the agent knows that merge mode, else
``sf`` (stated in the output).  ``--quick``: 1 seed, 300 episodes, fewer
worlds, 300 / 3,000 episodes for speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from hmmmerge._io import atomic_write_text
from hmmmerge.models import MERGERS
from hmmmerge.fold import default_min_evidence
from hmmmerge.reproduce.beyond import bench_world, context_curve_run, offline_run, online_run
from hmmmerge.sweep import Sweep, run_sweeps

VERSION = "1"
"""Results are keyed by configuration and this version, not by the code: delete ``OUT/runs`` (or a section's
folder) to recompute after changing a learner."""
GALLERY = ("maze", "torus", "two-rooms", "cscg-room", "aliased-loop", "random-graph")
SECTIONS = ("paper", "grid4", "gallery", "noise", "nostart", "slip", "speed", "evidence", "minigrid")
NAMES = {"fold": "fold", "fold-noisy": "fold-noisy", "sf": "SF merges", "random": "random merges", "none": "no merges",
         "em": "EM (clone HMM)",
         "context": "context (order 4)", "first-order": "first order", "oracle": "oracle", "rpni": "RPNI (AALpy)",
         "alergia": "ALERGIA (AALpy)"}


# --------------------------------------------------------------------------- configurations
def _worlds(section: str, quick: bool) -> list[dict]:
    """(world config, runs) for a section: list of base configs (one per colouring x seed)."""
    if section == "paper":
        cols, seeds = ((0,), (0,)) if quick else ((0, 1, 2), (0, 1, 2, 3, 4))
        return [{"world": "grid", "colouring": c, "seed": s} for c in cols for s in seeds]
    if section == "grid4":
        runs = (0,) if quick else (0, 1, 2)
        return [{"world": "grid", "colours": 4, "colouring": s, "seed": s} for s in runs]
    worlds = ("maze", "random-graph") if quick else GALLERY
    runs = (0,) if quick else (0, 1, 2)
    base = [{"world": w, "colouring": s, "seed": s} for w in worlds for s in runs]
    if section == "gallery":
        return base
    extra = [{"world": "grid", "colouring": s, "seed": s} for s in runs]
    if section == "noise":
        return [dict(c, noise=0.05) for c in extra + base] + [dict(c, noise=0.0) for c in extra]
    if section == "nostart":
        return [dict(c, start="random") for c in extra + base]
    if section == "slip":
        worlds = ("maze", "random-graph") if quick else ("maze", "torus", "random-graph")
        return [dict(c, slip=0.1) for c in extra + [b for b in base if b["world"] in worlds]]
    raise ValueError(section)


def sweeps_for(section: str, out: str, learner: str, quick: bool, models=None):
    """The online and offline sweeps of a section (only the merge modes and models in ``models``, if given)."""
    episodes = 300 if quick else 1000
    online_modes = {"paper": (learner, "sf", "random"), "grid4": (learner, "sf"), "gallery": (learner, "sf", "random"),
                    "noise": (learner, "fold-noisy", "sf"), "nostart": (learner, "sf"), "slip": (learner, "sf")}[section]
    offline = {"paper": ("oracle", "first-order", "context", "em", "rpni", "alergia"),
               "grid4": ("context", "em", "alergia"),
               "gallery": ("oracle", "first-order", "context", "em", "rpni", "alergia"),
               "noise": ("context", "em", "rpni", "alergia"),
               "nostart": ("context", "em", "rpni", "alergia"),
               "slip": ("context", "em", "rpni", "alergia")}[section]
    if models is not None:
        online_modes = tuple(m for m in online_modes if m in models)
        offline = tuple(m for m in offline if m in models)
    on, off = [], []
    for base in _worlds(section, quick):
        base = dict(base, episodes=episodes, eval_episodes=100)
        clean = section == "noise" and not base["noise"]   # the price of fold-noisy on clean data
        for m in dict.fromkeys(online_modes):
            if not (clean and m == "sf"):
                on.append(dict(base, merge=m))
        for m in offline:
            if clean and m not in ("em", "context"):
                continue
            c = dict(base, model=m)
            if m in ("rpni", "alergia"):
                one = base["seed"] == base.get("colouring", 0) if section == "paper" else base["seed"] == 0
                if m == "rpni" and not one:
                    continue  # RPNI is slow: one run per world (per colouring on the paper's world)
                c["model_episodes"] = 50 if quick else 200
            if m == "em":
                c.update(n_clones=30 if base.get("colours") == 4 else 20, n_iter=100)
            off.append(c)
    root = os.path.join(out, "runs", section)
    return (Sweep(os.path.join(root, "online"), online_run, on, version=VERSION),
            Sweep(os.path.join(root, "offline"), offline_run, off, version=VERSION))


# --------------------------------------------------------------------------- tables
def _fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def _key(c):
    return (c["world"], c.get("colours"), c.get("noise"))


def _world_name(c):
    name = f"10x10, {c.get('colours') or 10} colours" if c["world"] == "grid" else c["world"]
    return name + (", no noise" if c.get("noise") == 0 else "")


def summarise(on_cfg, on_res, off_cfg, off_res) -> dict:
    """Per world and learner: means over runs (and the worst run) of every metric."""
    rows: dict = {}
    for c, r in zip(on_cfg, on_res):
        d = rows.setdefault(_key(c), {"world": _world_name(c), "n_world_states": int(r["n_world_states"]),
                                      "n_obs": bench_world(c).n_obs})
        d.setdefault(c["merge"], []).append({
            "online_last50": float(r["l2_accuracy"][-50:].mean()),
            "online_100_200": float(r["l2_accuracy"][100:200].mean()) if len(r["l2_accuracy"]) >= 200 else np.nan,
            "no_prediction_last50": float(r["l2_no_prediction"][-50:].mean()),
            "heldout": float(r.get("heldout_accuracy", np.nan)), "surprise": float(r.get("heldout_surprise", np.nan)),
            "clusters": int(r["n_clusters_final"]), "purity": float(r["purity"]),
            "l1_states": int(r["n_first_level_states"]), "fit_s": float(r["fit_s"]),
            "heldout_own": float(r.get("merger_heldout_accuracy", np.nan))})
    for c, r in zip(off_cfg, off_res):
        d = rows.setdefault(_key(c), {"world": _world_name(c)})
        refused = int(r["refused"])
        d.setdefault(c["model"], []).append({
            "heldout": np.nan if refused else float(r["heldout_accuracy"]),
            "surprise": np.nan if refused else float(r["heldout_surprise"]),
            "states": np.nan if refused else int(r["heldout_states"]), "fit_s": float(r["fit_s"]),
            "refused": refused, "message": str(r["message"]), "episodes": c.get("model_episodes", c["episodes"])})
    return rows


def _mean(runs, key):
    v = [x[key] for x in runs if not np.isnan(x[key])]
    return float(np.mean(v)) if v else np.nan


def learner_table(rows, learner) -> list[str]:
    """Online learners: one line per (world, mode)."""
    out = ["| world | learner | runs | online acc., last 50 (mean / worst) | episodes 100-200 | no prediction, last 50 "
           "| held-out acc. | held-out, own level 2 | held-out surprise | clusters (world states) | purity (with singletons) "
           "| wall s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in rows.values():
        for m in dict.fromkeys((learner, "fold", "fold-noisy", "sf", "random", "none")):
            runs = d.get(m)
            if not runs:
                continue
            worst = min(x["online_last50"] for x in runs)
            out.append(f"| {d['world']} | {NAMES.get(m, m)} | {len(runs)} | {_mean(runs, 'online_last50'):.4f} / "
                       f"{worst:.4f} | {_fmt(_mean(runs, 'online_100_200'), '.4f')} | "
                       f"{_mean(runs, 'no_prediction_last50'):.4f} | {_fmt(_mean(runs, 'heldout'), '.4f')} | "
                       f"{_fmt(_mean(runs, 'heldout_own'), '.4f')} | "
                       f"{_fmt(_mean(runs, 'surprise'))} | {_mean(runs, 'clusters'):.1f} ({d.get('n_world_states', '-')}) | "
                       f"{_fmt(_mean(runs, 'purity'), '.4f')} | {_mean(runs, 'fit_s'):.2f} |")
    return out


def model_table(rows, learner) -> list[str]:
    """Held-out accuracy of every model per world (mean over runs), the learner's gap to EM."""
    present = _present(rows, ("oracle", learner, "fold", "fold-noisy", "sf", "random", "em", "context",
                              "first-order", "rpni", "alergia"))
    head = "| world | " + " | ".join(NAMES.get(m, m) for m in present) + f" | {NAMES.get(learner, learner)} - EM |"
    out = [head, "|" + "---|" * (len(present) + 2)]
    for d in rows.values():
        cells = []
        for m in present:
            runs = d.get(m)
            if not runs:
                cells.append("-")
            elif all(x.get("refused") for x in runs):
                cells.append("refused")
            else:
                cells.append(f"{_mean(runs, 'heldout'):.4f}")
        gap = _mean(d.get(learner, []), "heldout") - _mean(d.get("em", []), "heldout") if d.get(learner) and d.get("em") else np.nan
        out.append(f"| {d['world']} | " + " | ".join(cells) + f" | {_fmt(gap, '+.4f')} |")
    return out


def _present(rows, models) -> list[str]:
    """``models`` (first occurrence of each) that have runs in ``rows``."""
    return [m for m in dict.fromkeys(models) if any(m in d for d in rows.values())]


def cost_table(rows, learner) -> list[str]:
    """States and fit time (mean over runs) of every model per world."""
    present = _present(rows, (learner, "fold", "fold-noisy", "sf", "em", "context", "rpni", "alergia"))
    out = ["| world | " + " | ".join(f"{NAMES.get(m, m)}: states / s" for m in present) + " |",
           "|" + "---|" * (len(present) + 1)]
    for d in rows.values():
        cells = []
        for m in present:
            runs = d.get(m)
            if not runs:
                cells.append("-")
                continue
            states = _mean(runs, "clusters") if m in MERGERS else _mean(runs, "states")
            eps = runs[0].get("episodes")
            note = f" ({eps} ep.)" if m in ("rpni", "alergia") and eps else ""
            cells.append(f"{_fmt(states, ',.0f')} / {_mean(runs, 'fit_s'):.2f}{note}")
        out.append(f"| {d['world']} | " + " | ".join(cells) + " |")
    return out


def targets(section, rows, learner) -> list[str]:
    """The issue's targets for the section, checked on the learner's numbers."""
    lines = []
    for d in rows.values():
        runs = d.get(learner)
        if not runs:
            continue
        last = _mean(runs, "online_last50")
        worst = min(x["online_last50"] for x in runs)
        em = _mean(d.get("em", []), "heldout") if d.get("em") else np.nan
        held = _mean(runs, "heldout")
        ok = lambda b: "met" if b else "NOT met"  # noqa: E731
        if section == "paper":
            lines += [f"- {d['world']}: last-50 mean {last:.4f} >= 0.99: {ok(last >= 0.99)}; every run {worst:.4f} "
                      f">= 0.98: {ok(worst >= 0.98)}; episodes 100-200 {_mean(runs, 'online_100_200'):.4f} >= 0.88: "
                      f"{ok(_mean(runs, 'online_100_200') >= 0.88)}; purity {_mean(runs, 'purity'):.4f} >= 0.99: "
                      f"{ok(_mean(runs, 'purity') >= 0.99)}; clusters {_mean(runs, 'clusters'):.1f} within 10% of 100: "
                      f"{ok(abs(_mean(runs, 'clusters') - 100) <= 10)}"]
        elif section == "grid4":
            lines.append(f"- {d['world']}: last-50 mean {last:.4f} >= 0.98: {ok(last >= 0.98)}")
        elif section == "gallery":
            lines.append(f"- {d['world']}: online {last:.4f} >= 0.97: {ok(last >= 0.97)}; held-out {held:.4f} vs EM "
                         f"{em:.4f} (gap {held - em:+.4f}) within 0.01: {ok(held >= em - 0.01)}")
        elif section == "noise":
            cl, ws = _mean(runs, "clusters"), d.get("n_world_states", np.nan)
            own = _mean(runs, "heldout_own")
            if d["world"].endswith("no noise"):
                lines.append(f"- {d['world']}: held-out {held:.4f} (noise-aware emissions {_fmt(own, '.4f')}) vs EM "
                             f"{em:.4f} -- no target (the price on clean data); clusters {cl:.0f} ({ws} cells)")
                continue
            extra = "" if np.isnan(own) or abs(own - held) < 1e-9 else (
                f" (noise-aware emissions {own:.4f}, gap {own - em:+.4f}: {ok(own >= em - 0.02)})")
            ceiling = 0.95 + 0.05 / d["n_obs"]   # a perfect map against the noisy stream
            lines.append(f"- {d['world']}: held-out {held:.4f} vs EM {em:.4f} (gap {held - em:+.4f}) within 0.02: "
                         f"{ok(held >= em - 0.02)}{extra}; clusters {cl:.0f} <= 2 x {ws}: {ok(cl <= 2 * ws)} "
                         f"(worst run {max(x['clusters'] for x in runs)}); worst run held-out "
                         f"{min(x['heldout'] for x in runs):.4f}; online last 50 {last:.4f} (worst run {worst:.4f}) "
                         f"vs {ceiling:.3f} for a perfect map")
        elif section in ("nostart", "slip"):
            why = "a common start is missing" if section == "nostart" else "moves slip (p = 0.1)"
            lines.append(f"- {d['world']}: online {last:.4f}, held-out {held:.4f} vs EM {em:.4f} "
                         f"(gap {held - em:+.4f}) -- no target: {why}")
    return lines


# --------------------------------------------------------------------------- speed
SPEED_CHILD = """
import json, sys, time
import numpy as np
from hmmmerge import gridworld, random_walk
import inspect
import hmmmerge.agent as agent_module
from hmmmerge.agent import TwoLevelMemory
merge, episodes, reference, params = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
objects = "merger" in inspect.signature(TwoLevelMemory).parameters   # mergers as objects (since issue 21)
fold_class = None
if reference:   # the pure-Python fold merger in this checkout's agent
    import importlib.util
    spec = importlib.util.spec_from_file_location("fold_reference", reference)
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    fold_class = module.FoldMerger
    if not objects:
        agent_module.MERGE_MODES["fold"] = lambda agent, **extra: module.FoldMerger(**extra)
def make(seed):
    if not objects:
        return TwoLevelMemory(10, 4, merge=merge, merge_params=params, seed=seed)
    from hmmmerge.models import merger_class
    cls = fold_class if (fold_class is not None and merge == "fold") else merger_class(merge)
    return TwoLevelMemory(10, 4, merge=merge, merger=cls(**params) if (params or cls is fold_class) else None,
                          seed=seed)
env = gridworld(seed=0)
make(1).fit(random_walk(env, 30, seed=1))  # kernels
traj = random_walk(env, episodes, 50, seed=0)
t = time.perf_counter(); c = time.process_time()
agent = make(0).fit(traj)
wall, cpu = time.perf_counter() - t, time.process_time() - c
h = agent.history()
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "l2_last50": float(h["l2_accuracy"][-50:].mean()),
                  "l2_sum": float(h["l2_accuracy"].sum()), "clusters": int(agent.n_clusters_),
                  "l1_states": int(agent.memory_.n_states)}))
"""
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BEFORE = "0b8663b"
"""The commit before the fold merger's numba kernels and the O(level 2) sleeps (``--before``)."""


def _git(*args, cwd=REPO) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _checkout(rev: str, out: str) -> str | None:
    """A plain copy of the package at ``rev`` (``git archive``) under ``out``; None without git or that commit."""
    full = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if full is None:
        return None
    root = os.path.join(out, "checkouts", full[:12])
    if not os.path.isdir(os.path.join(root, "hmmmerge")):
        tmp = root + ".part"
        os.makedirs(tmp, exist_ok=True)
        archive = subprocess.run(["git", "archive", full, "hmmmerge"], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        os.replace(tmp, root)
    return root


def speed(out, learner, quick, repeats=3, before=BEFORE) -> list[str]:
    """CPU and wall time of one online run on one core (child processes pinned with ``taskset``, numba on
    one thread), side by side: this checkout, this checkout with the pure-Python fold merger
    (``tests/fold_reference.py``), the package at commit ``before`` and SF merges.

    Results are cached in ``OUT/runs/speed.json`` under the measured code's commit (a changed checkout is
    measured again)."""
    path = os.path.join(out, "runs", "speed.json")
    cache = json.load(open(path)) if os.path.exists(path) else {}
    sizes = (300, 3000) if quick else (1000, 10000)
    here = (_git("rev-parse", "HEAD") or "unknown")[:12] + ("+changes" if _git("status", "--porcelain", "hmmmerge") else "")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    reference = os.path.join(REPO, "tests", "fold_reference.py")
    old_tree = _checkout(before, out) if before else None
    rows = [(NAMES.get(learner, learner) + " (this checkout)", learner, "", None, here, {})]
    if learner == "fold":
        if os.path.exists(reference):
            rows.append(("fold, pure-Python merger (tests/fold_reference.py), this agent", "fold", reference, None,
                         here, {}))
        if old_tree is not None:
            note = " (before the kernels)" if before == BEFORE else ""
            rows.append((f"fold at {before}{note}", "fold", "", old_tree, before, {}))
    rows.append(("SF merges (this checkout)", "sf", "", None, here, {}))
    results = {}
    for label, merge, ref, tree, code, params in rows:
        for n in sizes:
            key = f"{label}:{n}"
            if cache.get(key, {}).get("code") != code:
                best = None
                for _ in range(repeats if n == sizes[0] else 1):
                    run_env = dict(env, PYTHONPATH=tree) if tree else env
                    cmd = [sys.executable, "-c", SPEED_CHILD, merge, str(n), ref, json.dumps(params)]
                    if hasattr(os, "sched_setaffinity") and _has_taskset():
                        cmd = ["taskset", "-c", "0"] + cmd
                    res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=run_env,
                                         cwd=tree or os.getcwd())
                    r = json.loads(res.stdout.strip().splitlines()[-1])
                    best = r if best is None or r["cpu_s"] < best["cpu_s"] else best
                cache[key] = dict(best, code=code)
                atomic_write_text(path, json.dumps(cache, indent=1))
            results[key] = cache[key]
    lines = ["| learner | episodes | CPU s (best of runs) | wall s | 10x episodes / 1x (CPU) | clusters | "
             "level-1 states | online acc., last 50 |", "|---|---|---|---|---|---|---|---|"]
    for label, *_ in rows:
        base = results[f"{label}:{sizes[0]}"]["cpu_s"]
        for n in sizes:
            r = results[f"{label}:{n}"]
            lines.append(f"| {label} | {n:,} | {r['cpu_s']:.3f} | {r['wall_s']:.3f} | {r['cpu_s'] / base:.1f} | "
                         f"{r['clusters']:,} | {r['l1_states']:,} | {r['l2_last50']:.4f} |")
    lines.append("")
    me = rows[0][0]
    for label, merge, ref, tree, *_ in rows[1:]:
        for n in sizes:
            a, b = results[f"{me}:{n}"], results[f"{label}:{n}"]
            same = ""
            if ref or tree:  # the same merger, other code: the same decisions
                same = " (same" if (a["l2_sum"], a["clusters"]) == (b["l2_sum"], b["clusters"]) else " (DIFFERENT"
                same += " results: accuracy curve and clusters)"
            lines.append(f"- {n:,} episodes: {me} / {label}: CPU {a['cpu_s'] / b['cpu_s']:.3f}{same}")
    if learner == "fold" and not quick:
        one, ten = results[f"{me}:{sizes[0]}"]["cpu_s"], results[f"{me}:{sizes[1]}"]["cpu_s"]
        lines += ["", f"Targets: 1,000 episodes {one:.3f} s CPU <= 1 s: {'met' if one <= 1 else 'NOT met'}; "
                      f"10,000 episodes {ten / one:.1f}x <= 12x: {'met' if ten <= 12 * one else 'NOT met'}"]
    return lines


# --------------------------------------------------------------------------- evidence minimum
def evidence_runs(quick: bool) -> list[dict]:
    """Configurations of the ``evidence`` section: ``min_evidence`` 2..6 on the paper's world and with 4
    colours; ``single_evidence`` 1 and 2 (at the default minimum) there and on the random graph."""
    cols, seeds = ((0,), (0,)) if quick else ((0, 1, 2), (0, 1))
    runs = (0,) if quick else (0, 1, 2)
    paper = [{"world": "grid", "colouring": c, "seed": s} for c in cols for s in seeds]
    grid4 = [{"world": "grid", "colours": 4, "colouring": s, "seed": s} for s in runs]
    graph = [{"world": "random-graph", "colouring": s, "seed": s} for s in runs]
    out = [dict(w, min_evidence=k) for w in paper + grid4 for k in range(2, 7)]
    out += [dict(w, single_evidence=e) for w in paper + grid4 + graph for e in (None, 1, 2)
            if not (e is None and w["world"] == "grid")]
    out += [dict(w, provisional_lead=p) for w in paper + grid4 + graph for p in ("off", 2, 3)]
    return [dict(c, episodes=300 if quick else 1000) for c in out]


def evidence_run(config: dict) -> dict:
    """One online fold run with ``min_evidence`` / ``single_evidence`` set: accuracy, clusters, undos, CPU time."""
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.fold import FoldMerger
    from hmmmerge.reproduce.beyond import bench_walks, bench_world

    env = bench_world(config)
    train, _ = bench_walks(env, dict(config, eval_episodes=1))
    params = {k: config[k] for k in ("min_evidence", "single_evidence", "provisional_lead") if config.get(k) is not None}
    if params.get("provisional_lead") == "off":
        params["provisional_lead"] = None
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=FoldMerger(**params),
                           seed=[int(config["colouring"]), int(config["seed"]), 1])
    c = time.process_time()
    agent.fit(train)
    cpu = time.process_time() - c
    acc = agent.history()["l2_accuracy"]
    purity, _ = agent._current_purity()
    return {"last50": float(acc[-50:].mean()), "mid": float(acc[100:200].mean()), "clusters": agent.n_clusters_,
            "purity": purity, "cpu_s": cpu, "k": agent.merger_.evidence_minimum, **agent.merger_.stats,
            "provisional_merges": agent.merger_.provisional["merges"]}


def evidence(quick: bool) -> list[str]:
    """The sensitivity table of ``min_evidence`` and ``single_evidence`` (runs in this process: about 1 s each)."""
    configs = evidence_runs(quick)
    results = [evidence_run(c) for c in configs]
    names = {"grid": "10x10, {} colours", "random-graph": "random graph, 60 states"}
    groups = {}
    for c, r in zip(configs, results):
        world = names[c["world"]].format(c.get("colours", 10))
        groups.setdefault((world, r["k"], c.get("single_evidence"), c.get("provisional_lead", 1)), []).append(r)
    lines = ["| world | min_evidence | single_evidence | provisional_lead | runs | online acc., last 50 (mean / worst) "
             "| episodes 100-200 | clusters (mean) | purity (min) | merges | provisional merges in force | undos (total) "
             "| CPU s per run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (world, k, single, lead), rs in groups.items():
        default = " (default)" if k == default_min_evidence(10 if "10 colours" in world or "graph" in world else 4) \
            else ""
        lead = f"{lead}{' (default)' if lead == 1 else ''}"
        lines.append(f"| {world} | {k}{default} | {'-' if single is None else single} | {lead} | {len(rs)} | "
                     f"{np.mean([r['last50'] for r in rs]):.4f} / {min(r['last50'] for r in rs):.4f} | "
                     f"{np.mean([r['mid'] for r in rs]):.4f} | {np.mean([r['clusters'] for r in rs]):.1f} | "
                     f"{min(r['purity'] for r in rs):.4f} | {np.mean([r['merges'] for r in rs]):.0f} | "
                     f"{np.mean([r['provisional_merges'] for r in rs]):.0f} | "
                     f"{sum(r['undos'] for r in rs)} | {np.mean([r['cpu_s'] for r in rs]):.2f} |")
    return lines


# --------------------------------------------------------------------------- MiniGrid
MINIGRID = "MiniGrid-FourRooms-v0"
MINIGRID_WALKS = ((20, 1000, 0), (20, 1000, 1), (20, 1000, 2), (20, 1000, 3), (200, 100, 0))
"""(episodes, moves per episode, walk seed) of the training walks; the fresh walk is 10 x 200 moves, seed 100."""
MINIGRID_LEARNERS = {
    "fold": ("fold", {}),
    "fold, colour only (colour_past=0)": ("fold", {"colour_past": 0}),
    "fold, no colour fold": ("fold", {"colour_evidence": None}),
    "fold, no provisional pass": ("fold", {"provisional_lead": None}),
    "EM, 3 clones, 20 iter.": ("em", {"n_clones": 3, "n_iter": 20}),
    "EM, 5 clones, 50 iter.": ("em", {"n_clones": 5, "n_iter": 50}),
    "context (order 4)": ("context", {}),
}


def minigrid_run(label: str, walk: tuple, quick: bool) -> dict:
    """One learner of the ``minigrid`` section on one training walk: held-out accuracy / surprise, states, CPU s."""
    from hmmmerge import from_gymnasium, random_walk
    from hmmmerge import build_model
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.evaluate import score_trajectories
    from hmmmerge.fold import FoldMerger

    env = from_gymnasium(MINIGRID, seed=0)
    n, length, seed = walk
    train = random_walk(env, n // 4 if quick else n, length, seed=seed)
    fresh = random_walk(env, 10, 200, seed=100)
    kind, params = MINIGRID_LEARNERS[label]
    c = time.process_time()
    if kind == "fold":
        agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=FoldMerger(**params), seed=0).fit(train)
        hmm = agent.level2_hmm()
    else:
        hmm = build_model(kind, train, env=env, seed=0, **params)
    cpu = time.process_time() - c
    return {"heldout": score_trajectories(hmm, fresh).accuracy,
            "surprise": score_trajectories(hmm, fresh, smoothing=1e-3).surprise, "states": int(hmm.n_states),
            "cpu_s": cpu}


def minigrid(out: str, quick: bool) -> list[str]:
    """The MiniGrid table; runs are cached in ``OUT/runs/minigrid.json`` (by learner and walk, not by code:
    delete the file after changing a learner)."""
    path = os.path.join(out, "runs", "minigrid.json")
    cache = json.load(open(path)) if os.path.exists(path) else {}
    walks = MINIGRID_WALKS[:1] if quick else MINIGRID_WALKS
    lines = ["| training walk | " + " | ".join(MINIGRID_LEARNERS) + " | fold - EM (5 clones) |",
             "|---|" + "---|" * (len(MINIGRID_LEARNERS) + 1)]
    verdicts = []
    for walk in walks:
        row = {}
        for label in MINIGRID_LEARNERS:
            key = f"{label}:{walk}:{'quick' if quick else 'full'}"
            if key not in cache:
                cache[key] = minigrid_run(label, walk, quick)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                atomic_write_text(path, json.dumps(cache, indent=1))
            row[label] = cache[key]
        n, length, seed = walk
        n = n // 4 if quick else n
        cells = [f"{r['heldout']:.3f} ({r['states']:,} states, {r['cpu_s']:.1f} s)" for r in row.values()]
        gap = row["fold"]["heldout"] - row["EM, 5 clones, 50 iter."]["heldout"]
        lines.append(f"| {n} x {length:,} moves, walk seed {seed} | " + " | ".join(cells) + f" | {gap:+.3f} |")
        verdicts.append(f"{n} x {length:,}, seed {seed}: {'met' if gap >= -0.02 else 'NOT met'}")
    return lines + ["", "Target (fold held-out within 0.02 of EM): " + "; ".join(verdicts)]


def _has_taskset() -> bool:
    from shutil import which

    return which("taskset") is not None


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 seed, 300 episodes, fewer worlds")
    p.add_argument("--out", default="bench-fold-out", help="results folder (default ./bench-fold-out)")
    p.add_argument("--learner", default=None, help="the merge mode under test (default fold if available, else sf)")
    p.add_argument("--executor", default="serial", help="serial (default), local[:N], dask://HOST:PORT")
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ", ".join(SECTIONS))
    p.add_argument("--before", default=BEFORE, help=f"speed: the commit to compare with (default {BEFORE}; '' for none)")
    p.add_argument("--models", default=None,
                   help="comma-separated merge modes and models to run in the sections with sweeps (default all)")
    p.add_argument("--tables-only", action="store_true",
                   help="run nothing: tables of the runs already finished under --out (a partial run, or runs "
                        "made by another checkout)")
    args = p.parse_args(argv)
    learner = args.learner or ("fold" if "fold" in MERGERS else "sf")
    if learner not in MERGERS and not args.tables_only:
        print(f"bench_fold: unknown learner {learner!r}; the agent knows {', '.join(MERGERS)}", file=sys.stderr)
        return 2
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        print(f"bench_fold: unknown section {bad[0]!r}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    md = [f"# bench_fold ({'quick' if args.quick else 'full'}; learner under test: {learner})", ""]
    if "fold" not in MERGERS:
        md += [f"`merge=\"fold\"` is not available in this checkout: the tables show `{learner}` in its place.", ""]
    summaries = {}
    for section in sections:
        if section == "evidence":
            if not args.tables_only:
                md += ["## evidence minimum (fold, min_evidence 2..6)", ""] + evidence(args.quick) + [""]
            continue
        if section == "minigrid":
            if not args.tables_only:
                md += [f"## MiniGrid ({MINIGRID}, held-out accuracy, states, CPU s)", ""] + minigrid(args.out, args.quick) + [""]
            continue
        if section == "speed":
            if not args.tables_only:
                md += ["## speed (one core)", ""] + speed(args.out, learner, args.quick, before=args.before) + [""]
            continue
        models = None if args.models is None else {m.strip() for m in args.models.split(",")}
        on, off = sweeps_for(section, args.out, learner, args.quick, models)
        if args.tables_only:
            (on_cfg, on_res), (off_cfg, off_res) = finished(on), finished(off)
            if not on_res and not off_res:
                continue
            md += [f"({len(on_res)} of {len(on)} online and {len(off_res)} of {len(off)} offline runs finished)", ""]
        else:
            on_res, off_res = run_sweeps([on, off], executor=args.executor, progress=None)
            on_cfg, off_cfg = on.configs, off.configs
        rows = summarise(on_cfg, on_res, off_cfg, off_res)
        summaries[section] = rows
        md += [f"## {section}", "", *learner_table(rows, learner), "", *model_table(rows, learner), "",
               *cost_table(rows, learner), "", "Targets:", "", *targets(section, rows, learner), ""]
        refusals = {r["message"] for d in rows.values() for m in ("rpni",) for r in d.get(m, []) if r["refused"]}
        if refusals:
            md += ["RPNI refused: " + sorted(refusals)[0].split(";")[0] + " (and similar).", ""]
    if "paper" in sections and not args.tables_only:
        md += context_curve_note(args.out, args.quick)
    md.append(f"Total wall time of this invocation: {time.perf_counter() - t0:.0f} s (cached runs are not redone).")
    text = "\n".join(md) + "\n"
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "bench_fold.md"), text)
    print(text)
    return 0


def finished(sweep) -> tuple[list, list]:
    """(configs, results) of the runs of ``sweep`` that are finished on disk."""
    done = sweep.status()["done"]
    return [sweep.configs[i] for i in done], [sweep.load_one(i) for i in done]


def context_curve_note(out, quick) -> list[str]:
    """The context baseline as an online learner on the paper's world (refitted every 50 episodes)."""
    cols, seeds = ((0,), (0,)) if quick else ((0, 1, 2), (0, 1, 2, 3, 4))
    configs = [{"world": "grid", "colouring": c, "seed": s, "episodes": 300 if quick else 1000, "refit_every": 50}
               for c in cols for s in seeds]
    sw = Sweep(os.path.join(out, "runs", "paper", "context_curve"), context_curve_run, configs, version=VERSION)
    res = sw.run(executor="serial", progress=None)
    last = np.mean([r["accuracy"][-50:].mean() for r in res])
    mid = np.mean([r["accuracy"][100:200].mean() for r in res]) if len(res[0]["accuracy"]) >= 200 else np.nan
    return [f"Context baseline as an online learner on the paper's world (refitted every 50 episodes, {len(res)} "
            f"runs): last 50 episodes {last:.4f}, episodes 100-200 {_fmt(mid, '.4f')}.", ""]


if __name__ == "__main__":
    sys.exit(main())
