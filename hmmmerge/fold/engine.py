"""The engine of the fold family: red-blue state merging over level 1's prefix tree, with a pluggable test.

Nodes are level-1 states shifted by one; node 0 is the virtual start state,
whose one action (index ``n_actions``) leads to the first observation.  The
engine keeps the recorded tree (``_parent``, ``_action``, ``_colour``), the
blocks (union-find ``_uf``, -1 for an unplaced node; each root has a row
``_delta[x][a]``, the successor node under action ``a``, and ``_dchild``, the
node whose placing made that entry), the red blocks (``_red``, ``_reds`` in
promotion order) and a journal of every change, undone latest first by
:meth:`Engine._rollback`.  :meth:`Engine._fold` merges two blocks and,
recursively, their successors under each action (determinisation); the
compatibility test is a plug:

* ``start()``: an accumulator for one fold;
* ``pair(acc, x, y)``: False when blocks ``x`` and ``y`` refute the fold (``y`` joins ``x``; ``x`` is
  red if either is); called before they are joined;
* ``joined(x, y)`` / ``parted(x, y)``: per-block statistics follow ``y`` into ``x`` and back;
* ``evidence(acc)``: the evidence of the finished fold.

:class:`ExactTest` is the colour-clash test of ``merge="fold"`` (the numba
kernels of :mod:`hmmmerge.fold._kernels` run the same test; the pure-Python
engine with it is their reference in the tests); :class:`hmmmerge.fold.noisy.LikelihoodTest`
is the statistical test of ``merge="fold-noisy"``.  The engine also records
experience (:meth:`Engine.observe`, :meth:`Engine.observe_tree`: a member's
``_record`` / ``_visit`` / ``_place_recorded``) and runs a sleep
(:meth:`Engine.sleep`: a member's ``_consolidate``).  A member of the family
adds placing, the blue-fringe policy (which merges it accepts, when it
promotes) and its state file.
"""

from __future__ import annotations

import numpy as np

from .._estimator import Estimator

__all__ = ["Engine", "ExactTest", "link_action", "tree_links"]

PLACE, ROOT, UNION, DELTA, RED, CONFLICT = range(6)   # journal rows, as the kernels write them


