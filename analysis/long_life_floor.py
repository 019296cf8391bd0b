"""Why the random and none lives grow faster than sf: the models those modes build.

For each merge mode, the paper's agent (size 10, paper world) is fed 100
episodes at a time; every ``--every`` episodes the script records, next to the
CPU seconds of the last 100 episodes:

* level-1 states, clusters and their mean size (states per cluster);
* ``T2`` entries (the level-2 model the online predictors read);
* the mean support of the pure level-2 filter (``l2_filter``): the clusters
  holding belief after each step of 20 fixed fresh episodes, replayed through
  the agent's own kernels on its current level 2 (the agent is not changed).
  Every cluster of the support enters the prediction, so an exact filter
  touches each of them at every step;
* the CPU seconds of the online kernel (``agent_steps``: Algorithm 1 and the
  four predictors, the two level-2 beliefs included) within those 100 episodes;
* the level-1 states a sleep moved between clusters (mean over the sleeps of
  the last block, from the journal of :meth:`~hmmmerge.clusters.Clusters.changes`):
  with C explicit, a sleep writes at least that many entries.

    python analysis/long_life_floor.py [--episodes 10000] [--every 1000] [--modes sf random none] [--out DIR]

Writes ``OUT/long_life_floor.csv`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hmmmerge as hm  # noqa: E402
from hmmmerge import _agent_kernels as ak  # noqa: E402
from hmmmerge.agent import TwoLevelMemory  # noqa: E402
from hmmmerge.clusters import Clusters  # noqa: E402

FIELDS = ["mode", "episodes", "cpu_s_per_100", "online_kernel_s_per_100", "states", "clusters", "states_per_cluster", "t2_entries",
          "filter_support", "moved_per_sleep"]


def filter_support(agent, probe) -> float:
    """Mean number of clusters in the pure level-2 filter's belief over the steps of ``probe``."""
    l2 = agent.level2_.arrays
    k = l2.n_clusters
    if k == 0:
        return 0.0
    bel, scratch = ak.new_belief(k), ak.new_scratch(k, agent.n_obs)
    sizes = []
    for obs, acts in zip(probe.obs, probe.actions):
        ak._set_emitters(bel, int(obs[0]), l2)
        for a, o in zip(acts[1:], obs[1:]):
            mt, total = ak._predict(bel, int(a), l2, scratch)
            ak._condition(bel, mt, total, int(o), l2, scratch)
            if bel.size[0] == 0:
                ak._set_emitters(bel, int(o), l2)
            sizes.append(int(bel.size[0]))
    return float(np.mean(sizes))


def life(mode: str, episodes: int, every: int):
    """Yield one row (a dict of :data:`FIELDS`) every ``every`` episodes of one life."""
    env = hm.gridworld(seed=0)
    warm = TwoLevelMemory(10, 4, merge=mode, seed=1)
    warm.partial_fit(hm.random_walk(env, 30, seed=1))  # load the kernels before timing
    agent = TwoLevelMemory(10, 4, merge=mode, initial_size=10, seed=0)
    walk = np.random.default_rng(0)
    probe = hm.random_walk(env, 20, 50, seed=123)
    moved, online = [], [0.0]
    original_changes, original_steps = Clusters.changes, ak.agent_steps

    def counting_changes(self):
        got = original_changes(self)
        moved.append(len(got.moved))
        return got

    def timed_steps(*args):
        cpu = time.process_time()
        original_steps(*args)
        online[0] += time.process_time() - cpu

    Clusters.changes, ak.agent_steps = counting_changes, timed_steps
    try:
        done = 0
        while done < episodes:
            traj = hm.random_walk(env, 100, 50, seed=walk)
            moved.clear()
            online[0] = 0.0
            cpu = time.process_time()
            agent.partial_fit(traj)
            cpu = time.process_time() - cpu
            done += 100
            if done % every == 0:
                k = agent.n_clusters_
                yield {"mode": mode, "episodes": done, "cpu_s_per_100": round(cpu, 4),
                       "online_kernel_s_per_100": round(online[0], 4),
                       "states": agent.memory_.n_states, "clusters": k,
                       "states_per_cluster": round(agent.memory_.n_states / max(k, 1), 1),
                       "t2_entries": len(agent.level2_.arrays.t2_idx), "filter_support": round(filter_support(agent, probe), 1),
                       "moved_per_sleep": round(float(np.mean(moved)), 1) if moved else 0.0}
    finally:
        Clusters.changes, ak.agent_steps = original_changes, original_steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--modes", nargs="+", default=["sf", "random", "none"])
    parser.add_argument("--out", default="long_life_floor")
    args = parser.parse_args(argv)
    if args.every % 100 or args.every <= 0 or args.episodes < args.every:
        parser.error("--every must be a positive multiple of 100, at most --episodes")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for mode in args.modes:
        for row in life(mode, args.episodes, args.every):
            rows.append(row)
            print(row, flush=True)
    path = os.path.join(args.out, "long_life_floor.csv")
    with open(path + ".tmp", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(path + ".tmp", path)
    print("| " + " | ".join(FIELDS) + " |")
    print("|" + "---|" * len(FIELDS))
    for row in rows:
        print("| " + " | ".join(str(row[f]) for f in FIELDS) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
