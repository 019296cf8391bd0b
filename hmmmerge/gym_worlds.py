"""Worlds and data from Gymnasium and MiniGrid (optional extra ``[gym]``: ``pip install -e ".[gym]"``).

:func:`from_gymnasium` does one of two things:

* **MiniGrid world** (``n_episodes=None``, a MiniGrid environment): the
  layout after ``reset(seed=seed)`` becomes an
  :class:`~hmmmerge.environment.Environment` that every tool here accepts.
  States are the agent's ``(x, y, direction)`` on every cell it can stand on
  (MiniGrid's directions: 0 right, 1 down, 2 left, 3 up; ``x`` the column,
  ``y`` the row); actions are MiniGrid's own first three, 0 turn left, 1 turn
  right, 2 forward (a blocked move stays in place); an observation is the id
  of a distinct egocentric view, MiniGrid's ``obs["image"]`` for a view of
  ``agent_view_size`` cells (odd, >= 3; the environment's own by default).
  Goals and lava, the objects that end an episode, are removed (their cells
  become floor), so the world has no terminal state; other objects (walls,
  closed doors, keys, balls, boxes) block, open doors let through.  The
  start is the agent's pose after the reset.  The environment passed in is
  not modified (a copy is reset).
* **Recorded trajectories** (``n_episodes`` given, any Gymnasium environment
  with a discrete action space and hashable observations): episodes of
  ``episode_length`` moves under ``policy`` (uniformly random by default),
  as a :class:`Recording`: :class:`~hmmmerge.trajectories.Trajectories`
  (``states`` is ``None``: the true states are unknown, so purity is not
  available; accuracy and surprise need no true states) and the
  :class:`ObservationVocabulary` mapping each observation to its id, saved
  alongside by :meth:`Recording.save`.  Numpy arrays, dicts, lists and
  tuples of those are hashed by content.  An episode that terminates before
  ``episode_length`` moves is dropped and drawn again (counted in
  ``Recording.dropped``; the vocabulary keeps the observations they showed);
  a truncation (time limit) before that is an error.  Actions are recorded as
  ``action - action_space.start``, so they run from 0.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from numbers import Integral

import networkx as nx
import numpy as np

from ._io import atomic_write_text, open_regular
from ._limits import check_count, check_memory
from ._random import as_generator
from .environment import Environment
from .trajectories import Trajectories

__all__ = ["from_gymnasium", "score_recording", "ObservationVocabulary", "Recording", "MINIGRID_ACTIONS", "TERMINAL_OBJECTS"]

MINIGRID_ACTIONS = {0: "turn left", 1: "turn right", 2: "forward"}
"""The actions of a MiniGrid world: MiniGrid's own action numbers 0, 1, 2."""

TERMINAL_OBJECTS = ("goal", "lava")
"""MiniGrid object types that end an episode; :func:`from_gymnasium` removes them."""

_DIR_TO_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))  # MiniGrid: 0 right, 1 down, 2 left, 3 up
_MAX_DRAWS_PER_EPISODE = 20


def _require_gym():
    try:
        import gymnasium
    except ImportError:
        raise ImportError('from_gymnasium needs gymnasium: pip install "hmmmerge[gym]"') from None
    return gymnasium


def _is_count(v, low: int) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool) and v >= low


# ---------------------------------------------------------------------------- observation ids
def observation_key(obs):
    """A hashable key for an observation: arrays, dicts, lists and tuples by content.

    >>> observation_key(np.array([[1, 2]], dtype=np.uint8)) == observation_key(np.array([[1, 2]], dtype=np.uint8))
    True
    >>> observation_key({"b": 1, "a": [2, 3]})
    ('dict', (('a', ('list', (2, 3))), ('b', 1)))
    """
    if isinstance(obs, np.ndarray):
        return ("ndarray", obs.dtype.str, obs.shape, obs.tobytes())
    if isinstance(obs, np.generic):
        return obs.item()
    if isinstance(obs, dict):
        return ("dict", tuple(sorted((str(k), observation_key(v)) for k, v in obs.items())))
    if isinstance(obs, (list, tuple)):
        return (type(obs).__name__, tuple(observation_key(v) for v in obs))
    try:
        hash(obs)
    except TypeError:
        raise TypeError(f"observation of type {type(obs).__name__} is not hashable") from None
    return obs


