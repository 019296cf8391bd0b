"""The single runs behind the paper's figures (sweep functions: ``config -> dict of arrays``).

Every random choice of a run derives from its configuration only (world
colouring ``colouring``, run ``seed``, partition ``partition``), so a run gives
the same arrays on any executor.

* :func:`learning_run` -- Section 4: the online agent (``TwoLevelMemory``) on
  the 10x10 world with 10 colours, per-episode metrics.
* :func:`cluster_run` -- Section 3.1: clusters of level-1 states of a given
  size and purity built from the true labels, their successor features
  against the true ones, and probe / candidate merge classification.
* :func:`baseline_run` -- the demo's offline baselines (first order, EM) scored
  on fresh episodes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["learning_run", "cluster_run", "baseline_run", "validate_learning", "validate_cluster",
           "world", "HISTORY_KEYS"]

HISTORY_KEYS = ("episode", "l1_accuracy", "l2_accuracy", "l2_filter_accuracy", "first_order_accuracy",
                "l1_no_prediction", "l2_no_prediction", "l2_filter_no_prediction", "first_order_no_prediction",
                "n_clusters", "n_states", "purity", "purity_no_singletons")


def world(colouring: int, rows: int = 10, cols: int = 10, n_colours: int = 10):
    """The paper's world: ``rows x cols`` grid, ``n_colours`` balanced colours shuffled with seed ``colouring``.

    >>> world(0).n_states, world(0).n_obs
    (100, 10)
    """
    from ..worlds import gridworld

    return gridworld(rows, cols, n_colours=n_colours, seed=int(colouring))


def _walk(env, config, episodes=None, salt=0):
    from ..rollouts import random_walk

    n = int(config["episodes"] if episodes is None else episodes)
    return random_walk(env, n, int(config.get("episode_length", 50)),
                       seed=[int(config["colouring"]), int(config["seed"]), salt])


AUTHORS_SF = {"sf_scale": 0.8, "min_depth": 4}
"""Successor features as the authors' code computes them: depth ``l`` weighted ``gamma^l`` (gamma 0.8), eligible from depth 4."""


def learning_run(config: dict) -> dict:
    """One online run of the paper's agent; returns its per-episode history.

    Config keys: ``colouring``, ``seed``, ``merge`` (sf / random / none),
    ``size``, ``episodes``, optional ``episode_length`` (50),
    ``merge_iterations`` (5), ``structure`` (also return the position-to-position
    transition matrix of the final level 2, see
    :func:`hmmmerge.evaluate.position_transition_matrix`), ``eval_episodes``
    (score the final level 2 on that many fresh episodes: accuracy and surprise).
    The walk depends on (colouring, seed) only, so the merge modes of one seed
    see the same episodes.

    >>> r = learning_run({"colouring": 0, "seed": 0, "merge": "sf", "size": 10, "episodes": 30})
    >>> r["l2_accuracy"].shape, bool(np.all((r["l2_accuracy"] >= 0) & (r["l2_accuracy"] <= 1)))
    ((30,), True)
    """
    from ..agent import TwoLevelMemory
    from ..models import merger_with

    env = world(config["colouring"])
    traj = _walk(env, config)
    merge = str(config["merge"])
    schedule = {"merge_iterations": int(config["merge_iterations"])} if "merge_iterations" in config else {}
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, initial_size=int(config["size"]),
                           merger=merger_with(merge, **AUTHORS_SF) if config.get("authors_sf") else None,
                           seed=[int(config["colouring"]), int(config["seed"]), 1], **schedule)
    agent.fit(traj)
    hist = agent.history()
    out = {k: np.asarray(hist[k], dtype=np.int64 if k == "episode" else np.float64) for k in HISTORY_KEYS}
    out["n_first_level_states"] = np.int64(agent.memory_.n_states)
    if config.get("structure") and agent.n_clusters_:
        from ..evaluate import position_transition_matrix

        n = agent.memory_.n_states
        agent.clusters_.grow(n)
        out["structure"] = position_transition_matrix(agent.level2_hmm(), agent.clusters_.assignment[:n],
                                                      agent.memory_.labels, n_positions=env.n_states)
    n_eval = int(config.get("eval_episodes", 0))
    if n_eval and agent.n_clusters_:
        out.update(_held_out(env, agent.level2_hmm(), config, n_eval, prefix="l2_heldout"))
    return out


