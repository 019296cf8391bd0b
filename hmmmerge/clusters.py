"""Level 2: clusters of level-1 states and the connection matrix C.

``C`` (n x k) holds ``C[i, j] = P(h2 = j | h1 = i)``.  With hard assignments
(the paper's experiments) a :class:`Clusters` object stores one cluster id per
level-1 state (-1: not connected) and builds ``C`` on demand.  Merging two
clusters adds their columns and drops one; disconnecting a state zeroes its
row.  Level 1 is never changed by any of this.

The level-2 model (Equation ``trans_2dn``, written for row-stochastic ``T``):
``T2[a] ∝ C^T T1[a] C`` row-normalised, ``E2 ∝ C^T E1``, ``B2 ∝ C^T B1``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ._validation import check_int
from ._random import as_generator
from .hmm import ActionHMM

__all__ = ["Clusters", "Changes", "level2_hmm"]


class Changes(NamedTuple):
    """How C changed while :meth:`Clusters.record_changes` was on (see :meth:`Clusters.changes`).

    ``relabel[c]``: the id now holding old cluster ``c`` (several old ids may
    share one: merged; a cluster whose states were all moved or dealt out
    again: where most of them went), or a *ghost* id ``>= n_clusters`` if all its states lost their
    clusters (then ``ok`` is False); ``n_ghosts`` such ids follow.  ``moved``
    (increasing): the states whose cluster is not ``relabel`` of their old one
    (newly connected states included); ``was``: for each, ``relabel`` of its
    old cluster (-1: it was not connected).  ``ok`` is False if a connected
    state lost its cluster or C was edited where it could not be followed.
    """

    relabel: np.ndarray
    n_ghosts: int
    moved: np.ndarray
    was: np.ndarray
    ok: bool


class Clusters:
    """A hard assignment of level-1 states to clusters (a binary connection matrix C).

    >>> cl = Clusters(np.array([0, 0, 1, -1]))
    >>> cl.n_clusters, cl.sizes().tolist()
    (2, [2, 1])
    >>> cl.merge([(1, 0)]); cl.assignment.tolist()
    [0, 0, 0, -1]
    """

    def __init__(self, assignment=None, n_states: int = 0):
        if assignment is None:
            assignment = np.full(n_states, -1, dtype=np.int64)
        a = np.asarray(assignment, dtype=np.int64).copy()
        if a.ndim != 1:
            raise ValueError(f"assignment must be 1-D, got shape {a.shape}")
        if a.size and a.min() < -1:
            raise ValueError("assignment entries must be cluster ids >= 0 or -1 (not connected)")
        self.assignment = a
        self._journal = None
        self._lists = None  # member list of every cluster, see keep_members
        self._stamp, self._epoch = np.zeros(0, dtype=np.int64), 0  # per-state marks of changes()
        self._free_upto = 0  # every unconnected state below it is in _free (see partition_unassigned)
        self._free = np.zeros(0, dtype=np.int64)
        self._caches: dict = {}
        self._rep = np.zeros(0, dtype=np.int64)
        self._compact()
        self._set_reps()

    # ------------------------------------------------------------------ views
    @property
    def n_clusters(self) -> int:
        return self._k

    @property
    def n_states(self) -> int:
        return self.assignment.shape[0]

    def sizes(self) -> np.ndarray:
        """Number of level-1 states in each cluster.

        >>> Clusters(np.array([0, 1, 1, -1, 1])).sizes().tolist()
        [1, 3]
        """
        a = self.assignment
        return np.bincount(a[a >= 0], minlength=self._k)

    def sizes_of(self, ids) -> np.ndarray:
        """The number of states of each cluster of ``ids`` (O(len(ids)) once :meth:`keep_members` is on).

        >>> Clusters(np.array([0, 1, 1, -1, 1])).sizes_of([1, 0]).tolist()
        [3, 1]
        """
        ids = np.asarray(ids, dtype=np.int64)
        if self._lists is None:
            return self.sizes()[ids]
        return np.array([len(self._materialise(c)) for c in ids.tolist()], dtype=np.int64)

    def members(self, cluster: int) -> np.ndarray:
        """The level-1 states of ``cluster``, in increasing order (read-only).

        In O(its size) once :meth:`keep_members` is on, else one pass over all states.

        >>> Clusters(np.array([0, 1, 1, -1, 1])).members(1).tolist()
        [1, 2, 4]
        """
        if self._lists is None:
            return np.flatnonzero(self.assignment == cluster)
        return np.sort(self._materialise(cluster))

    def connection_matrix(self, n_states: int | None = None) -> sp.csr_matrix:
        """C as a sparse (n_states x n_clusters) binary matrix.

        >>> Clusters(np.array([1, -1, 0])).connection_matrix().toarray().tolist()
        [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
        """
        n = self.n_states if n_states is None else int(n_states)
        a = self.assignment[:n]
        rows = np.flatnonzero(a >= 0)
        return sp.csr_matrix((np.ones(len(rows)), (rows, a[rows])), shape=(n, self._k))

    def cluster_emission(self, emission: np.ndarray) -> np.ndarray:
        """The observation of each cluster (its members all share one), in O(n_clusters).

        >>> Clusters(np.array([1, 1, 0, -1])).cluster_emission(np.array([3, 3, 5, 7])).tolist()
        [5, 3]
        """
        return np.asarray(emission)[self._rep] if self._k else np.zeros(0, dtype=np.int64)

    def _set_reps(self) -> None:
        """One member state per cluster (its largest), through which :meth:`cluster_emission` reads colours."""
        a = self.assignment
        rows = np.flatnonzero(a >= 0)
        self._rep = np.zeros(self._k, dtype=np.int64)
        self._rep[a[rows]] = rows

    # ------------------------------------------------------------ member lists
    @property
    def keeps_members(self) -> bool:
        """Whether :meth:`keep_members` is on."""
        return self._lists is not None

    def keep_members(self) -> None:
        """Keep every cluster's member list from now on (one pass now), so that :meth:`members` does not
        scan all states.  Changes must then go through the methods of this class, and states connected
        from outside (the agent's online joins) be announced with :meth:`note_joined`; :meth:`compact`
        (after direct edits) drops the lists.  The lists are kept in no particular order (a change costs
        the size of the clusters it touches, no sort); :meth:`members` sorts the one it returns.

        >>> cl = Clusters(np.array([1, 0, 1])); cl.keep_members(); cl.merge([(0, 1)]); cl.members(0).tolist()
        [0, 1, 2]
        """
        a = self.assignment
        order = np.argsort(a, kind="stable")
        bounds = np.searchsorted(a[order], np.arange(self._k + 1))
        self._lists = [_frozen(order[bounds[c]:bounds[c + 1]]) for c in range(self._k)]
        self._extra, self._joined = {}, []

    def member_csr(self, ids, increasing: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The members of clusters ``ids`` as CSR ``(ptr, idx)``; with :meth:`keep_members` on, each
        cluster's states in no particular order unless ``increasing``.

        >>> ptr, idx = Clusters(np.array([1, 0, 1, -1])).member_csr([1, 0]); ptr.tolist(), idx.tolist()
        ([0, 2, 3], [0, 2, 1])
        """
        ids = np.asarray(ids, dtype=np.int64).tolist()
        if self._lists is None:
            sets = [self.members(c) for c in ids]
        else:
            self._group_joined()
            sets = [self._materialise(c) if c in self._extra else self._lists[c] for c in ids]
            if increasing:  # kept sorted from now on (any order is a valid order)
                for r, c in enumerate(ids):
                    self._lists[c] = sets[r] = _frozen(np.sort(sets[r]))
        ptr = np.zeros(len(sets) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(x) for x in sets])
        return ptr, np.concatenate(sets) if sets else np.zeros(0, dtype=np.int64)

    def note_joined(self, states) -> None:
        """States that were connected by writing :attr:`assignment` directly (to a cluster, from -1):
        their clusters' member lists gain them (when next read).

        >>> cl = Clusters(np.array([0, -1])); cl.keep_members(); cl.assignment[1] = 0; cl.note_joined([1])
        >>> cl.members(0).tolist()
        [0, 1]
        """
        if self._lists is not None and len(states):
            self._journal_cannot_follow()
            self._joined.append(np.array(states, dtype=np.int64))

    def _journal_cannot_follow(self) -> None:
        if self._journal is not None:  # a direct edit while recording
            self._journal["ok"] = False

    def _group_joined(self) -> None:
        """Announced states go to their clusters' pending additions (O(announced))."""
        if self._joined:
            states = np.concatenate(self._joined)
            self._joined = []
            owner = self.assignment[states]
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(self._k + 1))
            for x in np.unique(owner).tolist():
                self._extra.setdefault(x, []).append(states[order[bounds[x]:bounds[x + 1]]])

    def _materialise(self, c: int) -> np.ndarray:
        """Cluster ``c``'s member list (any order) with the joined states added."""
        self._group_joined()
        extra = self._extra.pop(c, None)
        if extra is not None:
            self._lists[c] = _frozen(np.concatenate([self._lists[c], *extra]))
        return self._lists[c]

    def _drop_from_lists(self, states, owner) -> None:
        """Member lists lose ``states`` (their clusters ``owner``, -1: none)."""
        for c in np.unique(owner[owner >= 0]).tolist():
            lst = self._materialise(c)
            self._lists[c] = _frozen(lst[~np.isin(lst, states[owner == c])])

    def _remap_lists(self, new_of_old, k_new) -> None:
        """Member lists follow a renumbering (``new_of_old[c]`` < 0: ``c`` is gone; shared ids merge);
        announced states must be grouped (under the old ids) before C is renumbered."""
        if self._lists is None:
            return
        m = np.asarray(new_of_old)
        live = np.flatnonzero(m >= 0)
        if np.array_equal(m[live], np.arange(k_new)):  # emptied ids dropped, the others keep their order
            self._lists = [self._lists[c] for c in live.tolist()]
            self._extra = {int(m[c]): x for c, x in self._extra.items() if m[c] >= 0}
            return
        hits = np.bincount(m[m >= 0], minlength=max(k_new, 1))
        for c in np.flatnonzero((m >= 0) & (hits[np.maximum(m, 0)] > 1)).tolist():
            self._materialise(c)  # clusters that merge: their lists are joined below
        parts = [[] for _ in range(k_new)]
        for c, t in enumerate(m.tolist()):
            if t >= 0:
                parts[t].append(self._lists[c])
        self._lists = [p[0] if len(p) == 1 else _frozen(np.concatenate(p)) if p else _EMPTY for p in parts]
        self._extra = {int(m[c]): x for c, x in self._extra.items() if m[c] >= 0}

    # ------------------------------------------------------------ per-cluster caches
    def depth_counts(self, key, horizon: int, n_obs: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(valid, counts)``: per-cluster counts kept across changes, under ``key``.

        ``counts`` is (at least n_clusters, horizon, n_obs) int (spare rows are zero): what
        :func:`~hmmmerge._successor_kernels.set_depth_counts` gives for each
        cluster's states (observations per breadth-first depth); a row is trusted
        only where ``valid``.  A change of a cluster's members here clears its flag
        (the caller may compute the new row and set it again), as does
        :meth:`invalidate` for changes this object cannot see; renumbering keeps
        rows with their clusters, and merged clusters add their rows (counts of
        disjoint sets add up).  This is how successor features are kept up to date
        without recomputing them from all the states of a cluster.  ``None`` if
        the table would need more than ``max_bytes`` (then nothing is kept).

        >>> cl = Clusters(np.array([0, 1, 2]))
        >>> valid, counts = cl.depth_counts("f", 1, 2); valid[:] = True; counts[:, 0, 0] = [10, 11, 12]
        >>> cl.merge([(0, 1)]); valid, counts = cl.depth_counts("f", 1, 2)
        >>> valid[:2].tolist(), counts[:2, 0, 0].tolist()   # clusters 0+1 merged into new 0; old 2 is now 1
        ([True, True], [21, 12])
        """
        shape = (int(horizon), int(n_obs))
        if 8 * max(self._k, 1) * shape[0] * shape[1] > self.max_cache_bytes:
            self._caches.pop(key, None)
            return None
        entry = self._caches.get(key)
        if entry is None or entry[1].shape[1:] != shape:
            entry = (np.zeros(self._k, dtype=bool), np.zeros((self._k, *shape), dtype=np.int64))
            self._caches[key] = entry
        return entry

    def kept_depth_counts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every ``(valid, counts)`` table :meth:`depth_counts` keeps (for updates from outside).

        >>> cl = Clusters(np.array([0])); _ = cl.depth_counts("f", 2, 3); [c.shape for _, c in cl.kept_depth_counts()]
        [(1, 2, 3)]
        """
        return list(self._caches.values())

    #: the largest per-cluster count table :meth:`depth_counts` keeps (bytes)
    max_cache_bytes = 1 << 28

    def invalidate(self, cluster_ids) -> None:
        """Mark the cached values of ``cluster_ids`` stale (ids < 0 are ignored).

        >>> cl = Clusters(np.array([0, 1])); valid, _ = cl.depth_counts("f", 1, 1); valid[:] = True
        >>> cl.invalidate([1, -1]); cl.depth_counts("f", 1, 1)[0].tolist()
        [True, False]
        """
        ids = np.asarray(cluster_ids, dtype=np.int64)
        ids = ids[ids >= 0]
        for valid, _ in self._caches.values():
            valid[ids] = False

    def _remap_caches(self, new_of_old: np.ndarray, k_new: int) -> None:
        """Carry cache rows to renumbered clusters (``new_of_old[c]`` < 0: gone); merged rows add up.

        Tables keep spare rows (invalid, zero) so that adding clusters rarely copies them."""
        live = np.flatnonzero(new_of_old >= 0)
        target = new_of_old[live]
        growth = len(live) == len(new_of_old) and np.array_equal(target, np.arange(len(target)))
        for key, (valid, counts) in list(self._caches.items()):
            if growth and k_new <= len(valid):  # new clusters only: their spare rows are invalid and zero
                continue
            x = np.zeros((k_new + k_new // 4 + 16, *counts.shape[1:]), dtype=np.int64)
            hits = np.bincount(target, minlength=len(x))
            if hits.max(initial=0) <= 1:  # a renumbering: rows move
                v = np.zeros(len(x), dtype=bool)
                v[target], x[target] = valid[live], counts[live]
            else:
                v = hits > 0  # new clusters start invalid
                np.logical_and.at(v, target, valid[live])
                np.add.at(x, target, counts[live])
            self._caches[key] = (v, x)

    # ------------------------------------------------------------ change journal
    def record_changes(self) -> None:
        """Start following the changes of C for :meth:`changes` (in O(changes), without a copy of C).

        >>> cl = Clusters(np.array([0, 0, 1, 2, -1])); cl.record_changes()
        >>> cl.merge([(2, 1)]); _ = cl.add_clusters([[4]]); cl.assign([1], 2)
        >>> ch = cl.changes(); ch.relabel.tolist(), ch.moved.tolist(), ch.was.tolist(), ch.ok
        ([0, 1, 1], [1, 4], [0, -1], True)
        """
        self._journal = {"relabel": np.arange(self._k, dtype=np.int64), "full": np.zeros(self._k, dtype=bool),
                         "states": [], "was": [], "ghosts": 0, "ok": True}

    def changes(self) -> Changes:
        """How C changed since :meth:`record_changes` (a :class:`Changes`); stops recording.

        Equal to comparing C before and after (any state not in ``moved`` is in
        ``relabel`` of its old cluster), without a copy of C or a pass over it:
        the journal holds the states given to :meth:`add_clusters`,
        :meth:`assign`, :meth:`assign_each`, :meth:`split` and :meth:`disconnect`,
        and renumberings relabel it.

        >>> cl = Clusters(np.array([0, 1, 1])); cl.record_changes(); cl.disconnect([0])
        >>> ch = cl.changes(); ch.relabel.tolist(), ch.n_ghosts, ch.moved.tolist(), ch.ok   # 0 emptied: a ghost
        ([1, 0], 1, [], False)
        """
        from ._cluster_kernels import journal_changes

        j, self._journal = self._journal, None
        if j is None:
            raise ValueError("changes() needs record_changes() first")
        states = np.concatenate(j["states"]) if j["states"] else np.zeros(0, dtype=np.int64)
        was = np.concatenate(j["was"]) if j["was"] else np.zeros(0, dtype=np.int64)
        if len(self._stamp) < self.n_states:  # fresh marks, room to grow
            self._stamp, self._epoch = np.zeros(2 * self.n_states, dtype=np.int64), 0
        self._epoch += 1
        relabel, n_ghosts, moved, was, ok = journal_changes(states, was, self.assignment, self._stamp, self._epoch,
                                                            j["relabel"], j["full"], j["ghosts"], self._k)
        order = np.argsort(moved)
        return Changes(relabel, int(n_ghosts), moved[order], was[order], bool(ok and j["ok"]))

    def _log(self, states, was) -> None:
        """Journal: ``states`` change cluster now; ``was``: their clusters before (current ids)."""
        if self._journal is not None and len(states):
            self._journal["states"].append(np.array(states, dtype=np.int64))
            self._journal["was"].append(np.array(was, dtype=np.int64))

    def _log_renumbering(self, new_of_old) -> None:
        """Journal: ids are renumbered (``new_of_old[c]`` < 0: ``c`` emptied, it becomes a ghost)."""
        j = self._journal
        if j is None:
            return
        gone = np.flatnonzero(np.asarray(new_of_old) < 0)
        code = np.asarray(new_of_old, dtype=np.int64).copy()
        code[gone] = -2 - (j["ghosts"] + np.arange(len(gone)))  # ghosts are coded -2, -3, ...
        j["ghosts"] += len(gone)
        j["relabel"] = _apply_ids(code, j["relabel"])
        j["was"] = [_apply_ids(code, np.concatenate(j["was"]))] if j["was"] else []

    # ------------------------------------------------------------ changes
    def grow(self, n_states: int) -> None:
        """Extend to ``n_states`` level-1 states; new states are not connected.

        >>> cl = Clusters(np.array([0])); cl.grow(3); cl.assignment.tolist()
        [0, -1, -1]
        """
        if n_states > self.n_states:
            self.assignment = np.concatenate(
                [self.assignment, np.full(n_states - self.n_states, -1, dtype=np.int64)]
            )

    def add_clusters(self, groups) -> np.ndarray:
        """Connect each group of (unconnected) states to a new cluster; returns the new ids.

        >>> cl = Clusters(np.array([0, -1, -1, -1]))
        >>> cl.add_clusters([[1, 3], [2]]).tolist(), cl.assignment.tolist()
        ([1, 2], [0, 1, 2, 1])
        """
        ids = np.arange(self._k, self._k + len(groups))
        for cid, g in zip(ids, groups):
            g = np.asarray(g, dtype=np.int64)
            if (self.assignment[g] >= 0).any():
                raise ValueError("add_clusters: a state is already connected to a cluster")
            self._log(g, np.full(len(g), -1))
            self.assignment[g] = cid
        self._remap_caches(np.arange(self._k), self._k + len(groups))  # new rows start invalid
        if self._lists is not None:
            self._lists.extend(_frozen(np.array(g, dtype=np.int64)) for g in groups)
        self._rep = np.concatenate([self._rep, [int(np.max(g)) for g in groups]]).astype(np.int64)
        self._k += len(groups)
        return ids

    def assign(self, states, cluster: int) -> None:
        """Move ``states`` into ``cluster`` (an existing id) without renumbering; see :meth:`compact`.

        >>> cl = Clusters(np.array([0, 0, 1])); cl.assign([1], 1); cl.assignment.tolist()
        [0, 1, 1]
        """
        states = np.asarray(states, dtype=np.int64)
        self.invalidate(np.unique(self.assignment[states]))
        self.invalidate([cluster])
        self._log(states, self.assignment[states])
        if self._lists is not None:
            arriving = np.unique(states[self.assignment[states] != cluster])
            self._drop_from_lists(arriving, self.assignment[arriving])
            self._lists[cluster] = _frozen(np.concatenate([self._materialise(cluster), arriving]))
        self.assignment[states] = cluster

    def merge(self, pairs) -> None:
        """Merge each pair ``(src, dst)``: the states of ``src`` join ``dst``.

        Chains (``a->b``, ``b->c``) are followed (connected components of the
        pairs); cluster ids are then renumbered compactly.

        >>> cl = Clusters(np.array([0, 1, 2, 3]))
        >>> cl.merge([(0, 1), (1, 2)]); cl.assignment.tolist(), cl.n_clusters   # 0 -> 1 -> 2 chain
        ([0, 0, 0, 1], 2)
        """
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if not len(pairs):
            return
        if pairs.min() < 0 or pairs.max() >= self._k:
            raise ValueError(f"merge pairs refer to clusters outside 0..{self._k - 1}")
        from scipy.sparse.csgraph import connected_components

        graph = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(self._k, self._k))
        _, roots = connected_components(graph, directed=False)
        self._compact(roots)

    def assign_each(self, states, clusters, whole=None, members=None) -> None:
        """Move each of ``states`` into its cluster of ``clusters`` (existing ids), like :meth:`assign`.

        ``whole``: ids of clusters whose states were pooled and dealt out again
        among them (a merge with split): every move is from one of them to
        another, and :meth:`changes` can then relabel each to where most of its
        states went; ``members``: their states before the moves, if known.

        >>> cl = Clusters(np.array([0, 0, 1, 2])); cl.assign_each([1, 3], [2, 1]); cl.assignment.tolist()
        [0, 2, 1, 1]
        """
        states, clusters = np.asarray(states, dtype=np.int64), np.asarray(clusters, dtype=np.int64)
        if states.shape != clusters.shape:
            raise ValueError(f"assign_each: {len(states)} states but {len(clusters)} clusters")
        owner = self.assignment[states]
        self.invalidate(np.unique(owner))
        self.invalidate(np.unique(clusters))
        if whole is None or self._lists is None:
            self._log(states, owner)
            if self._lists is not None:
                self._drop_from_lists(states, owner)
                for c in np.unique(clusters).tolist():
                    self._lists[c] = _frozen(np.concatenate([self._materialise(c), states[clusters == c]]))
            self.assignment[states] = clusters
            return
        from ._cluster_kernels import member_lists

        whole = np.asarray(whole, dtype=np.int64)  # deal the whole clusters' members out again
        position = np.full(self._k, -1, dtype=np.int64)
        position[whole] = np.arange(len(whole))
        if (position[owner] < 0).any() or (position[clusters] < 0).any():
            raise ValueError("assign_each: a move leaves the clusters given as whole")
        pool = self.member_csr(whole)[1] if members is None else np.asarray(members, dtype=np.int64)
        self._log(pool, self.assignment[pool])  # every member, moved or not: changes() knows them all
        if self._journal is not None:
            relabel = self._journal["relabel"]
            live = relabel >= 0
            self._journal["full"][live] |= position[relabel[live]] >= 0
        self.assignment[states] = clusters
        ptr, idx = member_lists(pool, self.assignment, position, len(whole))
        for r, c in enumerate(whole.tolist()):
            self._lists[c] = _frozen(idx[ptr[r]:ptr[r + 1]])

    def disconnect(self, states) -> None:
        """Separate level-1 states back out of their clusters (the paper's reversibility).

        >>> cl = Clusters(np.array([0, 0, 1])); cl.disconnect([2])   # cluster 1 empties and vanishes
        >>> cl.assignment.tolist(), cl.n_clusters
        ([0, 0, -1], 1)
        """
        states = np.asarray(states, dtype=np.int64)
        self.invalidate(np.unique(self.assignment[states]))
        self._log(states, self.assignment[states])
        self._free = np.union1d(self._free, states[states < self._free_upto])
        if self._lists is not None:
            self._drop_from_lists(states, self.assignment[states])
        self.assignment[states] = -1
        self._compact()

    def split(self, states) -> int:
        """Move ``states`` (all from one cluster) into a new cluster; returns its id.

        >>> cl = Clusters(np.array([0, 0, 0, 1]))
        >>> cl.split([1, 2]), cl.assignment.tolist(), cl.sizes().tolist()
        (2, [0, 2, 2, 1], [1, 1, 2])
        """
        states = np.asarray(states, dtype=np.int64)
        owners = np.unique(self.assignment[states])
        if len(owners) != 1 or owners[0] < 0:
            raise ValueError("split: states must all belong to one cluster")
        self.invalidate(owners)
        self._remap_caches(np.arange(self._k), self._k + 1)
        self._rep = np.append(self._rep, states.max())
        self._log(states, self.assignment[states])
        if self._lists is not None:
            self._drop_from_lists(states, self.assignment[states])
            self._lists.append(_frozen(np.unique(states)))
        self.assignment[states] = self._k
        self._k += 1
        self._compact()
        return int(self.assignment[states[0]])

    def relabel(self, new_of_old) -> None:
        """Give cluster ``c`` the id ``new_of_old[c]`` (ids ``0..k'-1``, all used; equal ids merge clusters).

        Like :meth:`merge` with the new numbering given; only the states of clusters whose id changes are
        rewritten (after one comparison pass), cached counts move with their clusters (merged ones add up).

        >>> cl = Clusters(np.array([0, 1, 2, -1])); cl.relabel([1, 0, 1]); cl.assignment.tolist(), cl.n_clusters
        ([1, 0, 1, -1], 2)
        """
        m = np.asarray(new_of_old, dtype=np.int64)
        k_new = int(m.max()) + 1 if m.size else 0
        if m.shape != (self._k,) or (m.size and m.min() < 0) or np.bincount(m, minlength=k_new).min(initial=1) == 0:
            raise ValueError(f"new_of_old must map the {self._k} cluster ids onto 0..k'-1, each used")
        moved = np.flatnonzero(m != np.arange(self._k))
        if self._lists is not None:
            self._group_joined()  # under the old ids
        if len(moved):  # ids below the first one that moves stay: their (usually many) states are not touched
            a = self.assignment
            idx = np.flatnonzero(a >= moved[0])
            a[idx] = m[a[idx]]
        self._log_renumbering(m)
        self._remap_lists(m, k_new)
        self._remap_caches(m, k_new)
        rep = np.zeros(k_new, dtype=np.int64)
        rep[m] = self._rep
        self._rep = rep
        self._k = k_new

    def compact(self) -> None:
        """Renumber clusters ``0..k-1`` after the assignment was edited directly (empty ids vanish).

        Cached per-cluster values are all invalidated (direct edits are not
        seen); changes made through :meth:`assign` keep the untouched ones.

        >>> cl = Clusters(np.array([0, 1, 2])); cl.assignment[1] = 0; cl.compact(); cl.assignment.tolist()
        [0, 0, 1]
        """
        self.invalidate(np.arange(self._k))
        self._journal_cannot_follow()  # direct edits cannot be followed
        self._lists = None
        self._free_upto = 0
        self._compact()
        self._set_reps()

    def rewritten(self, k: int, rep) -> None:
        """:meth:`compact` after the caller rewrote :attr:`assignment` directly with the ids ``0..k-1``,
        every one in use, ``rep[c]`` the largest state of cluster ``c``: the same result, without compact's
        passes over the states (a merger that writes C from a map of its own knows both).

        >>> cl = Clusters(np.array([0, 1, 2])); cl.assignment[:] = [1, 0, 1]; cl.rewritten(2, [1, 2])
        >>> cl.n_clusters, cl.cluster_emission(np.array([7, 8, 7])).tolist()
        (2, [8, 7])
        """
        k, rep = int(k), np.array(rep, dtype=np.int64)
        if rep.shape != (k,) or (k and (rep.min() < 0 or rep.max() >= self.n_states)):
            raise ValueError(f"rewritten: rep must hold one state of each of the {k} clusters")
        self.invalidate(np.arange(self._k))
        self._journal_cannot_follow()
        self._lists = None
        self._free_upto = 0
        k_before, self._k = self._k, k
        if k_before:  # as compact's renumbering: ids below k stay, the others vanish
            ids = np.arange(k_before, dtype=np.int64)
            new_of_old = np.where(ids < k, ids, -1)
            self._log_renumbering(new_of_old)
            self._remap_caches(new_of_old, k)
        self._rep = rep

    def compact_assigned(self) -> None:
        """Renumber after changes made through :meth:`assign` (cached values of untouched clusters stay valid).

        >>> cl = Clusters(np.array([0, 1, 2])); cl.assign([1], 0); cl.compact_assigned(); cl.assignment.tolist()
        [0, 0, 1]
        """
        self._compact(top=self._k)  # ids below k: no pass to find the largest

    def _compact(self, ids=None, top=None) -> None:
        """Renumber clusters ``0..k-1`` keeping their order; ``ids`` optionally maps old ids first; ``top``:
        a bound on the ids in use (found by a pass over C if not given)."""
        from ._cluster_kernels import renumber

        a = self.assignment
        k_before = getattr(self, "_k", 0)
        if getattr(self, "_lists", None) is not None:
            self._group_joined()  # under the old ids
        if top is None:
            top = max(int(a.max(initial=-1)) + 1, k_before)
        roots = np.arange(top, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
        present, new_id, k = renumber(a, roots)
        self._k = int(k)
        if k_before:
            present = np.concatenate([present, np.zeros(max(k_before - len(present), 0), dtype=bool)])[:k_before]
            new_of_old = np.full(k_before, -1, dtype=np.int64)
            new_of_old[present] = new_id[roots[:k_before][present]]
            self._log_renumbering(new_of_old)
            self._remap_lists(new_of_old, self._k)
            self._remap_caches(new_of_old, self._k)
            rep = np.zeros(self._k, dtype=np.int64)
            live = np.flatnonzero(new_of_old >= 0)
            rep[new_of_old[live]] = self._rep[live]
            self._rep = rep

    # ------------------------------------------------------------ partitions
    def partition_unassigned(self, emission: np.ndarray, size: int, seed=0, n_states: int | None = None) -> int:
        """The authors' initial partition: per observation, shuffle the unconnected
        states and cut them into clusters of exactly ``size``; the remainder waits.

        Returns the number of clusters added.

        >>> cl = Clusters(n_states=7)
        >>> cl.partition_unassigned(np.array([0, 0, 0, 0, 0, 1, 1]), size=2, seed=0)
        3
        >>> int((cl.assignment == -1).sum())
        1
        """
        check_int(size, "size", low=1)
        rng = as_generator(seed)
        n = self.n_states if n_states is None else int(n_states)
        if n < self._free_upto:
            free = np.flatnonzero(self.assignment[:n] < 0)
        else:  # the states left over last time and the states added since (no pass over all states)
            free = np.concatenate([self._free[self._free < n], np.arange(self._free_upto, n)])
            free = free[self.assignment[free] < 0]
        colours = emission[free]
        groups = []
        for o in np.unique(colours):
            states = rng.permutation(free[colours == o])
            full = (len(states) // size) * size
            groups.extend(states[:full].reshape(-1, size))
        self.add_clusters(groups)
        self._free, self._free_upto = free[self.assignment[free] < 0], n
        return len(groups)

    # ------------------------------------------------------------ files
    def copy(self) -> "Clusters":
        """An independent copy (changes to it leave this one alone).

        >>> cl = Clusters(np.array([0, 1])); twin = cl.copy(); twin.merge([(1, 0)])
        >>> cl.n_clusters, twin.n_clusters
        (2, 1)
        """
        return Clusters(self.assignment)


def _frozen(x):
    x.flags.writeable = False
    return x


_EMPTY = _frozen(np.zeros(0, dtype=np.int64))


def _apply_ids(code, ids):
    """``code[ids]`` where ``ids >= 0``; other entries (-1: not connected, <= -2: ghosts) unchanged."""
    out = ids.copy()
    live = ids >= 0
    out[live] = code[ids[live]]
    return out


def level2_hmm(memory, C, n_states: int | None = None):
    """The level-2 :class:`~hmmmerge.hmm.ActionHMM` of a memory under connection matrix ``C``.

    ``C`` is a :class:`Clusters`, or any non-negative (n x k) matrix (dense or
    sparse; rows of unconnected states are zero).  Every cluster needs at least
    one level-1 state: an empty column has no emission, and a ``ValueError``
    names the first one (drop empty clusters first).  ``B2 ∝ C^T B1``; if the
    start state is unconnected, ``B2`` is uniform over the clusters.

    Returns
    -------
    ActionHMM
        One hidden state per cluster: ``T2[a] ∝ C^T T1[a] C``, ``E2 ∝ C^T E1``.

    See Also
    --------
    hmmmerge.agent.TwoLevelMemory.level2_hmm : the same for the online agent.

    >>> from hmmmerge.episodic import EpisodicMemory
    >>> mem = EpisodicMemory(2, 1)
    >>> for o, a in [(0, -1), (1, 0), (0, 0), (1, 0)]:
    ...     _ = mem.observe(o, a)
    >>> hmm = level2_hmm(mem, Clusters(np.array([0, 1, 0, 1])))
    >>> hmm.T[0].toarray().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    n = memory.n_states if n_states is None else int(n_states)
    Cm = C.connection_matrix(n) if isinstance(C, Clusters) else sp.csr_matrix(C, dtype=np.float64)
    if Cm.shape[0] != n:
        raise ValueError(f"C has {Cm.shape[0]} rows for {n} level-1 states")
    if Cm.shape[1] == 0:
        raise ValueError("C has no clusters: there is no level-2 model yet")
    if Cm.nnz and Cm.data.min() < 0:
        raise ValueError("C holds a negative weight")
    Ct = Cm.T.tocsr()
    T2 = []
    for T1 in memory.transition_matrices():
        counts = (Ct @ T1[:n, :n] @ Cm).tocsr()
        T2.append(_row_normalise(counts))
    E1 = sp.csr_matrix((np.ones(n), (np.arange(n), memory.emission[:n])), shape=(n, memory.n_obs))
    E2 = np.asarray((Ct @ E1).todense())
    sums = E2.sum(1, keepdims=True)
    if (sums == 0).any():
        empty = int(np.flatnonzero(sums.ravel() == 0)[0])
        raise ValueError(f"cluster {empty} has no level-1 state: drop empty clusters first")
    E2 /= sums
    B2 = np.asarray(Cm[memory.start_state].todense()).ravel() if 0 <= memory.start_state < n else np.zeros(Cm.shape[1])
    B2 = B2 / B2.sum() if B2.sum() > 0 else np.full(Cm.shape[1], 1.0 / Cm.shape[1])
    return ActionHMM(T2, E2, B2)


def _row_normalise(M: sp.csr_matrix) -> sp.csr_matrix:
    sums = np.asarray(M.sum(axis=1)).ravel()
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    return sp.csr_matrix(sp.diags(scale) @ M)
