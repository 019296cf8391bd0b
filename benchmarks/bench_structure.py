"""Benchmark: markov_radii and random_walk against plain reference implementations.

Run:  python benchmarks/bench_structure.py [--repeat N]

* ``markov_radii`` on a 100x100 gridworld with 1,000 colours (target < 1 s),
  next to a plain per-vertex networkx BFS (``nx.bfs_layers``, stopping at the
  first layer that repeats an observation); the two results must agree.
* ``random_walk`` for 1,000 episodes x 50 steps (target well under 50 ms),
  next to a plain Python loop walker (one ``random.randrange`` per step).

Times are the best of ``--repeat`` runs (the first, compiling call of
``markov_radii`` is timed separately).  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import time

import networkx as nx
import numpy as np

from hmmmerge import gridworld, markov_radii, random_walk


def reference_radii(env) -> np.ndarray:
    """Per-vertex BFS with networkx, layer by layer, checking the ball for a repeated observation."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(env.n_states))
    graph.add_edges_from(
        (u, int(env.next_state[a, u])) for a in range(env.n_actions) for u in range(env.n_states)
    )
    obs = env.obs.tolist()
    radii = np.zeros(env.n_states, dtype=np.int64)
    for v in range(env.n_states):
        shown = set()
        depth = -1
        for depth, layer in enumerate(nx.bfs_layers(graph, v)):
            layer_obs = [obs[u] for u in layer]
            if len(set(layer_obs)) != len(layer_obs) or shown.intersection(layer_obs):
                radii[v] = depth - 1
                break
            shown.update(layer_obs)
        else:
            radii[v] = depth  # the whole reachable set is Markov: the eccentricity
    return radii


def python_walk(env, n_episodes: int, episode_length: int, seed: int = 0):
    """The same protocol as random_walk, one Python step at a time."""
    rng = random.Random(seed)
    next_state = env.next_state.tolist()
    obs = env.obs.tolist()
    n_actions = env.n_actions
    all_obs, all_actions, all_states = [], [], []
    for _ in range(n_episodes):
        s = env.start
        o_row, a_row, s_row = [obs[s]], [-1], [s]
        for _ in range(episode_length):
            a = rng.randrange(n_actions)
            s = next_state[a][s]
            o_row.append(obs[s])
            a_row.append(a)
            s_row.append(s)
        all_obs.append(o_row)
        all_actions.append(a_row)
        all_states.append(s_row)
    return np.array(all_obs), np.array(all_actions), np.array(all_states)


def best_of(fn, repeat: int):
    times = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (best is kept)")
    args = parser.parse_args(argv)

    env = gridworld(100, 100, n_colours=1000, seed=0)

    t0 = time.perf_counter()
    markov_radii(env)  # first call: numba import and compile (or cache load)
    first = time.perf_counter() - t0
    t_radii, radii = best_of(lambda: markov_radii(env), args.repeat)
    t_ref, ref = best_of(lambda: reference_radii(env), 1)
    if not np.array_equal(radii, ref):
        raise SystemExit("markov_radii disagrees with the networkx reference")

    t_walk, traj = best_of(lambda: random_walk(env, 1000, 50, seed=0), args.repeat)
    t_loop, (o, a, s) = best_of(lambda: python_walk(env, 1000, 50, seed=0), max(1, args.repeat // 2))
    assert o.shape == traj.obs.shape == (1000, 51) and (a[:, 0] == -1).all()

    print(f"100x100 gridworld, 1,000 colours: Markov radius {radii.min()}, "
          f"mean {radii.mean():.2f}, max {radii.max()}; results identical to the reference: yes")
    print()
    print("| task | hmmmerge | plain reference | ratio | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| markov_radii, 100x100 grid, 1,000 colours | {t_radii * 1e3:.1f} ms "
          f"(first call {first:.2f} s) | {t_ref * 1e3:.0f} ms (networkx BFS per vertex) "
          f"| {t_ref / t_radii:.0f}x | < 1 s |")
    print(f"| random_walk, 1,000 episodes x 50 steps | {t_walk * 1e3:.2f} ms | {t_loop * 1e3:.0f} ms "
          f"(Python loop) | {t_loop / t_walk:.0f}x | well under 50 ms |")


if __name__ == "__main__":
    main()
