"""Level 2 of the online agent, kept up to date as level 1 and C change.

:class:`Level2` holds what the agent's step kernel reads of level 2 and keeps
it in step with level 1 (an :class:`~hmmmerge.episodic.EpisodicMemory`) and C
(a :class:`~hmmmerge.clusters.Clusters`):

* T2, the level-2 transitions as a stacked CSR matrix (row ``a * k + c``) with
  their counts and first sources, counted from level 1 (:meth:`Level2.recompute`),
  updated after a sleep by the states it moved (:meth:`Level2.recompute` with
  ``before``), and at every periodic refresh by the links of the states that
  joined clusters online (:meth:`Level2.refresh`);
* the per-colour index of the clusters and, for a merger with noise-aware
  emissions (fold-noisy), the emission distribution per cluster;
* the two beliefs over clusters of the online predictors (dropped when the
  number of clusters changes) and the kernel's scratch space.

A merger that counts level 2 itself (the ``level2_transitions`` hook of the
:class:`~hmmmerge.merging.Merger` protocol) supplies T2 instead.  ``parent`` and
``parent_action`` give every level-1 state's creating (state, action) (-1: a
start state), as :class:`~hmmmerge.agent.TwoLevelMemory` records them.

>>> from hmmmerge import gridworld, random_walk
>>> from hmmmerge.agent import TwoLevelMemory
>>> agent = TwoLevelMemory(10, 4).fit(random_walk(gridworld(), 20, seed=0))
>>> l2 = agent.level2_
>>> l2.k == agent.n_clusters_, l2.t2[0].shape == (4 * l2.k + 1,)
(True, True)
"""

from __future__ import annotations

import numpy as np

__all__ = ["Level2", "T2_UPDATE_MAX_ENTRIES_PER_STATE", "T2_UPDATE_MAX_MOVED_SHARE", "T2_UPDATE_MAX_SCANNED_SHARE"]

#: T2 is updated after a sleep (rather than counted afresh) while it has at most this many entries per
#: level-1 state and the sleep moved at most this share of the states: the update touches every entry
#: of T2 and, at several times the cost per item, every link of a moved state; the recount touches every
#: link of level 1.  With SF merges T2 stays small and few states move; without merges
#: (merge="none") T2 grows like level 1; random merges move whole large clusters.
T2_UPDATE_MAX_ENTRIES_PER_STATE = 0.125
T2_UPDATE_MAX_MOVED_SHARE = 0.05
#: ... and while the clusters that moved states left (where entries may lose their first source, then
#: searched state by state) hold at most this share of the states (random merges: huge clusters)
T2_UPDATE_MAX_SCANNED_SHARE = 0.1


