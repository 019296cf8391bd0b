"""Speed of the two-level memory (issue: the two-level memory).

Measures, in one run on this machine:

1. Algorithm 1 over 1,000 episodes x 51 observations: the numba batch path vs a
   literal dict-based implementation (target: batch < 0.1 s);
2. Algorithm 2 for 5,000 clusters of a ~50,000-state memory: the numba
   set-BFS vs the same computation with scipy.sparse products (target < 1 s);
3. one full paper run (1,000 episodes, size 10, sf merges), wall time and peak
   memory (target < 10 s, < 500 MB; the authors' public code takes 220-390 s of
   CPU for it, a published figure we cannot rerun here);
4. a 10,000-episode run (about 500,000 level-1 states), time and memory.

Runs 3 and 4 execute in subprocesses so that peak RSS is theirs alone.

    python benchmarks/bench_agent.py [--skip-long]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

import hmmmerge as hm
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.successor import successor_features


def literal_algorithm_1(obs, actions):
    T, E = {}, []
    for ep_o, ep_a in zip(obs.tolist(), actions.tolist()):
        h = "start"
        for o, a in zip(ep_o, ep_a):
            nxt = T.get((h, a))
            if nxt is None or E[nxt] != o:
                nxt = len(E)
                E.append(o)
                T[(h, a)] = nxt
            h = nxt
    return len(E)


def scipy_successor_features(mem, sets, gamma=0.8, horizon=25):
    n = mem.n_states
    adj = sp.csr_matrix((n, n), dtype=bool)
    for T in mem.transition_matrices():
        adj = adj + (T > 0)
    onehot = sp.csr_matrix((np.ones(n), (np.arange(n), mem.emission)), shape=(n, mem.n_obs))
    front = sets.astype(bool).astype(np.float64)
    sf = np.zeros((sets.shape[0], mem.n_obs))
    for l in range(horizon):
        front = ((front @ adj) > 0).astype(np.float64)
        counts = np.asarray((front @ onehot).todense())
        tot = counts.sum(1, keepdims=True)
        sf += gamma**l * np.divide(counts, tot, out=np.zeros_like(counts), where=tot > 0)
    return sf


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


CHILD = """
import json, resource, sys, time
import hmmmerge as hm
from hmmmerge.agent import TwoLevelMemory
episodes = int(sys.argv[1])
env = hm.gridworld(seed=0)
traj = hm.random_walk(env, episodes, 50, seed=0)
TwoLevelMemory(10, 4).fit(hm.random_walk(env, 30, seed=1))   # compile / load the kernels
t = time.perf_counter()
agent = TwoLevelMemory(10, 4, merge="sf", initial_size=10, seed=0).fit(traj)
wall = time.perf_counter() - t
s = agent.summary()
print(json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "l1_states": s["n_first_level_states"], "clusters": s["n_clusters"],
                  "l2_accuracy": s["l2_accuracy"]}))
"""


def run_child(episodes: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(episodes)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-long", action="store_true", help="skip the 10,000-episode run")
    args = parser.parse_args()
    env = hm.gridworld(seed=0)
    traj = hm.random_walk(env, 1000, 50, seed=0)
    rows = []

    EpisodicMemory(10, 4).observe_trajectories(traj[:2])  # compile
    t_batch, _ = best_of(lambda: EpisodicMemory(10, 4).observe_trajectories(traj))
    t_dict, _ = best_of(lambda: literal_algorithm_1(traj.obs, traj.actions), repeat=1)
    rows.append(("Algorithm 1, 1,000 x 51 observations", "numba batch", t_batch, "dict loop", t_dict, "< 0.1 s"))

    mem = EpisodicMemory(10, 4)
    mem.observe_trajectories(traj)
    rng = np.random.default_rng(0)
    perm = rng.permutation(mem.n_states)[: 5000 * 9]
    rows_idx = np.repeat(np.arange(5000), 9)
    sets = sp.csr_matrix((np.ones(len(perm)), (rows_idx, perm)), shape=(5000, mem.n_states))
    successor_features(mem, sets[:2])  # compile
    t_sf, sf = best_of(lambda: successor_features(mem, sets))
    t_sp, sf_ref = best_of(lambda: scipy_successor_features(mem, sets), repeat=1)
    assert np.allclose(sf, sf_ref)
    rows.append((f"Algorithm 2, 5,000 clusters of {mem.n_states:,} states", "numba set-BFS", t_sf,
                 "scipy.sparse products", t_sp, "< 1 s"))

    print("| task | ours | time (s) | peer | time (s) | ratio | target |")
    print("|---|---|---|---|---|---|---|")
    for task, ours, t_ours, peer, t_peer, target in rows:
        print(f"| {task} | {ours} | {t_ours:.4f} | {peer} | {t_peer:.4f} | {t_peer / t_ours:.0f}x | {target} |")

    print()
    print("| run | wall (s) | peak RSS (MB) | level-1 states | clusters | l2 accuracy (last 50) |")
    print("|---|---|---|---|---|---|")
    for episodes in ([1000] if args.skip_long else [1000, 10000]):
        r = run_child(episodes)
        print(f"| {episodes:,} episodes, size 10, sf | {r['wall_s']:.2f} | {r['peak_rss_mb']:.0f} | "
              f"{r['l1_states']:,} | {r['clusters']:,} | {r['l2_accuracy']:.3f} |")
    print("\nPublished reference: the authors' code takes 220-390 s of CPU for the 1,000-episode size-10 run "
          "(REFERENCE.md); it cannot run here, so no ratio is measured for it.")


if __name__ == "__main__":
    main()
