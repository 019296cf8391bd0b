"""Using learned maps: navigation in the true world (success, path length, localisation) and planning cost.

Sections (``--sections``, default all):

* ``paper`` -- the paper's world (10x10, 10 colours, balanced), 1,000 training walks of 50 moves, per seed
  (world colouring = walk seed): every learner's map navigates the same 500 start/goal pairs (random start,
  10 random moves to localise, then a random reachable colour within twice the shortest path). Columns:
  success, moves / shortest over successes, moves relative to the oracle's on the pairs both reached,
  localisation from move 10 on in those navigations (random starts) and in 500 navigations that start at
  the world's start (the start of every training walk), and the share of successful routes shorter than
  any connection from that place to that colour in the training walks ("shortcuts").  ``em-split`` (the
  catalogue's) is EM with ``split_rounds=3`` and ``merge_rounds=3`` (clones that stand for two places split
  after EM, clones that stand for one place merged).
  ``alergia`` when AALpy is installed, and ``rpni`` with ``--rpni`` (seed 0 only: 2-3 CPU minutes for
  1,000 walks).
* ``detour`` -- the same maps, after learning, in the world with passages blocked (walls put between cells
  on the way of many pairs): with and without online map updates.
* ``gallery`` -- the worlds of :data:`GALLERY` (the gallery's, a random graph, MiniGrid FourRooms with a
  3x3 and a 7x7 view) x the seeds of ``--seeds``, same protocol: oracle, fold, EM, EM with splits, first
  order; 1,000 walks of 50 moves (MiniGrid: 200 walks of 100 moves, goals are views, EM with 20 / 5
  clones per view and 50 iterations); a table per seed and a summary (range over the seeds).
* ``stochastic`` -- the paper's world with slipping moves (``with_noise(slip=...)``): learned from slipping
  walks, navigated with slips (re-planning after every observation; success within 3x the shortest path).
  Oracle, ``level2-replay`` (the learner for stochastic worlds), EM and first order: fold's map of slipping
  walks is not measured (it grows without bound on slips, see "Where fold would not hold").
* ``minigrid`` -- the gallery section on its two MiniGrid worlds only.
* ``speed`` -- CPU time of one ``plan`` call (value iteration + path) on 1,000-state maps, with the map's
  transitions used as a dense matrix beside the sparse form planning uses (same calls, same plans), and 20
  navigations on EM's 1,800-state FourRooms map both ways.

    python benchmarks/bench_planning.py [--sections paper,detour,gallery,stochastic,minigrid,speed] [--seeds 0,1,2]
        [--pairs 500] [--quick] [--rpni]

CPU times by ``time.process_time`` (the machine is shared); nothing here is asserted by the tests.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hmmmerge import random_walk
from hmmmerge.hmm import ActionHMM
from hmmmerge.planning import block_passage, distances_to, estimate_correspondence, navigate, plan

LEARNERS = ("oracle", "level2-fold", "em", "em-split", "level2-sf", "first-order")


def build(name: str, train, env, seed: int, **params):
    """The map of learner ``name`` (a name of the catalogue :data:`hmmmerge.models.MODELS`)."""
    from hmmmerge.models import build_model

    return build_model(name, train, env=env, seed=seed, **params)


def aalpy_learners() -> tuple:
    """``("alergia",)`` when AALpy is installed (rpni is run on seed 0 only: it costs minutes)."""
    from hmmmerge.models import MODELS

    return ("alergia",) if "alergia" in MODELS else ()


def walked_distance(train, n_states: int, n_obs: int) -> np.ndarray:
    """(S, O): fewest moves in any training episode from a visit of state ``s`` to a later sight of ``o``."""
    E, L = train.obs.shape
    nxt = np.full((E, L + 1, n_obs), np.iinfo(np.int64).max // 2, dtype=np.int64)
    for t in range(L - 1, -1, -1):  # next time each observation is seen, from t on
        nxt[:, t] = nxt[:, t + 1]
        nxt[np.arange(E), t, train.obs[:, t]] = t
    gap = nxt[:, :L] - np.arange(L)[None, :, None]  # (E, L, O)
    out = np.full((n_states, n_obs), np.iinfo(np.int64).max // 2, dtype=np.int64)
    np.minimum.at(out, train.states.ravel(), gap.reshape(-1, n_obs))
    return np.where(out >= np.iinfo(np.int64).max // 4, np.inf, out.astype(float))


def fit_maps(env, train, names, seed: int, params=None) -> dict:
    """``name -> (map, fit CPU seconds)``; a learner that fails is reported and left out.  ``params``: learner
    name -> parameters of its map."""
    maps = {}
    for name in names:
        c0 = time.process_time()
        try:
            maps[name] = (build(name, train, env, seed, **(params or {}).get(name, {})), time.process_time() - c0)
        except (ValueError, MemoryError) as e:  # e.g. rpni on data it refuses
            print(f"<!-- {name} not fitted: {e} -->", flush=True)
    return maps


def score_maps(env, train, maps, seed: int, pairs: int, tag: str, budget: float = 2.0,
               start="random", goals=None) -> list[dict]:
    """Every map (:func:`fit_maps`) on the same pairs; one row per map.  Localisation is scored from move 10
    on in these navigations and in as many navigations from the world's start."""
    walked = walked_distance(train, env.n_states, env.n_obs)
    rows, oracle_steps = [], None
    for name, (model, fit_s) in maps.items():
        c1 = time.process_time()
        corr = estimate_correspondence(model, train, env.n_states)
        r = navigate(env, model, pairs, seed=1000 + seed, correspondence=corr, budget=budget, start=start,
                     goals=goals)
        c2 = time.process_time()
        home = navigate(env, model, pairs, seed=1000 + seed, correspondence=corr, budget=budget, start="world",
                        goals=goals)
        ok = r.success
        short = ok & (r.steps < walked[r.starts, r.goals])
        row = {"world": tag, "seed": seed, "learner": name, "states": model.n_states, "success": r.success_rate,
               "ratio": r.path_ratio, "loc_nav": r.localisation_accuracy, "loc_home": home.localisation_accuracy,
               "success_home": home.success_rate,
               "shortcuts": float(short.sum() / max(ok.sum(), 1)), "fit_s": fit_s, "nav_s": c2 - c1,
               "_steps": r.steps, "_ok": ok, "_model": model, "_corr": corr, "_curve": r.localisation_curve,
               "_curve_home": home.localisation_curve}
        if name == "oracle":
            oracle_steps = (r.steps, ok)
        if oracle_steps is not None:
            both = ok & oracle_steps[1]
            row["vs_oracle"] = float(r.steps[both].sum() / max(oracle_steps[0][both].sum(), 1))
        rows.append(row)
    return rows


