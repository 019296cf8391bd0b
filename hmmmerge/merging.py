"""Merging clusters of level-1 states (Algorithm 3) and the random baseline.

One merge iteration (:func:`merge_iteration`), as in the authors' experiment:

1. choose one observation (colour) at random with weight ``(its number of
   clusters) - 1``;
2. compute the successor features (Algorithm 2) of each of its clusters, with
   the cluster's states as the initial set; a cluster whose BFS dies out
   before ``min_depth`` is not eligible;
3. shuffle the eligible clusters: the first half are probes, the second half
   candidates;
4. the merger pairs probes with candidates; the accepted pairs are applied in
   probe order, each pooling the two clusters and splitting back the states
   that contradict the majority next observation (:func:`merge_with_split`,
   the authors' experiment), or, with ``split_contradictions=False``, as plain
   unions (the paper's text).

:class:`SFMerger` is Algorithm 3: for every probe, the most similar candidate
is accepted with probability ``Phi((max - mean) / std)`` of the probe's row of
similarities, and only if ``max > threshold``.  :class:`RandomMerger` pairs
each probe with a uniformly random candidate, always accepted.

The merger protocol
-------------------
:class:`~hmmmerge.agent.TwoLevelMemory` drives every merge mode through one
small protocol, :class:`Merger`, so a new mode plugs in as an object
(``TwoLevelMemory(merger=MyMerger(...))``) or by name with one entry in the
catalogue :data:`hmmmerge.models.MERGERS` (``merge="name"``).  A merger is an
:class:`~hmmmerge._estimator.Estimator` (constructor parameters as attributes,
``_parameter_constraints`` checked when the agent starts); the agent works on a
fresh copy of it (``type(m)(**m.get_params(deep=False))``) at every ``fit``.

:class:`NoMerger` (``merge="none"``) is the paper's sleep without merges: the
not-yet-connected states are partitioned at random into clusters of
``initial_size`` per colour.  :class:`SFMerger` and :class:`RandomMerger`
sleep by that partition followed by ``merge_iterations`` calls of
:func:`merge_iteration`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from scipy.special import ndtr

from ._estimator import Estimator
from ._random import as_generator
from ._validation import Bool, Float, Int
from .successor import pairwise_similarity, successor_features

__all__ = ["Merger", "NoMerger", "SFMerger", "RandomMerger", "merge_iteration", "merge_with_split",
           "split_by_next_observation"]

#: the sleep schedule of the paper when a merger is used on its own (the agent passes its own values)
DEFAULT_INITIAL_SIZE = 10
DEFAULT_MERGE_ITERATIONS = 5


@runtime_checkable
class Merger(Protocol):
    """What :class:`~hmmmerge.agent.TwoLevelMemory` needs of a merger: ``sleep``; the other hooks are optional.

    Required
    ~~~~~~~~
    ``sleep(memory, clusters, rng) -> list[dict]``
        One sleep: connect, merge, split or reassign level-1 states of ``memory``
        (an :class:`~hmmmerge.episodic.EpisodicMemory`, never changed) in
        ``clusters`` (a :class:`~hmmmerge.clusters.Clusters`, C), drawing only from
        ``rng``; returns one report (a dict) per step it took.  Level 2 is
        recomputed by the agent afterwards.

    Optional hooks (an attribute that is absent or ``None`` is not called)
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    ``initial_size``, ``merge_iterations``
        Parameters of the paper's sleep schedule; ``None`` takes the agent's
        values (a merger whose own value differs from the agent's is refused).
    ``place(memory, clusters, states, rng) -> bool``
        Called after every chunk of online steps (chunks end at every episode
        end and every level-2 refresh) with the level-1 states visited in that
        chunk, in order; it may connect them to clusters at once and returns
        whether C changed (the agent then refreshes level 2 before the next step).
    ``level2_transitions(memory, clusters)``
        T2 as the merger counts it (stacked CSR ``(indptr, indices, data, counts, first)``),
        or ``None`` for the agent's own count.
    ``emission(clusters, n_states) -> (k, n_obs)``
        Noise-aware emissions per cluster for the online predictors.
    ``purity(memory, clusters) -> (purity, purity_no_singletons)`` or ``None``
        Weighted purity from label counts the merger keeps.
    ``level2_hmm(memory, clusters) -> ActionHMM``
        Level 2 as the merger models it (used by ``TwoLevelMemory.level2_hmm``).
    ``state_dict() -> dict`` / ``load_state_dict(data, source)``
        Learned state of the merger's own, saved in and restored from agent files.

    Independently of the mode, the agent's ``online_connect`` rule connects new
    level-1 states step by step inside its kernel (see :mod:`hmmmerge.agent`).

    >>> isinstance(SFMerger(), Merger), isinstance(object(), Merger)
    (True, False)
    """

    def sleep(self, memory, clusters, rng) -> list[dict]:
        ...


def _similarity(value, name: str):
    if callable(value):
        return value
    allowed = ("euclidean", "cosine", "kl", "correlation")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))} or a callable f(X, Y), got {value!r}")
    return value


class NoMerger(Estimator):
    """The paper's ``merge="none"``: a sleep only partitions the unconnected states.

    Per colour, the level-1 states without a cluster are shuffled and cut into
    new clusters of exactly ``initial_size`` (the remainder waits for the next
    sleep, see :meth:`~hmmmerge.clusters.Clusters.partition_unassigned`).

    >>> from hmmmerge import gridworld, random_walk
    >>> from hmmmerge.episodic import EpisodicMemory
    >>> from hmmmerge.clusters import Clusters
    >>> mem = EpisodicMemory(10, 4); _ = mem.observe_trajectories(random_walk(gridworld(), 5, seed=0))
    >>> cl = Clusters(n_states=mem.n_states)
    >>> NoMerger(initial_size=3).sleep(mem, cl, np.random.default_rng(0)), bool((cl.sizes() == 3).all())
    ([], True)
    """

    _parameter_constraints = {"initial_size": Int(1, none=True)}

    def __init__(self, initial_size: int | None = None):
        self.initial_size = initial_size

    @property
    def size_(self) -> int:
        """The cluster size of a partition: ``initial_size``, or :data:`DEFAULT_INITIAL_SIZE` when None."""
        return DEFAULT_INITIAL_SIZE if self.initial_size is None else int(self.initial_size)

    def sleep(self, memory, clusters, rng) -> list[dict]:
        """Partition the unconnected states; no merge step, so no reports."""
        self._validate_params()
        clusters.grow(memory.n_states)
        clusters.partition_unassigned(memory.emission, self.size_, rng, n_states=memory.n_states)
        return []


class SFMerger(NoMerger):
    """Algorithm 3: successor-feature guided merging.

    Parameters
    ----------
    similarity : ``"euclidean"`` (exp(-distance), default), ``"cosine"``, ``"kl"``,
        ``"correlation"`` or a callable ``f(X, Y) -> (n x k)``.
    threshold : minimum similarity ``l`` of an accepted pair (0.5).
    gamma, horizon, min_depth : successor-feature discount, BFS depth and the
        depth a cluster's BFS must reach to be eligible.
    sf_scale : factor applied to the features before the similarity (1: Algorithm 2's
        ``gamma^(l-1)`` weights; ``gamma`` with ``min_depth=4`` is the authors' code,
        which weights depth ``l`` by ``gamma^l``).
    split_contradictions : apply pairs with :func:`merge_with_split` (the authors'
        experiment) rather than as plain unions.
    initial_size, merge_iterations : a :meth:`sleep` partitions the unconnected
        states into clusters of ``initial_size`` per colour, then runs
        ``merge_iterations`` merge iterations.

    >>> import numpy as np
    >>> m = SFMerger()
    >>> probes = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> cands = np.array([[0.0, 1.0], [1.0, 0.0], [5.0, 5.0]])
    >>> m.select_pairs(probes, cands, seed=0)[1].tolist()   # best candidate of each probe
    [1, 0]
    """

    _parameter_constraints = {
        "similarity": _similarity, "threshold": Float(), "gamma": Float(0, 1, low_open=True),
        "horizon": Int(1), "min_depth": Int(0), "split_contradictions": Bool(), "sf_scale": Float(0, low_open=True),
        "initial_size": Int(1, none=True), "merge_iterations": Int(0, none=True),
    }

    def __init__(self, similarity="euclidean", threshold: float = 0.5, gamma: float = 0.8,
                 horizon: int = 25, min_depth: int = 5, split_contradictions: bool = True, sf_scale: float = 1.0,
                 initial_size: int | None = None, merge_iterations: int | None = None):
        self.similarity = similarity
        self.threshold = threshold
        self.gamma = gamma
        self.horizon = horizon
        self.min_depth = min_depth
        self.split_contradictions = split_contradictions
        self.sf_scale = sf_scale
        self.initial_size = initial_size
        self.merge_iterations = merge_iterations

    def _validate_params(self) -> None:
        """The table, and ``min_depth <= horizon`` (else no cluster could ever be eligible)."""
        super()._validate_params()
        if self.min_depth > self.horizon:
            raise ValueError(f"min_depth={self.min_depth} exceeds horizon={self.horizon}: no cluster could be eligible")

    @property
    def iterations_(self) -> int:
        """``merge_iterations``, or :data:`DEFAULT_MERGE_ITERATIONS` when None."""
        return DEFAULT_MERGE_ITERATIONS if self.merge_iterations is None else int(self.merge_iterations)

    def sleep(self, memory, clusters, rng) -> list[dict]:
        """Partition the unconnected states, then ``merge_iterations`` merge iterations (their reports);
        they stop early once no colour has two clusters (a fixed point: a million iterations cost no more).

        >>> from hmmmerge import gridworld, random_walk
        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(10, 4); _ = mem.observe_trajectories(random_walk(gridworld(), 40, seed=0))
        >>> cl = Clusters(n_states=mem.n_states)
        >>> reports = SFMerger(merge_iterations=3).sleep(mem, cl, np.random.default_rng(0))
        >>> len(reports), sorted(reports[0])
        (3, ['colour', 'eligible', 'merges', 'probes'])
        """
        super().sleep(memory, clusters, rng)
        reports = []
        # with splits, emptied clusters are only marked until the sleep ends: ids are renumbered once
        emptied = np.zeros(clusters.n_clusters, dtype=bool) if self.split_contradictions else None
        for _ in range(self.iterations_):
            reports.append(merge_iteration(memory, clusters, self, rng, emptied=emptied))
            if reports[-1]["colour"] < 0:  # no colour has two clusters: nothing can merge any more, no draw made
                break
        if emptied is not None and emptied.any():
            clusters.compact_assigned()
        return reports

    @property
    def count_horizon(self) -> int:
        """Breadth-first depths whose counts :meth:`features_from_counts` needs (the per-cluster cache)."""
        return self.horizon

    def features_from_counts(self, counts: np.ndarray, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`features` of sets from their per-depth observation counts (identical results): of the sets
        whose counts are ``counts[rows]`` (default: all rows), without copying them.

        >>> from hmmmerge import Environment
        >>> from hmmmerge._successor_kernels import set_depth_counts
        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 2])
        >>> counts = np.zeros((1, 3, 3), dtype=np.int64)
        >>> set_depth_counts(env.next_state, env.obs, np.array([0, 1]), np.array([0]), 3, counts, np.array([0]))
        >>> sf, depth = SFMerger(gamma=0.5, horizon=3, min_depth=1).features_from_counts(counts)
        >>> sf.tolist(), depth.tolist()
        ([[0.25, 1.0, 0.5]], [3])
        """
        from ._successor_kernels import features_from_depth_counts

        rows = np.arange(len(counts)) if rows is None else np.asarray(rows, dtype=np.int64)
        sf = np.zeros((len(rows), counts.shape[2]))
        depth = np.zeros(len(rows), dtype=np.int64)
        features_from_depth_counts(counts, rows, float(self.gamma), sf, depth)
        return sf, depth

    def features(self, memory, sets) -> tuple[np.ndarray, np.ndarray]:
        """Successor features and BFS depths of the initial ``sets`` (Algorithm 2).

        >>> from hmmmerge import Environment
        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 2])
        >>> sf, depth = SFMerger(gamma=0.5, horizon=3, min_depth=1).features(env, [[0]]); sf.tolist(), depth.tolist()
        ([[0.25, 1.0, 0.5]], [3])
        """
        return successor_features(memory, sets, self.gamma, self.horizon, return_depth=True)

    def acceptance(self, sim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row-wise ``argmax``, ``max`` and ``Phi((max - mean) / std)`` (std 0 gives z = 0).

        >>> best, top, p = SFMerger().acceptance(np.array([[0.9, 0.1, 0.1], [0.5, 0.5, 0.5]]))
        >>> best.tolist(), top.tolist(), p.round(3).tolist()   # a clear winner vs. a three-way tie
        ([0, 0], [0.9, 0.5], [0.921, 0.5])
        """
        best = sim.argmax(axis=1)
        top = sim[np.arange(len(sim)), best]
        # sim.mean(axis=1) and sim.std(axis=1), the same operations as numpy's, without their Python wrappers
        k = sim.shape[1]
        mean = np.add.reduce(sim, axis=1) / k
        dev = sim - mean[:, None]
        std = np.sqrt(np.add.reduce(np.multiply(dev, dev, out=dev), axis=1) / k)
        z = np.divide(top - mean, std, out=np.zeros_like(top), where=std > 0)
        return best, top, ndtr(z)  # the standard normal CDF Phi

    def select_pairs(self, probe_features, candidate_features, seed=0):
        """Algorithm 3 on probe and candidate embeddings: ``(probe_index, candidate_index)`` arrays.

        >>> probes = np.array([[0.0, 0.0], [50.0, 50.0]])
        >>> cands = np.vstack([[0.0, 0.0], np.full((9, 2), 10.0)])
        >>> pi, ci = SFMerger().select_pairs(probes, cands, seed=0)
        >>> pi.tolist(), ci.tolist()   # probe 1 is far from all: its best similarity is below the threshold
        ([0], [0])
        """
        rng = as_generator(seed)
        sim = pairwise_similarity(probe_features, candidate_features, self.similarity)
        best, top, p_accept = self.acceptance(sim)
        draw = rng.random(len(best)) < p_accept
        keep = np.flatnonzero(draw & (top > self.threshold))
        return keep, best[keep]


class RandomMerger(SFMerger):
    """The paper's random baseline: each probe merges with a uniformly random candidate.

    >>> import numpy as np
    >>> RandomMerger().select_pairs(np.zeros((3, 2)), np.zeros((4, 2)), seed=0)[0].tolist()
    [0, 1, 2]
    """

    _parameter_constraints = {k: v for k, v in SFMerger._parameter_constraints.items()
                              if k not in ("similarity", "threshold", "sf_scale")}

    def __init__(self, gamma: float = 0.8, horizon: int = 25, min_depth: int = 5,
                 split_contradictions: bool = True, initial_size: int | None = None,
                 merge_iterations: int | None = None):
        super().__init__(gamma=gamma, horizon=horizon, min_depth=min_depth,
                         split_contradictions=split_contradictions, initial_size=initial_size,
                         merge_iterations=merge_iterations)

    @property
    def count_horizon(self) -> int:
        return self.min_depth

    def features_from_counts(self, counts: np.ndarray, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Zeros and the depth reached (capped at ``min_depth``), like :meth:`features`."""
        counts = counts if rows is None else counts[rows]
        reached = counts.sum(axis=2) > 0
        return np.zeros((counts.shape[0], counts.shape[2])), reached.sum(axis=1)

    def features(self, memory, sets) -> tuple[np.ndarray, np.ndarray]:
        """Only eligibility matters here: the BFS stops at ``min_depth`` (features are zeros).

        >>> from hmmmerge import Environment
        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 2])
        >>> RandomMerger(horizon=25, min_depth=2).features(env, [[0]])[1].tolist()   # depth capped at 2
        [2]
        """
        _, depth = successor_features(memory, sets, self.gamma, self.min_depth, return_depth=True)
        return np.zeros((len(depth), memory.n_obs)), depth

    def select_pairs(self, probe_features, candidate_features, seed=0):
        """Every probe with a uniformly random candidate (features only give the counts).

        >>> pi, ci = RandomMerger().select_pairs(np.zeros((4, 2)), np.zeros((3, 2)), seed=1)
        >>> pi.tolist(), ci.tolist()
        ([0, 1, 2, 3], [1, 1, 2, 2])
        """
        rng = as_generator(seed)
        n, k = len(probe_features), len(candidate_features)
        return np.arange(n), rng.integers(0, k, size=n)


def cluster_sets(assignment: np.ndarray, cluster_ids: np.ndarray, states=None) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(ptr, idx)`` of the member states of ``cluster_ids`` (in that order).

    ``states`` (increasing), if given, are the only states looked at (e.g. those of
    the clusters' colour); by default all of ``assignment``.

    >>> ptr, idx = cluster_sets(np.array([1, 0, 1, -1, 2]), np.array([1, 2]))
    >>> ptr.tolist(), idx.tolist()   # cluster 1 holds states 0, 2; cluster 2 holds state 4
    ([0, 2, 3], [0, 2, 4])
    """
    from ._cluster_kernels import member_lists

    assignment = np.ascontiguousarray(assignment, dtype=np.int64)
    cluster_ids = np.asarray(cluster_ids, dtype=np.int64)
    states = np.arange(len(assignment)) if states is None else np.asarray(states, dtype=np.int64)
    k = int(assignment.max()) + 1 if assignment.size else 0
    pos = np.full(max(k, int(cluster_ids.max(initial=-1)) + 1, 1), -1, dtype=np.int64)
    pos[cluster_ids] = np.arange(len(cluster_ids))
    return member_lists(states, assignment, pos, len(cluster_ids))


def merge_iteration(memory, clusters, merger, seed=0, emptied=None) -> dict:
    """One merge iteration over ``clusters`` of ``memory`` (see the module docstring).

    Returns a small report: the colour chosen, numbers of eligible clusters,
    probes and merges.  ``emptied`` (a bool array over cluster ids, with
    split merges only) defers the renumbering: clusters emptied by the merges
    are marked there and ignored, and the caller calls
    :meth:`~hmmmerge.clusters.Clusters.compact_assigned` once at the end (the
    same result as renumbering after every iteration, since renumbering keeps
    the order of the ids).

    >>> from hmmmerge import gridworld, random_walk
    >>> from hmmmerge.episodic import EpisodicMemory
    >>> from hmmmerge.clusters import Clusters
    >>> env = gridworld(); mem = EpisodicMemory(env.n_obs, env.n_actions)
    >>> _ = mem.observe_trajectories(random_walk(env, 100, seed=0))
    >>> cl = Clusters(n_states=mem.n_states); _ = cl.partition_unassigned(mem.emission, 10, seed=0)
    >>> before = cl.n_clusters
    >>> report = merge_iteration(mem, cl, SFMerger(), seed=0)
    >>> cl.n_clusters == before - report["merges"]
    True
    """
    rng = as_generator(seed)
    report = {"colour": -1, "eligible": 0, "probes": 0, "merges": 0}
    n = memory.n_states
    clusters.grow(n)
    colour_of = clusters.cluster_emission(memory.emission)
    if emptied is not None:
        colour_of = np.where(emptied, -1, colour_of)
    counts = np.bincount(colour_of[colour_of >= 0], minlength=memory.n_obs)
    weights = np.maximum(counts - 1, 0).astype(float)
    if weights.sum() == 0:
        return report
    colour = int(rng.choice(memory.n_obs, p=weights / weights.sum()))
    ids = np.flatnonzero(colour_of == colour)
    sf, depth, ptr, idx = _cluster_features(memory, clusters, merger, ids, memory.states_emitting(colour))
    eligible = rng.permutation(np.flatnonzero(depth >= merger.min_depth))
    half = len(eligible) // 2
    probes, candidates = eligible[:half], eligible[half:]
    report.update(colour=colour, eligible=len(eligible), probes=len(probes))
    if len(probes) == 0:
        return report
    sf = sf * merger.sf_scale
    pi, ci = merger.select_pairs(sf[probes], sf[candidates], rng)
    before = clusters.n_clusters
    if merger.split_contradictions:
        pairs = np.column_stack([probes[pi], candidates[ci]])
        if ptr is None:  # member lists kept: read those of the pairs' clusters only
            involved, pairs = np.unique(pairs, return_inverse=True)
            ids, pairs = ids[involved], pairs.reshape(-1, 2)
            ptr, idx = clusters.member_csr(ids)
        gone = _apply_pairs(memory, clusters, ids, ptr, idx, pairs, merger.count_horizon, compact=emptied is None)
        if emptied is not None:
            emptied[gone] = True
            report["merges"] = len(gone)
            return report
    else:
        clusters.merge(np.column_stack([ids[probes[pi]], ids[candidates[ci]]]))
    report["merges"] = before - clusters.n_clusters
    return report


def _cluster_features(memory, clusters, merger, ids, states):
    """``merger.features`` of clusters ``ids`` (sorted) from kept per-depth counts, and their members among
    ``states`` (increasing) as CSR ``(ptr, idx)``: ``(sf, depth, ptr, idx)``; ``ptr`` and ``idx`` are None
    where ``clusters`` keeps member lists (stale clusters are then counted from their lists, without a
    pass over ``states``).

    The per-depth observation counts of a cluster (see
    :meth:`~hmmmerge.clusters.Clusters.depth_counts`) are kept up to date as its
    states and level 1 around them change; only rows marked stale are counted
    again from the cluster's states.  Without a kept table (too large), every
    cluster of ``ids`` is counted afresh.
    """
    from ._merge_kernels import members_and_counts

    horizon = merger.count_horizon
    kept = clusters.depth_counts(("depth-counts", horizon), horizon, memory.n_obs)
    if kept is None:  # every cluster counted afresh, in a table of its own
        valid, counts = np.zeros(len(ids), dtype=bool), np.zeros((len(ids), horizon, memory.n_obs), np.int64)
        rows = np.arange(len(ids))
    else:
        (valid, counts), rows = kept, ids
    nxt, emission, _ = memory.kernel_arrays()
    if clusters.keeps_members:
        stale = np.flatnonzero(~valid[rows])
        if len(stale):
            members_and_counts(clusters.member_csr(ids[stale])[1], clusters.assignment, ids[stale], nxt, emission,
                               rows[stale], valid, counts)
        return (*merger.features_from_counts(counts, rows), None, None)
    ptr, idx = members_and_counts(states, clusters.assignment, ids, nxt, emission, rows, valid, counts)
    return (*merger.features_from_counts(counts, rows), ptr, idx)


def _set_counts(memory, state_sets, horizon, out=None, rows=None):
    """Per-depth counts (see :func:`~hmmmerge._successor_kernels.set_depth_counts`) of a list of state sets
    (or of the rows of a 2-D array, e.g. single states as a column), as a new array, or added to rows
    ``rows`` of ``out``."""
    from ._successor_kernels import set_depth_counts

    nxt, emission, _ = memory.kernel_arrays()
    if isinstance(state_sets, np.ndarray) and state_sets.ndim == 2:
        ptr = np.arange(len(state_sets) + 1, dtype=np.int64) * state_sets.shape[1]
        idx = state_sets.astype(np.int64).ravel()
    else:
        ptr = np.zeros(len(state_sets) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(x) for x in state_sets])
        idx = np.concatenate(state_sets).astype(np.int64) if len(state_sets) else np.zeros(0, dtype=np.int64)
    if out is None:
        out, rows = np.zeros((len(state_sets), horizon, memory.n_obs), dtype=np.int64), np.arange(len(state_sets))
    set_depth_counts(nxt, emission, ptr, idx, horizon, out, np.asarray(rows, dtype=np.int64))
    return out


def split_by_next_observation(memory, states: np.ndarray) -> np.ndarray:
    """Which of ``states`` agree with the majority on one action (a boolean mask).

    The action is the first one with the fewest unknown successors among
    ``states``; the majority is the most common observation of their known
    successors (smallest on ties).  A state agrees if its successor under that
    action is unknown or emits the majority observation.

    >>> class Memory:  # anything with kernel_arrays(): (next_state A x N, emission N, n_obs)
    ...     def kernel_arrays(self):
    ...         return np.array([[2, 3, -1, -1]]), np.array([0, 0, 1, 2]), 3
    >>> split_by_next_observation(Memory(), np.array([0, 1, 2])).tolist()  # successors see 1, 2, unknown
    [True, False, True]
    """
    from ._merge_kernels import split_mask

    nxt, emission, n_obs = memory.kernel_arrays()
    states = np.asarray(states, dtype=np.int64)
    agree = np.empty(len(states), dtype=bool)
    split_mask(nxt, emission, n_obs, states, agree)
    return agree


def merge_with_split(memory, clusters, pairs, members: dict | None = None, count_horizon: int | None = None,
                     compact: bool = True) -> list[int]:
    """Apply merge pairs ``(probe, candidate)`` in order, splitting off contradictions.

    For each pair, the states of both clusters are pooled; those that agree
    with the majority next observation (see :func:`split_by_next_observation`)
    form the probe, the others stay in the candidate.  A candidate left empty
    disappears, and later pairs naming it refer to the probe that absorbed it.
    Cluster ids are renumbered once at the end.  ``members`` may give the
    states of clusters already known (cluster id -> state indices).  With
    ``count_horizon``, the per-depth counts that ``clusters`` keeps for that
    horizon (:meth:`~hmmmerge.clusters.Clusters.depth_counts`) are updated
    rather than dropped: a pooled pair's counts are the sum of its two
    clusters' counts, so only the split-off states are counted.  Returns the
    ids of the clusters left empty; with ``compact=False`` they stay (empty)
    and the ids are not renumbered (see :func:`merge_iteration`).

    >>> from hmmmerge.clusters import Clusters
    >>> from hmmmerge.episodic import EpisodicMemory
    >>> mem = EpisodicMemory(2, 1)
    >>> for ep in ([0, 1], [0, 1], [1, 0]):
    ...     _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate(ep)]
    >>> cl = Clusters(np.array([0, 1, 2, 3]))        # states: 0 -> 1 (obs 0 -> 1), 2 -> 3 (obs 1 -> 0)
    >>> _ = merge_with_split(mem, cl, [(1, 2)]); cl.n_clusters   # both emit 1, state 2 has a successor
    3
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= clusters.n_clusters):
        raise ValueError(f"merge pairs refer to clusters outside 0..{clusters.n_clusters - 1}")
    ids, pos_pairs = np.unique(pairs, return_inverse=True)
    members = members or {}
    sets = [np.asarray(members[c], dtype=np.int64) if c in members else clusters.members(c) for c in ids.tolist()]
    ptr = np.zeros(len(sets) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in sets])
    idx = np.concatenate(sets) if sets else np.zeros(0, dtype=np.int64)
    return _apply_pairs(memory, clusters, ids, ptr, idx, pos_pairs.reshape(-1, 2), count_horizon, compact).tolist()


