"""Speed of one EM (Baum-Welch) iteration of the clone HMM, the reference CSCG setup.

One random walk of 50,000 steps in a 6x8 room with 4 colours, 70 clones per
colour (280 hidden states), 4 actions.  Measured side by side in this run:

* ``hmmmerge`` -- :class:`hmmmerge.baselines.em.CloneHMM`'s iteration: numba
  forward / backward on the observed clone blocks (O(70^2) per step) and the
  expected counts summed per (action, previous colour, colour) group;
* ``dense numpy`` -- a straightforward implementation of the same iteration
  over all H states (O(H^2) per step, numpy per step), checked to give the
  same counts.

The public CSCG reference code is not run here; its published figure for this
setup is about 1.1-1.9 s per iteration (quoted in the table).  Target: <= 0.5 s.

    python benchmarks/bench_em.py [--steps 50000] [--repeats 5] [--dense-steps 50000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import hmmmerge
from hmmmerge.baselines import _em_kernels as K
from hmmmerge.baselines.em import CloneHMM, _Data, em_step


def dense_em_iteration(T, B, E, obs, acts, pseudocount):
    """One Baum-Welch iteration over all H states with numpy, one step at a time."""
    A, H, _ = T.shape
    N = len(obs)
    alpha = np.empty((N, H))
    c = np.empty(N)
    for t in range(N):
        a_t = B * E[:, obs[t]] if acts[t] < 0 else (alpha[t - 1] @ T[acts[t]]) * E[:, obs[t]]
        c[t] = a_t.sum()
        alpha[t] = a_t / c[t]
    C = np.zeros_like(T)
    Bc = np.zeros(H)
    beta = np.ones(H)
    for t in range(N - 1, -1, -1):
        if t < N - 1 and acts[t + 1] >= 0:
            w = E[:, obs[t + 1]] * beta / c[t + 1]
            C[acts[t + 1]] += np.outer(alpha[t], w) * T[acts[t + 1]]
            beta = T[acts[t + 1]] @ w
        else:
            beta = np.ones(H)
        if acts[t] < 0:
            Bc += alpha[t] * beta
    T2 = C + pseudocount
    T2 /= T2.sum(axis=2, keepdims=True)
    B2 = (Bc + pseudocount) / (Bc + pseudocount).sum()
    return float(np.log(c).sum()), T2, B2


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--clones", type=int, default=70)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dense-steps", type=int, default=None, help="run the dense peer on the first N steps only and scale up")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    env = hmmmerge.gridworld(6, 8, n_colours=4, seed=args.seed)
    traj = hmmmerge.random_walk(env, 1, args.steps, seed=args.seed)
    obs, acts = traj.obs.ravel(), traj.actions.ravel()
    O, A = env.n_obs, env.n_actions
    H = O * args.clones
    rng = np.random.default_rng(args.seed)
    T = rng.random((A, H, H))
    T /= T.sum(axis=2, keepdims=True)
    B = np.full(H, 1.0 / H)
    pc = 1e-3

    # ---- hmmmerge: the kernels as fit() runs them (compile excluded)
    data = _Data(K, obs, acts, np.full(O, args.clones))
    em_step(data, T, B, pc)  # numba compile / cache load, group layout
    data.viterbi(T, B)
    walls, cpus = [], []
    for _ in range(args.repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        ll_fast, T_fast, B_fast = em_step(data, T, B, pc)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    ours, ours_cpu = float(np.median(walls)), float(np.median(cpus))
    w0, c0 = time.perf_counter(), time.process_time()
    data.viterbi(T, B)
    vit, vit_cpu = time.perf_counter() - w0, time.process_time() - c0
    # whole fit() including input checks, layout and initialisation, per iteration
    n_fit = 5
    w0, c0 = time.perf_counter(), time.process_time()
    CloneHMM(n_clones=args.clones, n_iter=n_fit, pseudocount=pc, tol=0.0, seed=0).fit(traj)
    fit_wall, fit_cpu = (time.perf_counter() - w0) / n_fit, (time.process_time() - c0) / n_fit

    # ---- dense numpy peer
    E = np.zeros((H, O))
    E[np.arange(H), np.repeat(np.arange(O), args.clones)] = 1.0
    n_dense = len(obs) if args.dense_steps is None else min(args.dense_steps, len(obs))
    w0, c0 = time.perf_counter(), time.process_time()
    ll_dense, T_dense, B_dense = dense_em_iteration(T, B, E, obs[:n_dense], acts[:n_dense], pc)
    dense = (time.perf_counter() - w0) * (len(obs) / n_dense)
    dense_cpu = (time.process_time() - c0) * (len(obs) / n_dense)
    if n_dense == len(obs):
        same = np.allclose(T_dense, T_fast, rtol=1e-8, atol=1e-12) and np.isclose(ll_dense, ll_fast, rtol=1e-10)
        check = f"dense peer gives the same result as hmmmerge: {same} (max |dT| = {np.abs(T_dense - T_fast).max():.1e})"
    else:
        check = f"dense peer timed on {n_dense} steps and scaled linearly"

    print(
        f"One EM iteration, 6x8 room, 4 colours x {args.clones} clones = {H} states, {A} actions, "
        f"one walk of {args.steps:,} steps (cores: {os.cpu_count()}, load avg at end {os.getloadavg()[0]:.1f}; "
        "CPU = process time, robust to other jobs on the machine).\n"
    )
    print("| implementation | wall s / iteration | CPU s / iteration | CPU vs hmmmerge |")
    print("| --- | --- | --- | --- |")
    print(f"| hmmmerge CloneHMM EM step (numba, block-restricted), median of {args.repeats} | {ours:.3f} | {ours_cpu:.3f} | 1.0x |")
    print(f"| hmmmerge CloneHMM.fit, {n_fit} iterations incl. setup, per iteration | {fit_wall:.3f} | {fit_cpu:.3f} | {fit_cpu / ours_cpu:.1f}x |")
    print(f"| dense numpy, O(H^2) per step (measured here) | {dense:.2f} | {dense_cpu:.2f} | {dense_cpu / ours_cpu:.1f}x |")
    print(f"| CSCG reference code (published, not run here) | 1.1-1.9 | | {1.1 / ours_cpu:.1f}-{1.9 / ours_cpu:.1f}x |")
    print(f"\nViterbi decoding of the same sequence (one hard-EM E-step): {vit:.3f} s wall, {vit_cpu:.3f} s CPU")
    print(check)
    print(f"target <= 0.5 s per iteration: {'met' if min(ours, ours_cpu) <= 0.5 else 'NOT met'} "
          f"(wall {ours:.3f} s, CPU {ours_cpu:.3f} s)")


if __name__ == "__main__":
    main()
