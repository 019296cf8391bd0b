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

    from .._io import check_regular_file, make_folder
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
    history_path = os.path.join(args.out, "history.csv") if args.out else None
    keep_rows = 0
    if args.resume:  # everything checked before any file is touched
        agent, walk, target, keep_rows = _resume(args, env, seed, history_path)
    else:
        agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=args.merge, merger=merger_from_args(args),
                               initial_size=args.size, merge_iterations=args.merge_iterations,
                               online_connect=not args.literal, seed=seed)
        agent._validate_params()  # one-line errors before any work
        walk = as_generator(seed)
        if history_path is not None and os.path.lexists(history_path):
            check_regular_file(history_path, "history file")  # no FIFO / device opened for writing
    show = args.progress or (not args.json and sys.stderr.isatty())
    history = None
    if args.out:
        make_folder(args.out, "--out folder")
        history = _HistoryFile(history_path, keep_rows=keep_rows)
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
                     "history_rows": history.rows, "episode_length": int(args.episode_length)}
            agent.save(os.path.join(args.out, "checkpoint.npz"), extra=state)
    bar.close()


#: the keys of the run state a checkpoint stores in its agent file's ``extra`` (``episode_length``: since 2026-11)
RUN_STATE_KEYS = ("walk_rng", "target_episodes", "history_rows", "episode_length")


