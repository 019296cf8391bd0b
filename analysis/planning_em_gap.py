"""Why EM's map navigates worse than fold's on the paper's world: the model or the planner?

For each seed (``world("paper-grid", seed=s)``, 1,000 training walks of 50 moves from the start, as in
``benchmarks/bench_planning.py``), the maps of the oracle, fold, EM (the catalogue's ``em``) and EM with
``split_rounds=3`` and ``merge_rounds=3`` (``em-split``):

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
3. **What em-split's localisation still misses** (``--levers``, default seed 1, where it misses 0.97): the
   500 navigations of the benchmark with em-split's map scored through a correspondence estimated on 2,000
   random-start walks instead of the training walks (is the correspondence the cause?); em-split with
   other settings (split threshold 10 nats, 6 rounds, 40 clones per view, pseudocount 1e-4); em-split's
   map re-estimated from its expected counts with a smaller pseudocount (one M-step: 1e-6); and two maps
   that are not learned: the true cells with the training walks' counted moves (pseudocount 1e-3, and 0
   with an unseen move uniform), the best any map of this data with one state per cell could do.  The
   rows where a clone stands for a rare cell and a busy one of the same colour: the cells with the most
   misses, their training visits, and the clone believed there.

    python analysis/planning_em_gap.py [--seeds 0,1,2] [--levers 1] [--no-gap]
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


def navigation_row(env, train, model, seed, corr=None):
    corr = P.estimate_correspondence(model, train, env.n_states) if corr is None else corr
    r = P.navigate(env, model, 500, seed=1000 + seed, correspondence=corr)
    cells = set(corr.states[corr.counts.sum(axis=1) >= 1].tolist())
    return r, env.n_states - len(cells)


def counted_map(env, train, pseudocount):
    """The true cells with the training walks' counted moves (rows without a count: uniform)."""
    S, A = env.n_states, env.n_actions
    C = np.zeros((A, S, S))
    np.add.at(C, (train.actions[:, 1:].ravel(), train.states[:, :-1].ravel(), train.states[:, 1:].ravel()), 1)
    T = C + pseudocount
    s = T.sum(axis=2, keepdims=True)
    T = np.where(s > 0, T / np.where(s > 0, s, 1.0), 1.0 / S)
    return ActionHMM(T, np.eye(env.n_obs)[env.obs], np.eye(S)[env.start]), int((C.sum(axis=2) == 0).sum())


def sharpened(est, train, env, pseudocount):
    """A fitted CloneHMM's map re-estimated once (one M-step) from its expected counts with ``pseudocount``."""
    from hmmmerge.baselines import _em_kernels
    from hmmmerge.baselines.em import _Data

    obs, acts, _, _ = est._sequence(train, env.n_obs, env.n_actions)
    _, C, Bc = _Data(_em_kernels, obs, acts, est.n_clones_).expected_counts(est.T_, est.B_)
    T = C + pseudocount
    T /= T.sum(axis=2, keepdims=True)
    B = (Bc + pseudocount) / (Bc + pseudocount).sum()
    return ActionHMM(T, np.eye(env.n_obs)[est.state_obs_], B)


def unseen_moves(est, train, env, visits, rare: int = 30) -> None:
    """How many (state, action) pairs the training walks never tried (< 0.5 expected moves), among em-split's
    clones that the walks use (expected occupancy >= 1) and among the true cells; and at the places visited
    fewer than ``rare`` times."""
    from hmmmerge.baselines import _em_kernels
    from hmmmerge.baselines.em import _Data

    obs, acts, _, _ = est._sequence(train, env.n_obs, env.n_actions)
    _, C, Bc = _Data(_em_kernels, obs, acts, est.n_clones_).expected_counts(est.T_, est.B_)
    used = C.sum(axis=(0, 2)) + Bc >= 1
    tried = C.sum(axis=2) >= 0.5  # (A, H)
    corr = P.estimate_correspondence(est.to_hmm(), train, env.n_states)
    at_rare = used & (visits[np.maximum(corr.states, 0)] < rare)
    cells = np.zeros((env.n_actions, env.n_states), dtype=bool)
    cells[train.actions[:, 1:].ravel(), train.states[:, :-1].ravel()] = True
    rare_cells = visits < rare
    print(f"\nUnseen moves: em-split's map: {int(used.sum())} clones used, {int((~tried[:, used]).sum())} of "
          f"{int(env.n_actions * used.sum())} (clone, action) pairs never tried, {int((~tried[:, at_rare]).sum())} of "
          f"{int(env.n_actions * at_rare.sum())} at the {int(at_rare.sum())} clones of the {int(rare_cells.sum())} "
          f"cells visited < {rare} times; the true cells: {int((~cells).sum())} of {cells.size} never tried, "
          f"{int((~cells[:, rare_cells]).sum())} of {int(env.n_actions * rare_cells.sum())} at those cells", flush=True)


