"""Where the fold does not hold: its cost and accuracy block by block on slipping moves and random starts.

One life per merge mode on the paper's world (colouring 0), 100 episodes of 50
moves a block, walks as in ``bench_fold.py``'s ``slip`` and ``nostart``
sections (``hmmmerge.reproduce.beyond``: with probability ``--slip`` the move
made is a random action while the recorded one is the chosen one; with
``--start random`` episodes start at uniformly random cells).  Per block: CPU
seconds, level-1 states, clusters and the online ``l2`` accuracy over the
block's last 50 episodes (no prediction counted wrong).  A life stops once it
has used ``--max-cpu`` seconds, since on such data some modes slow down block
after block.

    python benchmarks/bench_fold_limits.py --modes fold fold-noisy sf --slip 0.1
    python benchmarks/bench_fold_limits.py --modes fold fold-noisy sf --start random
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hmmmerge.agent import TwoLevelMemory  # noqa: E402
from hmmmerge.models import MERGERS  # noqa: E402
from hmmmerge.reproduce.beyond import _walk, bench_world  # noqa: E402


def life(mode: str, episodes: int, slip: float, start: str, noise: float, max_cpu: float, seed: int = 1):
    """Yield ``(episodes so far, CPU s of the block, level-1 states, clusters, l2 accuracy)`` per block."""
    env = bench_world({"world": "grid", "colouring": 0})
    walks = _walk(env, episodes, 50, np.random.default_rng(seed), start, noise, slip)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=mode, seed=0)
    used = 0.0
    for b in range(0, episodes, 100):
        cpu = time.process_time()
        agent.partial_fit(walks[b:b + 100])
        cpu = time.process_time() - cpu
        used += cpu
        acc = float(agent.history()["l2_accuracy"][-50:].mean())
        yield b + 100, cpu, agent.memory_.n_states, agent.n_clusters_, acc
        if used > max_cpu:
            return


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["fold", "fold-noisy", "sf"])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--slip", type=float, default=0.0)
    parser.add_argument("--start", choices=("fixed", "random"), default="fixed")
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--max-cpu", type=float, default=300.0, help="CPU seconds after which a life stops")
    args = parser.parse_args(argv)
    if args.episodes <= 0 or args.episodes % 100:
        parser.error("--episodes must be a positive multiple of 100")
    for name in ("slip", "noise"):
        if not 0 <= getattr(args, name) < 1:
            parser.error(f"--{name} must be in [0, 1), got {getattr(args, name)}")
    unknown = [m for m in args.modes if m not in MERGERS]
    if unknown:
        parser.error(f"unknown merge modes {unknown}; known: {sorted(MERGERS)}")
    if not args.max_cpu > 0:
        parser.error(f"--max-cpu must be positive, got {args.max_cpu}")
    print("| mode | episodes | CPU s of the block | level-1 states | clusters | online l2, last 50 |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes:
        for row in life(mode, args.episodes, args.slip, args.start, args.noise, args.max_cpu):
            print(f"| {mode} | {row[0]:,} | {row[1]:.2f} | {row[2]:,} | {row[3]:,} | {row[4]:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