class Level2:
    """Level 2 as the online agent keeps it (module docstring).

    Attributes
    ----------
    k : number of clusters when last recomputed (``None`` before).
    t2 : ``(indptr, indices, data, counts, first)`` of T2.
    arrays : the step kernel's view (:class:`hmmmerge._agent_kernels.Level2`).
    joined : arrays of level-1 states that joined clusters online since T2 was counted, or ``None``
        when T2 must be counted afresh at the next refresh (a replaced link, or a loaded agent).
    anchored, filtered, scratch : the online predictors' beliefs and work space.
    """

    def __init__(self, n_obs: int, n_actions: int):
        self.n_obs, self.n_actions = int(n_obs), int(n_actions)
        self.k = None
        self.t2 = None
        self.arrays = None
        self.joined = []
        self.anchored = self.filtered = self.scratch = None

    def recompute(self, memory, clusters, merger, parent, parent_action, before=None) -> None:
        """Recompute T2 and the per-colour cluster index.

        ``before``: ``(changes, k, T2)``: how a sleep changed C (a
        :class:`~hmmmerge.clusters.Changes`), and k and T2 before it (T2 agreeing
        with C); T2 is then updated by the states the sleep moved rather than
        counted from all of level 1 (the same matrix, see :meth:`after_sleep`).
        """
        from ._agent_kernels import Level2 as Arrays, level2_transitions, new_belief, new_scratch

        n = memory.n_states
        clusters.grow(n)
        k = clusters.n_clusters
        own = getattr(merger, "level2_transitions", None)  # a merger that knows level 2 (fold)
        t2 = own(memory, clusters) if own is not None else None
        if t2 is None and before is not None and k:
            t2 = self.after_sleep(memory, clusters, parent, parent_action, *before)
        self.t2 = t2 = t2 if t2 is not None else level2_transitions(memory.kernel_arrays()[0], n,
                                                                    clusters.assignment, k)
        self.joined = []
        cluster_obs = clusters.cluster_emission(memory.emission)
        order = np.argsort(cluster_obs, kind="stable")
        em_idx = order[cluster_obs[order] >= 0].astype(np.int64)
        em_ptr = np.zeros(self.n_obs + 1, dtype=np.int64)
        em_ptr[1:] = np.cumsum(np.bincount(cluster_obs[cluster_obs >= 0], minlength=self.n_obs))
        self.arrays = Arrays(k, *t2[:3], clusters.assignment, cluster_obs, em_ptr, em_idx,
                             *self.soft_emission(memory, clusters, merger, k))
        if self.k != k:  # beliefs over the old clusters are dropped
            self.anchored, self.filtered = new_belief(k), new_belief(k)
            self.scratch = new_scratch(k, self.n_obs)
            self.k = k

    def soft_emission(self, memory, clusters, merger, k: int) -> tuple[np.ndarray, np.ndarray, float]:
        """The merger's emission distribution per cluster (fold-noisy, replay), or an empty (0, n_obs)
        array (also when the merger's ``emission`` returns None): the online predictors then take one colour
        per cluster (``cluster_obs``); the value
        of every entry of each row off the cluster's own colour when the merger states it
        (``emission_floor``: replay's noise rate), else an empty array; and the share of a belief below which
        a cluster leaves the online beliefs when the merger states it (``online_belief_cut``: replay's
        :data:`~hmmmerge.replay.ONLINE_BELIEF_CUT`, with soft emissions only), else 0."""
        own = getattr(merger, "emission", None)  # a merger with noise-aware emissions (fold-noisy)
        E = own(clusters, memory.n_states) if own is not None and k else None
        if E is None:  # none, or not now (replay's exact phase): one colour per cluster
            return np.zeros((0, self.n_obs)), np.zeros(0), 0.0
        floor = getattr(merger, "emission_floor", None)
        cut = getattr(merger, "online_belief_cut", None)
        return (np.ascontiguousarray(E, dtype=np.float64),
                np.zeros(0) if floor is None else np.ascontiguousarray(floor(clusters), dtype=np.float64),
                0.0 if cut is None else float(cut()))

    def update_soft(self, memory, clusters, merger) -> None:
        """Noise-aware emissions again from the merger's counts (nothing to do without them)."""
        if self.arrays.soft.shape[0]:
            soft, floor, cut = self.soft_emission(memory, clusters, merger, self.arrays.n_clusters)
            self.arrays = self.arrays._replace(soft=soft, soft_floor=floor, belief_cut=cut)

    def after_sleep(self, memory, clusters, parent, parent_action, changes, k_old, t2_old):
        """T2 (with counts and first sources) from T2 before a sleep and the states it moved; None
        (count afresh) if a connected state lost its cluster, or where the update would cost more than
        a recount (see :data:`T2_UPDATE_MAX_ENTRIES_PER_STATE`).

        Entries are relabelled, the links of moved states taken out under their old
        clusters and put back under their new ones; an entry that lost its first
        source gets it back from one ordered pass over the states of its cluster.
        """
        from ._agent_kernels import find_first_sources, level2_csr, level2_moves, lost_first_sources

        n = memory.n_states
        indptr, indices, _, counts, first = t2_old
        if len(indices) > T2_UPDATE_MAX_ENTRIES_PER_STATE * n:  # a recount is cheaper
            return None
        if not changes.ok or len(changes.moved) > T2_UPDATE_MAX_MOVED_SHARE * n:
            return None
        k_new = clusters.n_clusters
        left = np.unique(changes.was[(changes.was >= 0) & (changes.was < k_new)])  # rows that may lose sources
        if clusters.sizes_of(left).sum() > T2_UPDATE_MAX_SCANNED_SHARE * n:
            return None
        k_ext = k_new + changes.n_ghosts
        new, nxt = clusters.assignment, memory.kernel_arrays()[0]
        table, e_row, e_col, e_cnt, e_first, e_lost, m = level2_moves(
            indptr, indices, counts, first, k_old, k_ext, changes.relabel, changes.moved, changes.was, new, nxt,
            parent, parent_action)
        lost = lost_first_sources(e_row, e_cnt, e_first, e_lost, m, k_ext, k_new)
        ids = np.flatnonzero(lost)
        if len(ids):
            ptr, idx = clusters.member_csr(ids, increasing=True)
            find_first_sources(table, e_row, e_col, e_first, e_lost, k_ext, ids, ptr, idx, lost, new, nxt)
        return level2_csr(e_row, e_col, e_cnt, e_first, m, k_ext, k_new, self.n_actions)

    def note_joined(self, joined: np.ndarray, replaced: bool) -> None:
        """Record level-1 states that joined clusters online; ``replaced``: a link of level 1 was replaced
        (Algorithm 1), which may remove counted links, so the next refresh counts T2 afresh."""
        if replaced:
            self.joined = None
        elif self.joined is not None and len(joined):
            self.joined.append(joined)

    def refresh(self, memory, clusters, merger, parent, parent_action) -> None:
        """The periodic refresh: T2 gains the links of the states that joined clusters online since it
        was last computed (the same matrix as :meth:`recompute`, without a pass over level 1)."""
        from ._agent_kernels import level2_add_links

        if self.joined is None:  # a replaced link may have removed counted links (or a load)
            self.recompute(memory, clusters, merger, parent, parent_action)
            return
        if not self.joined:
            return
        joined = np.concatenate(self.joined)
        cluster_of, nxt = clusters.assignment, memory.kernel_arrays()[0]
        par, act = parent[joined], parent_action[joined]
        linked = par >= 0
        linked[linked] = (nxt[act[linked], par[linked]] == joined[linked]) & (cluster_of[par[linked]] >= 0)
        src, acts, dst = [par[linked]], [act[linked]], [joined[linked]]
        for a in range(self.n_actions):
            w = nxt[a, joined]
            keep = w >= 0
            keep[keep] = (cluster_of[w[keep]] >= 0) & ~np.isin(w[keep], joined)
            src.append(joined[keep]); acts.append(np.full(int(keep.sum()), a, dtype=np.int64)); dst.append(w[keep])
        src, acts, dst = np.concatenate(src), np.concatenate(acts), np.concatenate(dst)
        k = clusters.n_clusters
        indptr, indices, _, counts, first = self.t2
        self.t2 = t2 = level2_add_links(indptr, indices, counts, first, k, src, acts * k + cluster_of[src],
                                        cluster_of[dst])
        self.joined = []
        self.arrays = self.arrays._replace(t2_ptr=t2[0], t2_idx=t2[1], t2_val=t2[2])

    def restore_t2(self, indptr, indices, data) -> None:
        """T2 as a saved agent last refreshed it (it may lag level 1 by up to ``refresh_every`` steps); the
        states joined since are not stored, so the next refresh counts T2 afresh."""
        self.arrays = self.arrays._replace(t2_ptr=np.asarray(indptr).astype(np.int64),
                                           t2_idx=np.asarray(indices).astype(np.int64),
                                           t2_val=np.asarray(data).astype(np.float64))
        self.joined = None