def _to_json(obs):
    if isinstance(obs, (np.ndarray, np.generic)):
        return obs.tolist()
    if isinstance(obs, dict):
        return {str(k): _to_json(v) for k, v in obs.items()}
    if isinstance(obs, (list, tuple)):
        return [_to_json(v) for v in obs]
    if obs is None or isinstance(obs, (bool, int, float, str)):
        return obs
    raise TypeError(f"observation of type {type(obs).__name__} cannot be saved as JSON")


class ObservationVocabulary:
    """Observations -> ids ``0, 1, 2, ...`` in order of first appearance.

    >>> vocab = ObservationVocabulary()
    >>> [vocab.add(o) for o in ["a", "b", "a"]], len(vocab), vocab.observations
    ([0, 1, 0], 2, ['a', 'b'])
    """

    FORMAT = "hmmmerge.vocabulary"

    def __init__(self):
        self._ids: dict = {}
        self.observations: list = []

    def __len__(self) -> int:
        return len(self.observations)

    def add(self, obs) -> int:
        """The id of ``obs``, a new one if it was never seen."""
        key = observation_key(obs)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.observations)
            self.observations.append(copy.deepcopy(obs))
        return i

    def id_of(self, obs) -> int:
        """The id of an observation already in the vocabulary (``KeyError`` if not)."""
        try:
            return self._ids[observation_key(obs)]
        except KeyError:
            raise KeyError("observation not in the vocabulary") from None

    def save(self, path) -> None:
        """Write the observations, in id order, as JSON (atomically); arrays become nested lists."""
        payload = {"format": self.FORMAT, "version": 1, "observations": [_to_json(o) for o in self.observations]}
        atomic_write_text(path, json.dumps(payload))

    @classmethod
    def load(cls, path) -> "ObservationVocabulary":
        """Read a vocabulary written by :meth:`save` (observations come back as JSON values: lists, not arrays).

        >>> import os, tempfile
        >>> v = ObservationVocabulary(); _ = v.add((1, 2)); _ = v.add("x")
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = os.path.join(d, "v.json"); v.save(p); back = ObservationVocabulary.load(p)
        >>> back.observations
        [[1, 2], 'x']
        """
        path = os.fspath(path)
        try:
            with open_regular(path, "r", what="vocabulary file", encoding="utf-8") as f:
                payload = json.load(f)
            if not isinstance(payload, dict) or payload.get("format") != cls.FORMAT or payload.get("version") != 1:
                raise ValueError(f"{path}: not an observation vocabulary (format {cls.FORMAT!r}, version 1)")
            if not isinstance(payload.get("observations"), list):
                raise ValueError(f"{path}: 'observations' must be a list")
            vocab = cls()
            for k, obs in enumerate(payload["observations"]):
                if vocab.add(obs) != k:
                    raise ValueError(f"{path}: observations[{k}] repeats an earlier observation")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        except RecursionError:  # lists nested thousands deep
            raise ValueError(f"{path}: observations nested too deeply") from None
        return vocab


