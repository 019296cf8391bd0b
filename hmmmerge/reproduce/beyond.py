"""Runs beyond the paper: every learner on the same walks of one world, scored by the one evaluator.

Sweep functions (``config -> dict of arrays``, see :mod:`hmmmerge.sweep`)
behind ``benchmarks/bench_fold.py`` and ``fig:beyond_paper``:

* :func:`online_run` -- the two-level agent (``merge`` = fold, sf, random,
  none) living the training walk online: per-episode curves, then its final
  level 2 scored on fresh walks;
* :func:`offline_run` -- a model fitted on the same training walk (oracle,
  first order, context, EM, AALpy's RPNI and ALERGIA), scored on the same
  fresh walks;
* :func:`context_curve_run` -- the context baseline as an online learner:
  refitted on all past episodes every ``refit_every`` episodes and scored on
  the next ones (its learning curve).

Shared configuration keys: ``world`` (a gallery name, ``"grid"`` with
``rows`` / ``cols``, or ``"random-graph"`` with ``n_states`` / ``n_actions``),
``colours`` (optional), ``colouring`` (the world's seed), ``seed`` (the
walk's), ``episodes``, ``episode_length`` (50), ``eval_episodes`` (100),
``noise`` (0: each observation replaced by a uniformly random colour with this
probability, in the training and the fresh walks alike), ``slip`` (0: with this
probability the move made is a uniformly random action while the recorded
action is the one chosen -- a world with non-deterministic transitions), ``start``
(``"fixed"``: every episode at the world's start, the paper's protocol;
``"random"``: each at a uniformly random state).  The training and fresh
walks depend on the world, ``colouring``, ``seed``, ``noise``, ``slip`` and
``start`` only, so every learner of a seed sees the same data.  Accuracy counts a step
without prediction as wrong; surprise is smoothed with epsilon 1e-3.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["bench_world", "bench_walks", "online_run", "offline_run", "context_curve_run", "random_graph",
           "OFFLINE_MODELS"]

SMOOTHING = 1e-3


def random_graph(n_states: int = 60, n_actions: int = 3, n_colours: int = 10, seed=0):
    """A random world: each (state, action) leads to a uniformly random state; balanced colours.

    >>> env = random_graph(20, 3, 4, seed=1)
    >>> env.n_states, env.n_actions, env.n_obs
    (20, 3, 4)
    """
    from ..environment import Environment
    from ..worlds import grid_colours

    rng = np.random.default_rng([int(seed), 60])
    next_state = rng.integers(0, n_states, size=(n_actions, n_states))
    env = Environment.from_arrays(next_state, grid_colours(n_states, n_colours, "balanced", seed), n_obs=n_colours)
    env.graph.graph["name"] = f"random graph ({n_states} states, {n_actions} actions)"
    return env


def bench_world(config: dict):
    """The world a configuration names (see the module docstring).

    >>> bench_world({"world": "grid", "rows": 10, "cols": 10, "colours": 4, "colouring": 0}).n_obs
    4
    """
    from ..gallery import world
    from ..worlds import gridworld

    name = str(config["world"])
    colouring = int(config.get("colouring", 0))
    kw = {} if config.get("colours") is None else {"n_colours": int(config["colours"])}
    if name == "grid":
        return gridworld(int(config.get("rows", 10)), int(config.get("cols", 10)), seed=colouring, **kw)
    if name == "random-graph":
        return random_graph(int(config.get("n_states", 60)), int(config.get("n_actions", 3)),
                            seed=colouring, **kw)
    return world(name, seed=colouring, **kw)


def _walk(env, n_episodes: int, length: int, rng, start: str, noise: float, slip: float = 0.0):
    """The walks of ``bench_fold.py``: the same process as ``random_walk(env.with_noise(slip=slip,
    obs_noise=noise), ..., start=start)`` with other draws; kept so that its cached runs stay reproducible."""
    from ..trajectories import Trajectories

    S, A = env.n_states, env.n_actions
    if start == "fixed":
        states = np.full(n_episodes, env.start, dtype=np.int64)
    elif start == "random":
        states = rng.integers(0, S, size=n_episodes)
    else:
        raise ValueError(f"start must be 'fixed' or 'random', got {start!r}")
    actions = np.full((n_episodes, length + 1), -1, dtype=np.int64)
    actions[:, 1:] = rng.integers(0, A, size=(n_episodes, length))
    path = np.empty_like(actions)
    path[:, 0] = states
    executed = actions.copy()
    if slip > 0:  # the move made is a random one; the agent records the one it meant
        slipped = rng.random(actions.shape) < slip
        executed = np.where(slipped, rng.integers(0, A, size=actions.shape), actions)
    for t in range(1, length + 1):
        path[:, t] = env.next_state[executed[:, t], path[:, t - 1]]
    obs = env.obs[path]
    if noise > 0:
        flip = rng.random(obs.shape) < noise
        obs = np.where(flip, rng.integers(0, env.n_obs, size=obs.shape), obs)
    return Trajectories(obs, actions, path)


def bench_walks(env, config: dict):
    """(training walk, fresh walk) of a configuration: the same for every learner of a seed.

    >>> env = bench_world({"world": "grid", "colouring": 0})
    >>> train, fresh = bench_walks(env, {"colouring": 0, "seed": 1, "episodes": 3, "eval_episodes": 2})
    >>> train.obs.shape, fresh.obs.shape, bool((train.states[:, 0] == env.start).all())
    ((3, 51), (2, 51), True)
    """
    noise = float(config.get("noise", 0.0))
    slip = float(config.get("slip", 0.0))
    start = str(config.get("start", "fixed"))
    length = int(config.get("episode_length", 50))
    salt = [int(config.get("colouring", 0)), int(config["seed"]), int(round(noise * 1e6)), int(start == "random")]
    if slip > 0:
        salt.append(int(round(slip * 1e6)))
    train = _walk(env, int(config["episodes"]), length, np.random.default_rng(salt + [0]), start, noise, slip)
    fresh = _walk(env, int(config.get("eval_episodes", 100)), length, np.random.default_rng(salt + [1]), start,
                  noise, slip)
    return train, fresh


def _held_out(hmm, fresh) -> dict:
    from ..evaluate import score_trajectories

    raw = score_trajectories(hmm, fresh)
    smooth = score_trajectories(hmm, fresh, smoothing=SMOOTHING)
    return {"heldout_accuracy": np.float64(raw.accuracy),
            "heldout_surprise": np.float64(smooth.surprise),
            "heldout_no_prediction": np.float64(raw.no_prediction_share),
            "heldout_zero_prob_steps": np.int64(raw.zero_prob_steps),
            "heldout_states": np.int64(raw.n_states)}


def online_run(config: dict) -> dict:
    """The two-level agent (``merge``) on the training walk; curves, final sizes and held-out scores.

    Extra keys: ``merge`` (fold / fold-noisy / sf / random / none), ``size``
    (initial cluster size, 10).  Returns the per-episode curves of
    :meth:`~hmmmerge.agent.TwoLevelMemory.history` (``l2_accuracy``, ...),
    ``fit_s`` (wall time of the online run), ``n_first_level_states``, the
    current purities and the held-out scores of level 2 (``heldout_*``; for a
    merger with a level-2 model of its own, such as fold-noisy's noise-aware
    emissions, also ``merger_heldout_*``).

    >>> r = online_run({"world": "grid", "colouring": 0, "seed": 0, "merge": "sf", "episodes": 20,
    ...                 "eval_episodes": 5})
    >>> r["l2_accuracy"].shape, 0 <= float(r["heldout_accuracy"]) <= 1
    ((20,), True)
    """
    from ..agent import TwoLevelMemory

    env = bench_world(config)
    train, fresh = bench_walks(env, config)
    size = {"initial_size": int(config["size"])} if "size" in config else {}
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=str(config["merge"]),
                           seed=[int(config.get("colouring", 0)), int(config["seed"]), 1], **size)
    t0 = time.perf_counter()
    agent.fit(train)
    fit_s = time.perf_counter() - t0
    hist = agent.history()
    keys = ("l2_accuracy", "l2_no_prediction", "l2_filter_accuracy", "l1_accuracy", "first_order_accuracy",
            "n_clusters", "n_states")
    out = {k: np.asarray(hist[k], dtype=np.float64) for k in keys}
    purity, purity_ns = agent._current_purity()
    out.update(fit_s=np.float64(fit_s), n_first_level_states=np.int64(agent.memory_.n_states),
               n_world_states=np.int64(env.n_states), purity=np.float64(purity),
               purity_no_singletons=np.float64(purity_ns), n_clusters_final=np.int64(agent.n_clusters_))
    if agent.n_clusters_:
        out.update(_held_out(agent.level2_hmm(), fresh))
        if hasattr(agent.merger_, "level2_hmm"):   # a merger with a level-2 model of its own (fold-noisy)
            own = _held_out(agent.merger_.level2_hmm(agent.memory_, agent.clusters_), fresh)
            out.update({f"merger_{k}": v for k, v in own.items()})
    return out


def _fit_offline(model: str, env, train, config: dict):
    from ..models import MODELS, build_model

    if model not in OFFLINE_MODELS:
        raise ValueError(f"model must be one of {', '.join(OFFLINE_MODELS)}, got {model!r}")
    params = {k: config[k] for k in MODELS[model].defaults if k in config}  # e.g. n_clones, order, eps
    if "model_episodes" in config:
        train = train[: int(config["model_episodes"])]
    return build_model(model, train, env=env, seed=[int(config.get("colouring", 0)), int(config["seed"]), 2],
                       **params)


def _offline_models() -> tuple[str, ...]:
    from ..models import MODELS

    return tuple(name for name in MODELS if not name.startswith("level"))


OFFLINE_MODELS = _offline_models()
"""Models :func:`offline_run` fits (``model`` key): the catalogue's models that are not the agent's levels."""


def offline_run(config: dict) -> dict:
    """A model fitted on the training walk and scored on the fresh one.

    Extra keys: ``model`` (one of :data:`OFFLINE_MODELS`); the parameters of
    that model in the catalogue (:data:`hmmmerge.models.MODELS`, e.g. ``order`` for
    context, ``n_clones`` / ``n_iter`` for EM, ``eps`` for ALERGIA; unset ones keep
    the catalogue's defaults); ``model_episodes`` (fit on the first that many
    episodes only: the cost of RPNI / ALERGIA grows fast).  A model that refuses the data (RPNI on
    noisy data or without a common start) returns ``refused = 1`` and the
    reason in ``message``.

    >>> r = offline_run({"world": "grid", "colouring": 0, "seed": 0, "model": "context", "episodes": 50,
    ...                  "eval_episodes": 5})
    >>> int(r["refused"]), 0 <= float(r["heldout_accuracy"]) <= 1, float(r["fit_s"]) > 0
    (0, True, True)
    """
    env = bench_world(config)
    train, fresh = bench_walks(env, config)
    t0 = time.perf_counter()
    try:
        hmm = _fit_offline(str(config["model"]), env, train, config)
    except ValueError as e:
        if config["model"] != "rpni":
            raise
        return {"refused": np.int64(1), "message": np.array(str(e)), "fit_s": np.float64(time.perf_counter() - t0)}
    fit_s = time.perf_counter() - t0
    out = {"refused": np.int64(0), "message": np.array(""), "fit_s": np.float64(fit_s),
           "n_world_states": np.int64(env.n_states)}
    out.update(_held_out(hmm, fresh))
    return out


def context_curve_run(config: dict) -> dict:
    """Online accuracy per episode of the context model refitted every ``refit_every`` episodes (default 50).

    Episode ``e`` is predicted by the model fitted on the episodes before the
    last refit point (none before the first: no prediction, counted wrong).

    >>> r = context_curve_run({"world": "grid", "colouring": 0, "seed": 0, "episodes": 20, "refit_every": 10})
    >>> r["accuracy"].shape, float(r["accuracy"][:10].max())
    ((20,), 0.0)
    """
    from ..baselines.context import ContextModel

    env = bench_world(config)
    train, _ = bench_walks(env, config)
    every = int(config.get("refit_every", 50))
    acc = np.zeros(train.n_episodes)
    for start in range(every, train.n_episodes, every):
        hmm = ContextModel(order=int(config.get("order", 4))).fit(train[:start], env.n_obs, env.n_actions).to_hmm()
        chunk = train[start: start + every]
        res = hmm.run_filter(chunk, predictions=True)
        guess = res.predictions[:, 1:].argmax(axis=2)
        correct = (guess == chunk.obs[:, 1:]) & ~res.no_prediction[:, 1:]
        acc[start: start + every] = correct.mean(axis=1)
    return {"accuracy": acc}
