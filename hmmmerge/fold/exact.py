"""Sleep consolidation by folding (``merge="fold"``): the engine with the exact colour-clash test.

Level 1 with one start state is a prefix tree of (action, observation)
paths; its states are grouped into blocks (the clusters of level 2, C) by
blue-fringe state merging (EDSM, Lang, Pearlmutter & Price 1998; RPNI):
placing walks the automaton as experience arrives; a sleep folds blue blocks
into red ones (merging their successors too), refused by one colour clash
anywhere, a merge needing an evidence lead of ``min_evidence`` agreeing blocks;
contradicted merges are undone from the journal; a provisional pass (lead
``provisional_lead``, opened by the colour fold: ``colour_evidence``,
``colour_past``) decides what still waits and is rolled back at the next
sleep.  The state lives in flat arrays worked on by the numba kernels of
:mod:`hmmmerge.fold._kernels`, checked decision for decision against the
pure-Python engine with the same test (``tests/fold_reference.py``).  The
derivation of the defaults and the measurements: BENCHMARKS.md, "Design notes
of the fold family".

Examples
--------
>>> from hmmmerge import gridworld, random_walk
>>> from hmmmerge.episodic import EpisodicMemory
>>> from hmmmerge.clusters import Clusters
>>> env = gridworld(4, 4, n_colours=4, seed=0)
>>> mem = EpisodicMemory(env.n_obs, env.n_actions)
>>> states, _ = mem.observe_trajectories(random_walk(env, 300, 20, seed=0))
>>> fold = FoldMerger()
>>> fold.observe(mem, states)
>>> cl = Clusters(n_states=mem.n_states); report = fold.sleep(mem, cl)
>>> cl.n_clusters     # the 16 cells of the world
16
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from .._validation import Int, check_int
from ._state import StateError, checked_state, exact_state, no_state, sizes_of_level1
from .engine import Engine

__all__ = ["FoldMerger", "default_min_evidence"]

_STATS = ("merges", "promotions", "undos", "conflicts")
_NODE_ARRAYS = ("parent", "action", "colour", "uf", "uf_time", "just", "red", "row", "cid", "stamp", "reds")
_ROW_ARRAYS = ("delta", "dchild", "links", "first")
PROVISIONAL_LEAD = 1
"""Default ``provisional_lead`` (derived in the module docstring)."""
COLOUR_EVIDENCE = 20
"""Default ``colour_evidence`` (derived in the module docstring)."""
COLOUR_PAST = 1
"""Default ``colour_past`` (derived in the module docstring)."""
MAX_COLOUR_PAST = 64
"""The largest ``colour_past``: each step back is one more grouping of every block per sleep."""


def default_min_evidence(n_obs: int, risk: float = 1e-3) -> int:
    """The evidence minimum: the smallest ``k >= 3`` with ``n_obs**-k <= risk``.

    ``n_obs**-k`` is the chance that ``k`` successor colours of two different
    cells agree when colours are equally frequent and independent.

    >>> default_min_evidence(10), default_min_evidence(4), default_min_evidence(2)
    (3, 5, 10)
    """
    check_int(n_obs, "n_obs", low=1)
    if not 0 < risk < 1:
        raise ValueError(f"risk must be in (0, 1), got {risk!r}")
    if n_obs == 1:
        return 3
    return max(3, math.ceil(math.log(1 / risk) / math.log(n_obs) - 1e-9))


class WorkLimitReached(RuntimeError):
    """A sleep stopped because the work limit set on the fold's state was passed (its state is then left
    mid-sleep: only for a caller that drops the merger, as ``merge="replay"``'s exact phase does)."""


def _grown(a: np.ndarray, size: int, fill) -> np.ndarray:
    """``a`` extended along its first axis to ``size`` rows of ``fill``."""
    out = np.full((size,) + a.shape[1:], fill, dtype=a.dtype)
    out[:len(a)] = a
    return out


