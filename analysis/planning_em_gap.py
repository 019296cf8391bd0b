"""Why EM's map navigates worse than fold's on the paper's world: the model or the planner?

For each seed (``world("paper-grid", seed=s)``, 1,000 training walks of 50 moves from the start, as in
``benchmarks/bench_planning.py``), the maps of the oracle, fold, EM (the catalogue's ``em``) and EM with
``split_rounds=3`` (``em-split``):

1. **The filter on the same walks.**  300 walks of 50 moves from uniformly random cells; every map filters
   them from its long-run occupancy (the prior :func:`hmmmerge.planning.navigate` gives a random start) and
   its most probable state is mapped to a cell by the correspondence estimated on the training walks.
   Reported: localisation from move 10 on, the cells no learned state stands for ("uncovered": the
   majority cell of no state with mass >= 1), and the share of the misses made on cells whose usual state
   stands for another cell ("conflated") or on cells the training walks visited fewer than 20 times
   ("rare").
2. **The planner's moves.**  The 500 navigation pairs of the benchmark (random start, 10 random moves,
   then a random colour within twice the shortest path); every move is classed by whether the belief's most
   probable state stood for the true cell (sure: belief >= 0.9) and whether the move shortened the true
   distance to the goal.  With ``tolerance`` 0 (maximise the probability of arriving in time, ties
   within 1e-9 by speed) and 0.01 (the default of ``navigate``).

    python analysis/planning_em_gap.py [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hmmmerge.planning as P
from hmmmerge import random_walk, world
from hmmmerge.hmm import ActionHMM
from hmmmerge.models import build_model


def maps_of(env, train, seed):
    out = {"oracle": env.to_hmm()}
    for label, name, params in (("fold", "level2-fold", {}), ("em", "em", {}),
                                ("em-split", "em-split", {})):
        c = time.process_time()
        out[label] = build_model(name, train, env=env, seed=seed, **params)
        print(f"<!-- seed {seed}: {label} fitted in {time.process_time() - c:.1f} s CPU -->", flush=True)
    return out


def filter_report(env, train, model, corr, walks):
    """Localisation from move 10 on random-start walks (filtered from the map's occupancy) and its misses."""
    prior = P.occupancy(model) + 1e-9 / model.n_states
    loc = P.localise(ActionHMM(model.T, model.E, prior / prior.sum()), walks, corr)
    states, est = walks.states[:, 10:].ravel(), loc.estimated[:, 10:].ravel()
    usual = np.full(env.n_states, -1)
    for s in range(env.n_states):  # the learned state most often believed at cell s
        at = loc.map_states[:, 10:].ravel()[states == s]
        if at.size:
            usual[s] = np.bincount(at).argmax()
    conflated = np.array([usual[s] >= 0 and corr.states[usual[s]] != s for s in range(env.n_states)])
    visits = np.bincount(train.states.ravel(), minlength=env.n_states)
    miss = est != states
    mass = corr.counts.sum(axis=1) >= 1
    uncovered = env.n_states - len(set(corr.states[mass].tolist()))
    n_miss = max(int(miss.sum()), 1)
    return {"loc": 1 - miss.mean(), "uncovered": uncovered,
            "conflated": (miss & conflated[states]).sum() / n_miss,
            "rare": (miss & (visits[states] < 20)).sum() / n_miss}


def move_report(env, model, corr, seed, tolerance):
    """Counts of navigation moves by (localised, sure, shortening) and the navigation's scores."""
    log, pending = [], []
    action, step = P._Navigator.action, P._world_step

    def recording_action(self, b, goal, left):
        a = action(self, b, goal, left)
        pending.append((b.copy(), goal, a))
        return a

    def recording_step(env_, s, a, rng):
        if pending:
            log.append((s, *pending.pop()))
        return step(env_, s, a, rng)

    P._Navigator.action, P._world_step = recording_action, recording_step
    try:
        r = P.navigate(env, model, 500, seed=1000 + seed, correspondence=corr, tolerance=tolerance)
    finally:
        P._Navigator.action, P._world_step = action, step
    dist = {c: P.distances_to(env, np.flatnonzero(env.obs == c)) for c in range(env.n_obs)}
    out = {"right & sure": [0, 0], "right & unsure": [0, 0], "wrong place": [0, 0]}
    for s, b, goal, a in log:
        if a is None:
            continue
        h = int(b.argmax())
        key = "wrong place" if corr.states[h] != s else "right & sure" if b[h] >= 0.9 else "right & unsure"
        out[key][int(dist[goal][env.next_state[a, s]] < dist[goal][s])] += 1
    return r, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args(argv)
    print("| seed | map | localisation from move 10, random-start walks | cells no state stands for | misses on "
          "conflated cells | misses on rare cells (< 20 visits) |")
    print("|---|---|---|---|---|---|")
    moves = []
    for seed in (int(s) for s in args.seeds.split(",")):
        env = world("paper-grid", seed=seed)
        train = random_walk(env, 1000, 50, seed=seed)
        walks = random_walk(env, 300, 50, seed=77, start="random")
        for label, model in maps_of(env, train, seed).items():
            corr = P.estimate_correspondence(model, train, env.n_states)
            f = filter_report(env, train, model, corr, walks)
            print(f"| {seed} | {label} | {f['loc']:.3f} | {f['uncovered']} | {f['conflated']:.2f} | "
                  f"{f['rare']:.2f} |", flush=True)
            if label == "oracle":
                continue
            for tol in (0.0, 0.01):
                r, out = move_report(env, model, corr, seed, tol)
                moves.append((seed, label, tol, r, out))
    print("\n| seed | map | tolerance | success | moves / shortest | right place & sure: moves that did not "
          "shorten / all | right place & unsure | wrong place |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, label, tol, r, out in moves:
        cells = " | ".join(f"{v[0]} / {sum(v)}" for v in out.values())
        print(f"| {seed} | {label} | {tol} | {r.success_rate:.3f} | {r.path_ratio:.3f} | {cells} |")


if __name__ == "__main__":
    main()
