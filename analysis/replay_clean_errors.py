"""Where replay's last 1% goes on clean grids: the clone HMM or the lumping, and which clone HMM fault
(issue 22, BENCHMARKS.md "Clean large grids, session 10"; with ``--condition``, the oracle gap under slips,
noise and random starts: "Few-colour worlds: the oracle gap, session 13").

For each run (the walks of ``benchmarks/bench_unseen_worlds.py``: same worlds, walks and agent seeds), one
replay life and one fold life of 1,000 episodes in 100-episode blocks, then, on the same 100 fresh episodes,
each scored step (the view after a move) classified by the training visits of the true cell it lands on:

* ``level2``: replay's level 2 (the lumped model on the clusters, what the benchmark scores);
* ``clones``: the unlumped clone HMM of the same merger (the ceiling of any lumping of it);
* ``fold``: fold's level 2 on the same walk (an exact deterministic machine on a clean world; clean only);
* ``truth``: the true world's transitions re-estimated by ``--truth`` iterations of batch EM on all 1,000
  training episodes from the oracle (its support and emission kept): what a learner that found the
  structure could reach from these episodes (``--truth 0``: left out);
* ``refit-all`` / ``refit-window``: the final clone HMM re-estimated by ``--refit`` iterations of plain
  batch EM (no decay, no slip, same pseudocount) on all 1,000 training episodes / on the last ``window``
  episodes the merger keeps: what the final clones could predict if no evidence were forgotten;
* ``merged``: clones that hold level-1 states of two true cells or more (the second cell with at least
  ``--share`` of the clone's states), and the share of the clone HMM's errors whose filtered clone
  before the step is such a clone (merged places) against a pure clone (a wrong row: thin or forgotten
  evidence, or lumped);
* ``row counts``: for the clone HMM's errors from a pure clone, the kept counts of the row of the
  action taken (``window * S``, what the M-step weighs against the pseudocount).

One JSON record per run in ``OUT`` (resumed), tables on stdout.

    PYTHONPATH=$PWD nice -n 10 python analysis/replay_clean_errors.py --out DIR \\
        [--worlds grid-15x15-c8,grid-20x20-c15] [--seeds 0,1] [--refit 20] \\
        [--condition noise-0.05] [--clones 45] [--truth 20]

(``--clones P``: ``ReplayMerger(n_clones=P)``, P clones per view, iterations per sleep and deep sleeps by
their defaults for that capacity; default: the merger's own layout.)

(``--worlds`` takes the probe set's worlds too, e.g. ``grid-30x30-c10``.)
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
BUCKETS = (0, 10, 30, 100, 10 ** 9)


def _bench(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def correct_steps(model, fresh):
    """(N, L-1) bool: the model's most probable next view is the one seen (the benchmark's accuracy)."""
    from hmmmerge.evaluate import _score

    W = _bench("bench_world_as_it_is")
    sc = _score(model, fresh, W.SMOOTHING, False, predictions=True)
    res = sc["res"]
    guess = res.predictions[:, 1:].argmax(axis=2)
    return (guess == fresh.obs[:, 1:]) & ~res.no_prediction[:, 1:]


def clone_hmm(m, T=None, B=None):
    """The unlumped clone HMM of merger ``m`` (or of ``T``, ``B`` on its clones), each clone emitting its view."""
    from hmmmerge.hmm import ActionHMM

    T = m._T.copy() if T is None else T.copy()
    s = T.sum(axis=2, keepdims=True)
    T = np.divide(T, s, out=np.full_like(T, 1.0 / T.shape[2]), where=s > 0)
    E = np.full((m._H, m._K), m._noise / m._K)
    E[np.arange(m._H), m._colour] += 1.0 - m._noise
    return ActionHMM(T, E, m._B if B is None else B)


def refit(m, obs_list, acts_list, n_iter):
    """``n_iter`` plain batch EM iterations from the final clone HMM of ``m`` on the given episodes:
    counts of all episodes at once, ``pseudocount`` on the observed pairs' blocks, no decay, no slip."""
    mm = copy.deepcopy(m)
    obs, acts = np.concatenate(obs_list), np.concatenate(acts_list)
    d = mm._data(obs, acts)
    inside = mm._has_pair[mm._colour][:, mm._colour]
    pc = float(mm.pseudocount)
    T = mm._T.copy()
    for _ in range(n_iter):
        mm._T = T
        mm._C[:] = 0.0
        ll, C, Bc = mm._expected_counts(d)
        C = np.where(inside[None], C + pc, 0.0)
        s = C.sum(axis=2, keepdims=True)
        T = np.divide(C, s, out=np.zeros_like(C), where=s > 0)
        mm._C[:] = 0.0
        B = Bc + pc
        mm._B = B / B.sum()
    return T, mm._B