class ExactFold(Engine):
    """The exact fold whatever holds its state: parameters, sleep, undo of contradicted merges, provisional pass.

    A subclass holds the state (:class:`FoldMerger`: flat arrays and numba
    kernels; ``tests/fold_reference.py``: the engine's lists) and provides
    ``_links()`` (union-find, placing transition, parent and union time per
    node), ``_decisions_array()``, ``_open_conflicts()`` (contradictions since
    the last settling: ``(node, child whose transition it contradicted)``),
    ``_settle()``, ``_unwind(t)`` (roll the journal back to ``t``; the
    unplaced nodes), ``_jlen()``, ``_keep_counts(merges, promotions)``,
    ``_place_all(nodes)``, ``_blue_fringe(k_single, provisional, k)``,
    ``_fold_colours_at(depth)``, ``stats``, ``n_red``, the engine's recording
    hooks (``_record``, ...) and ``write_clusters``.
    """

    _parameter_constraints = {"min_evidence": Int(0, none=True), "max_undo_rounds": Int(1),
                              "single_evidence": Int(0, none=True), "provisional_lead": Int(1, none=True),
                              "colour_evidence": Int(0, none=True), "colour_past": Int(0, MAX_COLOUR_PAST)}

    def __init__(self, min_evidence: int | None = None, max_undo_rounds: int = 50,
                 single_evidence: int | None = None, provisional_lead: int | None = PROVISIONAL_LEAD,
                 colour_evidence: int | None = COLOUR_EVIDENCE, colour_past: int = COLOUR_PAST):
        self.min_evidence = min_evidence
        self.max_undo_rounds = max_undo_rounds
        self.single_evidence = single_evidence
        self.provisional_lead = provisional_lead
        self.colour_evidence = colour_evidence
        self.colour_past = colour_past

    def _init_params(self, n_obs: int, n_actions: int) -> None:
        self._k = default_min_evidence(n_obs) if self.min_evidence is None else self.min_evidence
        self._k_single = -1 if self.single_evidence is None else self.single_evidence
        self._k_prov = -1 if self.provisional_lead is None else self.provisional_lead
        # the provisional pass in force: journal index where it began (-1 none), its merges and promotions
        self._prov = [-1, 0, 0]
        self._undos = 0
        self._last = -1                   # the level-1 state of the last step seen by place()
        self._pending: list[int] = []     # nodes unplaced by an undo, placed again at the next sleep
        self._dirty = True                # blocks changed since C was written (other than by place())

    @property
    def evidence_minimum(self) -> int | None:
        """The evidence minimum in use (known once the alphabet sizes are)."""
        return None if self._A is None else self._k

    @property
    def provisional(self) -> dict:
        """Merges and promotions of the provisional pass in force (taken back at the next sleep)."""
        return {"merges": self._prov[1] if self._A is not None else 0,
                "promotions": self._prov[2] if self._A is not None else 0}

    @property
    def decisions(self) -> list[int]:
        """The merge decisions in force, as journal positions (oldest first)."""
        return self._decisions_array().tolist() if self._A is not None else []

    # ------------------------------------------------------------ sleep
    _REPORTED = ("merges", "promotions", "undos")

    def _consolidate(self, memory, clusters) -> dict:
        """A sleep (:meth:`Engine.sleep`): take the last provisional pass back, place what is new, undo
        contradicted merges, fold the blue fringe, make the provisional pass and write C."""
        self._drop_provisional()
        self._place_pending()
        rounds = self._resolve_conflicts()
        self._blue_fringe()
        self._provisional_pass()
        self.write_clusters(clusters, memory.n_states)
        return dict(undo_rounds=rounds, red=self.n_red, clusters=clusters.n_clusters,
                    provisional_merges=self._prov[1], provisional_promotions=self._prov[2])

    def _provisional_pass(self) -> None:
        """Fold what waits, provisionally: the colour fold, then blue blocks merge into the only consistent
        red block or one leading by ``provisional_lead``, all of a round at once; when none can, every
        waiting blue block is promoted.  :meth:`_drop_provisional` takes it all back at the next sleep."""
        self._prov = [-1, 0, 0]
        if self._k_prov < 0:
            return
        mark, before = self._jlen(), self.stats
        if self.colour_evidence is not None:
            self._fold_colours()
        self._blue_fringe(k_single=0, provisional=True, k=self._k_prov)
        after = self.stats
        done = [after["merges"] - before["merges"], after["promotions"] - before["promotions"]]
        self._keep_counts(before["merges"], before["promotions"])   # the counters count consolidated decisions
        if any(done):
            self._prov = [mark] + done
            self._dirty = True

    def _fold_colours(self) -> None:
        """The colour fold (BENCHMARKS.md, design notes): by colour, then for ``d = 1 .. colour_past`` by
        colour and the last ``d`` (action, colour) steps before a block's first state."""
        for depth in range(self.colour_past + 1):
            self._fold_colours_at(depth)

    def _drop_provisional(self) -> None:
        """Roll back the provisional pass of the last sleep and everything placed after it (placed again)."""
        mark = self._prov[0]
        self._prov = [-1, 0, 0]
        if mark >= 0:
            self._pending.extend(self._unwind(mark))

    # ------------------------------------------------------------ undo
    def _decision_of(self, t: int) -> int:
        """The journal index of the fold decision containing journal entry ``t``."""
        dec = self._decisions_array()
        return int(dec[np.searchsorted(dec, t, side="right") - 1])

    def _responsible(self, u: int, w: int) -> int:
        """Latest fold decision (journal index) that made nodes ``u`` and ``w`` share a block; -1 if none."""
        uf, just, parent, uf_time = self._links()
        latest = -1
        pending = [(u, w)]
        seen = set()
        while pending:
            u, w = pending.pop()
            if u == w or (u, w) in seen:
                continue
            seen.add((u, w))
            path_u = {}
            x = u
            while True:
                path_u[x] = len(path_u)
                if uf[x] == x:
                    break
                x = int(uf[x])
            # walk w up to the first common ancestor
            edges = []
            y = w
            while y not in path_u:
                edges.append(y)
                y = int(uf[y])
            x = u
            while x != y:
                edges.append(x)
                x = int(uf[x])
            for z in edges:
                j = int(just[z])
                if j < 0:          # a fold union (or a conflict root, which joins nothing)
                    latest = max(latest, self._decision_of(int(uf_time[z])))
                else:              # placed by following the transition that ``j`` created
                    pending.append((int(parent[z]), int(parent[j])))
                    pending.append((j, int(uf[z])))
        return latest

    def contradicted_merge(self) -> int:
        """The latest merge decision behind a contradicted transition placed since the last sleep; -1 if none.

        >>> FoldMerger().contradicted_merge()
        -1
        """
        t = -1
        if self._A is not None:
            parent = self._links()[2]
            for node, child in self._open_conflicts():
                t = max(t, self._responsible(int(parent[node]), int(parent[child])))
        return t

    def undo(self, decision: int) -> list[int]:
        """Undo merge ``decision`` (a journal position from :attr:`decisions`) and every change after it.

        Blocks, transitions and placements return exactly to their state
        before the merge; returns the level-1 states that became unplaced (to
        be placed again: the next :meth:`sleep` does it).
        """
        if decision not in self.decisions:
            raise ValueError(f"{decision!r} is not a merge decision in force")
        unplaced = self._unwind(decision)
        self._undos += 1
        self._pending.extend(unplaced)
        return sorted(x - 1 for x in unplaced)

    def _place_pending(self) -> None:
        uf = self._links()[0]
        pending = sorted(set(x for x in self._pending if uf[x] < 0))
        self._pending = []
        self._place_all(pending)

    def _resolve_conflicts(self) -> int:
        """Roll back the decisions behind contradicted transitions and place again; returns rounds used."""
        rounds = 0
        while self._open_conflicts() and rounds < self.max_undo_rounds:
            rounds += 1
            t = self.contradicted_merge()
            if t < 0:      # no merge is behind them (not with deterministic data): their new blocks stay
                self._settle()
                break
            self.undo(t)
            self._place_pending()
            self._blue_fringe()
        return rounds