def _held_out(env, hmm, config, n_eval, prefix) -> dict:
    """Accuracy and smoothed surprise of a model on fresh episodes (the same ones for every model of a seed)."""
    from ..evaluate import score_trajectories

    fresh = _walk(env, config, episodes=n_eval, salt=99)
    r = score_trajectories(hmm, fresh, smoothing=1e-3)
    return {f"{prefix}_accuracy": np.float64(r.accuracy), f"{prefix}_surprise": np.float64(r.surprise),
            f"{prefix}_no_prediction": np.float64(r.no_prediction_share),
            f"{prefix}_zero_prob_steps": np.int64(r.zero_prob_steps), f"{prefix}_states": np.int64(r.n_states)}


def baseline_run(config: dict) -> dict:
    """A model of the registry trained on the run's episodes, scored on fresh ones.

    Config: ``colouring``, ``seed``, ``episodes``, ``model`` (a name of
    :data:`hmmmerge.models.MODELS`, e.g. ``first-order``, ``em``,
    ``oracle``), ``eval_episodes``, and any of that model's parameters (e.g.
    ``n_clones``, ``n_iter`` for EM); the others keep the registry's defaults.

    >>> r = baseline_run({"colouring": 0, "seed": 0, "episodes": 20, "model": "oracle", "eval_episodes": 5})
    >>> float(r["heldout_accuracy"]), float(r["heldout_surprise"]) < 1e-2
    (1.0, True)
    """
    from ..models import MODELS, build_model

    env = world(config["colouring"])
    name = config["model"]
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    params = {k: config[k] for k in MODELS[name].defaults if k in config}
    train = _walk(env, config) if MODELS[name].needs_data else None
    hmm = build_model(name, train, env=env, seed=[int(config["colouring"]), int(config["seed"]), 2], **params)
    return _held_out(env, hmm, config, int(config.get("eval_episodes", 100)), prefix="heldout")


def validate_learning(config: dict, result: dict) -> None:
    """Raise ``ValueError`` unless a learning result has full-length, in-range curves."""
    n = int(config["episodes"])
    for k in HISTORY_KEYS:
        if k not in result or result[k].shape != (n,):
            raise ValueError(f"curve {k!r} missing or not of length {n}")
    for k in HISTORY_KEYS[1:9]:
        v = result[k]
        if not np.all((v >= 0) & (v <= 1)):
            raise ValueError(f"{k} outside [0, 1]")
    if config.get("structure") and "structure" not in result:
        raise ValueError("structure matrix missing")


# --------------------------------------------------------------------------- Section 3.1
def _mode(labels_of_sets: list[np.ndarray]) -> np.ndarray:
    return np.array([np.bincount(s).argmax() for s in labels_of_sets], dtype=np.int64)


