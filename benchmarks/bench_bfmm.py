"""Benchmark and diagnosis: best-first model merging (Stolcke & Omohundro 1994).

Run: ``python benchmarks/bench_bfmm.py [--quick]`` (``--quick``: the paper's
world only, 300 episodes, no EM).  Prints markdown tables:

1. **Speed.** The paper's protocol (gridworld(10, 10, 10, seed=0), 1,000
   random walks of 50 moves): the incremental schedule (the default) next to
   batch merging from the prefix tree (the peer it replaces), on the same
   data, in one run; batch only up to 300 episodes (quadratic); and the
   determinising fold search (``search="fold"``).
2. **Diagnosis.** The log posterior ``log P(M) + log P(X | M)`` (the terms the
   search optimises, :func:`~hmmmerge.baselines.bfmm.path_log_posterior`) on
   the training data of (a) the pair search's final model (a': the fold
   search's), (b) the true world
   (paths = the true cells, ``env.to_hmm()``'s structure with the data's
   counts), (c) the first-order model (paths = the observations) and (d) the
   EM clone HMM (paths = its Viterbi paths), for several structure-prior
   weights.  (b) > (a): the greedy search stops below a model that the
   posterior prefers (search failure); (b) <= (a): the posterior itself does
   not prefer the true world (prior failure).
3. **Quality.** Accuracy and surprise from :func:`hmmmerge.evaluate.evaluate_model`
   (smoothing 1e-3, 100 fresh walks), next to first order and EM.

Worlds: the paper's grid and the gallery's ``maze`` and ``two-rooms``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hmmmerge import gridworld, random_walk
from hmmmerge.baselines.bfmm import BestFirstMerging, path_log_posterior
from hmmmerge.baselines.em import CloneHMM
from hmmmerge.baselines.first_order import FirstOrderModel
from hmmmerge.evaluate import evaluate_model
from hmmmerge.gallery import world

LAMBDAS = (0.1, 0.25, 1.0, 4.0)
PAIRS_MIN_LAMBDA = 1.0  # below it the incremental pair search keeps thousands of states and slows down


def worlds(quick: bool):
    out = [("paper grid 10x10", gridworld(10, 10, 10, seed=0))]
    if not quick:
        out += [("maze", world("maze")), ("two-rooms", world("two-rooms"))]
    return out


def timed(make, traj):
    t0 = time.perf_counter()
    m = make().fit(traj)
    return m, time.perf_counter() - t0


def speed(env, sizes, batch_sizes):
    print("## Speed: paper's world (gridworld 10x10, 10 colours, seed 0), walks of 50 moves\n")
    print("| episodes | pairs, incremental (default): s | states | log posterior "
          "| pairs, batch (prefix tree): s | states | log posterior | batch / incremental time "
          "| fold (batch): s | states | log posterior |")
    print("|" + "---|" * 11)
    for n in sizes:
        traj = random_walk(env, n, 50, seed=0)
        inc, ti = timed(BestFirstMerging, traj)
        fold, tf = timed(lambda: BestFirstMerging(incremental=False, search="fold"), traj)
        row = f"| {n:,} | {ti:.2f} | {inc.n_states_} | {inc.log_posterior_:,.0f} "
        if n in batch_sizes:
            bat, tb = timed(lambda: BestFirstMerging(incremental=False), traj)
            row += f"| {tb:.2f} | {bat.n_states_} | {bat.log_posterior_:,.0f} | {tb / ti:.1f}x "
        else:
            row += "| not run (quadratic) | - | - | - "
        print(row + f"| {tf:.2f} | {fold.n_states_} | {fold.log_posterior_:,.0f} |", flush=True)
    print()


def verdict(a, b):
    if abs(a - b) < 1e-6:
        return "none: finds (b)"
    return "search" if b > a else "prior"


def diagnosis(name, env, traj, em, lambdas, alpha=1.0):
    """Print the table; return the fitted models {(search, lambda): model}."""
    print(f"### {name}: {env.n_states} cells, {env.n_obs} colours, {traj.n_episodes:,} episodes x "
          f"{traj.episode_length} moves (prior_weight {alpha})\n")
    print("| structure prior | (a) pairs, incremental: states | log post. | (a') fold: states | log post. "
          "| (b) true world | (c) first order | (d) EM Viterbi paths | verdict pairs | verdict fold |")
    print("|" + "---|" * 10)
    em_paths = None if em is None else em.decode(traj)[1]
    fitted = {}
    for lam in lambdas:
        kw = dict(n_obs=env.n_obs, n_actions=env.n_actions, prior_weight=alpha, structure_prior=lam)
        b = path_log_posterior(traj, traj.states, **kw)
        c = path_log_posterior(traj, traj.obs, **kw)
        d = "-" if em_paths is None else f"{path_log_posterior(traj, em_paths, **kw):,.0f}"
        fold = BestFirstMerging(incremental=False, search="fold", structure_prior=lam, prior_weight=alpha).fit(traj)
        fitted["fold", lam] = fold
        if lam >= PAIRS_MIN_LAMBDA:
            pairs = BestFirstMerging(structure_prior=lam, prior_weight=alpha).fit(traj)
            fitted["pairs", lam] = pairs
            pa = f"{pairs.n_states_} | {pairs.log_posterior_:,.0f}"
            vp = verdict(pairs.log_posterior_, b)
        else:
            pa, vp = "not run | -", "-"
        print(f"| {lam} | {pa} | {fold.n_states_} | {fold.log_posterior_:,.0f} | {b:,.0f} | {c:,.0f} | {d} "
              f"| {vp} | {verdict(fold.log_posterior_, b)} |", flush=True)
    print()
    return fitted


def when_truth_wins(env, traj, lam=1.0):
    """First number of episodes at which the true world's posterior beats the first-order model's."""
    for n in (1, 2, 3, 5, 8, 13, 20, 30, 50, 100):
        sub = traj[:n]
        kw = dict(n_obs=env.n_obs, n_actions=env.n_actions, structure_prior=lam)
        if path_log_posterior(sub, sub.states, **kw) > path_log_posterior(sub, sub.obs, **kw):
            return n
    return None


def quality(name, env, models, test):
    print(f"### {name}: scored on {test.n_episodes} fresh walks (`evaluate_model`, smoothing 1e-3)\n")
    print("| model | states | accuracy | surprise (nats/move) | zero-prob steps (unsmoothed) |")
    print("|" + "---|" * 5)
    for label, hmm in models:
        r = evaluate_model(env, hmm, trajectories=test, smoothing=1e-3)
        r0 = evaluate_model(env, hmm, trajectories=test)
        print(f"| {label} | {hmm.n_states:,} | {r.accuracy:.3f} | {r.surprise:.3f} | {r0.zero_prob_steps} |",
              flush=True)
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="paper's world only, 300 episodes, no EM")
    args = ap.parse_args()
    n_train = 300 if args.quick else 1000
    env0 = gridworld(10, 10, 10, seed=0)
    warm = random_walk(env0, 3, 10, seed=1)  # compile the numba kernels before timing
    for kw in (dict(), dict(incremental=False), dict(incremental=False, search="fold")):
        BestFirstMerging(**kw).fit(warm)
    speed(env0, [100, 300] if args.quick else [100, 300, 1000], {100, 300})

    print("## Diagnosis: log posterior on the training data (higher is better)\n")
    for name, env in worlds(args.quick):
        traj = random_walk(env, n_train, 50, seed=0)
        test = random_walk(env, 100, 50, seed=12345)
        em = None
        if not args.quick:
            t0 = time.perf_counter()
            em = CloneHMM(n_clones=30, n_iter=150, seed=0).fit(traj, env.n_obs, env.n_actions)
            print(f"(EM fit: {time.perf_counter() - t0:.1f} s)\n")
        fitted = diagnosis(name, env, traj, em, LAMBDAS)
        n_win = when_truth_wins(env, traj)
        print(f"With structure prior 1 the true world's posterior first beats the first-order model's at "
              f"{n_win} episode(s) of data.\n")
        models = [(f"best-first, {search}, structure prior {lam}", bf.to_hmm())
                  for (search, lam), bf in fitted.items() if lam in (0.1, 1.0)]
        models.append(("first order", FirstOrderModel().fit(traj, env.n_obs, env.n_actions).to_hmm()))
        if em is not None:
            models.append(("EM, clone HMM (30 clones, 150 it.)", em.to_hmm()))
        quality(name, env, models, test)


if __name__ == "__main__":
    main()