def print_rows(rows, budget: str = "2x", header: bool = True) -> None:
    if header:
        print()
        print(f"| world | seed | learner | states | success ({budget}) | moves / shortest | moves / oracle's | "
              "localisation from move 10, random start | localisation from move 10, world's start | "
              f"success ({budget}), world's start | shortcuts | fit CPU s | navigate CPU s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['world']} | {r['seed']} | {r['learner']} | {r['states']} | {r['success']:.3f} | "
              f"{r['ratio']:.3f} | "
              f"{r.get('vs_oracle', float('nan')):.3f} | {r['loc_nav']:.3f} | {r['loc_home']:.3f} | "
              f"{r['success_home']:.3f} | {r['shortcuts']:.2f} | {r['fit_s']:.1f} | {r['nav_s']:.1f} |", flush=True)


def paper(seeds, pairs: int, quick: bool, rpni: bool = False) -> list[dict]:
    from hmmmerge import world

    all_rows = []
    for seed in seeds:
        env = world("paper-grid", seed=seed)
        train = random_walk(env, 250 if quick else 1000, 50, seed=seed)
        extra = aalpy_learners() + (("rpni",) if rpni and seed == 0 and aalpy_learners() else ())
        all_rows += score_maps(env, train, fit_maps(env, train, LEARNERS + extra, seed), seed, pairs, "paper-grid")
    print_rows(all_rows)
    print_curves(all_rows)
    return all_rows


CURVE_MOVES = (0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30)


def print_curves(rows) -> None:
    """Localisation per move of the navigation episodes (move 0: the first view), random start and the world's
    start, every map beside the oracle's: the mean over the seeds of the rows."""
    print("\nLocalisation by move of the navigation episodes (random start: 10 random moves, then the goal; "
          "mean over seeds):\n")
    print("| start | learner | " + " | ".join(f"move {m}" for m in CURVE_MOVES) + " |")
    print("|---|---|" + "---|" * len(CURVE_MOVES))
    for key, start in (("_curve", "random"), ("_curve_home", "world's start")):
        for name in dict.fromkeys(r["learner"] for r in rows):
            curves = [r[key] for r in rows if r["learner"] == name]
            cells = [np.nanmean([c[m] for c in curves if m < len(c)]) if any(m < len(c) for c in curves)
                     else np.nan for m in CURVE_MOVES]
            print(f"| {start} | {name} | " + " | ".join("--" if np.isnan(v) else f"{v:.3f}" for v in cells) + " |",
                  flush=True)