def cluster_run(config: dict) -> dict:
    """Section 3.1 on one colouring and one random partition.

    A level-1 memory is built from ``memory_episodes`` random-walk episodes
    (depends on ``colouring`` only).  For each cluster size and purity, and each
    position ``x`` with enough states, a probe and a candidate cluster are
    drawn (disjoint): ``round(purity * size)`` states created in ``x`` plus
    states of the same colour created elsewhere.  Returned arrays, shape
    (positions, sizes, purities), NaN where not built:

    * ``similarity``: ``exp(-||SF_episodic(probe) - SF_true(x)||)`` (Algorithm 2 on
      the memory vs the expected SF under the uniform policy);
    * ``correct``: 1 if, among the candidates of the same colour, the most
      similar one to the probe has the probe's label (mode of the members' labels);
    * ``chance``: 1 / number of those candidates;
    * ``purity``: the probe's actual purity.

    Config keys: ``colouring``, ``partition``, ``memory_episodes``, ``sizes``,
    ``purities``, optional ``gamma`` (0.8), ``horizon`` (25).

    >>> r = cluster_run({"colouring": 0, "partition": 0, "memory_episodes": 100, "sizes": [1, 5],
    ...                  "purities": [1.0]})
    >>> r["correct"].shape, bool(np.nanmean(r["correct"][:, 1, 0]) > np.nanmean(r["chance"][:, 1, 0]))
    ((100, 2, 1), True)
    """
    from .._random import as_generator
    from ..episodic import EpisodicMemory
    from ..rollouts import random_walk
    from ..successor import pairwise_similarity, successor_features, true_successor_features

    env = world(config["colouring"])
    gamma, horizon = float(config.get("gamma", 0.8)), int(config.get("horizon", 25))
    sizes, purities = [int(s) for s in config["sizes"]], [float(p) for p in config["purities"]]
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, int(config["memory_episodes"]), 50,
                                         seed=[int(config["colouring"]), 7]))
    labels = mem.labels
    P = env.n_states
    own = [np.flatnonzero(labels == x) for x in range(P)]
    colour_states = [np.flatnonzero(mem.emission == o) for o in range(env.n_obs)]
    sf_true = true_successor_features(env, [[x] for x in range(P)], gamma, horizon)
    rng = as_generator([int(config["colouring"]), int(config["partition"]), 11])
    shape = (P, len(sizes), len(purities))
    out = {k: np.full(shape, np.nan) for k in ("similarity", "correct", "chance", "purity")}
    for si, size in enumerate(sizes):
        for ui, p in enumerate(purities):
            n_pure = int(round(p * size))
            if n_pure < 1 or abs(n_pure / size - p) > 0.1 + 1e-9:
                continue  # this purity is not reachable at this size
            n_imp = size - n_pure
            valid, probes, cands = [], [], []
            for x in range(P):
                if len(own[x]) < 2 * n_pure:
                    continue
                pure = rng.choice(own[x], 2 * n_pure, replace=False)
                pool = colour_states[env.obs[x]]
                pool = pool[labels[pool] != x]
                if len(pool) < 2 * n_imp:
                    continue
                imp = rng.choice(pool, 2 * n_imp, replace=False)
                valid.append(x)
                probes.append(np.concatenate([pure[:n_pure], imp[:n_imp]]))
                cands.append(np.concatenate([pure[n_pure:], imp[n_imp:]]))
            if not valid:
                continue
            valid = np.array(valid)
            sf_p = successor_features(mem, probes, gamma, horizon)
            sf_c = successor_features(mem, cands, gamma, horizon)
            out["similarity"][valid, si, ui] = np.exp(-np.linalg.norm(sf_p - sf_true[valid], axis=1))
            lab_p, lab_c = _mode([labels[s] for s in probes]), _mode([labels[s] for s in cands])
            out["purity"][valid, si, ui] = [np.mean(labels[s] == m) for s, m in zip(probes, lab_p)]
            colour = env.obs[valid]
            for o in np.unique(colour):
                idx = np.flatnonzero(colour == o)
                sim = pairwise_similarity(sf_p[idx], sf_c[idx])
                best = sim.argmax(axis=1)
                out["correct"][valid[idx], si, ui] = (lab_c[idx][best] == lab_p[idx]).astype(float)
                out["chance"][valid[idx], si, ui] = 1.0 / len(idx)
    out["obs"] = env.obs.astype(np.int64)
    out["states_per_position"] = np.array([len(s) for s in own], dtype=np.int64)
    return out


def validate_cluster(config: dict, result: dict) -> None:
    """Raise ``ValueError`` unless a cluster result has the expected shapes and ranges."""
    n_pos = result["obs"].shape[0] if "obs" in result else -1
    shape = (n_pos, len(config["sizes"]), len(config["purities"]))
    for k in ("similarity", "correct", "chance", "purity"):
        if k not in result or result[k].shape != shape:
            raise ValueError(f"{k!r} missing or not of shape {shape}")
        v = result[k][~np.isnan(result[k])]
        if not np.all((v >= 0) & (v <= 1)):
            raise ValueError(f"{k} outside [0, 1]")
