"""``hmmmerge run``: the paper's online agent on one world, with its metrics."""

from __future__ import annotations

import os


def add_parser(sub) -> None:
    from .env import add_world_arguments

    p = sub.add_parser("run", help="run the two-level memory (the paper's agent) and report its metrics",
                       description="Live the paper's protocol: random-walk episodes from the start cell, "
                                   "level 1 learned online, sleeps with partitions and merges. Accuracies are "
                                   "means over the last 50 episodes; surprise is measured on fresh episodes.")
    add_world_arguments(p)
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--episode-length", type=int, default=50)
    p.add_argument("--size", type=int, default=10, help="initial cluster size (1, 10, 100 in the paper)")
    from ..models import MERGERS

    p.add_argument("--merge", choices=list(MERGERS), default="sf",
                   help="sleep consolidation: " + "; ".join(f"{name}: {e.summary}" for name, e in MERGERS.items()))
    p.add_argument("--merge-iterations", type=int, default=5)
    p.add_argument("--similarity", choices=["euclidean", "cosine", "kl", "correlation"], default=None,
                   help="similarity of successor features (sf merges; default: the merger's, euclidean)")
    p.add_argument("--literal", action="store_true",
                   help="the paper's text literally: no online connection, merges are plain unions "
                        "(default: the authors' experiment, which produced the paper's figures)")
    p.add_argument("--authors-sf", action="store_true",
                   help="successor features as the authors' code computes them (depth l weighted gamma^l, "
                        "eligible from depth 4) instead of Algorithm 2's gamma^(l-1) and depth 5")
    p.add_argument("--agent-seed", type=int, default=None,
                   help="seed of the walk, partitions and merges (default: --seed)")
    p.add_argument("--eval-episodes", type=int, default=100, help="fresh episodes for the surprise (0: skip)")
    p.add_argument("--smoothing", type=float, default=1e-3, metavar="EPS",
                   help="surprise scores (1-EPS) p + EPS/n_obs so that a zero-probability step stays finite "
                        "(default 0.001; the unsmoothed value and the count of such steps are reported too)")
    p.add_argument("--out", metavar="DIR",
                   help="write per-episode curves (history.csv), the trained memory (agent.npz) and level 2 as a "
                        "world graph (level2.json: most likely transitions; read it with hmmmerge env --graph)")
    p.add_argument("--resume", metavar="FILE",
                   help="continue a memory saved by --out (DIR/agent.npz: --episodes more episodes), or an "
                        "interrupted run from its checkpoint (DIR/checkpoint.npz: to the run's own --episodes)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="with --out: every N episodes write DIR/checkpoint.npz atomically and append the new "
                        "rows to DIR/history.csv (history streams to disk; memory stays bounded)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--progress", action="store_true",
                   help="force the progress bar on stderr (default: shown when stderr is a terminal, not under --json)")
    p.set_defaults(run=run)


