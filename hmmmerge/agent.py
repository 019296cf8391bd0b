"""The online agent of the paper: level 1 + connection matrix C + merger.

Protocol (Section 4 and the authors' setup):

* episodes of random moves from the start cell; before every observation of
  a move the agent predicts it with level 1, with level 2 and with a
  first-order model (observations as states); then it learns level 1
  (Algorithm 1) and the first-order counts;
* every ``refresh_every`` (200) steps the level-2 transitions ``T2`` are
  recomputed from level 1 and C;
* every ``sleep_every`` (500) steps a *sleep* is due, applied at the next
  episode start: the not-yet-clustered level-1 states are partitioned at
  random into clusters of ``initial_size`` per colour, then
  ``merge_iterations`` (5) merge iterations run (Algorithm 3, or random
  merges, or none).

A step counts one observation (an episode of 50 moves has 51 steps).

Two level-2 predictors are reported:

* ``l2`` (the paper's): the belief over clusters is anchored to the cluster of
  the current level-1 state when it has one; otherwise it is propagated
  through ``T2`` and conditioned on the observation; if the observation
  contradicts it the belief is lost and level 2 predicts nothing until it is
  anchored again.  With clusters of size 1 and no merges this predictor is
  exactly level 1 on the clustered states.
* ``l2_filter``: the level-2 model on its own, a forward filter over clusters
  that starts from ``B2`` and, after a contradiction, restarts from the
  clusters that emit the observation (the rule of :class:`~hmmmerge.hmm.ActionHMM`).

A step where a predictor makes no prediction counts as wrong; the share of
such steps is reported separately (``*_accuracy_authors`` scores such a step as
the authors did: argmax of an all-zero vector, colour 0).

Two steps of the authors' experiment that the paper's text leaves out are on
by default, because they produce the paper's figures (see README):

* ``online_connect``: after each move, a level-1 state without a cluster is
  connected to a cluster drawn from the level-2 posterior ``q`` over the
  clusters emitting the observation, with probability ``1 - exp(H(q)) / n_o``
  (``n_o`` clusters emit it; a uniform posterior never connects);
* ``split_contradictions``: merging a probe with a candidate pools their
  states and moves those that contradict the majority next observation (on
  the best-known action) back into the candidate
  (:func:`hmmmerge.merging.merge_with_split`).

With both off the agent follows the paper's text literally (connections
change only at sleeps; merges are unions).
"""

from __future__ import annotations

import json
import time

import numpy as np

from ._io import atomic_savez
from ._limits import check_memory
from ._random import as_generator
from .clusters import Clusters, level2_hmm
from .episodic import EpisodicMemory
from .merging import RandomMerger, SFMerger, merge_iteration
from .rollouts import Trajectories

__all__ = ["TwoLevelMemory", "PREDICTORS"]

PREDICTORS = ("l1", "l2", "l2_filter", "first_order")
_MERGE_MODES = ("sf", "random", "none")