def untried_as_unknown(est, train, env):
    """A navigator update in which a move never tried from a clone (< 0.5 expected moves on the training
    walks) is unknown: the belief that took it goes uniformly to the clones of the view seen next, with
    probability 1 for that view (the map's pseudocount row would give it the view's share of all clones)."""
    from hmmmerge.baselines import _em_kernels
    from hmmmerge.baselines.em import _Data

    obs, acts, _, _ = est._sequence(train, env.n_obs, env.n_actions)
    _, C, _ = _Data(_em_kernels, obs, acts, est.n_clones_).expected_counts(est.T_, est.B_)
    untried = C.sum(axis=2) < 0.5  # (A, H)

    def update(self, b, a, o):
        E = self.model.E[:, o]
        wild = untried[a]
        pred = b[~wild] @ self.model.T[a][~wild] + b[wild].sum() * E / E.sum()
        post = pred * E
        return post / post.sum(), float(post.sum())

    return update


def levers(seed: int) -> None:
    from hmmmerge.models import fit_model

    env = world("paper-grid", seed=seed)
    train = random_walk(env, 1000, 50, seed=seed)
    visits = np.bincount(train.states.ravel(), minlength=env.n_states)
    print(f"\n| seed | map | success | moves / shortest | localisation from move 10, random start | cells no state "
          "stands for | fit CPU s |")
    print("|---|---|---|---|---|---|---|")

    def row(label, model, fit_s, corr=None):
        r, uncovered = navigation_row(env, train, model, seed, corr)
        print(f"| {seed} | {label} | {r.success_rate:.3f} | {r.path_ratio:.3f} | {r.localisation_accuracy:.3f} | "
              f"{uncovered} | {fit_s} |", flush=True)

    c = time.process_time()
    est = fit_model("em-split", train, env=env, seed=seed)
    fit_s = f"{time.process_time() - c:.1f}"
    model = est.to_hmm()
    row("em-split", model, fit_s)
    c = time.process_time()
    row("em-split without merges (merge_rounds=0)", build_model("em-split", train, env=env, seed=seed,
                                                                 merge_rounds=0), f"{time.process_time() - c:.1f}")
    plain_update = P._Navigator.update
    P._Navigator.update = untried_as_unknown(est, train, env)
    try:
        row("em-split, a move never tried from a clone unknown in the filter", model, fit_s)
    finally:
        P._Navigator.update = plain_update
    fresh = random_walk(env, 2000, 50, seed=99, start="random")
    row("em-split, correspondence from 2,000 random-start walks", model, fit_s,
        P.estimate_correspondence(model, fresh, env.n_states))
    for label, params in (("em-split, threshold 10 nats", {"split_surprise": 10.0}),
                          ("em-split, threshold 10 nats, 6 rounds", {"split_surprise": 10.0, "split_rounds": 6}),
                          ("em-split, 40 clones per view", {"n_clones": 40}),
                          ("em-split, pseudocount 1e-4", {"pseudocount": 1e-4})):
        c = time.process_time()
        other = build_model("em-split", train, env=env, seed=seed, **params)
        row(label, other, f"{time.process_time() - c:.1f}")
    row("em-split, one M-step with pseudocount 1e-6", sharpened(est, train, env, 1e-6), fit_s)
    unseen_moves(est, train, env, visits)
    for pc in (1e-3, 0.0):
        ideal, unseen = counted_map(env, train, pc)
        row(f"true cells, counted moves (pseudocount {pc:g}; {unseen} of {env.n_states * env.n_actions} "
            "moves never made)", ideal, "--")

    # where em-split misses: the believed clone and the cell it stands for
    corr = P.estimate_correspondence(model, train, env.n_states)
    steps, update = [], P._Navigator.update
    world_step = P._world_step

    def recording_step(env_, s, a, rng):
        t = world_step(env_, s, a, rng)
        steps.append(t)
        return t

    beliefs = []

    def recording_update(self, b, a, o):
        nb, p = update(self, b, a, o)
        beliefs.append(nb)
        return nb, p

    P._Navigator.update, P._world_step = recording_update, recording_step
    try:
        P.navigate(env, model, 500, seed=1000 + seed, correspondence=corr)
    finally:
        P._Navigator.update, P._world_step = update, world_step
    mass = corr.counts.sum(axis=1)
    misses = {}
    for t, b in zip(steps, beliefs):
        h = P._most_probable(b)
        if corr.states[h] != t:
            misses.setdefault(t, []).append(h)
    print(f"\n| seed | cell | training visits | moves believed elsewhere | clone believed most often | its training "
          "mass (on its cell / on this cell) | the cell it stands for (visits) |")
    print("|---|---|---|---|---|---|---|")
    for t, hs in sorted(misses.items(), key=lambda kv: -len(kv[1]))[:6]:
        h = np.bincount(hs).argmax()
        print(f"| {seed} | {t} | {visits[t]} | {len(hs)} | {h} | {mass[h]:.1f} ({corr.counts[h, corr.states[h]]:.1f} / "
              f"{corr.counts[h, t]:.1f}) | {corr.states[h]} ({visits[corr.states[h]]}) |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--levers", default="1", help="seeds of part 3 (empty: none)")
    p.add_argument("--no-gap", action="store_true", help="part 3 only")
    args = p.parse_args(argv)
    if not args.no_gap:
        gap(args.seeds)
    for seed in (int(s) for s in args.levers.split(",") if s):
        levers(seed)


def gap(seeds: str) -> None:
    print("| seed | map | localisation from move 10, random-start walks | cells no state stands for | misses on "
          "conflated cells | misses on rare cells (< 20 visits) |")
    print("|---|---|---|---|---|---|")
    moves = []
    for seed in (int(s) for s in seeds.split(",")):
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