def passages_on_routes(env, n_walls: int, seed: int):
    """``n_walls`` passages between neighbouring cells, drawn among those most used by shortest routes."""
    rng = np.random.default_rng(seed)
    use = {}
    for c in range(env.n_obs):
        d = distances_to(env, np.flatnonzero(env.obs == c))
        for s in range(env.n_states):
            for a in range(env.n_actions):
                t = int(env.next_state[a, s])
                if t != s and d[t] == d[s] - 1:
                    key = tuple(sorted((s, t)))
                    use[key] = use.get(key, 0) + 1
    ranked = sorted(use, key=lambda k: -use[k])[: 4 * n_walls]
    chosen = rng.choice(len(ranked), size=n_walls, replace=False)
    return [ranked[i] for i in chosen]


def detour(paper_rows, pairs: int, n_walls: int = 6) -> None:
    from hmmmerge import world

    print(f"\nDetours: {n_walls} passages blocked after learning (drawn among the 4x{n_walls} passages most used by "
          "shortest routes); success within twice the *blocked* world's shortest path.\n")
    print("| seed | learner | map updated online | success (2x) | moves / shortest | transitions removed |")
    print("|---|---|---|---|---|---|")
    for row in paper_rows:
        if row["learner"] not in ("oracle", "level2-fold", "em", "em-split"):
            continue
        env = world("paper-grid", seed=row["seed"])
        blocked = env
        for s, t in passages_on_routes(env, n_walls, row["seed"]):
            blocked = block_passage(blocked, env.nodes[s], env.nodes[t])
        for update in (False, True):
            r = navigate(blocked, row["_model"], pairs, seed=2000 + row["seed"], correspondence=row["_corr"],
                         update_map=update)
            print(f"| {row['seed']} | {row['learner']} | {'yes' if update else 'no'} | {r.success_rate:.3f} | "
                  f"{r.path_ratio:.3f} | {r.map_updates} |", flush=True)


GALLERY = ("maze", "torus", "two-rooms", "aliased-loop", "cscg-room", "random-graph", "fourrooms-3x3",
           "fourrooms-7x7")
"""The gallery section's worlds: the gallery's (but the paper's grid), bench_fold's random graph (60 states,
3 actions) and MiniGrid FourRooms with a 3x3 and MiniGrid's default 7x7 egocentric view (views are the
observations; the layout, doors and start pose drawn with the seed)."""
MINIGRID_VIEWS = {"fourrooms-3x3": 3, "fourrooms-7x7": 7}


def gallery_world(name: str, seed: int):
    """A world of :data:`GALLERY`, coloured (or laid out) with ``seed``."""
    if name in MINIGRID_VIEWS:
        from hmmmerge import from_gymnasium

        return from_gymnasium("MiniGrid-FourRooms-v0", seed=seed, agent_view_size=MINIGRID_VIEWS[name])
    from hmmmerge.reproduce.beyond import bench_world

    return bench_world({"world": name, "colouring": seed})


def em_params(env) -> dict:
    """EM's clones per view: 30 (the catalogue's) up to 10 views, 20 up to 100, 5 beyond (MiniGrid's 7x7
    view: 350-380 views, 1,800-1,900 clones); 50 iterations beyond 10 views."""
    if env.n_obs <= 10:
        return {}
    return {"n_clones": 20 if env.n_obs <= 100 else 5, "n_iter": 50}