class FoldMerger(ExactFold):
    """Evidence-driven folding of level-1 states into a deterministic level 2.

    Parameters
    ----------
    min_evidence : agreeing block pairs a merge needs (None: :func:`default_min_evidence`).
    max_undo_rounds : bound on roll-back-and-refold rounds per sleep.
    single_evidence : if set, evidence enough to merge a blue block into the only red block of its
        colour it is consistent with (None: no such rule; see the module docstring).
    provisional_lead : the lead a merge needs in the provisional pass of each sleep (None: no
        provisional pass; default 1, derived in the module docstring).
    colour_evidence : evidence a colour fold needs (None: no colour fold; default 20, derived in the
        module docstring).  Part of the provisional pass: without it, no colour fold either.
    colour_past : the colour fold also groups blocks by colour and the last 1 .. ``colour_past``
        (action, colour) steps before their first state (0: by colour only; default 1).

    Attributes
    ----------
    n_recorded : level-1 states recorded so far (their parents and actions are kept).
    n_red : number of red (consolidated) blocks.
    stats : counters: ``merges``, ``promotions`` (consolidated), ``undos``, ``conflicts`` (including
        contradictions of provisional merges).
    provisional : merges and promotions of the provisional pass in force.

    Nodes are level-1 states shifted by one; node 0 is the virtual start state
    whose one action (index ``n_actions``) leads to the first observation.
    The state lives in flat arrays worked on by the numba kernels of
    :mod:`hmmmerge.fold._kernels`.

    Examples
    --------
    >>> from hmmmerge.episodic import EpisodicMemory
    >>> from hmmmerge.clusters import Clusters
    >>> mem = EpisodicMemory(n_obs=2, n_actions=1)
    >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 0, 1, 0, 1])]
    >>> fold = FoldMerger(min_evidence=1); fold.observe(mem, [states])
    >>> cl = Clusters(n_states=mem.n_states); _ = fold.sleep(mem, cl)
    >>> cl.assignment.tolist()   # a two-state loop
    [0, 1, 0, 1, 0, 1]
    """

    # ------------------------------------------------------------ set-up
    def _init(self, n_obs: int, n_actions: int, capacity: int = 1024) -> None:
        from ._kernels import LINKS_OK, N_SC, NROWS, FoldState

        self._A, self._n_obs = int(n_actions), int(n_obs)
        self._init_params(n_obs, n_actions)
        A1 = self._A + 1
        cap = max(int(capacity), 16)

        def full(fill, dtype=np.int64, shape=(), size=cap):
            return np.full((size,) + shape, fill, dtype=dtype)

        rows = max(cap // 8, 16)
        self._st = FoldState(parent=full(-1), action=full(-1), colour=full(-1), uf=full(-1), uf_time=full(-1),
                             just=full(-1), red=full(False, bool), row=full(-1), delta=full(-1, shape=(A1,), size=rows),
                             dchild=full(-1, shape=(A1,), size=rows), cid=full(-1), stamp=full(0),
                             links=full(0, shape=(A1,), size=rows), first=full(-1, shape=(A1,), size=rows),
                             journal=np.full((4 * cap, 5), -1, dtype=np.int64), reds=full(-1),
                             conflicts=np.full((16, 2), -1, dtype=np.int64), decisions=np.full(16, -1, np.int64),
                             sc=np.zeros(N_SC, dtype=np.int64))
        st = self._st
        # node 0: the virtual start state, a red root with a transition row (row 0)
        st.parent[0], st.uf[0], st.red[0], st.row[0] = -1, 0, True, 0
        st.sc[NROWS], st.sc[LINKS_OK] = 1, 1
        self._n = 1                       # nodes recorded or reserved (level-1 states + 1)
        self._recorded: list[int] = []    # recorded by observe(), placed at its end
        # cluster ids: _croot[c] is a node of cluster c's block as last written (ids grow with place());
        # _written identifies the Clusters object written to; _dirty: blocks changed in another way
        self._croot = np.zeros(0, dtype=np.int64)
        self._written = None
        self._dirty = True
        # label counts per cluster id (for purity), kept while the ids are current
        self._tab = np.zeros((0, 0), dtype=np.int64)
        self._tab_ok = False
        self._unlabelled = False

    def _room(self, nodes: int = 0, journal: int = 0, conflicts: int = 0, decisions: int = 0, rows: int = 0) -> None:
        """Grow the arrays so that ``nodes`` nodes fit and the lists (and rows) can take the given extra entries."""
        from ._kernels import JLEN, NCONF, NDEC, NROWS

        st = self._st
        new = {}
        cap = len(st.parent)
        if nodes > cap:
            size = max(nodes, 2 * cap)
            for name in _NODE_ARRAYS:
                a = getattr(st, name)
                new[name] = _grown(a, size, False if a.dtype == bool else (0 if name == "stamp" else -1))
        need = int(st.sc[NROWS]) + rows
        if need > len(st.delta):
            size = max(need, 2 * len(st.delta))
            for name in _ROW_ARRAYS:
                new[name] = _grown(getattr(st, name), size, 0 if name == "links" else -1)
        for name, idx, extra in (("journal", JLEN, journal), ("conflicts", NCONF, conflicts),
                                 ("decisions", NDEC, decisions)):
            a = getattr(st, name)
            need = int(st.sc[idx]) + extra
            if need > len(a):
                new[name] = _grown(a, max(need, 2 * len(a)), -1)
        if new:
            self._st = st._replace(**new)
        self._n = max(self._n, nodes)

    @property
    def n_recorded(self) -> int:
        return 0 if self._A is None else self._n - 1

    @property
    def n_red(self) -> int:
        from ._kernels import NRED

        return 0 if self._A is None else int(self._st.sc[NRED])

    @property
    def stats(self) -> dict:
        """Counters: ``merges``, ``promotions``, ``undos``, ``conflicts`` (all zero before any data)."""
        from ._kernels import CONFLICTS, MERGES, PROMOTIONS

        if self._A is None:
            return dict.fromkeys(_STATS, 0)
        sc = self._st.sc
        return {"merges": int(sc[MERGES]), "promotions": int(sc[PROMOTIONS]), "undos": self._undos,
                "conflicts": int(sc[CONFLICTS])}

    # ------------------------------------------------------------ experience
    def _place_all(self, nodes) -> None:
        """Place recorded nodes in order (parents first)."""
        from ._kernels import place_nodes

        nodes = np.asarray(nodes, dtype=np.int64)
        if not len(nodes):
            return
        self._room(journal=2 * len(nodes), conflicts=len(nodes), rows=len(nodes))
        self._dirty = True
        if place_nodes(self._st, nodes) >= 0:
            raise ValueError("level-1 states must be placed after their parents")

    @property
    def _parent(self) -> np.ndarray:
        return self._st.parent

    def _grow(self, n: int) -> None:
        self._room(nodes=n + 1)

    def _record(self, node: int, pnode: int, a: int, colour: int) -> None:
        st = self._st
        st.parent[node], st.action[node], st.colour[node] = pnode, a, colour
        self._recorded.append(node)

    def _place_recorded(self) -> None:
        self._place_all(self._recorded)
        self._recorded = []

    def _record_tree(self, nodes, parent, action, colour) -> None:
        self._st.parent[nodes], self._st.action[nodes], self._st.colour[nodes] = parent, action, colour
        self._place_all(nodes)

    # ------------------------------------------------------------ folding
    def _blue_fringe(self, k_single: int | None = None, provisional: bool = False, k: int | None = None) -> None:
        """Promote, then merge (most evidence first) until every blue block waits for evidence
        (:func:`hmmmerge.fold._kernels.blue_fringe`; ``k_single``: that rule's minimum, default the merger's)."""
        from ._kernels import NEED_ROOM, NROOTS, OVER_BUDGET, blue_fringe

        k_single = self._k_single if k_single is None else k_single
        k = self._k if k is None else k
        while True:
            roots = int(self._st.sc[NROOTS])
            self._room(journal=(roots + 1) * (2 * self._A + 6) + 64, decisions=roots + 2)
            done = blue_fringe(self._st, k, k_single, provisional)
            if done == OVER_BUDGET:
                raise WorkLimitReached("the fold's work limit was passed mid-sleep")
            if done != NEED_ROOM:
                return

    def _fold_colours_at(self, depth: int) -> None:
        """The colour fold, ``depth`` steps back (:func:`hmmmerge.fold._kernels.fold_groups`): the blocks
        reached from the start, grouped by colour and the last ``depth`` (action, colour) steps before
        their first level-1 state; a group is folded when its joint fold clashes nowhere and agrees on at
        least ``colour_evidence`` blocks."""
        from ._kernels import NROOTS, fold_groups, reached_blocks

        while True:
            blocks, bounds = self._colour_groups(reached_blocks(self._st), depth)
            roots = int(self._st.sc[NROOTS])
            self._room(journal=2 * (roots + 1) * (2 * self._A + 6) + 64, decisions=len(bounds) + 1)
            stack = np.empty((2 + (self._A + 1) * (roots + 1), 2), dtype=np.int64)
            done = fold_groups(self._st, self.colour_evidence, stack, blocks, bounds)
            if done == -2:
                raise WorkLimitReached("the fold's work limit was passed mid-sleep")
            if done >= 0:
                return

    def _colour_groups(self, blocks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """``blocks`` ordered by (colour, then action and parent colour of each of ``depth`` steps back
        from the block's first state, (-1, -1) before the start; node), and the group bounds."""
        st = self._st
        keys = [st.colour[blocks]]
        x = blocks
        for _ in range(depth):
            p = np.where(x > 0, st.parent[np.maximum(x, 0)], -1)
            keys += [np.where(x > 0, st.action[np.maximum(x, 0)], -1), np.where(p >= 0, st.colour[np.maximum(p, 0)], -1)]
            x = p
        order = np.lexsort([blocks] + keys[::-1])
        blocks = blocks[order]
        cut = np.zeros(len(blocks), dtype=bool)
        for key in keys:
            key = key[order]
            cut[1:] |= key[1:] != key[:-1]
        return blocks, np.concatenate([[0], np.flatnonzero(cut), [len(blocks)]]).astype(np.int64)

    # ------------------------------------------------------------ the journal (see ExactFold)
    def _links(self):
        st = self._st
        return st.uf, st.just, st.parent, st.uf_time

    def _decisions_array(self) -> np.ndarray:
        from ._kernels import NDEC

        return self._st.decisions[:int(self._st.sc[NDEC])]

    def _open_conflicts(self) -> list:
        from ._kernels import NCONF, SETTLED

        return self._st.conflicts[int(self._st.sc[SETTLED]):int(self._st.sc[NCONF])].tolist()

    def _settle(self) -> None:
        from ._kernels import NCONF, SETTLED

        self._st.sc[SETTLED] = self._st.sc[NCONF]

    def _unwind(self, t: int) -> list[int]:
        from ._kernels import JLEN, LINKS_OK, rollback

        buf = np.empty(int(self._st.sc[JLEN]) - t, dtype=np.int64)
        m = rollback(self._st, t, buf)
        self._st.sc[LINKS_OK] = 0       # per-block link counts are recounted when next needed
        self._dirty = True
        return buf[:m].tolist()

    def _jlen(self) -> int:
        from ._kernels import JLEN

        return int(self._st.sc[JLEN])

    def _keep_counts(self, merges: int, promotions: int) -> None:
        from ._kernels import MERGES, PROMOTIONS

        self._st.sc[MERGES], self._st.sc[PROMOTIONS] = merges, promotions

    def place(self, memory, clusters, states, rng=None) -> bool:
        """The agent's online hook: record and place the new level-1 states of one chunk of steps.

        ``states`` are the level-1 states after consecutive steps of one
        episode (a chunk may start mid-episode; then it continues the previous
        chunk).  New states join the block their parent's transition leads to,
        or start a new cluster.  Returns whether clusters were added.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1); fold = FoldMerger(); cl = Clusters(n_states=0)
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1])]
        >>> fold.place(mem, cl, states), cl.assignment[:2].tolist()
        (True, [0, 1])
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1])]
        >>> fold.place(mem, cl, states)   # the same path: nothing new
        False
        """
        from ._kernels import place_steps

        self._check(memory)
        states = np.asarray(states, dtype=np.int64)
        if not len(states):
            return False
        self._room(nodes=memory.n_states + 1, journal=2 * len(states), conflicts=len(states), rows=len(states))
        clusters.grow(memory.n_states)
        k0 = clusters.n_clusters
        new_roots = np.empty(len(states), dtype=np.int64)
        labels = memory.labels
        if self._tab_ok:
            self._tab_room(k0 + len(states), int(labels[states].max()) + 1, memory.n_states)
        flags = np.array([self._unlabelled, self._tab_ok], dtype=np.int64)
        m, last, status = place_steps(self._st, states, self._last, memory.start_state, memory.next_state,
                                      memory.emission, clusters.assignment, k0, new_roots, labels, self._tab, flags)
        self._unlabelled = bool(flags[0])
        if status:
            self._tab_ok = False
        if status > 0:
            h = int(states[status - 1])
            prev = int(states[status - 2]) if status > 1 else self._last
            raise ValueError(f"no level-1 link {prev} -> {h}: pass the actions of the steps")
        if status < 0:
            raise ValueError("level-1 states must be placed after their parents")
        self._last = int(last)
        if m:
            roots = new_roots[:m]
            clusters.add_clusters(roots[:, None])
            self._croot = np.concatenate([self._croot, roots + 1])
        return bool(m)

    # ------------------------------------------------------------ level 2
    def _current(self, clusters, n_states: int) -> bool:
        """Whether ``clusters`` holds exactly the blocks as last written plus what place() added."""
        return (not self._dirty and self._written is not None and self._written() is clusters
                and self._n - 1 == n_states and clusters.n_clusters == len(self._croot))

    def level2_transitions(self, memory, clusters):
        """Level-2 transitions as the agent computes them from level 1
        (:func:`hmmmerge._agent_kernels.level2_transitions`: stacked CSR, row ``a * k + c``, with link
        counts and first source states) in O(clusters x actions), or None when that would not be
        exact (a contradicted transition in force, blocks changed outside :meth:`place` since they were
        written).

        Every level-1 link ``i -a-> j`` then joins the block of ``i`` to the block its transition
        ``a`` leads to, so each row has one entry, 1.0; the blocks keep their link counts.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1); fold = FoldMerger(); cl = Clusters(n_states=0)
        >>> fold.place(mem, cl, [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1])])
        True
        >>> _ = fold.sleep(mem, cl); [x.tolist() for x in fold.level2_transitions(mem, cl)]
        [[0, 1, 1], [1], [1.0], [1], [0]]
        """
        from ._kernels import LINKS_OK, NCONF, count_links, level2_rows

        if self._A is None or self._st.sc[NCONF] or not self._current(clusters, memory.n_states):
            return None
        if not self._st.sc[LINKS_OK]:
            count_links(self._st, self._n)
        return level2_rows(self._st, self._croot, clusters.n_clusters, self._A)

    def _tab_room(self, rows: int, cols: int, n_states: int) -> None:
        """Grow the label table; drop it (purity from scratch) when it would outgrow the level-1 states."""
        r, c = self._tab.shape
        if rows <= r and cols <= c:
            return
        rows, cols = max(rows, 2 * r), max(cols, c)
        if rows * cols > 4 * n_states + 4096:
            self._tab_ok = False
            return
        self._tab = _grown(self._tab, rows, 0)
        if cols > c:
            self._tab = np.concatenate([self._tab, np.zeros((rows, cols - c), dtype=np.int64)], axis=1)

    def purity(self, memory, clusters):
        """Weighted purity of the clusters with and without singletons (NaN without true labels), from
        label counts kept per cluster; None when ``clusters`` is not as written here (see
        :func:`hmmmerge.evaluate.weighted_purity`).

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1); fold = FoldMerger(); cl = Clusters(n_states=0)
        >>> fold.place(mem, cl, [mem.observe(o, -1 if t == 0 else 0, label=t % 2) for t, o in enumerate([0, 1])])
        True
        >>> _ = fold.sleep(mem, cl); fold.purity(mem, cl)
        (1.0, nan)
        """
        from ._kernels import label_table

        n = memory.n_states
        if self._A is None or n == 0 or not self._current(clusters, n):
            return None
        k = clusters.n_clusters
        if not self._tab_ok:
            labels = memory.labels
            cols = max(int(labels.max()) + 1, 1)
            if k * cols > 4 * n + 4096:
                return None
            self._tab, self._unlabelled = label_table(clusters.assignment, labels, n, k, cols)
            self._tab_ok = True
        if self._unlabelled:
            return float("nan"), float("nan")
        tab = self._tab[:k]
        sizes, top = tab.sum(axis=1), tab.max(axis=1)
        out = []
        for smallest in (1, 2):
            keep = sizes >= smallest
            out.append(float(top[keep].sum() / sizes[keep].sum()) if keep.any() else float("nan"))
        return out[0], out[1]

    # ------------------------------------------------------------ files
    def state_dict(self) -> dict:
        """Arrays that fully describe the merger (``fold_*`` keys, for ``.npz`` files); empty before any data.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); sorted(fold.state_dict())[:3]
        ['fold_action', 'fold_cid', 'fold_colour']
        """
        from ._kernels import JLEN, NCONF, NDEC, NRED, SETTLED

        if self._A is None:
            return {}
        st, n, sc = self._st, self._n, self._st.sc
        has_row = st.row[:n] >= 0
        delta = np.full((n, self._A + 1), -1, dtype=np.int64)
        dchild = delta.copy()
        delta[has_row], dchild[has_row] = st.delta[st.row[:n][has_row]], st.dchild[st.row[:n][has_row]]
        reds = st.reds[:int(sc[NRED])]
        roots = np.flatnonzero((st.cid[:n] >= 0) & (st.uf[:n] == np.arange(n)))
        cid = np.column_stack([roots, st.cid[roots]])
        return {
            "fold_sizes": np.array([self._n_obs, self._A, self._k, self._last, int(sc[SETTLED])], dtype=np.int64),
            "fold_parent": st.parent[:n].copy(),
            "fold_action": st.action[:n].copy(),
            "fold_colour": st.colour[:n].copy(),
            "fold_uf": st.uf[:n].copy(),
            "fold_uf_time": st.uf_time[:n].copy(),
            "fold_just": st.just[:n].copy(),
            "fold_red": st.red[:n].copy(),
            "fold_has_row": has_row, "fold_delta": delta, "fold_dchild": dchild,
            "fold_reds": np.column_stack([st.colour[reds], reds]).astype(np.int64).reshape(-1, 2),
            "fold_journal": st.journal[:int(sc[JLEN])].copy(),
            "fold_conflicts": st.conflicts[:int(sc[NCONF])].copy(),
            "fold_decisions": st.decisions[:int(sc[NDEC])].copy(),
            "fold_stats": np.array([self.stats[k] for k in _STATS], dtype=np.int64),
            "fold_cid": np.asarray(cid, dtype=np.int64).reshape(-1, 2),
            "fold_pending": np.asarray(self._pending, dtype=np.int64),
            "fold_provisional": np.asarray(self._prov, dtype=np.int64),
        }

    def load_state_dict(self, d, source: str = "<dict>") -> None:
        """Restore :meth:`state_dict` arrays (no ``fold_*`` keys: a fresh merger); errors name ``source``.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem)
        >>> back = FoldMerger(); back.load_state_dict(fold.state_dict()); back.block_of(2).tolist()
        [1, 2]
        """
        from ._kernels import (CONFLICTS, JLEN, LINKS_OK, MERGES, NCONF, NDEC, NRED, NROOTS, NROWS, PROMOTIONS,
                                    ROOT as _ROOT_OP, SETTLED)

        self._validate_params()
        if "fold_sizes" not in d:
            checked_state(lambda d: no_state(d, "fold_sizes"), d, source)
            self._A = None
            return
        a = checked_state(exact_state, d, source)
        k = default_min_evidence(a["n_obs"]) if self.min_evidence is None else self.min_evidence
        if a["k"] != k and sizes_of_level1(d) is not None:   # an agent file: its parameters are the merger's
            raise StateError(f"{source}: fold_sizes hold the evidence minimum {a['k']}, but the merger's is {k}")
        n, journal = a["n"], a["journal"]
        self._init(a["n_obs"], a["A"], capacity=n)
        self._k, self._last = a["k"], a["last"]
        # rows in the order the journal made the roots (node 0 first): rollbacks give them back last first
        order = np.concatenate([[0], journal[journal[:, 0] == _ROOT_OP, 1]]).astype(np.int64)
        self._room(nodes=n, journal=len(journal), conflicts=len(a["conflicts"]), decisions=len(a["decisions"]),
                   rows=len(order))
        st = self._st
        for name in ("parent", "action", "colour", "uf", "uf_time", "just", "red"):
            getattr(st, name)[:n] = a[name]
        st.row[:n] = -1
        st.row[order] = np.arange(len(order))
        st.delta[:len(order)], st.dchild[:len(order)] = a["delta"][order], a["dchild"][order]
        reds, conflicts, decisions = a["reds"][:, 1], a["conflicts"], a["decisions"]
        st.reds[:len(reds)] = reds
        st.journal[:len(journal)] = journal
        st.conflicts[:len(conflicts)] = conflicts
        st.decisions[:len(decisions)] = decisions
        stats = dict(zip(_STATS, a["stats"].tolist()))
        st.cid[a["cid"][:, 0]] = a["cid"][:, 1]
        st.sc[:] = 0
        st.sc[[JLEN, NRED, NCONF, SETTLED, NDEC]] = (len(journal), len(reds), len(conflicts), a["settled"],
                                                    len(decisions))
        st.sc[[MERGES, PROMOTIONS, CONFLICTS]] = stats["merges"], stats["promotions"], stats["conflicts"]
        st.sc[NROOTS] = int((a["uf"] == np.arange(n)).sum()) - 1   # node 0 is not a block
        st.sc[LINKS_OK], st.sc[NROWS] = 0, len(order)
        self._undos = stats["undos"]
        self._pending = a["pending"].tolist()
        self._prov = a["provisional"].tolist()
        self._dirty = True

    def _uf_array(self) -> np.ndarray:
        return self._st.uf

    def write_clusters(self, clusters, n_states: int) -> None:
        """Set ``clusters`` to the blocks: cluster ids in order of their root node.

        When ``clusters`` holds what was last written here plus what :meth:`place`
        added, only cluster ids are renumbered (one pass, :meth:`Clusters.relabel`).

        >>> from hmmmerge.clusters import Clusters
        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); cl = Clusters(n_states=2)
        >>> fold.write_clusters(cl, 2); cl.assignment.tolist()
        [0, 1]
        """
        from ._kernels import find_all, merge_rows

        clusters.grow(n_states)
        if self._A is None or not self._current(clusters, n_states):
            self._tab_ok = False
            super().write_clusters(clusters, n_states)
            return
        roots = find_all(self._st.uf, self._croot)
        blocks = np.unique(roots)
        new_of_old = np.searchsorted(blocks, roots)
        clusters.relabel(new_of_old)
        if self._tab_ok:
            self._tab = merge_rows(self._tab[:len(roots)], new_of_old, len(blocks))
        self._written_blocks(blocks, clusters, n_states)

    def _written_blocks(self, blocks: np.ndarray, clusters, n_states: int) -> None:
        if self._A is not None:
            self._st.cid[blocks] = np.arange(len(blocks))
            self._croot = blocks
            self._written = weakref.ref(clusters)
            self._dirty = self._n - 1 != n_states