def _resume(args, env, seed, history_path):
    """Load ``--resume`` and check everything the run will rely on; returns ``(agent, walk, target, keep_rows)``.

    Nothing is written or cut here.  An agent file whose ``extra`` holds a run
    state is a checkpoint: its generator state, target and history rows must be
    valid, agree with the agent (a checkpoint is saved right after the history
    was written up to the agent's last episode) and with ``history_path``'s
    episode column.  ``keep_rows`` is the number of rows of ``history_path``
    to keep: those the agent proves were written (episodes before its last
    written one), never fewer.
    """
    from .._random import as_generator
    from ..agent import TwoLevelMemory

    src = args.resume
    agent = TwoLevelMemory.load(src)
    if agent.n_obs != env.n_obs or agent.n_actions != env.n_actions:
        raise ValueError(f"{src} was trained on another kind of world")
    written = int(getattr(agent, "_popped", 0))  # the agent's episodes already streamed to a history file
    if written > agent.episodes_:
        raise ValueError(f"{src}: meta 'popped' ({written}) is more than the agent's {agent.episodes_} episodes")
    state = getattr(agent, "saved_extra_", None)
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"{src}: meta 'extra' is a {type(state).__name__}, expected an object (a checkpoint's "
                         "run state) or null")
    checkpoint = bool(state) and any(k in state for k in RUN_STATE_KEYS)
    if not checkpoint:  # a saved memory: --episodes more
        walk = as_generator((seed, agent.episodes_))
        target = agent.episodes_ + args.episodes
        try:  # the history of this very agent (its episodes exactly) is continued, any other one replaced
            rows, later = _history_rows_written(history_path, written) if history_path else (None, False)
        except _NotThisHistory:
            rows, later = None, True
        return agent, walk, target, 0 if later or rows is None else rows
    missing = [k for k in RUN_STATE_KEYS[:3] if k not in state]
    if missing:
        raise ValueError(f"{src}: the checkpoint's run state has no {', '.join(map(repr, missing))}")
    walk = as_generator(0)
    try:
        if not isinstance(state["walk_rng"], dict) or state["walk_rng"].get("bit_generator") != "PCG64":
            raise TypeError
        walk.bit_generator.state = state["walk_rng"]
    except (TypeError, ValueError, KeyError, OverflowError):
        raise ValueError(f"{src}: the checkpoint's 'walk_rng' is not a state of the walk's random generator "
                         "(PCG64)") from None
    target, rows = state["target_episodes"], state["history_rows"]
    for key, value in (("target_episodes", target), ("history_rows", rows)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{src}: the checkpoint's {key!r} is {value!r}, expected an integer")
    if not agent.episodes_ < target:
        raise ValueError(f"{src}: the checkpoint's 'target_episodes' {target} is not more than the "
                         f"{agent.episodes_} episodes the agent has lived")
    if written != agent.episodes_:
        raise ValueError(f"{src}: not a consistent checkpoint: the agent wrote its history up to episode "
                         f"{written}, not its last episode {agent.episodes_}")
    if not 0 <= rows <= written:
        raise ValueError(f"{src}: the checkpoint's 'history_rows' {rows} is outside 0..{written} (the episodes "
                         "the agent has written)")
    length = state.get("episode_length", args.episode_length)
    if length != args.episode_length:
        raise ValueError(f"{src}: the checkpoint's run has --episode-length {length!r}; resume it with the same")
    try:  # the episodes still to live, as --episodes of a new run
        check_run_memory(env, target - agent.episodes_, args.episode_length, 0, agent.initial_size)
    except ValueError as e:
        raise ValueError(f"{src}: the checkpoint's 'target_episodes' {target} is too many: {e}") from None
    on_disk = _history_rows_written(history_path, written)[0] if history_path else None
    if on_disk is not None and on_disk != rows:
        raise ValueError(f"{history_path} holds {on_disk} rows of the episodes before the checkpoint, the "
                         f"checkpoint {src} says {rows}: not this checkpoint's history (nothing was changed)")
    return agent, walk, int(target), 0 if on_disk is None else rows


class _NotThisHistory(ValueError):
    """A history file whose rows are not those of the agent being resumed."""


def _history_rows_written(path, written: int) -> tuple:
    """``(rows, later)``: the leading rows of the history file ``path`` of episodes ``< written`` (consecutive,
    ending at ``written - 1``; ``None`` without a file) and whether rows of later episodes follow them.

    Reads only.  A folder, FIFO or device is refused (``ValueError``); rows
    that cannot be the history of an agent that wrote ``written`` episodes
    raise :class:`_NotThisHistory`.
    """
    from .._io import open_regular

    if not os.path.lexists(path):
        return None, False
    later = False
    with open_regular(path, "r", what="history file") as f:
        header = f.readline()
        if not header:
            return 0, False
        if header.split(",", 1)[0].strip() != "episode":
            raise _NotThisHistory(f"{path}: not a history file (its first column is not 'episode'); "
                                  "nothing was changed")
        count, previous = 0, None
        for k, line in enumerate(f, start=2):
            try:
                episode = int(line.split(",", 1)[0])
            except ValueError:
                raise _NotThisHistory(f"{path}: line {k} does not start with an episode number; nothing was "
                                      "changed") from None
            if episode >= written:
                later = True
                break
            if previous is not None and episode != previous + 1:
                raise _NotThisHistory(f"{path}: line {k} is episode {episode} after {previous}; nothing was "
                                      "changed")
            count, previous = count + 1, episode
    if count and previous != written - 1:
        raise _NotThisHistory(f"{path}: its rows end at episode {previous}, the agent wrote up to episode "
                              f"{written - 1}; nothing was changed")
    return count, later


class _HistoryFile:
    """history.csv, appended block by block; a resumed run keeps its first ``keep_rows`` rows (the rows the
    resumed agent wrote, checked by :func:`_resume`) and drops, atomically, the rows written after them."""

    def __init__(self, path, keep_rows: int = 0):
        from .._io import atomic_write_text, open_regular

        self.path = path
        self.rows = 0
        self._header = None
        if keep_rows:
            with open_regular(path, "r", what="history file") as f:
                lines = [f.readline() for _ in range(keep_rows + 1)]
                rest = f.read(1)
            if len(lines[-1]) == 0 or not lines[-1].endswith("\n"):
                raise ValueError(f"{path} holds fewer than {keep_rows} rows; nothing was changed")
            self._header = lines[0]
            if rest:  # rows of episodes after the checkpoint: they are lived again
                atomic_write_text(path, "".join(lines))
            self.rows = keep_rows
        else:
            atomic_write_text(path, "")

    def append(self, history) -> None:
        import numpy as np

        from .._io import open_regular

        keys = list(history)
        lines = [] if self._header else [",".join(keys) + "\n"]
        self._header = True
        cols = [np.asarray(history[k]) for k in keys]
        for row in zip(*cols):
            lines.append(",".join(repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)
                                  for v in row) + "\n")
        with open_regular(self.path, "a", what="history file") as f:
            f.writelines(lines)
        self.rows += len(cols[0]) if cols else 0

    def flush(self) -> None:
        from .._io import open_regular

        with open_regular(self.path, "a", what="history file") as f:
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
    """Level-2 surprise (nats per move) and accuracy of the pure level-2 filter on fresh episodes, and the
    oracle's (the true world's model) on the same episodes (``oracle_fresh_accuracy``, ``oracle_surprise``).

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
                "surprise_smoothing_epsilon": smoothing, "oracle_fresh_accuracy": None, "oracle_surprise": None}
    model = agent.level2_hmm()
    walk_seed = np.random.default_rng([seed, 7919])
    fresh = evaluate_model(env, model, n_episodes, episode_length, seed=walk_seed, smoothing=smoothing).as_dict()
    raw = evaluate_model(env, model, n_episodes, episode_length, seed=np.random.default_rng([seed, 7919]),
                         oracle=False).as_dict()
    return {"surprise": fresh["surprise"], "surprise_ci": fresh["surprise_ci"],
            "surprise_smoothing_epsilon": smoothing,
            "surprise_unsmoothed": raw["surprise"] if math.isfinite(raw["surprise"]) else None,
            "zero_prob_steps": raw["zero_prob_steps"], "l2_fresh_accuracy": fresh["accuracy"],
            "oracle_fresh_accuracy": fresh["oracle_accuracy"], "oracle_surprise": fresh["oracle_surprise"]}