def run(args) -> int:
    import sys
    import time

    from .._limits import check_count
    from .._random import as_generator
    from ..agent import TwoLevelMemory
    from ..cli import print_json
    from .env import world_from_args

    if not 0.0 < args.smoothing <= 1.0:
        raise ValueError(f"--smoothing must be in (0, 1], got {args.smoothing}")
    for name in ("episodes", "episode_length", "size", "eval_episodes", "checkpoint_every"):
        value = getattr(args, name)
        low = 0 if name in ("eval_episodes", "checkpoint_every") else 1
        if value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if args.checkpoint_every and not args.out:
        raise ValueError("--checkpoint-every needs --out DIR (where the checkpoint and history.csv go)")
    if args.agent_seed is not None and args.agent_seed < 0:
        raise ValueError(f"--agent-seed must be >= 0, got {args.agent_seed}")
    check_count("--merge-iterations", args.merge_iterations, "merge_iterations")
    env = world_from_args(args)
    check_run_memory(env, args.episodes, args.episode_length, args.eval_episodes, args.size)
    seed = args.seed if args.agent_seed is None else args.agent_seed
    start = time.perf_counter()
    target = args.episodes
    history_rows = 0
    if args.resume:
        agent = TwoLevelMemory.load(args.resume)
        if agent.n_obs != env.n_obs or agent.n_actions != env.n_actions:
            raise ValueError(f"{args.resume} was trained on another kind of world")
        run_state = getattr(agent, "saved_extra_", None)
        if run_state and "walk_rng" in run_state:  # a checkpoint: finish the interrupted run
            walk = as_generator(0)
            walk.bit_generator.state = run_state["walk_rng"]
            target = int(run_state["target_episodes"])
            history_rows = int(run_state["history_rows"])
        else:
            walk = as_generator((seed, agent.episodes_))
            target = agent.episodes_ + args.episodes
    else:
        agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=args.merge, merger=merger_from_args(args),
                               initial_size=args.size, merge_iterations=args.merge_iterations,
                               online_connect=not args.literal, seed=seed)
        agent._validate_params()  # one-line errors before any work
        walk = as_generator(seed)
    show = args.progress or (not args.json and sys.stderr.isatty())
    history = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        history = _HistoryFile(os.path.join(args.out, "history.csv"), keep_rows=history_rows if args.resume else 0)
    _live(agent, env, walk, target, args, history, show)
    wall = time.perf_counter() - start
    out = agent.summary()
    out.update(params=agent._json_params(), seed=seed, wall_s=round(wall, 3), n_states_world=env.n_states)
    if args.eval_episodes:
        out.update(_surprise(env, agent, args.eval_episodes, args.episode_length, seed, args.smoothing))
    if args.out:
        history.append(agent.pop_history())
        agent.save(os.path.join(args.out, "agent.npz"))
        if agent.n_clusters_:
            from ..cognitive_map import cognitive_map

            level2 = os.path.join(args.out, "level2.json")
            cognitive_map(agent.level2_hmm(), name=f"level 2 ({agent.merge_} merges)").save(level2)
            out["level2_graph"] = level2
        out["out"] = args.out
    if args.json:
        print_json(out)
    else:
        print(f"{agent}: {agent.episodes_} episodes, {agent.memory_.n_states} level-1 states, "
              f"{agent.n_clusters_} clusters ({wall:.1f} s)")
        for key in ("l1_accuracy", "l2_accuracy", "l2_filter_accuracy", "first_order_accuracy",
                    "no_prediction_share", "purity", "surprise"):
            if key in out:
                print(f"  {key:24s} {out[key]:.4f}")
    return 0


def merger_from_args(args):
    """The merger the flags ask for (``--similarity``, ``--literal``, ``--authors-sf`` where the mode has
    those parameters), or ``None``: ``--merge``'s merger with its defaults.

    >>> import argparse
    >>> args = argparse.Namespace(merge="sf", similarity="cosine", literal=False, authors_sf=True)
    >>> merger_from_args(args)
    SFMerger(similarity='cosine', min_depth=4, sf_scale=0.8)
    >>> merger_from_args(argparse.Namespace(merge="fold", similarity="cosine", literal=True, authors_sf=False))
    """
    from ..models import merger_with

    wanted = {"similarity": args.similarity, "split_contradictions": not args.literal}
    if args.authors_sf:
        wanted.update(sf_scale=0.8, min_depth=4)
    return merger_with(args.merge, **wanted)


def _live(agent, env, walk, target, args, history, show) -> None:
    """Live until ``agent.episodes_ == target`` in blocks of episodes, checkpointing every ``--checkpoint-every``.

    The walk of a block is drawn from the one generator ``walk`` (blocks of
    any size give the same episodes as one long walk), so a run resumed from
    a checkpoint (agent, generator state and history rows saved together)
    ends exactly as an uninterrupted one.
    """
    from ..agent import _progress
    from ..rollouts import random_walk

    every = args.checkpoint_every
    done = getattr(agent, "episodes_", 0)  # a new agent has lived no episode yet
    block = every if every else max(target - done, 1)
    if show:
        block = min(block, 100)  # the bar moves at least every 100 episodes
    bar = _progress(target, show, initial=done)
    while done < target:
        n = min(block, target - done)
        if every:
            n = min(n, every - done % every)  # land exactly on checkpoint boundaries
        agent.partial_fit(random_walk(env, n, args.episode_length, seed=walk))
        done = agent.episodes_
        bar.update(n)
        if every and done % every == 0 and done < target:
            history.append(agent.pop_history())
            history.flush()
            state = {"walk_rng": walk.bit_generator.state, "target_episodes": int(target),
                     "history_rows": history.rows}
            agent.save(os.path.join(args.out, "checkpoint.npz"), extra=state)
    bar.close()