@dataclass(frozen=True)
class Recording:
    """Trajectories recorded from a Gymnasium environment, with their observation vocabulary.

    ``dropped`` counts the episodes that terminated early and were drawn again.
    """

    trajectories: Trajectories
    vocabulary: ObservationVocabulary
    n_actions: int
    dropped: int = 0

    @property
    def n_obs(self) -> int:
        return len(self.vocabulary)

    def save(self, path) -> None:
        """``path`` (``.npz``: ``obs``, ``actions``, ``n_actions``) and ``path`` + ``.vocabulary.json`` beside it."""
        from ._io import atomic_savez

        path = os.fspath(path)
        t = self.trajectories
        atomic_savez(path, obs=t.obs, actions=t.actions, n_actions=np.int64(self.n_actions),
                     dropped=np.int64(self.dropped))
        self.vocabulary.save(path + ".vocabulary.json")

    @classmethod
    def load(cls, path) -> "Recording":
        """Read what :meth:`save` wrote.

        >>> import os, tempfile
        >>> r = from_gymnasium("FrozenLake-v1", n_episodes=2, episode_length=0, is_slippery=False)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = os.path.join(d, "lake.npz"); r.save(p); back = Recording.load(p)
        >>> back.trajectories.obs.tolist(), back.n_actions, back.vocabulary.observations
        ([[0], [0]], 4, [0])
        """
        path = os.fspath(path)
        with open_regular(path, "rb", what="recording") as raw:
            try:
                with np.load(raw, allow_pickle=False) as data:
                    arrays = {k: data[k] for k in ("obs", "actions", "n_actions", "dropped")}
            except KeyError as e:
                raise ValueError(f"{path}: not a recording (no array {e})") from None
            except Exception as e:  # zip, CRC, zlib, header errors of a truncated, damaged or foreign file
                raise ValueError(f"{path}: not a recording ({type(e).__name__}: {e})") from None
        counts = {}
        for key, low in (("n_actions", 1), ("dropped", 0)):
            a = arrays[key]
            if a.shape != () or a.dtype.kind not in "iu" or not low <= int(a) < 2**31:
                raise ValueError(f"{path}: {key} is {a.tolist()!r}, expected an integer in {low}..{2**31 - 1}")
            counts[key] = int(a)
        obs, actions = arrays["obs"], arrays["actions"]
        for key, a in (("obs", obs), ("actions", actions)):
            if a.ndim != 2 or (a.size and a.dtype.kind not in "iu"):
                raise ValueError(f"{path}: {key} must be a 2-D integer array, got {a.dtype} of shape {a.shape}")
        try:
            traj = Trajectories(obs=obs, actions=actions)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        vocab = ObservationVocabulary.load(path + ".vocabulary.json")
        if traj.obs.size and traj.obs.max() >= len(vocab):
            raise ValueError(f"{path}: observation id {int(traj.obs.max())} is not in the vocabulary "
                             f"of {len(vocab)} observations")
        n_actions = counts["n_actions"]
        if traj.episode_length and traj.n_episodes and traj.actions[:, 1:].max() >= n_actions:
            raise ValueError(f"{path}: an action is >= n_actions = {n_actions}")
        return cls(traj, vocab, n_actions, counts["dropped"])


def score_recording(model, trajectories: Trajectories, **kwargs) -> dict:
    """Accuracy, surprise and likelihood of ``model`` on recorded (held-out) trajectories; purity unavailable.

    :func:`hmmmerge.evaluate.score_trajectories` as a dict (keyword arguments go
    there, e.g. ``smoothing``) plus ``purity: None`` and a ``purity_note``: purity
    compares clusters with true states, which a recording does not have.

    >>> from hmmmerge.baselines.first_order import FirstOrderModel
    >>> rec = from_gymnasium("CliffWalking-v1", n_episodes=20, episode_length=10, seed=0)
    >>> model = FirstOrderModel().fit(rec.trajectories[:15], rec.n_obs, rec.n_actions).to_hmm()
    >>> r = score_recording(model, rec.trajectories[15:], smoothing=1e-3)
    >>> r["accuracy"] > 0.9, r["purity"]
    (True, None)
    """
    from .evaluate import score_trajectories

    out = score_trajectories(model, trajectories, **kwargs).as_dict()
    out.update(purity=None, purity_note="unavailable: the true states of recorded trajectories are unknown")
    return out


