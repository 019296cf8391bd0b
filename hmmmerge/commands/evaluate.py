"""``hmmmerge evaluate``: one table comparing world models on the same fresh episodes.

Every row is a model of the registry :data:`hmmmerge.models.MODELS`, built
by :func:`hmmmerge.models.build_model`; adding a model there adds a row
here (and its options as flags).  All rows are trained on the same random
walks and scored by :func:`hmmmerge.evaluate.score_trajectories` on the same
fresh walks.

Seeds: ``--seed`` picks the world's colouring (as in ``hmmmerge env``) and
also seeds the walks: training and evaluation walks come from two
independent streams spawned from ``numpy.random.SeedSequence(seed)``.
"""

from __future__ import annotations

import argparse
import time

from .._validation import check_float, check_int
from ..models import MODELS, build_model
from .env import add_world_arguments, world_from_args

#: the model-quality keys of each ``--json`` row (besides ``model`` and the times ``fit_s``, ``score_s``, ``wall_s``)
SCORE_KEYS = ("accuracy", "surprise", "surprise_ci", "mean_true_prob", "no_prediction_share", "zero_prob_steps",
              "log_likelihood", "n_states")


def experiment_generators(seed: int):
    """Independent Generators for the training walks and the evaluation walks of ``seed``."""
    import numpy as np

    train, evaluation = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(train), np.random.default_rng(evaluation)


def _cli_number(kind, name: str | None = None, **bounds):
    """An argparse type: ``kind`` (int or float) parsed from text and range-checked like the library does.

    The error names the library parameter ``name`` when given.
    """
    check = check_int if kind is int else check_float

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        try:
            return check(value, name or "value", **bounds)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value ")) from None

    return parse


_positive_int = _cli_number(int, low=1)
_non_negative = _cli_number(float, low=0)
_epsilon = _cli_number(float, low=0, high=1, low_open=True)


def model_flags() -> dict:
    """CLI flag -> (option, default) of every model option in the registry (a flag shared by models once)."""
    out = {}
    for entry in MODELS.values():
        for option in entry.options:
            default = entry.defaults[option.param]
            if out.setdefault(option.flag, (option, default))[1] != default:
                raise ValueError(f"{option.flag} has two defaults in the model registry")
    return out


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """One CLI flag per model option of the registry (see :func:`model_flags`)."""
    for flag, (option, default) in model_flags().items():
        kind = option.type or type(default)
        if option.choices:
            p.add_argument(flag, choices=option.choices, default=default, help=f"{option.help} (default {default})")
        else:
            parse = _cli_number(kind, option.param, low=1) if kind is int else _cli_number(kind, option.param, low=0)
            p.add_argument(flag, type=parse, default=default, help=f"{option.help} (default {default})")


def model_params(name: str, args) -> dict:
    """The registry parameters of model ``name`` set by the parsed CLI flags."""
    return {o.param: getattr(args, o.flag.lstrip("-").replace("-", "_")) for o in MODELS[name].options}


def add_experiment_arguments(p: argparse.ArgumentParser) -> None:
    """World options plus the training / scoring protocol shared by ``evaluate`` and ``baseline``."""
    add_world_arguments(p)
    p.add_argument("--episodes", type=_positive_int, default=1000,
                   help="training episodes of random walk (default 1000)")
    p.add_argument("--episode-length", type=_positive_int, default=50, help="moves per episode (default 50)")
    p.add_argument("--eval-episodes", type=_positive_int, default=100,
                   help="fresh episodes to score on (default 100)")
    p.add_argument("--smoothing", type=_epsilon, default=None, metavar="EPS",
                   help="score (1-EPS) p + EPS/n_obs instead of p; default none: a zero-probability step "
                        "makes the surprise infinite (counted in zero_prob_steps)")
    p.add_argument("--score-first", action="store_true",
                   help="also score the first observation of each episode (predicted from B)")
    add_model_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _warm_up() -> None:
    """Load the numba filter kernels (dense and sparse) so that no row's time includes it."""
    import numpy as np
    import scipy.sparse as sp

    from ..hmm import ActionHMM

    for T in (np.ones((1, 1, 1)), [sp.csr_matrix(np.ones((1, 1)))]):
        ActionHMM(T, np.ones((1, 1)), [1.0]).run_filter([[0, 0]], [[-1, 0]], predictions=True)