class _HistoryFile:
    """history.csv, appended block by block; a resumed run first cuts it back to its checkpoint's rows."""

    def __init__(self, path, keep_rows: int = 0):
        self.path = path
        self.rows = 0
        self._header = None
        if keep_rows and os.path.exists(path):
            with open(path) as f:
                lines = f.readlines()
            self._header = lines[0] if lines else None
            kept = lines[: keep_rows + 1]
            if len(kept) != keep_rows + 1:
                raise ValueError(f"{path} holds {len(lines) - 1} rows, the checkpoint expects {keep_rows}")
            with open(path, "w") as f:
                f.writelines(kept)
            self.rows = keep_rows
        else:
            open(path, "w").close()

    def append(self, history) -> None:
        import numpy as np

        keys = list(history)
        lines = [] if self._header else [",".join(keys) + "\n"]
        self._header = True
        cols = [np.asarray(history[k]) for k in keys]
        for row in zip(*cols):
            lines.append(",".join(repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)
                                  for v in row) + "\n")
        with open(self.path, "a") as f:
            f.writelines(lines)
        self.rows += len(cols[0]) if cols else 0

    def flush(self) -> None:
        with open(self.path, "a") as f:
            f.flush()
            os.fsync(f.fileno())


#: memory per step of experience: the walk (obs, actions, positions), level 1 (successors per
#: action, emission, label, cluster) and the per-step predictions and draws of one fit
BYTES_PER_STEP = 16 * 8
BYTES_PER_STEP_AND_ACTION = 8


def check_run_memory(env, episodes: int, episode_length: int, eval_episodes: int, size: int) -> None:
    """Refuse a run whose experience, first-order counts or level-2 model would not fit in memory.

    Level 2 is estimated at its largest, one cluster per ``size`` level-1 states, with
    dense emissions (clusters x observations); ``--eval-episodes`` adds walks and the
    true world's dense emissions.

    >>> from hmmmerge import gridworld
    >>> check_run_memory(gridworld(), 1000, 50, 100, 10)
    >>> check_run_memory(gridworld(), 10**9, 50, 100, 10)
    Traceback (most recent call last):
    ...
    hmmmerge._limits.SizeLimitError: --episodes 1000000000 x --episode-length 50 needs about ...
    """
    from .._limits import check_memory

    A, O = env.n_actions, env.n_obs
    steps = episodes * (episode_length + 1)
    per_step = BYTES_PER_STEP + BYTES_PER_STEP_AND_ACTION * A
    check_memory(f"first-order counts of {O} observations x {A} actions (--colours)", 8 * O * A * O)
    check_memory(f"--episodes {episodes} x --episode-length {episode_length}", steps * per_step)
    check_memory(f"level 2 of --episodes {episodes} x --episode-length {episode_length} at --size {size} "
                 f"with {O} observations", 8 * (steps // size + 1) * O)
    if eval_episodes:
        check_memory(f"--eval-episodes {eval_episodes} x --episode-length {episode_length}",
                     eval_episodes * (episode_length + 1) * (per_step + 8 * O) + 8 * env.n_states * O)


def _surprise(env, agent, n_episodes, episode_length, seed, smoothing) -> dict:
    """Level-2 surprise (nats per move) and accuracy of the pure level-2 filter on fresh episodes.

    ``surprise`` is the smoothed value (each prediction mixed with ``smoothing``
    of uniform, stated in the output) so that one zero-probability step does not
    make it infinite; ``surprise_unsmoothed`` is ``None`` when it is infinite,
    and ``zero_prob_steps`` counts those steps.
    """
    import math

    import numpy as np

    from ..evaluate import evaluate_model

    if agent.n_clusters_ == 0:
        return {"surprise": None, "surprise_unsmoothed": None, "zero_prob_steps": None,
                "surprise_smoothing_epsilon": smoothing}
    model = agent.level2_hmm()
    walk_seed = np.random.default_rng([seed, 7919])
    fresh = evaluate_model(env, model, n_episodes, episode_length, seed=walk_seed, smoothing=smoothing).as_dict()
    raw = evaluate_model(env, model, n_episodes, episode_length, seed=np.random.default_rng([seed, 7919])).as_dict()
    return {"surprise": fresh["surprise"], "surprise_ci": fresh["surprise_ci"],
            "surprise_smoothing_epsilon": smoothing,
            "surprise_unsmoothed": raw["surprise"] if math.isfinite(raw["surprise"]) else None,
            "zero_prob_steps": raw["zero_prob_steps"], "l2_fresh_accuracy": fresh["accuracy"]}
