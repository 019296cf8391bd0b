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

import inspect
import json

import numpy as np

from ._estimator import Estimator, clone
from ._agent_file import read_agent_file, write_agent_file
from ._limits import check_memory
from ._random import as_generator, check_seed
from .clusters import Clusters, level2_hmm
from .episodic import EpisodicMemory
from .level2 import Level2
from .merging import depth_counts
from .models import MERGERS, merger_class
from ._validation import Bool, Int, as_trajectories, check_int, check_symbols
from .trajectories import Trajectories

__all__ = ["TwoLevelMemory", "PREDICTORS"]

PREDICTORS = ("l1", "l2", "l2_filter", "first_order")

#: the sleep schedule parameters the agent owns and hands to a merger that has them (sf, random, none)
SCHEDULE = ("initial_size", "merge_iterations")


def _check_merge(value, name):
    if value is not None and value not in MERGERS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, MERGERS))} or None, got {value!r}")


def _check_merger(value, name):
    if value is not None and not callable(getattr(value, "sleep", None)):
        raise TypeError(f"{name} must be None or a merger with a sleep(memory, clusters, rng) method "
                        f"(hmmmerge.merging.Merger), got {type(value).__name__}")


class TwoLevelMemory(Estimator):
    """The paper's agent: an episodic memory structured online into clusters.

    Parameters
    ----------
    n_obs, n_actions : alphabet sizes.
    merge : the merge mode by its catalogue name (:data:`hmmmerge.models.MERGERS`): ``"sf"``
        (Algorithm 3, the default), ``"random"``, ``"none"``, ``"fold"``
        (:class:`~hmmmerge.fold.FoldMerger`, evidence-driven folding) or ``"fold-noisy"``
        (:class:`~hmmmerge.fold_noisy.StatisticalFoldMerger`; its noise-aware emissions feed
        the online predictors and :meth:`level2_hmm`) or ``"replay"``
        (:class:`~hmmmerge.replay.ReplayMerger`: level 2 a clone HMM re-estimated at sleeps by stepwise
        EM over replayed episodes; the mode for a world of unknown kind: slipping moves, noisy views,
        random starts); shorthand for ``merger=`` that mode's merger with its defaults.
    merger : a merger object (the :class:`~hmmmerge.merging.Merger` protocol), e.g.
        ``SFMerger(gamma=0.7)`` or ``FoldMerger(colour_evidence=20)``; ``None``: the one ``merge``
        names.  Given both, ``merge`` must name the merger's own mode.
    initial_size : size of the initial random clusters (1, 10, 100 in the paper); the
        sleeps of ``sf``, ``random`` and ``none`` partition new states into clusters of this size.
    merge_iterations : merge iterations per sleep (5; ``sf`` and ``random``).
    refresh_every, sleep_every : in steps (200, 500).
    online_connect : the authors' online connection step (module docstring); the other extra
        step, ``split_contradictions``, is a parameter of the sf and random mergers.
    seed : int or numpy Generator; drives partitions, merges and online connections.

    Attributes
    ----------
    memory_ : the :class:`~hmmmerge.episodic.EpisodicMemory` (level 1).
    clusters_ : the :class:`~hmmmerge.clusters.Clusters` (C; ``assignment`` may be
        longer than ``memory_.n_states``, its capacity).
    merger_ : the agent's own copy of the merger, with the agent's schedule.
    merge_ : the catalogue name of the merger's mode (its class name for a merger outside the catalogue).
    n_clusters_ : number of clusters (level-2 states).
    first_order_counts_ : (n_obs, n_actions, n_obs) counts of the first-order predictor.
    steps_, episodes_, sleeps_ : counters (a step is one observation).
    last_predictions_, last_states_ : per step of the last (partial_)fit call.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> from hmmmerge.merging import SFMerger
    >>> env = gridworld()
    >>> agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=SFMerger(gamma=0.7), initial_size=10, seed=0)
    >>> agent
    TwoLevelMemory(n_obs=10, n_actions=4, merger=SFMerger(gamma=0.7))
    >>> agent.get_params()["merger__gamma"]
    0.7
    >>> _ = agent.fit(random_walk(env, 60, seed=0))
    >>> h = agent.history()
    >>> len(h["episode"]), int(h["n_states"][-1]) == agent.memory_.n_states, agent.merge_
    (60, True, 'sf')
    """

    _parameter_constraints = {
        "n_obs": Int(1), "n_actions": Int(1), "merge": _check_merge, "merger": _check_merger,
        "initial_size": Int(1), "merge_iterations": Int(0), "refresh_every": Int(1), "sleep_every": Int(1),
        "online_connect": Bool(), "seed": check_seed,
    }

    def __init__(self, n_obs: int, n_actions: int, *, merge: str | None = None, merger=None, initial_size: int = 10,
                 merge_iterations: int = 5, refresh_every: int = 200, sleep_every: int = 500,
                 online_connect: bool = True, seed=0):
        self.n_obs = n_obs
        self.n_actions = n_actions
        self.merge = merge
        self.merger = merger
        self.initial_size = initial_size
        self.merge_iterations = merge_iterations
        self.refresh_every = refresh_every
        self.sleep_every = sleep_every
        self.online_connect = online_connect
        self.seed = seed

    def _validate_params(self) -> None:
        """The table, then the agreement of ``merge``, ``merger`` and the sleep schedule (:meth:`_make_merger`)."""
        super()._validate_params()
        self._make_merger()

    def _merge_name(self) -> str:
        """The catalogue name of the mode: ``merge`` (default ``"sf"``), or the merger's own mode; a merger
        outside the catalogue goes by ``merge`` when given (the mode it stands for, under which the agent
        file records it), else by its class name."""
        if self.merger is None:
            return "sf" if self.merge is None else self.merge
        for name, entry in MERGERS.items():
            named = entry.cls if isinstance(entry.cls, str) else f":{entry.cls.__name__}"
            if named.rpartition(":")[2] == type(self.merger).__name__ and type(self.merger) is merger_class(name):
                return name
        return self.merge if self.merge is not None else type(self.merger).__name__

    def _make_merger(self):
        """The agent's own merger: a fresh copy of ``merger`` (or of ``merge``'s default merger) with the
        agent's ``initial_size`` and ``merge_iterations`` where the merger has them."""
        name = self._merge_name()
        if self.merger is None:
            merger = merger_class(name)()
        else:
            if self.merge is not None and self.merge != name:  # only for a merger of the catalogue
                raise ValueError(f"merge={self.merge!r} does not name the mode of merger={self.merger!r} "
                                 f"({name!r}): give one of them")
            merger = clone(self.merger)
        for key in SCHEDULE:
            if not hasattr(merger, key):
                continue
            own, mine = getattr(merger, key), getattr(self, key)
            if own is not None and own != mine:
                raise ValueError(f"{key} is {own!r} on the merger and {mine!r} on the agent: set it on the agent")
            setattr(merger, key, mine)
        if isinstance(merger, Estimator):
            merger._validate_params()
        return merger

    # ------------------------------------------------------------ learned state
    def _start(self) -> None:
        """Fresh learned state: empty level 1, no clusters, counters at zero, the RNG from ``seed``."""
        from ._agent_kernels import FirstOrder

        self._validate_params()
        self.merger_ = self._make_merger()
        self.merge_ = self._merge_name()
        self.rng_ = as_generator(self.seed)
        self.memory_ = EpisodicMemory(int(self.n_obs), int(self.n_actions))
        self._parent = np.full(self.memory_.capacity, -1, dtype=np.int64)
        self._parent_action = np.full(self.memory_.capacity, -1, dtype=np.int64)
        self.clusters_ = Clusters(n_states=0)
        check_memory(f"first-order counts of {self.n_obs} observations x {self.n_actions} actions",
                     8 * int(self.n_obs) ** 2 * int(self.n_actions))
        self.first_order_counts_ = np.zeros((self.n_obs, self.n_actions, self.n_obs), dtype=np.int64)
        self._fo = FirstOrder(self.first_order_counts_, np.zeros(1, dtype=np.int64))
        self.steps_ = 0
        self.episodes_ = 0
        self.sleeps_ = 0
        self.sleep_pending_ = False
        self._purity = (np.nan, np.nan)
        self._labels_kept = None  # (label counts per cluster, unlabelled connected states), see _label_counts
        self._label_width = 1
        self._history: list[dict] = []
        self.level2_ = Level2(int(self.n_obs), int(self.n_actions))
        self._set_level2()

    def _follow_members(self) -> None:
        """Keep the clusters' member lists from now on (sleeps then read the clusters they touch instead
        of scanning a colour's states) once level 1 holds :data:`KEEP_TABLES_FROM_STATES` states, unless
        the merger changes C between sleeps or counts level 2 itself (fold).  Results are the same."""
        if (not self.clusters_.keeps_members and self.memory_.n_states >= KEEP_TABLES_FROM_STATES
                and getattr(self.merger_, "place", None) is None
                and getattr(self.merger_, "level2_transitions", None) is None):
            self.clusters_.keep_members()

    def _started(self) -> bool:
        return hasattr(self, "memory_")

    @property
    def n_clusters_(self) -> int:
        return self.clusters_.n_clusters

    # ------------------------------------------------------------ level 2
    def _set_level2(self, before=None) -> None:
        """Recompute level 2 from level 1 and C (:meth:`hmmmerge.level2.Level2.recompute`)."""
        self.level2_.recompute(self.memory_, self.clusters_, self.merger_, self._parent, self._parent_action, before)

    def _refresh_level2(self) -> None:
        """The periodic level-2 refresh (:meth:`hmmmerge.level2.Level2.refresh`)."""
        self.level2_.refresh(self.memory_, self.clusters_, self.merger_, self._parent, self._parent_action)

    def _grow_lineage(self, capacity: int) -> None:
        """Parent (state, action) of every level-1 state at its creation (-1: the start state)."""
        have = self._parent.shape[0]
        if capacity > have:
            extra = np.full(capacity - have, -1, dtype=np.int64)
            self._parent = np.concatenate([self._parent, extra])
            self._parent_action = np.concatenate([self._parent_action, extra])

    def _note_changes(self, steps, out, g0, g1, n_before) -> None:
        """After steps ``g0..g1``: record the parents of new level-1 states and bring the per-depth
        counts that the clusters keep (see :meth:`~hmmmerge.clusters.Clusters.depth_counts`) up to date.

        A new state adds to the counts of its ancestors' clusters; a state that
        joined a cluster online adds its whole breadth-first counts; a replaced
        link (Algorithm 1 replaces ``T(h, a)`` when it predicted another colour)
        removes a subtree, so the clusters upstream of it are counted again later.
        """
        from ._agent_kernels import stale_clusters
        from ._successor_kernels import add_new_descendants

        states = out.state[g0:g1]
        fresh = np.flatnonzero(states >= n_before)
        created = fresh[np.unique(states[fresh], return_index=True)[1]] + g0  # the step creating each new state
        acts = steps.actions[created]
        parents = np.where(acts >= 0, out.state[np.maximum(created - 1, 0)], -1)
        self._parent[out.state[created]] = parents
        self._parent_action[out.state[created]] = acts
        if len(created):
            self._label_width = max(self._label_width, int(self.memory_.labels[out.state[created]].max()) + 1)
        k = self.clusters_.n_clusters
        if k == 0:
            return
        cluster_of = self.clusters_.assignment
        joined = states[out.joined[g0:g1]]
        self.clusters_.note_joined(joined)
        if self._labels_kept is not None and len(joined):
            table, unlabelled = self._label_counts_widened()
            lab = self.memory_.labels[joined]
            np.add.at(table, (cluster_of[joined[lab >= 0]], lab[lab >= 0]), 1)
            self._labels_kept = (table, unlabelled + int((lab < 0).sum()))
        nxt, emission, _ = self.memory_.kernel_arrays()
        g = np.arange(g0, g1)
        replaced = g[(steps.actions[g0:g1] >= 0) & (out.l1[g0:g1] >= 0) & (out.l1[g0:g1] != steps.obs[g0:g1])]
        self.level2_.note_joined(joined, replaced=len(replaced) > 0)
        kept = self.clusters_.kept_depth_counts()
        for valid, counts in kept:
            add_new_descendants(out.state[created], self._parent, self._parent_action, nxt, emission,
                                cluster_of, np.sort(joined), valid, counts)
            owners = cluster_of[joined]
            ok = valid[owners]
            if ok.any():
                depth_counts(self.memory_, joined[ok][:, None], counts.shape[1], out=counts, rows=owners[ok])
        if len(replaced) and kept:  # the tables' own horizon: the merger's may differ from the agent's
            flags = np.zeros(k, dtype=bool)
            stale_clusters(out.state[replaced - 1], self._parent, self._parent_action, nxt, cluster_of,
                           max(counts.shape[1] for _, counts in kept), flags)
            self.clusters_.invalidate(np.flatnonzero(flags))

    def sleep(self) -> list[dict]:
        """Run the merger's sleep now (partition the unclustered level-1 states, merge).

        Returns the merger's reports (one per merge iteration for ``sf`` and ``random``).

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, initial_size=5, merge_iterations=2, sleep_every=10**6)
        >>> agent = agent.run(gridworld(), 10, seed=0); agent.n_clusters_   # no sleep due yet
        0
        >>> reports = agent.sleep(); len(reports), agent.n_clusters_ > 0, agent.sleeps_
        (2, True, 1)
        """
        if not self._started():
            self._start()
        n = self.memory_.n_states
        self.clusters_.grow(n)
        self._follow_members()
        before = changes = None
        if getattr(self.merger_, "level2_transitions", None) is None:  # T2 will follow C's changes
            self._refresh_level2()  # T2 now agrees with C
            before = (self.clusters_.n_clusters, self.level2_.t2)
            self.clusters_.record_changes()
        reports = self.merger_.sleep(self.memory_, self.clusters_, self.rng_)
        if before is not None:
            changes = self.clusters_.changes()
            before = (changes, *before)
        self.sleeps_ += 1
        self._purity = self._current_purity(changes)
        self._set_level2(before)
        return reports

    def _current_purity(self, changes=None) -> tuple[float, float]:
        """Weighted purity with and without singleton clusters (NaN without true labels), as
        :func:`~hmmmerge.evaluate.weighted_purity` computes them; ``changes``: how the sleep that just
        ended changed C (see :meth:`_label_counts`)."""
        from .evaluate import cluster_top_counts

        own = getattr(self.merger_, "purity", None)  # a merger that keeps label counts per cluster (fold)
        got = own(self.memory_, self.clusters_) if own is not None else None
        if got is not None:
            return got
        kept = self._label_counts(changes)
        if kept is not None:
            table, unlabelled = kept
            if unlabelled or not table.any():
                return float("nan"), float("nan")
            sizes, top = table.sum(axis=1), table.max(axis=1)
        else:
            n = self.memory_.n_states
            assignment, labels = self.clusters_.assignment[:n], self.memory_.labels
            keep = assignment >= 0
            if not keep.any() or (labels[keep] < 0).any():
                return float("nan"), float("nan")
            sizes, top = cluster_top_counts(assignment[keep], labels[keep])
        out = []
        for smallest in (1, 2):
            keep = sizes >= smallest
            out.append(float(top[keep].sum() / sizes[keep].sum()) if keep.any() else float("nan"))
        return out[0], out[1]

    def _label_counts(self, changes=None):
        """``(table, unlabelled)``: true labels counted per cluster (k x labels) and connected states
        without a label, kept up to date from the changes of C (online joins, ``changes`` of a sleep)
        rather than counted from all of level 1 (from :data:`KEEP_TABLES_FROM_STATES` states on; counted
        afresh below); None where the table would be too large (:data:`LABEL_TABLE_MAX_ENTRIES`) or the
        merger changes C between sleeps."""
        from ._cluster_kernels import label_table, label_table_after_sleep

        n, k = self.memory_.n_states, self.clusters_.n_clusters
        if getattr(self.merger_, "place", None) is not None or k * self._label_width > LABEL_TABLE_MAX_ENTRIES:
            self._labels_kept = None
            return None
        if n < KEEP_TABLES_FROM_STATES:
            self._labels_kept = None
            return label_table(self.clusters_.assignment, self.memory_.labels, n, k, self._label_width)
        kept = self._labels_kept
        if kept is not None and changes is not None and changes.ok and len(kept[0]) == len(changes.relabel):
            table, unlabelled = self._label_counts_widened()
            table, more = label_table_after_sleep(table, changes.relabel, k + changes.n_ghosts, k, changes.moved,
                                                  changes.was, self.clusters_.assignment, self.memory_.labels)
            kept = (table, unlabelled + more)
        elif kept is None or changes is not None or len(kept[0]) != k:
            kept = label_table(self.clusters_.assignment, self.memory_.labels, n, k, self._label_width)
        self._labels_kept = kept
        return kept

    def _label_counts_widened(self):
        """The kept label table with a column for every label seen so far (new columns are zero)."""
        table, unlabelled = self._labels_kept
        if table.shape[1] < self._label_width:
            table = np.pad(table, ((0, 0), (0, self._label_width - table.shape[1])))
        return table, unlabelled

    # ------------------------------------------------------------ learning
    def fit(self, traj, progress: bool = False) -> "TwoLevelMemory":
        """Start afresh and live through the episodes of ``traj`` in order.

        Equivalent to discarding all learned state and calling :meth:`partial_fit`;
        ``traj`` must hold at least one episode (like every estimator's ``fit``;
        :meth:`partial_fit` of no episodes is a no-op).

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 3, 10, seed=0)
        >>> agent = TwoLevelMemory(10, 4, merge="none").fit(traj).fit(traj)   # the second fit starts over
        >>> agent.episodes_, agent.steps_
        (3, 33)
        """
        if not isinstance(traj, Trajectories):
            traj = as_trajectories(traj)
        if traj.n_episodes == 0:
            raise ValueError("fit got no episodes: it starts afresh and would learn nothing "
                             "(partial_fit of no episodes leaves a trained agent as it is)")
        self._start()
        return self.partial_fit(traj, progress=progress)

    def partial_fit(self, traj, progress: bool = False) -> "TwoLevelMemory":
        """Live through the episodes of ``traj`` in order, continuing from the learned state (online).

        ``traj``: a :class:`~hmmmerge.trajectories.Trajectories` or anything
        :func:`~hmmmerge._validation.as_trajectories` accepts (e.g. ``(obs, actions)``).

        Per-episode metrics accumulate in :meth:`history`; the per-step
        predictions of this call are kept in ``last_predictions_`` (predictor
        name -> (E, L+1) int array, -1 = no prediction, -2 = not scored: the
        first observation of an episode) and the level-1 states in ``last_states_``.

        >>> from hmmmerge import gridworld, random_walk
        >>> agent = TwoLevelMemory(10, 4, merge="none").partial_fit(random_walk(gridworld(), 3, 10, seed=0))
        >>> agent.episodes_, agent.steps_, agent.last_predictions_["l1"].shape
        (3, 33, (3, 11))
        >>> agent.last_predictions_["l1"][:, 0].tolist()   # first observations are not scored
        [-2, -2, -2]
        >>> agent.partial_fit(random_walk(gridworld(), 2, 10, seed=1)).episodes_   # continues
        5
        """
        from ._agent_kernels import Level1, Predictions, Steps, agent_steps

        if not isinstance(traj, Trajectories):  # keep the true states of a Trajectories (for purity)
            traj = as_trajectories(traj)
        if not self._started():
            self._start()
        mem = self.memory_
        check_symbols(traj.obs, traj.actions, mem.n_obs, mem.n_actions)
        E, L1 = traj.obs.shape
        obs = traj.obs.ravel()
        labels = traj.states.ravel() if traj.states is not None else np.full(obs.shape, -1, dtype=np.int64)
        steps = Steps(obs, traj.actions.ravel(), labels, np.zeros((obs.size, 2)))
        out = Predictions(*(np.full(obs.shape, -2, dtype=np.int64) for _ in PREDICTORS), np.full(obs.shape, -2, np.int64),
                          np.zeros(obs.shape, dtype=bool))
        mem.reserve(obs.size)
        self._grow_lineage(mem.capacity)
        level1 = Level1(*mem.buffers())
        self.clusters_.grow(mem.capacity)
        refresh, sleep = int(self.refresh_every), int(self.sleep_every)
        next_refresh = (self.steps_ // refresh + 1) * refresh
        next_sleep = (self.steps_ // sleep + 1) * sleep
        stats = np.zeros((E, 4))  # n_clusters, n_states, purity, purity without singletons
        place = getattr(self.merger_, "place", None)
        bar = _progress(E, progress)
        for e in range(E):
            if self.sleep_pending_:
                self.sleep()
                self.clusters_.grow(mem.capacity)
                self.sleep_pending_ = False
            g, end = e * L1, (e + 1) * L1
            if self.online_connect:
                steps.uniforms[g:end] = self.rng_.random((L1, 2))
            while g < end:
                stop = min(end, g + (next_refresh - self.steps_))
                l2 = self.level2_
                n_before = mem.n_states
                agent_steps(steps, g, stop, level1, l2.arrays._replace(cluster_of=self.clusters_.assignment),
                            l2.anchored, l2.filtered, self._fo, l2.scratch, out, bool(self.online_connect))
                self._note_changes(steps, out, g, stop, n_before)
                self.steps_ += stop - g
                if place is not None and place(mem, self.clusters_, out.state[g:stop], self.rng_):
                    self.clusters_.grow(mem.capacity)
                    self._set_level2()
                else:  # noise-aware emissions follow the counts of the placed visits
                    self.level2_.update_soft(self.memory_, self.clusters_, self.merger_)
                g = stop
                if self.steps_ >= next_refresh:
                    self.clusters_.grow(mem.capacity)
                    self._refresh_level2()
                    next_refresh += refresh
                if self.steps_ >= next_sleep:
                    self.sleep_pending_ = True
                    next_sleep += sleep
            self.episodes_ += 1
            stats[e] = (self.n_clusters_, mem.n_states, *self._purity)
            bar.update(1)
        bar.close()
        shaped = {name: getattr(out, name).reshape(E, L1) for name in PREDICTORS}
        self._history.append(_episode_metrics(traj.obs, shaped, stats, self.episodes_ - E))
        self.last_states_ = out.state.reshape(E, L1)
        self.last_predictions_ = shaped
        return self

    def run(self, env, n_episodes: int = 1000, episode_length: int = 50, seed=0, progress: bool = False):
        """The paper's protocol in one call: random-walk ``n_episodes`` in ``env`` and live through them.

        Continues the learned state if there is one (a loaded or earlier run
        agent, like :meth:`partial_fit`); a new agent starts empty.

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, merge="none").run(gridworld(), 5, seed=1)
        >>> agent.episodes_
        5
        """
        from .rollouts import random_walk

        if env.n_obs != self.n_obs or env.n_actions != self.n_actions:
            raise ValueError(f"env has {env.n_obs} observations / {env.n_actions} actions; "
                             f"the agent was built for {self.n_obs} / {self.n_actions}")
        return self.partial_fit(random_walk(env, n_episodes, episode_length, seed=seed), progress=progress)

    # ------------------------------------------------------------ results
    def history(self) -> dict[str, np.ndarray]:
        """Per-episode metrics of every episode lived so far (a dict of equal-length arrays).

        Accuracies and no-prediction shares are over the moves of each episode;
        ``n_clusters`` and ``n_states`` are taken at its end; ``purity`` and
        ``purity_no_singletons`` as of the last sleep (online connections between
        sleeps change them a little; :meth:`summary` reports the current values).

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, merge="none").run(gridworld(), 3, seed=0)
        >>> h = agent.run(gridworld(), 2, seed=1).history()   # a second run continues the history
        >>> h["episode"].tolist(), h["l1_accuracy"].shape
        ([0, 1, 2, 3, 4], (5,))
        """
        if not self._started() or not self._history:
            return {k: np.zeros(0) for k in _HISTORY_KEYS}
        return {k: np.concatenate([h[k] for h in self._history]) for k in _HISTORY_KEYS}

    def pop_history(self, keep: int = 50) -> dict[str, np.ndarray]:
        """Return the per-episode metrics held in memory and forget all but the last ``keep`` episodes.

        For long lives whose history streams to disk: the returned rows are the
        ones not returned before; :meth:`summary` over up to ``keep`` episodes
        still works afterwards.

        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4, merge="none").run(gridworld(), 5, seed=0)
        >>> agent.pop_history(keep=2)["episode"].tolist(), agent.run(gridworld(), 1).pop_history()["episode"].tolist()
        ([0, 1, 2, 3, 4], [5])
        >>> agent.history()["episode"].tolist()   # the tail kept for summary()
        [3, 4, 5]
        """
        keep = check_int(keep, "keep", low=0)
        h = self.history()
        new = getattr(self, "_popped", 0)
        first = h["episode"][0] if len(h["episode"]) else 0
        rows = {k: v[max(new - int(first), 0):] for k, v in h.items()}
        tail = {k: v[len(v) - min(keep, len(v)):] for k, v in h.items()}
        self._history = [tail] if len(tail["episode"]) else []
        self._popped = int(self.episodes_)
        return rows

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
        out["n_clusters"] = int(self.n_clusters_)
        out["n_first_level_states"] = int(self.memory_.n_states)
        out["episodes"] = int(self.episodes_)
        return out

    def level1_hmm(self):
        """Level 1 as an :class:`~hmmmerge.hmm.ActionHMM`.

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 5, seed=0)
        >>> l1 = TwoLevelMemory(10, 4, merge="none").fit(traj).level1_hmm()
        >>> l1.log_likelihood(traj.obs[-1:], traj.actions[-1:])   # the last episode is stored exactly
        0.0
        """
        return self.memory_.to_hmm()

    def to_hmm(self):
        """The learned model: level 2 (:meth:`level2_hmm`), as every learner of :mod:`hmmmerge.models` returns it.

        >>> from hmmmerge import gridworld, random_walk
        >>> agent = TwoLevelMemory(10, 4).fit(random_walk(gridworld(), 20, seed=0))
        >>> agent.to_hmm().n_states == agent.n_clusters_
        True
        """
        return self.level2_hmm()

    def level2_hmm(self):
        """Level 2 as an :class:`~hmmmerge.hmm.ActionHMM` (clusters are its states).

        :func:`~hmmmerge.clusters.level2_hmm` (``E2 = C^T E1``), or the merger's own model when it
        has one (fold-noisy: the same T2 with noise-aware emissions).  With clusters of one state and no merges, level 2 is level 1 on the clustered states:

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 20, seed=0)
        >>> agent = TwoLevelMemory(10, 4, merge="none", initial_size=1, online_connect=False).fit(traj)
        >>> l2 = agent.level2_hmm()
        >>> l2.n_states == agent.n_clusters_, l2.log_likelihood(traj.obs[:5], traj.actions[:5])
        (True, 0.0)
        """
        self.clusters_.grow(self.memory_.n_states)
        own = getattr(self.merger_, "level2_hmm", None)  # a merger with a level-2 model of its own (fold-noisy)
        if own is not None:
            return own(self.memory_, self.clusters_)
        return level2_hmm(self.memory_, self.clusters_)

    # ------------------------------------------------------------ files
    def _json_params(self) -> dict:
        """The parameters as JSON values; ``merger`` as ``{"name": mode, "params": {...}}`` (a callable
        similarity as ``"custom"``, a Generator seed as ``None``: its state is saved separately)."""
        params = self.get_params(deep=False)
        if self.merger is not None:
            names = inspect.signature(type(self.merger).__init__).parameters
            inner = {k: getattr(self.merger, k) for k, p in names.items()
                     if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
            if callable(inner.get("similarity")):
                inner["similarity"] = "custom"
            params["merger"] = {"name": self._merge_name(), "params": inner}
        seed = params["seed"]
        if isinstance(seed, (list, tuple)):
            params["seed"] = [int(x) for x in seed]
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            params["seed"] = int(seed)
        else:
            params["seed"] = None  # a Generator: its state is saved separately
        for name in ("n_obs", "n_actions", "initial_size", "merge_iterations", "refresh_every", "sleep_every"):
            params[name] = int(params[name])
        return params

    @classmethod
    def _params_from_json(cls, params: dict, source: str = "<meta>") -> dict:
        """Constructor arguments from saved parameters, of this version or an older one.

        Files before mergers were objects kept the sf parameters (``gamma``, ``horizon``,
        ``min_depth``, ``threshold``, ``similarity``, ``sf_scale``, ``split_contradictions``)
        and a ``merge_params`` dict on the agent: they become the merger's.

        >>> TwoLevelMemory._params_from_json({"merge": "sf", "gamma": 0.7, "merge_params": None})["merger"]
        SFMerger(gamma=0.7)
        """
        params = dict(params)
        spec = params.pop("merger", None)
        old = {k: params.pop(k) for k in _OLD_MERGER_PARAMS if k in params}
        extra = params.pop("merge_params", None) or {}
        if spec is None and (old or extra):
            name = params.get("merge") or "sf"
            if name not in MERGERS:
                raise ValueError(f"{source}: merge must be one of {', '.join(map(repr, MERGERS))}, got {name!r}")
            names = set(inspect.signature(merger_class(name)).parameters)
            kept = {k: v for k, v in old.items() if k in names and v != _OLD_DEFAULTS[k]}
            spec = {"name": name, "params": {**kept, **extra}} if (kept or extra) else None
        if spec is not None:
            if not isinstance(spec, dict) or not isinstance(spec.get("params"), dict):
                raise ValueError(f"{source}: the saved merger is not an object with 'name' and 'params'")
            if spec.get("name") not in MERGERS:
                raise ValueError(f"{source}: saved with a merger outside the catalogue ({spec.get('name')!r}); "
                                 "rebuild the agent with it")
            if spec["params"].get("similarity") == "custom":
                raise ValueError(f"{source}: saved with a custom similarity function; rebuild the agent with it")
            params["merger"] = merger_class(spec["name"])(**spec["params"])
        return params

    def save(self, path, extra: dict | None = None) -> None:
        """Write level 1, C, the first-order counts, parameters, counters and RNG state as ``.npz`` (no pickle).

        ``extra``: JSON values stored alongside (read back as ``saved_extra_``),
        e.g. the state of a long run for a checkpoint.

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4).run(gridworld(), 12, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "agent.npz"); agent.save(path); back = TwoLevelMemory.load(path)
        >>> back.episodes_, back.n_clusters_ == agent.n_clusters_, back.memory_.n_states == agent.memory_.n_states
        (12, True, True)
        """
        if not self._started():
            self._start()
        n = self.memory_.n_states
        meta = dict(params=self._json_params(), steps=self.steps_, episodes=self.episodes_, sleeps=self.sleeps_,
                    sleep_pending=self.sleep_pending_, purity=list(self._purity),
                    rng=self.rng_.bit_generator.state, fo_prev=int(self._fo.prev[0]),
                    popped=int(getattr(self, "_popped", 0)), extra=extra)
        try:
            meta_text = json.dumps(meta)
        except TypeError as e:
            raise ValueError(f"cannot save: the merger's parameters must be JSON values ({e})") from None
        hist = self.history()
        l2 = self.level2_.arrays
        write_agent_file(path, meta_text, **self.memory_.state_dict(), assignment=self.clusters_.assignment[:n].copy(),
                     fo_counts=self.first_order_counts_,
                     t2_indptr=l2.t2_ptr, t2_indices=l2.t2_idx, t2_data=l2.t2_val,
                     **getattr(self.merger_, "state_dict", dict)(),
                     **{f"history_{k}": v for k, v in hist.items()})

    @classmethod
    def _check_saved_params(cls, params, n_obs: int, n_actions: int) -> None:
        """Raise ValueError / TypeError unless ``params`` (saved) make an agent for these alphabet sizes."""
        if not isinstance(params, dict):
            raise ValueError("meta has no 'params' object")
        unknown = sorted(set(params) - set(cls._param_names()) - set(_OLD_MERGER_PARAMS) - {"merge_params"})
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown} in meta")
        if params.get("similarity") == "custom":
            return  # load explains that this agent must be rebuilt with its function
        try:
            params = cls._params_from_json(params)
        except ValueError as e:
            if "custom similarity" in str(e):
                return
            raise
        cls(**dict(params, n_obs=n_obs, n_actions=n_actions,
                   seed=0 if params.get("seed") is None else params["seed"]))._validate_params()

    @classmethod
    def load(cls, path) -> "TwoLevelMemory":
        """Read a memory written by :meth:`save`; :meth:`partial_fit` / :meth:`run` then resume where it stopped.

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> agent = TwoLevelMemory(10, 4).run(gridworld(), 12, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "agent.npz"); agent.save(path); back = TwoLevelMemory.load(path)
        >>> a, b = agent.run(gridworld(), 10, seed=5).history(), back.run(gridworld(), 10, seed=5).history()
        >>> all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)   # resumed exactly
        True
        """
        from ._agent_kernels import FirstOrder

        src = str(path)
        data, meta = read_agent_file(path, _HISTORY_KEYS, cls._check_saved_params)  # format, checksum, arrays
        params = cls._params_from_json(meta["params"] if "params" in meta else meta["settings"], src)
        mem = EpisodicMemory.from_state_dict(data, source=src)
        params.update(n_obs=mem.n_obs, n_actions=mem.n_actions)
        if params.get("seed") is None:
            params["seed"] = 0  # the saved RNG state below replaces it
        agent = cls(**params)
        agent._start()
        agent.memory_ = mem
        agent._parent = np.full(mem.capacity, -1, dtype=np.int64)
        agent._parent_action = np.full(mem.capacity, -1, dtype=np.int64)
        for a in range(mem.n_actions):  # in-degree <= 1: each linked state has one parent
            linked = np.flatnonzero(mem.next_state[a] >= 0)
            agent._parent[mem.next_state[a, linked]] = linked
            agent._parent_action[mem.next_state[a, linked]] = a
        assignment = np.asarray(data.get("assignment"), dtype=np.int64)
        if assignment.shape != (mem.n_states,):
            raise ValueError(f"{src}: assignment has shape {assignment.shape}, expected ({mem.n_states},)")
        agent.clusters_ = Clusters(assignment)
        if hasattr(agent.merger_, "load_state_dict"):  # a merger with learned state of its own (fold)
            agent.merger_.load_state_dict(data, source=src)
        fo_counts = np.asarray(data["fo_counts"], dtype=np.int64)
        if fo_counts.shape != (mem.n_obs, mem.n_actions, mem.n_obs):
            raise ValueError(f"{src}: fo_counts has the wrong shape {fo_counts.shape}")
        agent.first_order_counts_ = fo_counts
        agent._fo = FirstOrder(fo_counts, np.array([int(meta["fo_prev"])], dtype=np.int64))
        agent.steps_, agent.episodes_, agent.sleeps_ = int(meta["steps"]), int(meta["episodes"]), int(meta["sleeps"])
        agent.sleep_pending_ = bool(meta["sleep_pending"])
        agent._purity = tuple(float(x) for x in meta["purity"])
        agent._labels_kept = None
        agent._label_width = int(mem.labels.max(initial=0)) + 1
        agent.rng_.bit_generator.state = meta["rng"]
        agent._popped = int(meta.get("popped", 0))
        agent.saved_extra_ = meta.get("extra")
        hist = {k: data[f"history_{k}"] for k in _HISTORY_KEYS if f"history_{k}" in data}
        if len(hist) == len(_HISTORY_KEYS) and len(hist["episode"]):
            agent._history = [hist]
        agent._set_level2()
        # T2 as last refreshed (it may lag level 1 by up to refresh_every steps): resume exactly
        t2 = tuple(np.asarray(data[f"t2_{x}"]) for x in ("indptr", "indices", "data"))
        if t2[0].shape != agent.level2_.arrays.t2_ptr.shape:
            raise ValueError(f"{src}: stored level-2 transitions do not match the clusters")
        agent.level2_.restore_t2(*t2)
        return agent


#: the agent parameters of files before mergers were objects (they belong to the sf / random mergers now),
#: with the values they had by default
_OLD_DEFAULTS = {"gamma": 0.8, "horizon": 25, "min_depth": 5, "threshold": 0.5, "similarity": "euclidean",
                 "split_contradictions": True, "sf_scale": 1.0}
_OLD_MERGER_PARAMS = tuple(_OLD_DEFAULTS)

#: level-1 states from which the agent keeps member lists of the clusters and the table of true labels per
#: cluster up to date (below, scanning the states is cheaper; about 4,500 episodes of the paper's protocol)
KEEP_TABLES_FROM_STATES = 200_000
#: the largest table of true labels per cluster the agent keeps for purity (entries); beyond it purity is
#: counted from the states at every sleep
LABEL_TABLE_MAX_ENTRIES = 20_000_000

_HISTORY_KEYS = (
    ["episode"]
    + [f"{p}_accuracy" for p in PREDICTORS]
    + [f"{p}_no_prediction" for p in PREDICTORS]
    + [f"{p}_accuracy_authors" for p in PREDICTORS]
    + ["n_clusters", "n_states", "purity", "purity_no_singletons"]
)


def _episode_metrics(obs, preds: dict, stats, first_episode: int) -> dict[str, np.ndarray]:
    """Per-episode accuracy and no-prediction share of each predictor over the moves (t >= 1)."""
    truth = obs[:, 1:]
    out = {"episode": np.arange(first_episode, first_episode + len(obs))}
    for name in PREDICTORS:
        p = preds[name][:, 1:]
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


def _progress(total: int, enabled: bool, initial: int = 0):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="episode", leave=False)
