"""Benchmark: best-first model merging (Stolcke & Omohundro 1994) on the paper's world.

Run: ``python benchmarks/bench_bfmm.py [--quick]``.  Prints markdown tables:

1. scaling with data (10, 30, 100, 300 episodes of gridworld(10, 10, 10, seed=0),
   random_walk(env, n, 50, seed=0)): wall time, states, pair evaluations and
   model quality, with the naive peer (every same-emission pair re-scored
   from scratch after every merge, same numba kernels) side by side where it
   is affordable, and the ratio;
2. variants on 100 episodes: structure prior weight, initial model, SF candidates.

Quality on 200 fresh episodes (random_walk seed 12345): accuracy = argmax of the
predictive distribution vs the true observation over the 50 move steps (a step
without prediction counts as wrong); surprise = mean -log P(o_t) over the same
steps (``inf`` as soon as one step has probability 0, so the finite mean and the
number of zero-probability steps are given as well).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from hmmmerge import gridworld, random_walk
from hmmmerge.baselines import _bfmm_kernels as K
from hmmmerge.baselines.bfmm import BestFirstMerging, _Workspace, prefix_tree, sf_candidates, viterbi_log_posterior


def quality(hmm, test):
    r = hmm.run_filter(test.obs, test.actions, predictions=True)
    pred = r.predictions[:, 1:]
    nopred = r.no_prediction[:, 1:]
    ok = (pred.argmax(-1) == test.obs[:, 1:]) & ~nopred
    lp = r.log_probs[:, 1:]
    fin = np.isfinite(lp)
    return {
        "acc": ok.mean(),
        "nopred": nopred.mean(),
        "surprise": -lp.mean(),
        "surprise_finite": -lp[fin].mean(),
        "n_zero": int((~fin).sum()),
    }


@njit(cache=True)
def _naive_loop(H, A1, alpha, tab, lam, log_o1, n_trans, members, col_off, src, act, dst, cnt, alive_e,
                out_head, out_next, in_head, in_next, row_n, row_C, row_term, acc, touched, mark, collapsed):
    alive = np.ones(H, np.bool_)
    q = H
    n_merges = 0
    while q > 1:
        lam_logq = lam * np.log(q)
        best = -np.inf
        bx = -1
        by = -1
        for c in range(col_off.shape[0] - 1):
            for i in range(col_off[c], col_off[c + 1]):
                x = members[i]
                if not alive[x]:
                    continue
                for j in range(i + 1, col_off[c + 1]):
                    y = members[j]
                    if not alive[y]:
                        continue
                    d, r = K.pair_delta(x, y, A1, alpha, tab, dst, act, src, cnt, out_head, out_next, in_head,
                                        in_next, row_n, row_C, row_term, acc, touched, mark)
                    if d + lam_logq * r > best:
                        best = d + lam_logq * r
                        bx = x
                        by = y
        if bx < 0 or not best + lam * (n_trans * np.log((q + 1.0) / q) + log_o1) > 0.0:
            break
        _, removed = K.merge_states(bx, by, A1, alpha, tab, src, act, dst, cnt, alive_e, out_head, out_next,
                                    in_head, in_next, row_n, row_C, row_term, mark, collapsed)
        alive[by] = False
        n_trans -= removed
        q -= 1
        n_merges += 1
    return n_merges


def naive_fit(traj, prior_weight=1.0, structure_prior=1.0):
    """The naive peer: re-score all same-emission pairs after every merge. Returns (states, log posterior)."""
    model = prefix_tree(traj)
    ws = _Workspace(model, prior_weight)
    order = np.argsort(model.emission, kind="stable")
    col_off = np.concatenate([[0], np.cumsum(np.bincount(model.emission, minlength=model.n_obs))])
    n = _naive_loop(model.n_states, ws.A1, ws.alpha, ws.tab, structure_prior, float(np.log(model.n_obs + 1)),
                    len(model.src), order.astype(np.int64), col_off.astype(np.int64), ws.src, ws.act, ws.dst,
                    ws.cnt, ws.alive_e, ws.out_head, ws.out_next, ws.in_head, ws.in_next, ws.row_n, ws.row_C,
                    ws.row_term, ws.acc, ws.touched, ws.mark, ws.collapsed)
    s, a, d, c = ws.edges()
    q = model.n_states - n
    return q, viterbi_log_posterior(s, a, d, c, q, model.n_obs, prior_weight, structure_prior)


def true_cell_log_posterior(traj, bf):
    """Log posterior of the model that merges the initial states by their true cell (the map the data allow)."""
    m = bf.initial_model_
    cell = np.zeros(m.n_states, np.int64)
    cell[m.path.ravel()] = traj.states.ravel()
    big = int(cell.max()) + 1
    lab = np.concatenate([cell, [big, big + 1]])
    return viterbi_log_posterior(lab[m.src], m.act, lab[m.dst], m.count, len(np.unique(cell)), m.n_obs,
                                 bf.prior_weight, bf.structure_prior)


def fmt(x, nd=3):
    return "inf" if np.isinf(x) else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip 300 episodes and the slow naive runs")
    args = ap.parse_args()
    env = gridworld(10, 10, 10, seed=0)
    test = random_walk(env, 200, 50, seed=12345)
    # compile once (numba) so the timings below are steady-state
    BestFirstMerging().fit(random_walk(env, 3, 10, seed=1))
    naive_fit(random_walk(env, 2, 5, seed=1))

    sizes = [10, 30, 100] if args.quick else [10, 30, 100, 300]
    naive_sizes = {10} if args.quick else {10, 30}
    print("## Best-first model merging: scaling with data (gridworld 10x10, 10 colours, seed 0)\n")
    print("| episodes | steps | initial states | final states | pair evals | time (s) | naive peer (s) | ratio "
          "| log post. found | log post. true map | accuracy | no-pred | surprise | surprise (finite) | zero-prob steps |")
    print("|" + "---|" * 15)
    times = []
    for n in sizes:
        traj = random_walk(env, n, 50, seed=0)
        t0 = time.perf_counter()
        bf = BestFirstMerging().fit(traj)
        t = time.perf_counter() - t0
        times.append(t)
        q = quality(bf.to_hmm(), test)
        if n in naive_sizes:
            t0 = time.perf_counter()
            nq, nlp = naive_fit(traj)
            tn = time.perf_counter() - t0
            naive = f"{tn:.2f} ({nq} st.)"
            ratio = f"{tn / t:.0f}x"
        else:
            naive, ratio = "not run", "-"
        print(f"| {n} | {traj.n_steps} | {bf.n_initial_states_} | {bf.n_states_} | {bf.n_pair_evaluations_:,} "
              f"| {t:.2f} | {naive} | {ratio} | {bf.log_posterior_[-1]:.0f} | {true_cell_log_posterior(traj, bf):.0f} "
              f"| {q['acc']:.3f} | {q['nopred']:.3f} | {fmt(q['surprise'])} | {fmt(q['surprise_finite'])} "
              f"| {q['n_zero']} |", flush=True)
    if len(sizes) >= 3:
        k = np.polyfit(np.log(sizes[1:]), np.log(times[1:]), 1)[0]
        print(f"\nTime grows about as episodes^{k:.1f} (fit over {sizes[1:]} episodes).\n")

    print("## Variants on 100 episodes\n")
    print("| variant | final states | merges | time (s) | accuracy | no-pred | surprise (finite) | zero-prob steps |")
    print("|" + "---|" * 8)
    traj = random_walk(env, 100, 50, seed=0)
    variants = [
        ("structure_prior=1 (default)", dict()),
        ("structure_prior=0.25", dict(structure_prior=0.25)),
        ("structure_prior=4", dict(structure_prior=4.0)),
        ("prior_weight=0.1", dict(prior_weight=0.1)),
        ("initial='sequences'", dict(initial="sequences")),
        ("end_state=False", dict(end_state=False)),
        ("candidates=sf_candidates(k=10)", dict(candidates=sf_candidates(k=10))),
        ("candidates=sf_candidates(k=10), structure_prior=0.25",
         dict(candidates=sf_candidates(k=10), structure_prior=0.25)),
    ]
    for name, kw in variants:
        t0 = time.perf_counter()
        bf = BestFirstMerging(**kw).fit(traj)
        t = time.perf_counter() - t0
        q = quality(bf.to_hmm(), test)
        print(f"| {name} | {bf.n_states_} | {bf.n_merges_} | {t:.2f} | {q['acc']:.3f} | {q['nopred']:.3f} "
              f"| {fmt(q['surprise_finite'])} | {q['n_zero']} |", flush=True)


if __name__ == "__main__":
    main()