def gallery(seeds, pairs: int, quick: bool, worlds=GALLERY) -> list[dict]:
    """Every world of ``worlds`` x seed: oracle, fold, EM, EM with splits and first order on the same pairs;
    where the training walks hardly reach some places, also from the places they visited >= 20 times (and,
    on MiniGrid, to the views they showed >= 20 times)."""
    all_rows = []
    first = True
    for name in worlds:
        for seed in seeds:
            env = gallery_world(name, seed)
            big = name in MINIGRID_VIEWS
            train = random_walk(env, (50 if quick else 200) if big else (250 if quick else 1000), 100 if big else 50,
                                seed=seed)
            params = em_params(env)
            maps = fit_maps(env, train, ("oracle", "level2-fold", "em", "em-split", "first-order"), seed,
                            params={"em": params, "em-split": params})
            tag = name if not params else f"{name} (EM: {params['n_clones']} clones per view)"
            rows = score_maps(env, train, maps, seed, pairs, tag)
            for r in rows:
                r["world_name"], r["subset"] = name, "all"
            visits = np.bincount(train.states.ravel(), minlength=env.n_states)
            if (visits < 20).any():  # walks from the start hardly reach some places: also start where they went
                well = np.flatnonzero(visits >= 20)
                seen = np.bincount(train.obs.ravel(), minlength=env.n_obs)
                views = np.flatnonzero(seen >= 20) if big else None
                label = f"{name}, starts visited >= 20 times ({len(well)} of {env.n_states})"
                if big:
                    label += f", goals among the {len(views)} views seen >= 20 times"
                more = score_maps(env, train, maps, seed, pairs, label, start=well, goals=views)
                for r in more:
                    r["world_name"], r["subset"] = name, "well visited"
                rows += more
            print_rows(rows, header=first)  # world by world (the section is long)
            first = False
            for r in rows:
                r.pop("_model"), r.pop("_corr")
            all_rows += rows
    summary(all_rows)
    return all_rows


def summary(rows) -> None:
    """Per world, subset and learner: the range over seeds of success, moves / oracle's and localisation."""
    print("\n| world | starts | learner | seeds | states | success (2x) | moves / oracle's | localisation from "
          "move 10, random start | localisation from move 10, world's start |")
    print("|---|---|---|---|---|---|---|---|---|")
    keys = []
    for r in rows:
        k = (r["world_name"], r["subset"], r["learner"])
        if k not in keys:
            keys.append(k)

    def span(vals, fmt="{:.3f}"):
        vals = [v for v in vals if np.isfinite(v)]
        if not vals:
            return "--"
        lo, hi = min(vals), max(vals)
        return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"

    for k in keys:
        sel = [r for r in rows if (r["world_name"], r["subset"], r["learner"]) == k]
        print(f"| {k[0]} | {k[1]} | {k[2]} | {len(sel)} | {span([r['states'] for r in sel], '{:.0f}')} | "
              f"{span([r['success'] for r in sel])} | {span([r.get('vs_oracle', np.nan) for r in sel])} | "
              f"{span([r['loc_nav'] for r in sel])} | {span([r['loc_home'] for r in sel])} |", flush=True)


def stochastic(pairs: int, quick: bool, slips=(0.05, 0.1)) -> None:
    from hmmmerge import world

    rows = []
    for slip in slips:
        env = world("paper-grid", seed=0).with_noise(slip=slip)
        train = random_walk(env, 250 if quick else 1000, 50, seed=0)
        maps = fit_maps(env, train, ("oracle", "level2-replay", "em", "em-split", "first-order"), 0)
        rows += score_maps(env, train, maps, 0, pairs, f"paper-grid, slip {slip}", budget=3.0)
    print("\nSlipping moves (success within 3x the shortest path):\n")
    print_rows(rows, "3x")


def _plan_times(model, goal, starts, dense: bool):
    """CPU seconds of each ``plan`` call from the given start states, and the plans; ``dense``: the map's
    transitions used as a dense (A*H, H) matrix, else as :class:`hmmmerge.planning._Transitions` stores them."""
    import hmmmerge.planning as P

    old = P._SPARSE_SHARE
    P._SPARSE_SHARE = -1.0 if dense else old
    model = ActionHMM(model.to_dense().T, model.E, model.B) if dense else model
    times, plans = [], []
    try:
        for h in starts:
            b = np.zeros(model.n_states)
            b[h] = 1.0
            c = time.process_time()
            try:
                p = plan(model, b, goal, horizon=1000)
                plans.append((p.actions.tolist(), p.states.tolist()))
            except ValueError:
                plans.append(None)
            times.append(time.process_time() - c)
    finally:
        P._SPARSE_SHARE = old
    return np.array(times), plans