def run_models(env, names, args) -> list[dict]:
    """Train every named model on the same walks and score it on the same fresh walks.

    Times: ``fit_s`` (building the model), ``score_s`` (scoring), ``wall_s``
    (both); the numba kernels are loaded before any timing.
    """
    from .._limits import check_count
    from ..evaluate import score_trajectories
    from ..rollouts import random_walk
    from .run import check_run_memory

    check_count("--em-iter", args.em_iter, "em_iterations")
    check_run_memory(env, args.episodes, args.episode_length, args.eval_episodes, args.size)
    _warm_up()
    train_rng, eval_rng = experiment_generators(args.seed)
    train = random_walk(env, args.episodes, args.episode_length, seed=train_rng)
    test = random_walk(env, args.eval_episodes, args.episode_length, seed=eval_rng)
    rows = []
    import sys

    from tqdm import tqdm

    show = not getattr(args, "json", False) and sys.stderr.isatty()
    for name in tqdm(names, desc="models", unit="model", disable=not show, leave=False):
        t0 = time.perf_counter()
        model = build_model(name, train, env=env, seed=args.seed, **model_params(name, args))
        t1 = time.perf_counter()
        score = score_trajectories(model, test, smoothing=args.smoothing, score_first=args.score_first).as_dict()
        t2 = time.perf_counter()
        rows.append({"model": name, **{k: score[k] for k in SCORE_KEYS},
                     "fit_s": t1 - t0, "score_s": t2 - t1, "wall_s": t2 - t0})
    return rows


def protocol(env, args) -> dict:
    """The settings every row shares, for the JSON output."""
    return {
        "world": {
            "n_states": env.n_states, "n_actions": env.n_actions, "n_obs": env.n_obs,
            # the world options as given (None: the default / not applicable)
            **{k: getattr(args, k, None) for k in ("grid", "world", "graph", "colours", "colouring")},
        },
        "episodes": args.episodes,
        "episode_length": args.episode_length,
        "eval_episodes": args.eval_episodes,
        "seed": args.seed,
        "smoothing": args.smoothing,
        "score_first": args.score_first,
    }


# --------------------------------------------------------------------------- command
def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="compare world models: accuracy, surprise, states",
                       description="Train each model on the same random walks and score it on the same fresh "
                                   "walks: next-observation accuracy, surprise (nats per step), no-prediction "
                                   "share, number of states.")
    add_experiment_arguments(p)
    table = [name for name, entry in MODELS.items() if entry.table]
    p.add_argument("--models", default=",".join(table),
                   help=f"comma-separated subset of {', '.join(MODELS)} (default: {', '.join(table)})")
    p.add_argument("--draw-factor-graph", metavar="PNG",
                   help="also save the two-level memory's factor graph over a 4-step window (needs pgmpy)")
    p.set_defaults(run=run)


def _parse_models(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise ValueError(f"--models: unknown {unknown or text!r}; choose from {', '.join(MODELS)}")
    return names


def _fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows) -> None:
    """Plain-text table of ``run_models`` rows."""
    head = f"{'model':<14} {'accuracy':>8} {'surprise':>9} {'95% CI':>19} {'no pred':>8} {'p=0':>6} {'states':>7} {'wall s':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ci = "-" if r["surprise_ci"] is None else f"[{r['surprise_ci'][0]:.3f}, {r['surprise_ci'][1]:.3f}]"
        print(f"{r['model']:<14} {r['accuracy']:>8.4f} {_fmt(r['surprise']):>9} {ci:>19} "
              f"{r['no_prediction_share']:>8.4f} {r['zero_prob_steps']:>6d} {r['n_states']:>7d} {r['wall_s']:>7.3f}")


def save_two_level_picture(env, path, n_steps: int = 4, seed: int = 0) -> None:
    """The two-level factor graph over a short window: level 1 = the true world, C = one cluster per colour."""
    import numpy as np

    from ..factor_graph import draw_factor_graph, two_level_factor_graph
    from ..rollouts import random_walk

    C = np.zeros((env.n_states, env.n_obs))
    C[np.arange(env.n_states), env.obs] = 1.0
    walk = random_walk(env, 1, n_steps - 1, seed=seed)
    fg, ev = two_level_factor_graph(env.to_hmm(), C, walk.obs[0], walk.actions[0])
    draw_factor_graph(fg, path, evidence=ev, title="two-level memory: level 1 (h1), clusters (h2) via C")


def run(args) -> int:
    from ..cli import print_json

    names = _parse_models(args.models)
    env = world_from_args(args)
    rows = run_models(env, names, args)
    report = protocol(env, args)
    report["models"] = rows
    if args.draw_factor_graph:
        save_two_level_picture(env, args.draw_factor_graph, seed=args.seed)
        report["factor_graph"] = args.draw_factor_graph
    if args.json:
        print_json(report)
        return 0
    print(f"world: {env.n_states} states, {env.n_actions} actions, {env.n_obs} observations; "
          f"trained on {args.episodes} episodes, scored on {args.eval_episodes} fresh episodes of "
          f"{args.episode_length} moves (seed {args.seed}; surprise in nats per scored step"
          f"{', smoothing ' + str(args.smoothing) if args.smoothing else ''})")
    print_table(rows)
    if args.draw_factor_graph:
        print(f"factor graph saved to {args.draw_factor_graph}")
    return 0
