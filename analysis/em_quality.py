"""Quality of the EM baseline (action-conditioned clone HMM) on the paper's world.

For each seed: the 10x10 gridworld with 10 colours (``gridworld(10, 10, 10,
seed=s)``), trained on 1,000 episodes of 50 random moves
(``random_walk(env, 1000, 50, seed=s)``), scored on fresh episodes
(``random_walk(env, n_test, 50, seed=10_000 + s)``): next-observation accuracy
(argmax of the predictive distribution; a step without prediction counts as
wrong) and surprise (mean ``-log P(o_t | past)`` in nats) over the 50 move
steps of each episode.  The oracle scores 1.0 / 0.

    python analysis/em_quality.py                       # defaults, seeds 0 1 2
    python analysis/em_quality.py --clones 20 --iters 300 --viterbi
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hmmmerge
from hmmmerge.models import MODELS, fit_model
from hmmmerge.evaluate import score_trajectories


def run(seed: int, args) -> dict:
    env = hmmmerge.gridworld(10, 10, 10, seed=seed)
    train = hmmmerge.random_walk(env, args.episodes, 50, seed=seed)
    test = hmmmerge.random_walk(env, args.test_episodes, 50, seed=10_000 + seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model = fit_model("em", train, env=env, seed=seed, n_clones=args.clones, n_iter=args.iters,
                      pseudocount=args.pseudocount, tol=args.tol, viterbi_refine=args.viterbi,
                      viterbi_pseudocount=args.viterbi_pseudocount, n_init=args.n_init)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    em = score_trajectories(model.to_hmm(), test)  # the move steps, unsmoothed: the project's one scoring path
    oracle = score_trajectories(env.to_hmm(), test)
    return {
        "seed": seed,
        "states": model.n_states_,
        "em_iters": model.n_iter_,
        "viterbi_iters": len(model.viterbi_log_likelihood_),
        "wall_s": wall,
        "cpu_s": cpu,
        "train_nats_per_step": -model.log_likelihood_ / train.n_steps,
        "accuracy": em.accuracy,
        "surprise": em.surprise,
        "no_prediction": em.no_prediction_share,
        "oracle": (oracle.accuracy, oracle.surprise),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    em = MODELS["em"].defaults  # the registry's defaults, as `hmmmerge evaluate` uses them
    p.add_argument("--clones", type=int, default=em["n_clones"], help="clones per colour")
    p.add_argument("--iters", type=int, default=em["n_iter"], help="max EM iterations")
    p.add_argument("--pseudocount", type=float, default=em["pseudocount"])
    # a tighter early stop than the registry's (1e-2): this script studies how good EM can get
    p.add_argument("--tol", type=float, default=1e-3, help="early stop (total nats per iteration)")
    p.add_argument("--viterbi", action="store_true", help="Viterbi (hard-EM) refinement after EM")
    p.add_argument("--viterbi-pseudocount", type=float, default=None, help="hard-EM pseudocount (default: --pseudocount)")
    p.add_argument("--n-init", type=int, default=1, help="random restarts")
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--test-episodes", type=int, default=200)
    args = p.parse_args(argv)
    print(
        f"EM clone HMM on gridworld(10, 10, 10): {args.clones} clones/colour, <= {args.iters} EM iterations, "
        f"pseudocount {args.pseudocount}, tol {args.tol}, viterbi {args.viterbi} "
        f"(pseudocount {args.viterbi_pseudocount}), restarts {args.n_init}; "
        f"{args.episodes} x 50 training moves, {args.test_episodes} x 50 fresh test moves\n"
    )
    print("| seed | states | EM iters | Viterbi iters | fit wall (s) | fit CPU (s) | train nats/step | accuracy | surprise (nats/step) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for s in args.seeds:
        r = run(s, args)
        rows.append(r)
        print(
            f"| {s} | {r['states']} | {r['em_iters']} | {r['viterbi_iters']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{r['train_nats_per_step']:.4f} | {r['accuracy']:.4f} | {r['surprise']:.4f} |",
            flush=True,
        )
    acc = np.mean([r["accuracy"] for r in rows])
    sur = np.mean([r["surprise"] for r in rows])
    print(f"| mean | | | | {np.mean([r['wall_s'] for r in rows]):.1f} | {np.mean([r['cpu_s'] for r in rows]):.1f} | | {acc:.4f} | {sur:.4f} |")
    print(f"\noracle on the same test episodes: accuracy {rows[0]['oracle'][0]:.3f}, surprise {rows[0]['oracle'][1]:.3f}")


if __name__ == "__main__":
    main()