def truth_refit(hmm, obs, acts, n_iter, learn_start=True):
    """``(T, B)``: ``n_iter`` batch EM iterations (Baum-Welch, episodes as rows of ``obs``/``acts``, action
    -1 first) from the ActionHMM ``hmm``, its emission and the support of its transitions kept (a row
    with no expected count keeps its probabilities); ``B`` re-estimated when ``learn_start``.

    >>> from hmmmerge import Environment, random_walk
    >>> env = Environment.from_arrays([[1, 2, 0], [2, 0, 1]], [0, 0, 1]).with_noise(slip=0.2)
    >>> tr = random_walk(env, 200, 20, seed=0)
    >>> T, B = truth_refit(env.with_noise(slip=0.6).to_hmm(), tr.obs, tr.actions, 30)   # from a wrong slip
    >>> float(env.to_hmm().to_dense().T[0, 0, 1]), round(float(T[0, 0, 1]), 1)   # 0.8 + 0.2 / 2, found again
    (0.9, 0.9)
    """
    def dense(m):
        return np.asarray(m.todense() if hasattr(m, "todense") else m, dtype=np.float64)

    T = np.stack([dense(m) for m in hmm.T]) if not isinstance(hmm.T, np.ndarray) else hmm.T.astype(np.float64)
    E, B = dense(hmm.E), np.asarray(hmm.B, dtype=np.float64).copy()
    support = T > 0
    N, L = obs.shape
    A, S = T.shape[0], T.shape[1]
    for _ in range(n_iter):
        alpha, c = np.zeros((L, N, S)), np.zeros((L, N))
        p = B[None, :] * E[:, obs[:, 0]].T
        for t in range(L):
            if t:
                p = np.empty((N, S))
                for a in range(A):
                    m = acts[:, t] == a
                    p[m] = alpha[t - 1][m] @ T[a]
                p *= E[:, obs[:, t]].T
            c[t] = np.maximum(p.sum(axis=1), 1e-300)
            alpha[t] = p / c[t][:, None]
        beta, C = np.ones((N, S)), np.zeros_like(T)
        for t in range(L - 1, 0, -1):
            w = E[:, obs[:, t]].T * beta / c[t][:, None]
            nb = np.empty((N, S))
            for a in range(A):
                m = acts[:, t] == a
                C[a] += T[a] * (alpha[t - 1][m].T @ w[m])
                nb[m] = w[m] @ T[a].T
            beta = nb
        C = np.where(support, C, 0.0)
        s = C.sum(axis=2, keepdims=True)
        T = np.where(s > 0, C / np.where(s > 0, s, 1.0), T)
        if learn_start:
            b = (alpha[0] * beta).sum(axis=0)
            B = b / b.sum()
    return T, B