# ---------------------------------------------------------------------------- entry point
def from_gymnasium(env, *, n_episodes=None, episode_length: int = 50, policy=None, seed=0,
                   agent_view_size=None, return_vocabulary: bool = False, **make_kwargs):
    """A MiniGrid world as an :class:`Environment`, or a :class:`Recording` from any Gymnasium environment.

    Parameters
    ----------
    env : a ``gymnasium.Env`` or an environment id for ``gymnasium.make(env, **make_kwargs)``.
    n_episodes : ``None`` to enumerate a MiniGrid world; a count to record episodes (any environment).
    episode_length : moves per recorded episode.
    policy : ``policy(observation, rng) -> action`` for recording; uniformly random by default.
    seed : seeds the reset (the MiniGrid layout), the episodes' resets and the random policy.
    agent_view_size : MiniGrid view size (odd, >= 3); the environment's own by default.
    return_vocabulary : MiniGrid world only: also return the :class:`ObservationVocabulary` of its views.

    See the module docstring for the conventions.

    >>> env = from_gymnasium("MiniGrid-Empty-5x5-v0")
    >>> env.n_states, env.n_actions, env.start_node  # 3 x 3 free cells, 4 directions; (x, y, direction)
    (36, 3, (1, 1, 0))
    >>> rec = from_gymnasium("FrozenLake-v1", n_episodes=3, episode_length=4, is_slippery=False)
    >>> rec.trajectories.obs.shape, rec.trajectories.states is None
    ((3, 5), True)
    """
    gym = _require_gym()
    if isinstance(env, str):
        try:
            import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
        except ImportError:
            pass
        try:
            env = gym.make(env, **make_kwargs)
        except gym.error.Error as e:
            raise ValueError(f"gymnasium cannot make {env!r}: {e}") from None
    elif make_kwargs:
        raise TypeError(f"keyword arguments {sorted(make_kwargs)} only apply when env is an id")
    if not isinstance(env, gym.Env):
        raise TypeError(f"env must be a gymnasium.Env or an environment id, got {type(env).__name__}")
    if not (isinstance(seed, Integral) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if n_episodes is None:
        return _minigrid_world(env, int(seed), agent_view_size, return_vocabulary)
    if agent_view_size is not None or return_vocabulary:
        raise ValueError("agent_view_size and return_vocabulary apply to MiniGrid worlds (n_episodes=None)")
    return _record(env, n_episodes, episode_length, policy, int(seed))


# ---------------------------------------------------------------------------- MiniGrid
def _minigrid_world(env, seed: int, agent_view_size, return_vocabulary: bool):
    try:
        from minigrid.minigrid_env import MiniGridEnv
    except ImportError:
        raise ImportError('MiniGrid worlds need minigrid: pip install "hmmmerge[gym]"') from None
    if not isinstance(env.unwrapped, MiniGridEnv):
        raise ValueError(
            f"{type(env.unwrapped).__name__} is not a MiniGrid environment: only MiniGrid layouts can be enumerated; "
            "pass n_episodes=... to record trajectories instead"
        )
    if agent_view_size is not None:
        if not _is_count(agent_view_size, 3) or agent_view_size % 2 == 0:
            raise ValueError(f"agent_view_size must be an odd integer >= 3, got {agent_view_size!r}")
        _check_view_size(int(agent_view_size), env.unwrapped.width, env.unwrapped.height)
    env = copy.deepcopy(env)
    env.reset(seed=seed)
    grid_env = env.unwrapped
    if agent_view_size is not None:
        grid_env.agent_view_size = int(agent_view_size)
    grid = grid_env.grid
    for x in range(grid.width):
        for y in range(grid.height):
            cell = grid.get(x, y)
            if cell is not None and cell.type in TERMINAL_OBJECTS:
                grid.set(x, y, None)
    start = (int(grid_env.agent_pos[0]), int(grid_env.agent_pos[1]), int(grid_env.agent_dir))
    carried = grid_env.carrying

    def standable(x, y):
        cell = grid.get(x, y)
        return cell is None or cell.can_overlap()

    states = [(x, y, d) for y in range(grid.height) for x in range(grid.width) if standable(x, y) for d in range(4)]
    view = int(grid_env.agent_view_size)
    check_count(f"a MiniGrid world of {grid.width}x{grid.height} cells: states", len(states), "world_states")
    check_count(f"the views of {len(states)} states x {view}x{view} cells (agent_view_size {view})",
                len(states) * view * view, "view_cells")
    check_memory(f"the views of {len(states)} states x {view}x{view} cells (agent_view_size {view})",
                 len(states) * (3 * view * view + 200))
    vocab = ObservationVocabulary()
    g = nx.MultiDiGraph(name=f"MiniGrid {env.spec.id if env.spec else type(grid_env).__name__} (seed {seed})")
    try:
        for x, y, d in states:
            grid_env.agent_pos, grid_env.agent_dir = (x, y), d
            g.add_node((x, y, d), obs=vocab.add(grid_env.gen_obs()["image"]))
    finally:
        grid_env.agent_pos, grid_env.agent_dir, grid_env.carrying = start[:2], start[2], carried
    for x, y, d in states:
        g.add_edge((x, y, d), (x, y, (d - 1) % 4), action=0)
        g.add_edge((x, y, d), (x, y, (d + 1) % 4), action=1)
        dx, dy = _DIR_TO_VEC[d]
        fx, fy = x + dx, y + dy
        inside = 0 <= fx < grid.width and 0 <= fy < grid.height
        g.add_edge((x, y, d), (fx, fy, d) if inside and standable(fx, fy) else (x, y, d), action=2)
    world = Environment(g, start=start, n_obs=len(vocab))
    return (world, vocab) if return_vocabulary else world


def _check_view_size(view: int, width: int, height: int) -> None:
    """Refuse a view larger than the grid can fill: from any cell, a view of ``2 * max(width, height) - 1``
    cells (MiniGrid's view runs ``view - 1`` cells ahead and ``(view - 1) / 2`` to each side) already
    covers the whole grid, and a larger one adds only cells outside it.

    >>> _check_view_size(9, 5, 5)
    >>> _check_view_size(10001, 5, 5)
    Traceback (most recent call last):
    ...
    ValueError: agent_view_size 10001 is larger than a 5x5 grid can fill: at most 9 (a view of 9 cells covers the whole grid from every cell)
    """
    most = 2 * max(width, height) - 1
    if view > most:
        raise ValueError(f"agent_view_size {view} is larger than a {width}x{height} grid can fill: at most {most} "
                         f"(a view of {most} cells covers the whole grid from every cell)")


# ---------------------------------------------------------------------------- recording
def _record(env, n_episodes, episode_length, policy, seed: int) -> Recording:
    gym = _require_gym()
    if not _is_count(n_episodes, 1):
        raise ValueError(f"n_episodes must be an integer >= 1, got {n_episodes!r}")
    if not _is_count(episode_length, 0):
        raise ValueError(f"episode_length must be an integer >= 0, got {episode_length!r}")
    # observations and actions (int64), as random_walk bounds its walks
    check_memory(f"a recording of {n_episodes} episodes x {episode_length} moves",
                 16 * int(n_episodes) * (int(episode_length) + 1))
    space = env.action_space
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(f"the action space must be Discrete, got {space}")
    n_actions, first = int(space.n), int(space.start)
    rng = as_generator(seed)
    if policy is None:
        def policy(_obs, generator):
            return int(generator.integers(n_actions)) + first
    elif not callable(policy):
        raise TypeError("policy must be a callable policy(observation, rng) -> action")
    vocab = ObservationVocabulary()
    obs = np.empty((n_episodes, episode_length + 1), dtype=np.int64)
    actions = np.full_like(obs, -1)
    dropped, episode = 0, 0
    while episode < n_episodes:
        if dropped > _MAX_DRAWS_PER_EPISODE * n_episodes:
            raise ValueError(f"{dropped} episodes terminated before {episode_length} moves; "
                             "lower episode_length")
        o, _ = env.reset(seed=int(rng.integers(2**31)))
        row_obs, row_act = [vocab.add(o)], [-1]
        for t in range(episode_length):
            a = policy(o, rng)
            if not (isinstance(a, Integral) and first <= a < first + n_actions):
                raise ValueError(f"policy returned action {a!r}, not one of {first}..{first + n_actions - 1}")
            o, _, terminated, truncated, _ = env.step(a)
            row_obs.append(vocab.add(o))
            row_act.append(int(a) - first)
            if (terminated or truncated) and t < episode_length - 1:
                if truncated and not terminated:
                    raise ValueError(f"the environment truncated an episode after {t + 1} moves, before "
                                     f"episode_length={episode_length}; lower episode_length or raise its time limit")
                break
        if len(row_obs) < episode_length + 1:
            dropped += 1
            continue
        obs[episode], actions[episode] = row_obs, row_act
        episode += 1
    return Recording(Trajectories(obs=obs, actions=actions), vocab, n_actions, dropped)
