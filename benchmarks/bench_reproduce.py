"""Speed of the paper's runs and of `hmmmerge reproduce`, next to the authors' setup.

Measures one 1,000-episode run of the online agent per configuration (colouring 0,
seed 0, the paper's protocol) in this process, and (with ``--quick``) the wall time
of ``reproduce(quick=True)`` into a fresh folder.  The peer column quotes the CPU
seconds of one run of the authors' public code re-run on a machine like ours
(REFERENCE.md: 220-390 s for size 10, about 1,500 s for size 1); it is not run here.
The last line estimates the full protocol (15 runs per configuration) on the cores
available, from the measured single runs.

    python benchmarks/bench_reproduce.py [--configs 10:sf 1:sf ...] [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

PEER = {10: (220.0, 390.0), 1: (1500.0, 1500.0)}
ALL = ["1:sf", "1:random", "1:none", "10:sf", "10:random", "10:none", "100:sf", "100:random", "100:none"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=ALL, help="SIZE:MERGE items (default: all nine)")
    p.add_argument("--quick", action="store_true", help="also time reproduce(quick=True) in a fresh folder")
    args = p.parse_args(argv)

    from hmmmerge.reproduce.runs import learning_run

    learning_run({"colouring": 0, "seed": 0, "merge": "sf", "size": 10, "episodes": 20})  # compile numba
    print("| configuration | ours: one run, 1,000 episodes (s) | authors' code (s, quoted) | ratio |")
    print("| --- | --- | --- | --- |")
    total = 0.0
    for item in args.configs:
        size, merge = item.split(":")
        t = time.perf_counter()
        learning_run({"colouring": 0, "seed": 0, "merge": merge, "size": int(size), "episodes": 1000})
        wall = time.perf_counter() - t
        total += wall
        peer = PEER.get(int(size)) if merge == "sf" else None
        peer_s = "-" if peer is None else (f"{peer[0]:.0f}" if peer[0] == peer[1] else f"{peer[0]:.0f}-{peer[1]:.0f}")
        ratio = "-" if peer is None else f"{peer[0] / wall:.0f}-{peer[1] / wall:.0f}x" if peer[0] != peer[1] else f"{peer[0] / wall:.0f}x"
        print(f"| size {size}, {merge} | {wall:.1f} | {peer_s} | {ratio} |", flush=True)
    cores = os.cpu_count() or 1
    if len(args.configs) == len(ALL):
        print(f"\nfull protocol estimate: 15 x {total:.0f} s / {cores} cores = {15 * total / cores / 60:.1f} min "
              "(plus about 30 s of Section 3.1 runs and figures)")
    if args.quick:
        from hmmmerge.reproduce import reproduce

        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            res = reproduce(d, quick=True, progress=False)
            print(f"reproduce --quick: {time.perf_counter() - t:.1f} s wall "
                  f"(runs {res['timing']['runs_s']:.1f} s, {len(res['files'])} files)")


if __name__ == "__main__":
    main()