def one_run(world, seed, n_refit, share, condition="clean", clones=None, n_truth=0):
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.hmm import ActionHMM
    from hmmmerge.replay import ReplayMerger

    U = _bench("bench_unseen_worlds")
    W = _bench("bench_world_as_it_is")
    config = {"world": world, "condition": condition, "colouring": seed, "seed": seed, "learner": "replay",
              "episodes": 1000, "eval_episodes": 100,
              "episode_length": U.MINIGRID_EPISODE_LENGTH if world.startswith("minigrid") else 50, "bench": "unseen"}
    env = U.build_world(world, seed, condition)
    train, fresh = U.walks(env, config)
    start = U.CONDITIONS[condition]["start"]
    out = {"world": world, "seed": seed, "condition": condition, "clones_per_view": clones}
    agents = {}
    for learner in ("replay", "fold") if condition == "clean" else ("replay",):
        merger = {} if learner == "fold" or clones is None else {"merger": ReplayMerger(n_clones=clones)}
        a = TwoLevelMemory(env.n_obs, env.n_actions, **(merger or {"merge": learner}), seed=[seed, seed, 1])
        c = time.process_time()
        for b in range(0, train.n_episodes, W.BLOCK):
            a.partial_fit(train[b:b + W.BLOCK])
        out[f"{learner}_fit_cpu_s"] = time.process_time() - c
        agents[learner] = a
    a, m = agents["replay"], agents["replay"].merger_
    models = {"level2": m.level2_hmm(a.memory_, a.clusters_), "clones": clone_hmm(m)}
    if "fold" in agents:
        f = agents["fold"]
        models["fold"] = f.merger_.level2_hmm(f.memory_, f.clusters_) if hasattr(f.merger_, "level2_hmm") \
            else f.level2_hmm()
    out["clones"], out["blocks"], out["n_iter"] = int(m._H), int(m._block.max()) + 1, int(m.n_iter_)
    if n_refit:
        eps = [(train.obs[i], train.actions[i]) for i in range(train.n_episodes)]
        models["refit-all"] = clone_hmm(m, *refit(m, [e[0] for e in eps], [e[1] for e in eps], n_refit))
        kept = m._episodes
        models["refit-window"] = clone_hmm(m, *refit(m, [e[0] for e in kept], [e[1] for e in kept], n_refit))
    if n_truth:
        oracle = env.to_hmm(start=start)
        T, B = truth_refit(oracle, train.obs, train.actions, n_truth, learn_start=start is None)
        models["truth"] = ActionHMM(T, oracle.E, B)
    ok = {k: correct_steps(v, fresh) for k, v in models.items()}
    visits = np.bincount(train.states.ravel(), minlength=env.n_states)
    cell = fresh.states[:, 1:]
    v = visits[cell]
    out["C"] = int(a.n_clusters_)
    out["accuracy"] = {k: float(x.mean()) for k, x in ok.items()}
    out["buckets"] = {}
    for lo, hi in zip(BUCKETS[:-1], BUCKETS[1:]):
        sel = (v >= lo) & (v < hi)
        out["buckets"][f"{lo}-{hi}"] = {"steps": int(sel.sum()),
                                        **{k: int((~x & sel).sum()) for k, x in ok.items()}}
    out["visited_cells"] = int((visits > 0).sum())
    out["cells_under_30"] = int(((visits > 0) & (visits < 30)).sum())
    out["unseen_steps"] = int((v == 0).sum())
    out["level2_wrong_clones_right"] = int((~ok["level2"] & ok["clones"]).sum())
    out["clones_wrong_level2_right"] = int((ok["level2"] & ~ok["clones"]).sum())
    if "fold" in ok:
        out["clones_wrong_fold_right"] = int((~ok["clones"] & ok["fold"]).sum())
    # merged places: clones whose level-1 states come from two true cells or more
    n = a.memory_.n_states
    cs, lab = m._clone_state[:n], a.memory_.labels[:n]
    held = cs >= 0
    table = np.zeros((m._H, env.n_states), dtype=np.int64)
    np.add.at(table, (cs[held], lab[held]), 1)
    tot = table.sum(axis=1)
    top2 = np.sort(table, axis=1)[:, -2:]
    merged = (tot > 0) & (top2[:, 0] >= share * np.maximum(tot, 1))
    out["clones_used"] = int((tot > 0).sum())
    out["clones_merged"] = int(merged.sum())
    out["states_in_merged_clones"] = float(tot[merged].sum() / max(tot.sum(), 1))
    # the clone HMM's filtered clone before each scored step (the belief it predicts from)
    res = models["clones"].run_filter(fresh, posteriors=True)
    before = res.posteriors[:, :-1].argmax(axis=2)
    act = fresh.actions[:, 1:]
    wrong = ~ok["clones"]
    from_merged = merged[before] & wrong
    out["clone_errors"] = int(wrong.sum())
    out["clone_errors_from_merged_clone"] = int(from_merged.sum())
    rows = float(m.window) * m._g * m._row_sums()     # (A, H): kept counts of each row, as the M-step weighs them
    pure_wrong = wrong & ~merged[before]
    out["row_counts_pure_errors"] = np.quantile(rows[act[pure_wrong], before[pure_wrong]], [0.1, 0.5, 0.9]).tolist() \
        if pure_wrong.any() else []
    right = ok["clones"]
    out["row_counts_right"] = np.quantile(rows[act[right], before[right]], [0.1, 0.5, 0.9]).tolist()
    out["pseudocount_mass_row"] = float(m.pseudocount) * float(m._sizes[0]) * \
        float(np.mean(m._has_pair.sum(axis=1)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--worlds", default="grid-15x15-c8,grid-20x20-c15")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--refit", type=int, default=20)
    p.add_argument("--share", type=float, default=0.1)
    p.add_argument("--condition", default="clean", help="a condition of the benchmark (e.g. noise-0.05)")
    p.add_argument("--clones", type=int, default=None, help="clones per view (default: the merger's layout)")
    p.add_argument("--truth", type=int, default=0, help="batch EM iterations from the true world (0: none)")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    recs = []
    for world in args.worlds.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            tag = "" if args.condition == "clean" else f"_{args.condition}"
            tag += "" if args.clones is None else f"_k{args.clones}"
            path = os.path.join(args.out, f"{world}_{seed}{tag}.json")
            if os.path.exists(path):
                rec = json.load(open(path))
            elif args.table_only:
                continue
            else:
                rec = one_run(world, seed, args.refit, args.share, args.condition, args.clones, args.truth)
                tmp = path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(rec, f)
                os.replace(tmp, path)
            recs.append(rec)
            print(json.dumps(rec), flush=True)
    if not recs:
        return
    models = list(recs[0]["accuracy"])
    print("| run | " + " | ".join(models) + " | C | clones used / merged | clone errors from merged clones |")
    for r in recs:
        print(f"| {r['world']} {r['seed']} {r.get('condition', 'clean')} k={r.get('clones_per_view')} | " + " | ".join(f"{r['accuracy'][k]:.4f}" for k in models)
              + f" | {r['C']} | {r['clones_used']} / {r['clones_merged']} | "
              f"{r['clone_errors_from_merged_clone']} of {r['clone_errors']} |")
    print("\n| run | visits of the true cell | steps | " + " | ".join(f"{k} wrong" for k in models) + " |")
    for r in recs:
        for b, x in r["buckets"].items():
            print(f"| {r['world']} {r['seed']} | {b} | {x['steps']} | " + " | ".join(str(x[k]) for k in models) + " |")


if __name__ == "__main__":
    main()
