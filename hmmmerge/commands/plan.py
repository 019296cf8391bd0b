"""``hmmmerge plan``: learn a map, then navigate the true world with it.

The learner (a model of the registry :data:`hmmmerge.models.MODELS`) is
trained on ``--episodes`` random walks; its map is then used by
:func:`hmmmerge.planning.navigate` on ``--pairs`` start/goal pairs: the agent
starts at a random place, makes ``--warmup`` random moves to localise, and
must reach a random colour within ``--budget`` times the true shortest path,
re-planning in its map after every observation.  Localisation is scored
through the learned-state -> true-state correspondence estimated on the
training walks.

Seeds: ``--seed`` picks the world's colouring and seeds the training walks and
the navigation (two independent streams, as in ``hmmmerge evaluate``).
"""

from __future__ import annotations

import time

from ..models import MODELS
from .evaluate import _cli_number, _positive_int, add_model_arguments, model_params
from .env import add_world_arguments, world_from_args

#: the scores of the ``--json`` object (besides the protocol and the times)
SCORE_KEYS = ("success_rate", "path_ratio", "localisation_accuracy", "n_pairs", "mean_shortest",
              "mean_steps_success", "max_path_ratio")

_budget = _cli_number(float, "budget", low=1)
_non_negative_int = _cli_number(int, "warmup", low=0)


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="navigate the true world with a learned map: success, path ratio, localisation",
                       description="Train a learner on random walks, then navigate the true world with its map: "
                                   "plans made in the learned map, executed in the true world, re-planned after "
                                   "every observation. Reports the success rate, moves taken / shortest path "
                                   "(over successes) and localisation accuracy.")
    p.add_argument("--learner", required=True, choices=list(MODELS), metavar="NAME",
                   help="the map's learner: " + ", ".join(MODELS))
    add_world_arguments(p)
    p.add_argument("--episodes", type=_positive_int, default=1000, help="training episodes (default 1000)")
    p.add_argument("--episode-length", type=_positive_int, default=50, help="moves per episode (default 50)")
    p.add_argument("--pairs", type=_positive_int, default=200, help="start/goal pairs to navigate (default 200)")
    p.add_argument("--warmup", type=_non_negative_int, default=10,
                   help="random moves to localise before each goal is given (default 10)")
    p.add_argument("--budget", type=_budget, default=2.0,
                   help="success: the goal reached within BUDGET x the shortest path (default 2)")
    p.add_argument("--from", dest="nav_start", choices=["random", "world"], default="random",
                   help="where each navigation starts: a random place (default) or the world's start state")
    add_model_arguments(p)
    p.add_argument("--compare", action="store_true",
                   help="also navigate the same pairs with the oracle's map and the first-order map (the floor)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..models import build_model
    from ..cli import print_json
    from ..planning import estimate_correspondence, navigate
    from ..rollouts import random_walk
    from .evaluate import experiment_generators
    from .run import check_run_memory

    env = world_from_args(args)
    check_run_memory(env, args.episodes, args.episode_length, 0, getattr(args, "size", 10))
    train_rng, nav_rng = experiment_generators(args.seed)
    train = random_walk(env, args.episodes, args.episode_length, seed=train_rng)
    t0 = time.process_time()
    model = build_model(args.learner, train, env=env, seed=args.seed, **model_params(args.learner, args))
    t1 = time.process_time()
    nav_seed = int(nav_rng.integers(2**62))  # the same pairs for every map

    def navigate_with(m):
        corr = estimate_correspondence(m, train, env.n_states)
        return navigate(env, m, args.pairs, seed=nav_seed, correspondence=corr, warmup=args.warmup,
                        budget=args.budget, start=args.nav_start)

    result = navigate_with(model)
    t2 = time.process_time()
    compare = {}
    if args.compare:
        for name in ("oracle", "first-order"):
            other = model if name == args.learner else build_model(name, train, env=env, seed=args.seed)
            scores = navigate_with(other).as_dict()
            compare[name] = {k: scores[k] for k in ("success_rate", "path_ratio", "localisation_accuracy")}
            compare[name]["n_states"] = other.n_states
    scores = result.as_dict()
    report = {
        "learner": args.learner,
        "world": {"n_states": env.n_states, "n_actions": env.n_actions, "n_obs": env.n_obs,
                  **{k: getattr(args, k, None) for k in ("grid", "world", "graph", "colours", "colouring")}},
        "episodes": args.episodes, "episode_length": args.episode_length, "seed": args.seed,
        "warmup": args.warmup, "budget": args.budget, "start": args.nav_start,
        "n_states": model.n_states,
        **{k: scores[k] for k in SCORE_KEYS},
        "fit_cpu_s": t1 - t0, "navigate_cpu_s": t2 - t1,
    }
    if compare:
        report["compare"] = compare
    if args.json:
        print_json(report)
        return 0
    print(f"{args.learner}: a map of {model.n_states} states learned from {args.episodes} episodes of "
          f"{args.episode_length} moves (world: {env.n_states} states; seed {args.seed})")
    print(f"  {result.n_pairs} navigations from a {args.nav_start} start after {args.warmup} moves, "
          f"goal: a colour within {args.budget:g}x the shortest path")
    print(f"  success rate           {report['success_rate']:.4f}")
    print(f"  path ratio             {report['path_ratio']:.4f}  (moves / shortest, over successes)")
    print(f"  localisation accuracy  {report['localisation_accuracy']:.4f}  (from move {args.warmup} on)")
    for name, row in compare.items():
        print(f"  {name + ' (same pairs)':25s} success {row['success_rate']:.4f}, path ratio {row['path_ratio']:.4f}, "
              f"localisation {row['localisation_accuracy']:.4f}")
    print(f"  CPU: fit {report['fit_cpu_s']:.2f} s, navigate {report['navigate_cpu_s']:.2f} s")
    return 0
