"""``hmmmerge evaluate``: one table comparing world models on the same fresh episodes.

Every row is a *model builder* ``builder(env, train, args) -> ActionHMM`` in
:data:`MODELS`; adding a model (level 1, level 2, EM, best-first merging) is
one entry there plus, if it needs them, its options in
:func:`add_experiment_arguments`.  All rows are trained on the same random
walks and scored by :func:`hmmmerge.evaluate.evaluate_model` on the same
fresh walks.

Seeds: ``--seed`` picks the world's colouring (as in ``hmmmerge env``) and
also seeds the walks: training and evaluation walks come from two
independent streams spawned from ``numpy.random.SeedSequence(seed)``.
"""

from __future__ import annotations

import argparse
import time

from .env import add_world_arguments, world_from_args


# --------------------------------------------------------------------------- model builders
def build_oracle(env, train, args):
    """The true world (``env.to_hmm()``); ignores the training data."""
    return env.to_hmm()


def build_first_order(env, train, args):
    """Observations as hidden states, action-conditioned counts (the paper's "first order")."""
    from ..baselines.first_order import FirstOrderModel

    return FirstOrderModel(pseudocount=args.pseudocount).fit(train, env.n_obs, env.n_actions).to_hmm()


def build_level1(env, train, args):
    """Level 1: the episodic memory of Algorithm 1 after the training episodes."""
    from ..episodic import EpisodicMemory

    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(train)
    return mem.to_hmm()


def _level2_builder(merge: str):
    def build(env, train, args):
        from ..agent import TwoLevelMemory

        agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, initial_size=args.size, seed=args.seed)
        return agent.fit(train).level2_hmm()

    build.__doc__ = f"Level 2 of the paper's agent (merge={merge!r}, initial size --size) after the training episodes."
    return build


def build_context(env, train, args):
    """Longest matching context of (action, observation) pairs, up to ``--context-order`` pairs."""
    from ..baselines.context import ContextModel

    return ContextModel(order=args.context_order, pseudocount=args.pseudocount).fit(
        train, env.n_obs, env.n_actions).to_hmm()


def build_em(env, train, args):
    """EM on an action-conditioned clone HMM (``--clones`` per observation, ``--em-iter`` iterations)."""
    from ..baselines.em import CloneHMM

    return CloneHMM(n_clones=args.clones, n_iter=args.em_iter, seed=args.seed).fit(
        train, env.n_obs, env.n_actions).to_hmm()


def build_bfmm(env, train, args):
    """Best-first model merging, incremental (Stolcke & Omohundro), on all or the first ``--bfmm-episodes`` episodes."""
    from ..baselines.bfmm import BestFirstMerging

    data = train if args.bfmm_episodes is None else train[: args.bfmm_episodes]
    search = getattr(args, "bfmm_search", "pairs")
    bf = BestFirstMerging(search=search, incremental=search == "pairs",
                          structure_prior=getattr(args, "bfmm_structure_prior", 1.0), seed=args.seed)
    return bf.fit(data, env.n_obs, env.n_actions).to_hmm()


#: name -> builder(env, train_trajectories, args) -> ActionHMM, in table order.
MODELS = {
    "oracle": build_oracle,
    "first-order": build_first_order,
    "context": build_context,
    "level1": build_level1,
    "level2-sf": _level2_builder("sf"),
    "level2-random": _level2_builder("random"),
    "level2-none": _level2_builder("none"),
    "em": build_em,
    "bfmm": build_bfmm,
}


def experiment_generators(seed: int):
    """Independent Generators for the training walks and the evaluation walks of ``seed``."""
    import numpy as np

    train, evaluation = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(train), np.random.default_rng(evaluation)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _epsilon(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"--smoothing must be in (0, 1], got {v}")
    return v


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
    p.add_argument("--pseudocount", type=float, default=0.0,
                   help="first-order and context models: pseudocount (default 0)")
    p.add_argument("--context-order", type=_positive_int, default=4,
                   help="context model: longest context in (action, observation) pairs (default 4)")
    p.add_argument("--size", type=_positive_int, default=10, help="level 2: initial cluster size (default 10)")
    p.add_argument("--clones", type=_positive_int, default=30, help="EM: clones per observation (default 30)")
    p.add_argument("--em-iter", type=_positive_int, default=150, help="EM: iterations (default 150)")
    p.add_argument("--bfmm-episodes", type=_positive_int, default=None,
                   help="best-first merging: use only the first N training episodes (default: all)")
    p.add_argument("--bfmm-search", choices=("pairs", "fold"), default="pairs",
                   help="best-first merging: 'pairs' (Stolcke & Omohundro, incremental; default) or 'fold' "
                        "(evidence-driven determinising folds of the prefix tree)")
    p.add_argument("--bfmm-structure-prior", type=float, default=1.0,
                   help="best-first merging: weight of the structure prior (default 1)")
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
    from ..evaluate import evaluate_model
    from ..rollouts import random_walk

    from .._limits import check_count
    from .run import check_run_memory

    if args.pseudocount < 0:
        raise ValueError(f"--pseudocount must be >= 0, got {args.pseudocount}")
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
        model = MODELS[name](env, train, args)
        t1 = time.perf_counter()
        r = evaluate_model(env, model, trajectories=test, smoothing=args.smoothing, score_first=args.score_first)
        t2 = time.perf_counter()
        rows.append({
            "model": name,
            "accuracy": r["accuracy"],
            "surprise": r["surprise"],
            "surprise_ci": r["surprise_ci"],
            "mean_true_prob": r["mean_true_prob"],
            "no_prediction_share": r["no_prediction_share"],
            "zero_prob_steps": r["zero_prob_steps"],
            "log_likelihood": r["log_likelihood"],
            "n_states": r["n_states"],
            "fit_s": t1 - t0,
            "score_s": t2 - t1,
            "wall_s": t2 - t0,
        })
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
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {', '.join(MODELS)} (default: all)")
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