def _apply_pairs(memory, clusters, ids, ptr, idx, pairs, count_horizon, compact) -> np.ndarray:
    """:func:`merge_with_split` of ``pairs`` given as positions in ``ids`` (sorted cluster ids, members CSR
    ``ptr``/``idx``); returns the ids of the clusters left empty (increasing)."""
    from ._merge_kernels import merge_pairs_with_split

    kept = None
    if count_horizon is not None:
        kept = clusters.depth_counts(("depth-counts", count_horizon), count_horizon, memory.n_obs)
    valid, counts = kept if kept is not None else (np.zeros(0, dtype=bool), np.zeros((0, 1, 1), dtype=np.int64))
    nxt, emission, n_obs = memory.kernel_arrays()
    ids = np.asarray(ids, dtype=np.int64)
    moved, target, touched, sizes, known, rows = merge_pairs_with_split(
        nxt, emission, n_obs, ids, ptr, idx, np.ascontiguousarray(pairs, dtype=np.int64), kept is not None, valid,
        counts)
    pool = idx[np.repeat(touched, np.diff(ptr))]  # the touched clusters' states, before the moves
    clusters.assign_each(moved, target, whole=ids[touched], members=pool)
    clusters.invalidate(ids[touched])  # as if every touched cluster had been assigned its members
    if kept is not None:
        counts[ids[known]], valid[ids[known]] = rows, True
    if compact:
        clusters.compact_assigned()
    return ids[touched & (sizes == 0)]