def tree_links(memory, start: int, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Parent node and action of level-1 states ``start..n-1`` from the links of ``memory`` (node 0 and
    action ``n_actions`` for the first observation); ``strict``: refuse a state with two incoming links.

    >>> from hmmmerge.episodic import EpisodicMemory
    >>> mem = EpisodicMemory(2, 2); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0), (0, 1)]]
    >>> [x.tolist() for x in tree_links(mem, 0)]
    [[0, 1, 2], [2, 0, 1]]
    """
    n, A, nxt = memory.n_states, memory.n_actions, memory.next_state
    parent = np.full(n, -2, dtype=np.int64)
    action = np.full(n, -1, dtype=np.int64)
    for a in range(A):
        src = np.flatnonzero(nxt[a] >= 0)
        if strict and (parent[nxt[a, src]] != -2).any():
            raise ValueError("a level-1 state has two incoming links: not a prefix tree")
        parent[nxt[a, src]] = src
        action[nxt[a, src]] = a
    h = np.arange(start, n)
    top = parent[start:] == -2
    bad = h[top & (h != memory.start_state)]
    if len(bad):
        raise ValueError(f"level-1 state {int(bad[0])} has no incoming link (a replaced link?): "
                         "feed the step stream with observe()")
    return np.where(top, 0, parent[start:] + 1), np.where(top, A, action[start:])


def link_action(next_state: np.ndarray, prev: int, h: int) -> int:
    """The action of the level-1 link ``prev -> h``.

    >>> link_action(np.array([[1, -1], [-1, -1]]), 0, 1)
    0
    """
    column = next_state[:, prev].tolist()
    if h not in column:
        raise ValueError(f"no level-1 link {prev} -> {h}: pass the actions of the steps")
    return column.index(h)


class ExactTest:
    """The exact test: blocks of two colours clash; the evidence is the number of distinct blocks
    (other than the one folded into) that the other side was compared with and agreed."""

    def __init__(self, engine):
        self.m = engine

    def start(self):
        return set()

    def pair(self, acc, x, y) -> bool:
        acc.add(x)
        colour = self.m._colour
        return colour[x] == colour[y]

    def joined(self, x, y) -> None:
        pass

    parted = joined

    def evidence(self, acc) -> int:
        return len(acc) - 1


class Engine(Estimator):
    """Red-blue merging over the recorded prefix tree (module docstring); a member sets ``_make_test``,
    ``_init_params`` and its blue-fringe policy."""

    _A = None
    _STRICT_TREE = True
    """:meth:`observe_tree` refuses a state with two incoming links."""
    _NODES = (("_parent", -1), ("_action", -1), ("_colour", -1), ("_uf", -1), ("_red", False), ("_delta", None),
              ("_dchild", None))
    """Per-node lists and the value of a new node (a member adds its own)."""

    def _make_test(self):
        return ExactTest(self)

    def _init_params(self, n_obs: int, n_actions: int) -> None:
        """Derived settings, once the alphabet sizes are known."""

    def _init(self, n_obs: int, n_actions: int) -> None:
        self._A, self._n_obs = int(n_actions), int(n_obs)
        for name, fill in self._NODES:
            setattr(self, name, [fill])
        self._parent[0] = -1
        self._uf[0], self._red[0] = 0, True
        self._delta[0], self._dchild[0] = [-1] * (self._A + 1), [-1] * (self._A + 1)
        self._reds: list[int] = []
        self._journal: list[tuple] = []
        self._test = self._make_test()
        self._init_params(n_obs, n_actions)

    def _check(self, memory) -> None:
        """Check the parameters and set up at first use; later, that ``memory`` has the same alphabets."""
        if self._A is None:
            self._validate_params()
            self._init(memory.n_obs, memory.n_actions)
        elif (memory.n_obs, memory.n_actions) != (self._n_obs, self._A):
            raise ValueError(f"the memory has {memory.n_obs} observations / {memory.n_actions} actions; "
                             f"this merger was fed {self._n_obs} / {self._A}")

    @property
    def n_recorded(self) -> int:
        """Level-1 states recorded so far."""
        return 0 if self._A is None else len(self._parent) - 1

    def _grow(self, n: int) -> None:
        """Room for the nodes of ``n`` level-1 states."""
        grow = n + 1 - len(self._parent)
        if grow > 0:
            for name, fill in self._NODES:
                getattr(self, name).extend([fill] * grow)

    # ------------------------------------------------------------ experience
    def observe(self, memory, states, actions=None) -> None:
        """Record the level-1 states of experienced steps, place the new ones and count every visit.

        ``states`` holds the level-1 state after each step, as episodes (one
        row or list per episode, first entry the first observation, -1 after
        its end); ``actions`` the matching actions (``actions[:, 0] == -1``).
        Without ``actions`` they are read from the links of ``memory`` (exact
        when no link was ever replaced, i.e. in a deterministic world).  New
        states must appear in creation order, as they do in Algorithm 1.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.fold import StatisticalFoldMerger
        >>> mem = EpisodicMemory(2, 1)
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 1])]
        >>> fold = StatisticalFoldMerger(); fold.observe(mem, [states], [[-1, 0, 0]]); fold.n_recorded
        3
        """
        self._check(memory)
        self._grow(memory.n_states)
        A, n = self._A, memory.n_states
        for e, row in enumerate(states):
            row = np.asarray(row, dtype=np.int64).tolist()
            acts = None if actions is None else np.asarray(actions[e], dtype=np.int64).tolist()
            if acts is not None and len(acts) < len(row):
                raise ValueError(f"episode {e}: {len(row)} states but {len(acts)} actions")
            prev = -1
            for t, h in enumerate(row):
                if h == -1 and max(row[t:]) == -1:   # the padding after a shorter episode
                    break
                if not 0 <= h < n:
                    raise ValueError(f"episode {e}, step {t}: {h} is not a level-1 state of the memory")
                if self._parent[h + 1] >= 0:
                    self._visit(h + 1)
                elif t == 0:
                    self._record(h + 1, 0, A, int(memory.emission[h]))
                else:
                    a = acts[t] if acts is not None else link_action(memory.next_state, prev, h)
                    if not 0 <= a < A:
                        raise ValueError(f"episode {e}, step {t}: action {a} out of range")
                    self._record(h + 1, prev + 1, a, int(memory.emission[h]))
                prev = h
        self._place_recorded()

    def observe_tree(self, memory) -> None:
        """Record every unrecorded state of a prefix-tree ``memory`` from its links and place it.

        For memories built without the step stream; a link replaced by
        Algorithm 1 (a noisy memory) leaves a state without parent: then feed
        the steps with :meth:`observe` or through the agent.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.fold import StatisticalFoldMerger
        >>> mem = EpisodicMemory(2, 2)
        >>> _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0), (0, 1)]]
        >>> fold = StatisticalFoldMerger(); fold.observe_tree(mem); fold.n_recorded
        3
        """
        self._check(memory)
        n, start = memory.n_states, self.n_recorded
        parent, action = tree_links(memory, start, strict=self._STRICT_TREE)
        self._grow(n)
        self._record_tree(np.arange(start, n) + 1, parent, action, memory.emission[start:n])

    def _record_tree(self, nodes, parent, action, colour) -> None:
        """Record and place new nodes, parents first."""
        for args in zip(nodes.tolist(), parent.tolist(), action.tolist(), colour.tolist()):
            self._record(*args)
        self._place_recorded()

    def _record(self, node: int, pnode: int, a: int, colour: int):
        """Record a new node: parent node, action, colour (a member places it here or in
        :meth:`_place_recorded`)."""
        raise NotImplementedError

    def _visit(self, node: int) -> None:
        """Another step on a recorded node."""

    def _place_recorded(self) -> None:
        """Place the nodes :meth:`_record` left unplaced."""

    # ------------------------------------------------------------ blocks
    def _find(self, x: int) -> int:
        uf = self._uf
        while uf[x] != x:
            x = uf[x]
        return x

    def _make_root(self, node: int) -> None:
        """``node`` starts a block of its own, with an empty successor row."""
        self._uf[node] = node
        self._delta[node] = [-1] * (self._A + 1)
        self._dchild[node] = [-1] * (self._A + 1)

    def _fold(self, r: int, b: int):
        """Merge block ``b`` into ``r`` and, recursively, their successors; the evidence, or None when
        the test refutes it (journaled: the caller rolls back a refused or tentative fold)."""
        test = self._test
        acc = test.start()
        stack = [(r, b)]
        uf, delta, dchild, red, journal = self._uf, self._delta, self._dchild, self._red, self._journal
        A1 = self._A + 1
        while stack:
            x, y = stack.pop()
            while uf[x] != x:
                x = uf[x]
            while uf[y] != y:
                y = uf[y]
            if x == y:
                continue
            if red[y] and not red[x]:
                x, y = y, x
            if not test.pair(acc, x, y):
                return None
            uf[y] = x
            self._joined(x, y)
            journal.append((UNION, y))
            test.joined(x, y)
            dx, dy, cx = delta[x], delta[y], dchild[x]
            for a in range(A1):
                ty = dy[a]
                if ty < 0:
                    continue
                tx = dx[a]
                if tx < 0:
                    journal.append((DELTA, x, a, -1, cx[a]))
                    dx[a] = ty
                    cx[a] = dchild[y][a]
                else:
                    stack.append((tx, ty))
        return test.evidence(acc)

    def _joined(self, x: int, y: int) -> None:
        """Bookkeeping of a member when ``y`` joins ``x`` in a fold (before the journal row is written)."""

    def _try(self, r: int, b: int):
        """The evidence of folding ``b`` into ``r`` (None: refuted), the fold taken back."""
        mark = len(self._journal)
        evidence = self._fold(r, b)
        self._rollback(mark)
        return evidence

    def _promote(self, b: int) -> None:
        self._red[b] = True
        self._reds.append(b)
        self._journal.append((RED, b))

    def _rollback(self, t: int, unplaced: list | None = None) -> None:
        """Undo the journal from row ``t`` on, latest first; unplaced nodes are appended to ``unplaced``."""
        journal, uf, delta, dchild = self._journal, self._uf, self._delta, self._dchild
        while len(journal) > t:
            op = journal.pop()
            kind, x = op[0], op[1] if len(op) > 1 else -1
            if kind == UNION:
                self._test.parted(uf[x], x)
                uf[x] = x
            elif kind == DELTA:
                delta[x][op[2]], dchild[x][op[2]] = op[3], op[4]
            elif kind == RED:
                self._red[x] = False
                self._reds.pop()
            elif kind in (PLACE, ROOT):
                uf[x] = -1
                if kind == ROOT:
                    delta[x] = dchild[x] = None
                if unplaced is not None:
                    unplaced.append(x)
            else:
                self._undo(op)

    def _undo(self, op: tuple) -> None:
        """Undo a journal row of a member's own kind."""
        raise AssertionError(f"unknown journal row {op!r}")

    # ------------------------------------------------------------ sleep
    _REPORTED = ("merges", "promotions")
    """The counters whose change a sleep reports."""

    def sleep(self, memory, clusters, rng=None) -> list[dict]:
        """Consolidate: fold the blocks (the member's :meth:`_consolidate`) and write them to ``clusters``.

        Every recorded level-1 state ends in exactly one cluster of
        ``clusters``.  States not recorded yet are recorded first from the
        links of ``memory`` (:meth:`observe_tree`); ``rng`` is not used
        (folding is deterministic).  Returns one report: the change of the
        counters (merges, promotions, undos or undone decisions) over this
        sleep, red blocks, clusters and what the member adds.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> from hmmmerge.fold import FoldMerger, StatisticalFoldMerger
        >>> mem = EpisodicMemory(2, 1)
        >>> _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 8)]
        >>> cl = Clusters(n_states=mem.n_states)
        >>> FoldMerger(min_evidence=1).sleep(mem, cl)[0]["clusters"]
        2
        >>> StatisticalFoldMerger(min_visits=1).sleep(mem, cl)[0]["clusters"]
        2
        """
        self._check(memory)
        if self.n_recorded < memory.n_states:
            self.observe_tree(memory)
        before = dict(self.stats)
        extra = self._consolidate(memory, clusters)
        report = {k: self.stats[k] - before[k] for k in self._REPORTED}
        report.update(extra)
        return [report]

    def _consolidate(self, memory, clusters) -> dict:
        """The member's sleep after recording; writes C and returns its own report entries."""
        raise NotImplementedError

    # ------------------------------------------------------------ clusters
    def block_of(self, n_states: int) -> np.ndarray:
        """The block (root node) of each of the first ``n_states`` level-1 states; -1 if not placed.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.fold import StatisticalFoldMerger
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = StatisticalFoldMerger(); fold.observe_tree(mem); fold.block_of(3).tolist()
        [1, 2, -1]
        """
        from ._kernels import roots_of

        out = np.full(n_states, -1, dtype=np.int64)
        if self._A is not None:
            uf = self._uf_array()
            m = min(n_states, len(uf) - 1)
            out[:m] = roots_of(uf, m)
        return out

    def _uf_array(self) -> np.ndarray:
        return np.asarray(self._uf, dtype=np.int64)

    def write_clusters(self, clusters, n_states: int) -> None:
        """Set ``clusters`` to the blocks: cluster ids in order of their root node.

        >>> from hmmmerge.clusters import Clusters
        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.fold import StatisticalFoldMerger
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = StatisticalFoldMerger(); fold.observe_tree(mem); cl = Clusters(n_states=2)
        >>> fold.write_clusters(cl, 2); cl.assignment.tolist()
        [0, 1]
        """
        clusters.grow(n_states)
        roots = self.block_of(n_states)
        clusters.assignment[:] = -1
        clusters.assignment[:n_states] = roots
        clusters.compact()   # ids in order of the root nodes
        blocks = np.unique(roots)
        self._written_blocks(blocks[blocks >= 0], clusters, n_states)

    def _written_blocks(self, blocks: np.ndarray, clusters, n_states: int) -> None:
        """Remember the blocks as written: ``blocks[c]`` is the root node of cluster ``c``."""
        self._cid = dict(zip(blocks.tolist(), range(len(blocks))))