class TwoLevelMemory:
    """The paper's agent: an episodic memory structured online into clusters.

    Parameters
    ----------
    n_obs, n_actions : alphabet sizes.
    merge : ``"sf"`` (Algorithm 3), ``"random"`` or ``"none"``.
    initial_size : size of the initial random clusters (1, 10, 100 in the paper).
    merge_iterations : merge iterations per sleep (5).
    refresh_every, sleep_every : in steps (200, 500).
    gamma, horizon, min_depth, threshold, similarity, sf_scale : see :class:`~hmmmerge.merging.SFMerger`.
    online_connect, split_contradictions : the authors' two extra steps (module docstring).
    seed : int or numpy Generator; drives partitions, merges and online connections.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld()
    >>> agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", initial_size=10, seed=0)
    >>> _ = agent.fit(random_walk(env, 60, seed=0))
    >>> h = agent.history()
    >>> len(h["episode"]), int(h["n_states"][-1]) == agent.memory.n_states
    (60, True)
    """

    def __init__(self, n_obs: int, n_actions: int, *, merge: str = "sf", initial_size: int = 10,
                 merge_iterations: int = 5, refresh_every: int = 200, sleep_every: int = 500,
                 gamma: float = 0.8, horizon: int = 25, min_depth: int = 5, threshold: float = 0.5,
                 similarity="euclidean", online_connect: bool = True, split_contradictions: bool = True,
                 sf_scale: float = 1.0, seed=0):
        if merge not in _MERGE_MODES:
            raise ValueError(f"merge must be one of {_MERGE_MODES}, got {merge!r}")
        for name, v in (("initial_size", initial_size), ("merge_iterations", merge_iterations),
                        ("refresh_every", refresh_every), ("sleep_every", sleep_every)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < (0 if name == "merge_iterations" else 1):
                raise ValueError(f"{name} must be a {'non-negative' if name == 'merge_iterations' else 'positive'} integer, got {v!r}")
        self.settings = dict(merge=merge, initial_size=int(initial_size), merge_iterations=int(merge_iterations),
                             refresh_every=int(refresh_every), sleep_every=int(sleep_every), gamma=float(gamma),
                             horizon=int(horizon), min_depth=int(min_depth), threshold=float(threshold),
                             similarity=similarity if isinstance(similarity, str) else "custom",
                             online_connect=bool(online_connect), split_contradictions=bool(split_contradictions),
                             sf_scale=float(sf_scale))
        self._similarity = similarity
        self.merger = self._make_merger()
        self.rng = as_generator(seed)
        self.memory = EpisodicMemory(n_obs, n_actions)
        self.clusters = Clusters(n_states=0)
        check_memory(f"first-order counts of {n_obs} observations x {n_actions} actions",
                     8 * int(n_obs) ** 2 * int(n_actions))
        self.fo_counts = np.zeros((n_obs, n_actions, n_obs), dtype=np.int64)
        self._fo_prev = np.zeros(1, dtype=np.int64)  # the previous observation, for the first-order model
        self.steps = 0
        self.episodes = 0
        self.sleep_pending = False
        self.sleeps = 0
        self._purity = (np.nan, np.nan)
        self._history: list[np.ndarray] = []
        self._set_level2()

    def _make_merger(self):
        s = self.settings
        if s["merge"] == "sf":
            return SFMerger(self._similarity, s["threshold"], s["gamma"], s["horizon"], s["min_depth"],
                            split_contradictions=s["split_contradictions"], sf_scale=s["sf_scale"])
        if s["merge"] == "random":
            return RandomMerger(s["gamma"], s["horizon"], s["min_depth"],
                                split_contradictions=s["split_contradictions"])
        return None

    @property
    def n_obs(self) -> int:
        return self.memory.n_obs

    @property
    def n_actions(self) -> int:
        return self.memory.n_actions

    @property
    def n_clusters(self) -> int:
        return self.clusters.n_clusters

    def __repr__(self) -> str:
        return (f"TwoLevelMemory(merge={self.settings['merge']!r}, initial_size={self.settings['initial_size']}, "
                f"episodes={self.episodes}, level1_states={self.memory.n_states}, clusters={self.n_clusters})")

    # ------------------------------------------------------------ level 2
    def _set_level2(self) -> None:
        """Recompute T2 (stacked CSR, row ``a * k + c``) and the per-colour cluster index."""
        n = self.memory.n_states
        self.clusters.grow(n)
        k = self.clusters.n_clusters
        from ._memory_kernels import level2_transitions

        self._t2 = level2_transitions(self.memory._next, n, self.clusters.assignment, k)
        self._cluster_obs = self.clusters.cluster_emission(self.memory.emission)
        order = np.argsort(self._cluster_obs, kind="stable")
        self._em_idx = order[self._cluster_obs[order] >= 0].astype(np.int64)
        self._em_ptr = np.zeros(self.n_obs + 1, dtype=np.int64)
        self._em_ptr[1:] = np.cumsum(np.bincount(self._cluster_obs[self._cluster_obs >= 0], minlength=self.n_obs))
        if getattr(self, "_k", None) != k:
            size = max(k, 1)
            self._beliefs = [np.zeros(size), np.zeros(size, dtype=np.int64), np.zeros(1, dtype=np.int64),
                             np.zeros(size), np.zeros(size, dtype=np.int64), np.zeros(1, dtype=np.int64)]
            self._scratch = [np.zeros(size), np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64),
                             np.zeros(self.n_obs)]
            self._k = k

    def sleep(self) -> list[dict]:
        """Partition the unclustered level-1 states and run the merge iterations now.

        Returns one report per merge iteration run (see :func:`~hmmmerge.merging.merge_iteration`);
        the iterations stop early once no colour has two clusters (nothing can merge any more).

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, initial_size=5, merge_iterations=2, sleep_every=10**6)
        >>> agent = agent.run(gridworld(), 10, seed=0); agent.n_clusters   # no sleep due yet
        0
        >>> reports = agent.sleep(); len(reports), agent.n_clusters > 0, agent.sleeps
        (2, True, 1)
        """
        n = self.memory.n_states
        self.clusters.grow(n)
        s = self.settings
        self.clusters.partition_unassigned(self.memory.emission, s["initial_size"], self.rng, n_states=n)
        reports = []
        if self.merger is not None:
            for _ in range(s["merge_iterations"]):
                reports.append(merge_iteration(self.memory, self.clusters, self.merger, self.rng))
                if reports[-1]["colour"] < 0:  # no colour has two clusters: a fixed point, no draw was made
                    break
        self.sleeps += 1
        self._purity = self._current_purity()
        self._set_level2()
        return reports

    def _current_purity(self) -> tuple[float, float]:
        """Weighted purity with and without singleton clusters (NaN without true labels)."""
        from .evaluate import weighted_purity

        n = self.memory.n_states
        labels, assignment = self.memory.labels, self.clusters.assignment[:n]
        if n == 0 or (labels[assignment >= 0] < 0).any():
            return float("nan"), float("nan")
        return (weighted_purity(assignment, labels, include_singletons=True),
                weighted_purity(assignment, labels))

    # ------------------------------------------------------------ learning
    def fit(self, traj: Trajectories, progress: bool = False) -> "TwoLevelMemory":
        """Live through the episodes of ``traj`` in order (online; call again to continue).

        Per-episode metrics accumulate in :meth:`history`; the per-step
        predictions of this call are kept in ``last_predictions_`` (predictor
        name -> (E, L+1) int array, -1 = no prediction, -2 = not scored: the
        first observation of an episode) and the level-1 states in ``last_states_``.

        >>> from hmmmerge import gridworld, random_walk
        >>> agent = TwoLevelMemory(10, 4, merge="none").fit(random_walk(gridworld(), 3, 10, seed=0))
        >>> agent.episodes, agent.steps, agent.last_predictions_["l1"].shape
        (3, 33, (3, 11))
        >>> agent.last_predictions_["l1"][:, 0].tolist()   # first observations are not scored
        [-2, -2, -2]
        """
        from . import _memory_kernels as K

        if not isinstance(traj, Trajectories):
            raise TypeError(f"traj must be Trajectories, got {type(traj).__name__}")
        self.memory._check_symbols(traj.obs, traj.actions)
        E, L1 = traj.obs.shape
        obs = traj.obs.ravel()
        act = traj.actions.ravel()
        lab = traj.states.ravel() if traj.states is not None else np.full(obs.shape, -1, dtype=np.int64)
        outs = [np.full(obs.shape, -2, dtype=np.int64) for _ in range(5)]  # l1, fo, l2, l2f, h1
        s = self.settings
        mem = self.memory
        mem.reserve(obs.size)
        self.clusters.grow(mem.capacity)
        next_refresh = (self.steps // s["refresh_every"] + 1) * s["refresh_every"]
        next_sleep = (self.steps // s["sleep_every"] + 1) * s["sleep_every"]
        stats = np.zeros((E, 4))  # n_clusters, n_states, purity, purity without singletons
        uniforms = np.zeros((obs.size, 2))
        bar = _progress(E, progress)
        for e in range(E):
            if self.sleep_pending:
                self.sleep()
                self.clusters.grow(mem.capacity)
                self.sleep_pending = False
            g, end = e * L1, (e + 1) * L1
            if s["online_connect"]:
                uniforms[g:end] = self.rng.random((L1, 2))
            while g < end:
                stop = min(end, g + (next_refresh - self.steps))
                K.agent_chunk(obs, act, lab, g, stop, mem._next, mem._emission, mem._labels, mem._scal,
                              self.clusters.assignment, self.fo_counts, self._fo_prev,
                              self._k, *self._t2, self._cluster_obs, self._em_ptr, self._em_idx,
                              *self._beliefs, *self._scratch, *outs, s["online_connect"], uniforms)
                self.steps += stop - g
                g = stop
                if self.steps >= next_refresh:
                    self.clusters.grow(mem.capacity)
                    self._set_level2()
                    next_refresh += s["refresh_every"]
                if self.steps >= next_sleep:
                    self.sleep_pending = True
                    next_sleep += s["sleep_every"]
            self.episodes += 1
            stats[e] = (self.n_clusters, mem.n_states, *self._purity)
            bar.update(1)
        bar.close()
        self._history.append(_episode_metrics(traj.obs, [o.reshape(E, L1) for o in outs[:4]], stats,
                                              self.episodes - E))
        self.last_states_ = outs[4].reshape(E, L1)
        self.last_predictions_ = {name: outs[j].reshape(E, L1) for name, j in zip(PREDICTORS, (0, 2, 3, 1))}
        return self

    def run(self, env, n_episodes: int = 1000, episode_length: int = 50, seed=0, progress: bool = False):
        """Random-walk ``n_episodes`` in ``env`` (the paper's protocol) and :meth:`fit` them.

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, merge="none").run(gridworld(), 5, seed=1)
        >>> agent.episodes
        5
        """
        from .rollouts import random_walk

        if env.n_obs != self.n_obs or env.n_actions != self.n_actions:
            raise ValueError(f"env has {env.n_obs} observations / {env.n_actions} actions; "
                             f"the agent was built for {self.n_obs} / {self.n_actions}")
        return self.fit(random_walk(env, n_episodes, episode_length, seed=seed), progress=progress)

    # ------------------------------------------------------------ results
    def history(self) -> dict[str, np.ndarray]:
        """Per-episode metrics of every episode lived so far (a dict of equal-length arrays).

        Accuracies and no-prediction shares are over the moves of each episode;
        ``n_clusters`` and ``n_states`` are taken at its end; ``purity`` and
        ``purity_no_singletons`` as of the last sleep (online connections between
        sleeps change them a little; :meth:`summary` reports the current values).

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, merge="none").run(gridworld(), 3, seed=0)
        >>> h = agent.run(gridworld(), 2, seed=1).history()   # a second call continues the history
        >>> h["episode"].tolist(), h["l1_accuracy"].shape
        ([0, 1, 2, 3, 4], (5,))
        """
        if not self._history:
            return {k: np.zeros(0) for k in _HISTORY_KEYS}
        return {k: np.concatenate([h[k] for h in self._history]) for k in _HISTORY_KEYS}

    def summary(self, last: int = 50) -> dict:
        """Means over the last ``last`` episodes, plus the current sizes (the keys of ``hmmmerge run``).

        >>> from hmmmerge import gridworld
        >>> s = TwoLevelMemory(10, 4).run(gridworld(), 20, seed=0).summary(last=10)
        >>> s["episodes"], s["n_clusters"] > 0, sorted(k for k in s if k.endswith("_accuracy"))
        (20, True, ['first_order_accuracy', 'l1_accuracy', 'l2_accuracy', 'l2_filter_accuracy'])
        """
        h = self.history()
        if not len(h["episode"]):
            raise ValueError("no episodes yet: fit some data first")
        tail = slice(-int(last), None)
        out = {f"{p}_accuracy": float(np.mean(h[f"{p}_accuracy"][tail])) for p in PREDICTORS}
        out.update({f"{p}_no_prediction_share": float(np.mean(h[f"{p}_no_prediction"][tail])) for p in PREDICTORS})
        out.update({f"{p}_accuracy_authors_scoring": float(np.mean(h[f"{p}_accuracy_authors"][tail]))
                    for p in PREDICTORS})
        out["no_prediction_share"] = out["l2_no_prediction_share"]
        out["purity"], out["purity_no_singletons"] = self._current_purity()
        out["n_clusters"] = int(self.n_clusters)
        out["n_first_level_states"] = int(self.memory.n_states)
        out["episodes"] = int(self.episodes)
        return out

    def level1_hmm(self):
        """Level 1 as an :class:`~hmmmerge.hmm.ActionHMM`.

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 5, seed=0)
        >>> l1 = TwoLevelMemory(10, 4, merge="none").fit(traj).level1_hmm()
        >>> l1.log_likelihood(traj.obs[-1:], traj.actions[-1:])   # the last episode is stored exactly
        0.0
        """
        return self.memory.to_hmm()

    def level2_hmm(self):
        """Level 2 as an :class:`~hmmmerge.hmm.ActionHMM` (clusters are its states).

        With clusters of one state and no merges, level 2 is level 1 on the clustered states:

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 20, seed=0)
        >>> agent = TwoLevelMemory(10, 4, merge="none", initial_size=1, online_connect=False).fit(traj)
        >>> l2 = agent.level2_hmm()
        >>> l2.n_states == agent.n_clusters, l2.log_likelihood(traj.obs[:5], traj.actions[:5])
        (True, 0.0)
        """
        self.clusters.grow(self.memory.n_states)
        return level2_hmm(self.memory, self.clusters)

    # ------------------------------------------------------------ files
    def save(self, path) -> None:
        """Write level 1, C, the first-order counts, settings, counters and RNG state as ``.npz`` (no pickle).

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4).run(gridworld(), 12, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "agent.npz"); agent.save(path); back = TwoLevelMemory.load(path)
        >>> back.episodes, back.n_clusters == agent.n_clusters, back.memory.n_states == agent.memory.n_states
        (12, True, True)
        """
        n = self.memory.n_states
        meta = dict(settings=self.settings, steps=self.steps, episodes=self.episodes, sleeps=self.sleeps,
                    sleep_pending=self.sleep_pending, purity=list(self._purity),
                    rng=self.rng.bit_generator.state, fo_prev=int(self._fo_prev[0]))
        hist = self.history()
        atomic_savez(path, **self.memory.state_dict(), assignment=self.clusters.assignment[:n].copy(),
                     fo_counts=self.fo_counts, meta=np.array(json.dumps(meta)),
                     t2_indptr=self._t2[0], t2_indices=self._t2[1], t2_data=self._t2[2],
                     **{f"history_{k}": v for k, v in hist.items()})

    @classmethod
    def load(cls, path) -> "TwoLevelMemory":
        """Read a memory written by :meth:`save`; :meth:`fit` then resumes where it stopped.

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4).run(gridworld(), 12, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "agent.npz"); agent.save(path); back = TwoLevelMemory.load(path)
        >>> a, b = agent.run(gridworld(), 10, seed=5).history(), back.run(gridworld(), 10, seed=5).history()
        >>> all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)   # resumed exactly
        True
        """
        src = str(path)
        with np.load(path, allow_pickle=False) as d:
            data = dict(d)
        try:
            meta = json.loads(str(data["meta"]))
            settings = dict(meta["settings"])
        except (KeyError, ValueError) as e:
            raise ValueError(f"{src}: not a TwoLevelMemory file ({e})") from None
        if settings.get("similarity") == "custom":
            raise ValueError(f"{src}: saved with a custom similarity function; rebuild the agent with it")
        mem = EpisodicMemory.from_state_dict(data, source=src)
        agent = cls(mem.n_obs, mem.n_actions, **settings)
        agent.memory = mem
        assignment = np.asarray(data.get("assignment"), dtype=np.int64)
        if assignment.shape != (mem.n_states,):
            raise ValueError(f"{src}: assignment has shape {assignment.shape}, expected ({mem.n_states},)")
        agent.clusters = Clusters(assignment)
        agent.fo_counts = np.asarray(data["fo_counts"], dtype=np.int64)
        if agent.fo_counts.shape != (mem.n_obs, mem.n_actions, mem.n_obs):
            raise ValueError(f"{src}: fo_counts has the wrong shape {agent.fo_counts.shape}")
        agent.steps, agent.episodes, agent.sleeps = int(meta["steps"]), int(meta["episodes"]), int(meta["sleeps"])
        agent.sleep_pending = bool(meta["sleep_pending"])
        agent._purity = tuple(float(x) for x in meta["purity"])
        agent.rng.bit_generator.state = meta["rng"]
        agent._fo_prev[0] = int(meta["fo_prev"])
        hist = {k: data[f"history_{k}"] for k in _HISTORY_KEYS if f"history_{k}" in data}
        if len(hist) == len(_HISTORY_KEYS) and len(hist["episode"]):
            agent._history = [hist]
        agent._set_level2()
        # T2 as last refreshed (it may lag level 1 by up to refresh_every steps): resume exactly
        t2 = tuple(np.asarray(data[f"t2_{x}"]) for x in ("indptr", "indices", "data"))
        if t2[0].shape != agent._t2[0].shape:
            raise ValueError(f"{src}: stored level-2 transitions do not match the clusters")
        agent._t2 = (t2[0].astype(np.int64), t2[1].astype(np.int64), t2[2].astype(np.float64))
        return agent


_HISTORY_KEYS = (
    ["episode"]
    + [f"{p}_accuracy" for p in PREDICTORS]
    + [f"{p}_no_prediction" for p in PREDICTORS]
    + [f"{p}_accuracy_authors" for p in PREDICTORS]
    + ["n_clusters", "n_states", "purity", "purity_no_singletons"]
)


def _episode_metrics(obs, preds, stats, first_episode: int) -> dict[str, np.ndarray]:
    """Per-episode accuracy and no-prediction share of each predictor over the moves (t >= 1)."""
    truth = obs[:, 1:]
    out = {"episode": np.arange(first_episode, first_episode + len(obs))}
    for name, pred in zip(PREDICTORS, [preds[0], preds[2], preds[3], preds[1]]):
        p = pred[:, 1:]
        out[f"{name}_accuracy"] = (p == truth).mean(axis=1)
        out[f"{name}_no_prediction"] = (p < 0).mean(axis=1)
        # the authors' scoring: argmax of an all-zero prediction is colour 0
        out[f"{name}_accuracy_authors"] = ((p == truth) | ((p < 0) & (truth == 0))).mean(axis=1)
    for j, key in enumerate(["n_clusters", "n_states", "purity", "purity_no_singletons"]):
        out[key] = stats[:, j]
    return out


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="episode", leave=False)