def speed(repeats: int = 20, nav_pairs: int = 20) -> None:
    """One ``plan`` call on 1,000-state maps, dense path beside sparse path (same calls, same plans), and
    navigations on EM's dense 1,800-state FourRooms map.  Starts and goal states are states the map learned
    something of (a row with a move more likely than twice its least likely: not EM's unused clones, whose
    rows are the pseudocount's uniform)."""
    import hmmmerge.planning as P
    from hmmmerge import from_gymnasium, gridworld
    from hmmmerge.models import build_model

    print("\n| map | states | transitions stored | entries above the row's floor | horizon | value-iteration sweeps | "
          f"CPU ms per plan, dense (median of {repeats}) | CPU ms per plan, sparse | dense / sparse | same plans | "
          "plan length | CPU ms to scan the map (once per map) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    mg = from_gymnasium("MiniGrid-FourRooms-v0", seed=0)
    grid = gridworld(32, 32, n_colours=10, seed=0)
    mg_walks = random_walk(mg, 200, 100, seed=0)
    c = time.process_time()
    em3 = build_model("em", mg_walks, env=mg, seed=0, n_clones=3, n_iter=50)
    em_fit = time.process_time() - c
    maps = [("32x32 grid, oracle", grid.to_hmm(), 9),
            ("FourRooms, oracle", mg.to_hmm(), int(mg.obs[0])),
            ("FourRooms, fold (200 x 100 moves)", build("level2-fold", mg_walks, mg, 0), int(mg.obs[0])),
            ("FourRooms, EM 3 clones per view (200 x 100 moves)", em3, int(mg.obs[0]))]
    maps += [(label + ", goal: one state", model, None) for label, model, _ in maps]
    for label, model, colour in maps:
        rng = np.random.default_rng(0)
        dense = model.to_dense().T
        used = np.flatnonzero((dense.max(axis=2) > 2 * dense.min(axis=2)).any(axis=0))  # not EM's unused clones
        goal = ("state", int(rng.choice(used))) if colour is None else colour
        starts = rng.choice(used, size=repeats)
        t_dense, p_dense = _plan_times(model, goal, starts, dense=True)
        t_sparse, p_sparse = _plan_times(model, goal, starts, dense=False)
        c = time.process_time()
        T = P._Transitions(model)
        scan = time.process_time() - c
        above = T.S.nnz if T.kind != "dense" else model.n_actions * model.n_states ** 2
        sweeps = len(P._ValueTables(model, P._goal_weights(model, goal)[0], 1000).V) - 1
        lengths = [len(p[0]) if p else -1 for p in p_sparse]
        print(f"| {label} | {model.n_states} | {'sparse' if model.is_sparse else 'dense'} | {above} | 1000 | "
              f"{sweeps} | {1000 * np.median(t_dense):.2f} | {1000 * np.median(t_sparse):.2f} | "
              f"{np.median(t_dense) / np.median(t_sparse):.1f} | {'yes' if p_dense == p_sparse else 'NO'} | "
              f"{np.median(lengths):.0f} | {1000 * scan:.2f} |", flush=True)
    print(f"\n(EM's map: fitted in {em_fit:.1f} s of CPU.)")

    em5 = build_model("em", mg_walks, env=mg, seed=0, n_clones=5, n_iter=50)
    corr = P.estimate_correspondence(em5, mg_walks, mg.n_states)
    print(f"\n| map | states | navigations | CPU s, dense | CPU s, sparse | dense / sparse | same moves |")
    print("|---|---|---|---|---|---|---|")
    runs = {}
    for dense in (True, False):
        old = P._SPARSE_SHARE
        P._SPARSE_SHARE = -1.0 if dense else old
        try:
            c = time.process_time()
            runs[dense] = (navigate(mg, em5, nav_pairs, seed=1000, correspondence=corr), time.process_time() - c)
        finally:
            P._SPARSE_SHARE = old
    same = np.array_equal(runs[True][0].steps, runs[False][0].steps) and \
        np.array_equal(runs[True][0].success, runs[False][0].success)
    print(f"| FourRooms, EM 5 clones per view | {em5.n_states} | {nav_pairs} | {runs[True][1]:.1f} | "
          f"{runs[False][1]:.1f} | {runs[True][1] / runs[False][1]:.1f} | {'yes' if same else 'NO'} |", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", default="paper,detour,gallery,stochastic,minigrid,speed")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--pairs", type=int, default=500)
    p.add_argument("--quick", action="store_true", help="fewer training walks (a smoke run)")
    p.add_argument("--rpni", action="store_true", help="also AALpy's RPNI in the paper section (seed 0 only; "
                                                       "about 2.5 CPU minutes for 1,000 walks)")
    args = p.parse_args(argv)
    sections = args.sections.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    if "paper" in sections or "detour" in sections:
        rows = paper(seeds, args.pairs, args.quick, args.rpni)
    if "detour" in sections:
        detour(rows, args.pairs)
    if "gallery" in sections or "minigrid" in sections:
        worlds = GALLERY if "gallery" in sections else tuple(MINIGRID_VIEWS)
        gallery(seeds, args.pairs, args.quick, worlds)
    if "stochastic" in sections:
        stochastic(args.pairs, args.quick)
    if "speed" in sections:
        speed()


if __name__ == "__main__":
    main()
