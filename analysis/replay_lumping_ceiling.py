"""How much does replay's lumping cost, and which lumping test recovers it?  (issue 22, BENCHMARKS.md
"Clean accuracy on large grids")

For each run (the walks of ``benchmarks/bench_unseen_worlds.py`` and ``benchmarks/bench_world_as_it_is.py``,
imported from them: same worlds, same walks, same agent seed), one replay life of 1,000 episodes in
100-episode blocks as the benchmark lives it, then, scored by the benchmark's evaluator on the same 100
fresh episodes:

* ``level2``: the learner's level 2 (the lumped model on the clusters, what the benchmark scores);
* ``clones``: the unlumped clone HMM of the same merger (``T``, ``B`` of all clones, each clone emitting
  its view, with the learner's noise rate): the ceiling of any lumping of this merger;
* ``relump:NAME``: the final merger's clones lumped again by another test (``--variants``: ``hoeffding``, the
  Hoeffding test alone, or ``dm-X``, the Bayes-factor test beside it with ``dirichlet=X``; the clone HMM
  is the same, only the blocks differ; a post-hoc proxy for a life lived with that test, which can also
  change the spares a split takes), with its number of clusters.

One JSON record per run in ``OUT`` (resumed), a table on stdout.

    PYTHONPATH=$PWD nice -n 10 python analysis/replay_lumping_ceiling.py --out /work/bench_out/lump6/ceiling \\
        [--sets unseen-clean,main-thin] [--variants hoeffding,dm-0.01,...]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _bench(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def run_sets(names):
    """(bench, config) of every run of the named sets."""
    out = []
    U = _bench("bench_unseen_worlds")
    for name in names:
        if name == "unseen-clean":
            out += [("unseen", {"world": w, "condition": "clean", "colouring": s, "seed": s})
                    for w in U.WORLDS for s in (0, 1)]
        elif name.startswith("unseen-"):
            cond = name[len("unseen-"):]
            out += [("unseen", {"world": w, "condition": cond, "colouring": s, "seed": s})
                    for w in U.WORLDS for s in (0, 1)]
        elif name == "main-thin":
            out += [("main", {"world": "cscg-room", "condition": c, "colouring": s, "seed": s})
                    for c in ("clean", "random-start") for s in (0, 1, 2)]
            out += [("main", {"world": "paper-grid", "condition": "clean", "colouring": c, "seed": s})
                    for c in (0, 1, 2) for s in (0, 1, 2)]
            out += [("main", {"world": "maze", "condition": "clean", "colouring": s, "seed": s}) for s in (0, 1, 2)]
        elif name.startswith("main-"):
            cond = name[len("main-"):]
            W = _bench("bench_world_as_it_is")
            for w in W.WORLDS:
                if w in W.MINIGRID_VIEWS:
                    if cond == "clean":
                        out += [("main", {"world": w, "condition": "clean", "colouring": 0, "seed": s})
                                for s in (0, 1, 2)]
                    continue
                pairs = [(c, s) for c in (0, 1, 2) for s in (0, 1, 2)] if w == "paper-grid" else \
                    [(s, s) for s in (0, 1, 2)]
                out += [("main", {"world": w, "condition": cond, "colouring": c, "seed": s}) for c, s in pairs]
        else:
            raise ValueError(f"unknown set {name!r}")
    return out


VARIANTS = {"hoeffding": 0.0}
"""Name -> ``dirichlet`` of the merger (0: the Hoeffding test alone; else the least concentration of the
Bayes-factor test beside it).  The modal likelihood-ratio test measured beside it (BENCHMARKS.md) is the
code of commit 1ea92dd."""
for _f in (0.001, 0.01, 0.03, 0.1):
    VARIANTS[f"dm-{_f}"] = _f


def one_run(bench, cfg, variants, life=None):
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.hmm import ActionHMM

    B = _bench("bench_unseen_worlds" if bench == "unseen" else "bench_world_as_it_is")
    W = _bench("bench_world_as_it_is")
    config = dict(cfg, learner="replay", episodes=1000, eval_episodes=100,
                  episode_length=100 if cfg["world"] in W.MINIGRID_VIEWS else 50)
    if bench == "unseen":
        config["bench"] = "unseen"
    env = B.build_world(config["world"], int(config["colouring"]), config["condition"])
    train, fresh = B.walks(env, config)
    start = B.CONDITIONS[config["condition"]]["start"]
    from hmmmerge.replay import ReplayMerger

    merger = ReplayMerger() if life is None else ReplayMerger(dirichlet=VARIANTS[life])
    a = TwoLevelMemory(env.n_obs, env.n_actions, merger=merger, seed=[int(config["colouring"]), int(config["seed"]), 1])
    c = time.process_time()
    for b in range(0, train.n_episodes, W.BLOCK):
        a.partial_fit(train[b:b + W.BLOCK])
    fit = time.process_time() - c
    m = a.merger_
    out = {"bench": bench, "config": cfg, "life": life or "default", "fit_cpu_s": fit,
           "noise": float(m._noise), "slip": float(m._slip), "effective_episodes": float(1.0 / m._var)}
    r = W._score(env, m.level2_hmm(a.memory_, a.clusters_), fresh, start)
    out["level2"] = r["heldout_accuracy"]
    out["oracle"] = r["oracle_accuracy"]
    out["C"] = int(a.n_clusters_)
    T = m._T.copy()
    s = T.sum(axis=2, keepdims=True)
    T = np.divide(T, s, out=np.full_like(T, 1.0 / T.shape[2]), where=s > 0)
    E = np.full((m._H, m._K), m._noise / m._K)
    E[np.arange(m._H), m._colour] += 1.0 - m._noise
    out["clones"] = W._score(env, ActionHMM(T, E, m._B), fresh, start)["heldout_accuracy"]
    out["used_clones"] = int((m._weights() > 1e-3).sum())
    for name in variants:
        mm, cl = copy.deepcopy(m), copy.deepcopy(a.clusters_)
        mm.dirichlet = VARIANTS[name]
        mm._lump()
        mm._fold_unheld()
        mm._write_clusters(cl, a.memory_.n_states)
        out[f"relump:{name}"] = W._score(env, mm.level2_hmm(a.memory_, cl), fresh, start)["heldout_accuracy"]
        out[f"C:{name}"] = int(cl.n_clusters)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sets", default="unseen-clean,main-thin")
    p.add_argument("--variants", default="hoeffding")
    p.add_argument("--life", default=None, help="the variant the life itself lumps with (default: the merger's "
                   "defaults)")
    p.add_argument("--worlds", default=None)
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    for v in variants + ([args.life] if args.life else []):
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}")
    os.makedirs(args.out, exist_ok=True)
    runs = run_sets(args.sets.split(","))
    if args.worlds:
        runs = [r for r in runs if r[1]["world"] in args.worlds.split(",")]
    recs = []
    for bench, cfg in runs:
        key = f"{bench}_{cfg['world']}_{cfg['condition']}_{cfg['colouring']}_{cfg['seed']}_{args.life or 'default'}"
        path = os.path.join(args.out, key + ".json")
        rec = json.load(open(path)) if os.path.exists(path) else None
        missing = [v for v in variants if rec is None or f"relump:{v}" not in rec]
        if not args.table_only and (rec is None or missing):
            rec = one_run(bench, cfg, variants, args.life) if rec is None else _add(rec, bench, cfg, variants, args.life)
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(rec, f)
            os.replace(tmp, path)
            print(key, f"level2 {rec['level2']:.4f} clones {rec['clones']:.4f} C {rec['C']}", flush=True)
        if rec is not None:
            recs.append(rec)
    cols = ["level2", "clones"] + [f"relump:{v}" for v in variants]
    print("| run | noise | " + " | ".join(cols) + " | C " + " / ".join(["level2"] + variants) + " | fit s |")
    for r in recs:
        c = r["config"]
        print(f"| {r['bench']} {c['world']} {c['condition']} {c['colouring']}/{c['seed']} | {r['noise']:.3f} | "
              + " | ".join(f"{r.get(k, float('nan')):.4f}" for k in cols) + " | "
              + " / ".join(str(r.get(k, "-")) for k in ["C"] + [f"C:{v}" for v in variants])
              + f" | {r['fit_cpu_s']:.1f} |")


def _add(rec, bench, cfg, variants, life):
    """Recompute a stored run with more variants (the life is redone: the merger is not stored)."""
    new = one_run(bench, cfg, variants, life)
    return dict(rec, **new)


if __name__ == "__main__":
    main()
