"""Sleep consolidation by folding: evidence-driven state merging of level 1 (``merge="fold"``).

With one start state, Algorithm 1's level 1 is a prefix tree of
(action, observation) paths.  This module groups its states into clusters
(level 2, the connection matrix C) the way automaton learning does it
(blue-fringe / EDSM, Lang, Pearlmutter & Price 1998; RPNI):

* **blocks** are the clusters; every placed level-1 state is in one block, a
  block emits one colour and has at most one successor block per action, so
  level 2 stays deterministic where the world is;
* **red** blocks are the consolidated automaton; **blue** blocks hang from a
  red block by one transition and are undecided;
* **placing** a new level-1 state walks the automaton: if the block of its
  parent has a successor under the action with the right colour, the state
  joins it; otherwise it starts a new block (attached as that successor).
  This happens as experience arrives (:meth:`FoldMerger.observe`), so
  level 2 predicts for the current episode;
* a **sleep** (:meth:`FoldMerger.sleep`) folds blue blocks into red ones:
  merging blue ``b`` into red ``r`` merges their successors under each action
  too, recursively (determinisation); one colour clash anywhere refuses the
  merge; its **evidence** is the number of distinct blocks (other than
  ``r``) that ``b``'s side agreed with.  A blue block is merged into its
  consistent red block with most evidence when that evidence leads the
  runner-up's by ``min_evidence`` (largest lead first); a blue block that
  clashes with every red block of its colour is promoted to red; the rest
  wait for more experience;
* **undo**: every change is journaled.  When new experience contradicts a
  level-2 transition (a state's parent block has a successor of another
  colour), the merge decisions that put the two level-1 parents in one block
  are found from the journal; everything from the latest of them on is rolled
  back (C returns exactly to its earlier value), and the rolled-back states are
  placed and folded again, now with the contradicting evidence.  Level 1 is
  never modified.

The work of a sleep is the new experience plus the folds it triggers; the
part of level 1 already in the red automaton is never visited again (writing
C is one vectorised pass, like the agent's level-2 refresh).

Default evidence minimum.  Evidence counts the distinct blocks that the
blue side agreed with (a self-loop at a wall or two paths that met add
nothing).  Two different cells of one colour in a world with ``n_obs``
equally frequent colours agree on one such comparison with probability about
``1/n_obs``, so ``k`` agreements by chance have probability about
``n_obs**-k``.  A blue block is merged into its best red block only if that
evidence leads every other consistent red block's by ``k``.
``min_evidence=None`` takes the smallest ``k >= 3`` with ``n_obs**-k <= 1e-3``
(3 for 10 colours, 5 for 4 colours): a run makes a few hundred merge
decisions, so chance merges are rare, and undo repairs the one that slips
through.

Why it works, and where it does not.  With a common start and a
deterministic world, a level-1 state's true position is a function of its
path, so one colour clash in a shared future proves two blocks differ, and
folding (determinisation) spreads every accepted identification to all
futures at once.  Measured on the paper's world (10x10, 10 colours, 1,000
episodes of 50 moves, sleeps every 500 steps, colouring and walk seeds
0-4): online ``l2`` accuracy over the last 50 episodes 0.991-1.0 (mean
0.997), purity with singletons >= 0.9999, 0-1 undo per run; over episodes
100-200 0.80-0.89 (mean 0.85), where no predictor anchored to level 1 can
exceed 0.95-0.98 (an episode's steps after its first never-traversed
transition cannot be predicted).  Blocks that still wait for evidence in
rarely visited corners keep 159-226 clusters instead of 100.  Four colours:
0.997-1.0; the aliased loop folds to its 3-state minimal machine.  It does not
hold without a common start: the first observations then contradict each
other with no merge to undo, nothing is ever merged, and level 2 stays level
1 (random start cells on the paper's world: 0.05 online, 50,765 clusters).
Noisy observations break the exact clash test: with 5% of the colours
replaced at random, contradictions are everywhere (1,734 in a run, 168
undos, 43,367 clusters, 0.11 online, 348 s; an ALERGIA-style statistical
test is not implemented).  In a world with random transitions
two visits of one position have different futures, so clashes prove nothing
and the blocks would grow like level 1.

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

import numpy as np

from ._validation import check_int

__all__ = ["FoldMerger", "default_min_evidence"]

# journal operations (undone in reverse order) and their tuple lengths
_PLACE, _ROOT, _UNION, _DELTA, _RED, _CONFLICT = range(6)
_OP_LEN = (2, 2, 2, 5, 2, 1)
_STATS = ("merges", "promotions", "undos", "conflicts")
_ARRAYS = ("parent", "action", "colour", "uf", "uf_time", "just", "red", "has_row", "delta", "dchild", "reds",
           "journal", "conflicts", "decisions", "stats", "cid", "pending")


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


class FoldMerger:
    """Evidence-driven folding of level-1 states into a deterministic level 2.

    Parameters
    ----------
    min_evidence : agreeing block pairs a merge needs (None: :func:`default_min_evidence`).
    max_undo_rounds : bound on roll-back-and-refold rounds per sleep.

    Attributes
    ----------
    n_recorded : level-1 states recorded so far (their parents and actions are kept).
    n_red : number of red (consolidated) blocks.
    stats : counters: ``merges``, ``promotions``, ``undos``, ``conflicts``.

    Nodes are level-1 states shifted by one; node 0 is the virtual start state
    whose one action (index ``n_actions``) leads to the first observation.

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

    def __init__(self, min_evidence: int | None = None, max_undo_rounds: int = 50):
        self.min_evidence = check_int(min_evidence, "min_evidence", low=0, allow_none=True)
        self.max_undo_rounds = check_int(max_undo_rounds, "max_undo_rounds", low=1)
        self._A = None

    # ------------------------------------------------------------ set-up
    def _init(self, n_obs: int, n_actions: int) -> None:
        self._A = int(n_actions)
        self._n_obs = int(n_obs)
        self._k = default_min_evidence(n_obs) if self.min_evidence is None else self.min_evidence
        # per node (node 0 = virtual start, node h + 1 = level-1 state h)
        self._parent = [-1]        # parent node of the level-1 state (0 for a first observation)
        self._action = [-1]        # action that led to it (n_actions for a first observation)
        self._colour = [-1]
        self._uf = [0]             # union-find parent (-1: not placed); roots are blocks
        self._uf_time = [-1]       # journal index of the operation that attached the node
        self._just = [-1]          # placement: the level-1 child whose transition it followed; -1 fold
        self._delta = [[-1] * (n_actions + 1)]    # per root: successor node per action
        self._dchild = [[-1] * (n_actions + 1)]   # per root: a level-1 node that gave that successor
        self._red = [True]
        self._reds_by_colour: dict[int, list[int]] = {}
        self._journal: list[tuple] = []
        self._conflicts: list[tuple[int, int]] = []   # (node, parent node) placed against a transition
        self._settled = 0                              # conflicts before this index have no merge to undo
        self._decisions: list[int] = []               # journal index at which each fold decision began
        self.stats = {"merges": 0, "promotions": 0, "undos": 0, "conflicts": 0}
        self._cid: dict[int, int] = {}   # root node -> cluster id, as last written
        self._last = -1                   # the level-1 state of the last step seen by place()
        self._pending: list[int] = []     # nodes unplaced by an undo, placed again at the next sleep

    def _check(self, memory) -> None:
        if self._A is None:
            self._init(memory.n_obs, memory.n_actions)
        elif (memory.n_obs, memory.n_actions) != (self._n_obs, self._A):
            raise ValueError(f"the memory has {memory.n_obs} observations / {memory.n_actions} actions; "
                             f"this merger was fed {self._n_obs} / {self._A}")

    @property
    def n_recorded(self) -> int:
        return 0 if self._A is None else len(self._parent) - 1

    @property
    def n_red(self) -> int:
        return 0 if self._A is None else sum(len(v) for v in self._reds_by_colour.values())

    @property
    def evidence_minimum(self) -> int | None:
        """The evidence minimum in use (known once the alphabet sizes are)."""
        return None if self._A is None else self._k

    # ------------------------------------------------------------ union-find
    def _find(self, x: int) -> int:
        uf = self._uf
        while uf[x] != x:
            x = uf[x]
        return x

    def _log(self, *op) -> None:
        self._journal.append(op)

    def _rollback(self, t: int, unplaced: list | None = None) -> None:
        """Undo journal entries from index ``t`` on (latest first)."""
        j = self._journal
        while len(j) > t:
            op = j.pop()
            kind = op[0]
            if kind == _PLACE:
                self._uf[op[1]] = -1
                if unplaced is not None:
                    unplaced.append(op[1])
            elif kind == _ROOT:
                x = op[1]
                self._uf[x] = -1
                self._delta[x] = None
                self._dchild[x] = None
                if unplaced is not None:
                    unplaced.append(x)
            elif kind == _UNION:
                self._uf[op[1]] = op[1]
            elif kind == _DELTA:
                _, x, a, old, oldc = op
                self._delta[x][a] = old
                self._dchild[x][a] = oldc
            elif kind == _RED:
                x = op[1]
                self._red[x] = False
                self._reds_by_colour[self._colour[x]].pop()
            elif kind == _CONFLICT:
                self._conflicts.pop()
                self._settled = min(self._settled, len(self._conflicts))
        while self._decisions and self._decisions[-1] >= t:
            self._decisions.pop()

    # ------------------------------------------------------------ experience
    def _grow(self, n: int) -> None:
        grow = n + 1 - len(self._parent)
        if grow > 0:
            for lst, v in ((self._parent, -1), (self._action, -1), (self._colour, -1), (self._uf, -1),
                           (self._uf_time, -1), (self._just, -1), (self._red, False)):
                lst.extend([v] * grow)
            self._delta.extend([None] * grow)
            self._dchild.extend([None] * grow)

    def observe(self, memory, states, actions=None) -> None:
        """Record the level-1 states of experienced steps and place the new ones.

        ``states`` holds the level-1 state after each step, as episodes (one
        row or list per episode, first entry the first observation);
        ``actions`` the matching actions (``actions[:, 0] == -1``).  Without
        ``actions`` they are read from the links of ``memory`` (exact when no
        link was ever replaced, i.e. in a deterministic world).  Only states not
        recorded before are new; they must appear in creation order, as they do
        in Algorithm 1.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1)
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 1])]
        >>> fold = FoldMerger(); fold.observe(mem, [states]); fold.n_recorded
        3
        """
        self._check(memory)
        A = self._A
        nxt = memory.next_state
        emission = memory.emission
        self._grow(memory.n_states)
        for e, row in enumerate(states):
            row = np.asarray(row, dtype=np.int64).tolist()
            acts = None if actions is None else np.asarray(actions[e], dtype=np.int64).tolist()
            prev = -1
            for t, h in enumerate(row):
                node = h + 1
                if self._parent[node] < 0 and node > 0 and h >= 0:
                    if t == 0:
                        pnode, a = 0, A
                    else:
                        a = acts[t] if acts is not None else _link_action(nxt, prev, h)
                        pnode = prev + 1
                    self._parent[node] = pnode
                    self._action[node] = a
                    self._colour[node] = int(emission[h])
                    self._place(node)
                prev = h

    def observe_tree(self, memory) -> None:
        """Record every state of a deterministic ``memory`` from its links (a prefix tree) and place it.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 2)
        >>> _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0), (0, 1)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); fold.n_recorded
        3
        """
        self._check(memory)
        n = memory.n_states
        start = self.n_recorded
        parent = np.full(n, -2, dtype=np.int64)
        action = np.full(n, -1, dtype=np.int64)
        nxt = memory.next_state
        for a in range(self._A):
            src = np.flatnonzero(nxt[a] >= start)
            if ((parent[nxt[a, src]] != -2)).any():
                raise ValueError("a level-1 state has two incoming links: not a prefix tree")
            parent[nxt[a, src]] = src
            action[nxt[a, src]] = a
        self._grow(n)
        for h in range(start, n):
            if parent[h] == -2:
                if h != memory.start_state:
                    raise ValueError(f"level-1 state {h} has no incoming link (a replaced link?): "
                                     "use observe() with the step stream")
                pnode, a = 0, self._A
            else:
                pnode, a = int(parent[h]) + 1, int(action[h])
            node = h + 1
            self._parent[node], self._action[node] = pnode, a
            self._colour[node] = int(memory.emission[h])
            self._place(node)

    def _place(self, node: int) -> None:
        """Put a recorded, unplaced node into the block its parent's transition leads to."""
        pnode = self._parent[node]
        if self._uf[pnode] < 0:
            raise ValueError("level-1 states must be placed after their parents")
        p = self._find(pnode)
        a = self._action[node]
        q = self._delta[p][a]
        t = len(self._journal)
        if q >= 0:
            q = self._find(q)
            if self._colour[q] == self._colour[node]:
                self._uf[node] = q
                self._uf_time[node] = t
                self._just[node] = self._dchild[p][a]
                self._log(_PLACE, node)
                return
            # the transition says another colour: a contradiction, resolved at the next sleep
            self._make_root(node, t)
            self._conflicts.append((node, self._dchild[p][a]))
            self._log(_CONFLICT)
            self.stats["conflicts"] += 1
            return
        self._make_root(node, t)
        self._set_delta(p, a, node, node)

    def _make_root(self, node: int, t: int) -> None:
        self._uf[node] = node
        self._uf_time[node] = t
        self._just[node] = -1
        self._delta[node] = [-1] * (self._A + 1)
        self._dchild[node] = [-1] * (self._A + 1)
        self._log(_ROOT, node)

    def _set_delta(self, x: int, a: int, target: int, child: int) -> None:
        self._log(_DELTA, x, a, self._delta[x][a], self._dchild[x][a])
        self._delta[x][a] = target
        self._dchild[x][a] = child

    def _set_red(self, x: int) -> None:
        self._red[x] = True
        self._reds_by_colour.setdefault(self._colour[x], []).append(x)
        self._log(_RED, x)

    # ------------------------------------------------------------ folding
    def _fold(self, r: int, b: int) -> int:
        """Merge block ``b`` into ``r`` and, recursively, their successors; return the evidence or -1 (clash).

        The evidence is the number of distinct blocks other than ``r`` that
        blocks of ``b``'s side were compared with and agreed: agreements with
        one block again (a self-loop at a wall, paths that met) add nothing.

        Changes are journaled; the caller rolls back a refused or tentative fold.
        """
        compared: set[int] = set()
        stack = [(r, b)]
        A1 = self._A + 1
        colour, delta, dchild, uf, red = self._colour, self._delta, self._dchild, self._uf, self._red
        uf_time, just, journal = self._uf_time, self._just, self._journal
        while stack:
            x, y = stack.pop()
            while uf[x] != x:
                x = uf[x]
            while uf[y] != y:
                y = uf[y]
            if x == y:
                continue
            if colour[x] != colour[y]:
                return -1
            if red[y] and not red[x]:
                x, y = y, x
            compared.add(x)
            uf[y] = x
            uf_time[y] = len(journal)
            just[y] = -1
            journal.append((_UNION, y))
            dx, dy, cx = delta[x], delta[y], dchild[x]
            for a in range(A1):
                ty = dy[a]
                if ty < 0:
                    continue
                tx = dx[a]
                if tx < 0:
                    journal.append((_DELTA, x, a, -1, cx[a]))
                    dx[a] = ty
                    cx[a] = dchild[y][a]
                else:
                    stack.append((tx, ty))
        return len(compared) - 1

    def _blues(self) -> list[int]:
        """Non-red blocks that a red block leads to, in a fixed order."""
        out, seen = [], set()
        for reds in self._reds_by_colour.values():
            for r in reds:
                for t in self._delta[r]:
                    if t >= 0:
                        t = self._find(t)
                        if not self._red[t] and t not in seen:
                            seen.add(t)
                            out.append(t)
        if self._delta[0] is not None:
            for t in self._delta[0]:
                if t >= 0:
                    t = self._find(t)
                    if not self._red[t] and t not in seen:
                        seen.add(t)
                        out.append(t)
        out.sort()
        return out

    def _blue_fringe(self) -> None:
        """Promote, then merge (most evidence first) until every blue block waits for evidence.

        A blue block is merged into the consistent red block of its colour with
        most evidence, and only if that evidence leads the runner-up's by at
        least ``min_evidence`` (the pair with the largest lead goes first).
        Clashes are cached for the sleep (a clash stays a clash as the
        automaton grows); evidence counts are recomputed after every change.
        """
        clashes: set[tuple[int, int]] = set()
        cache: dict[tuple[int, int], tuple[int, int]] = {}
        epoch = 0
        while True:
            k = self._attainable_minimum()
            blues = self._blues()
            if not blues:
                return
            best, best_pair, promoted = -1, None, False
            for b in blues:
                consistent, ev_b, r_b, runner_up = 0, -1, -1, 0
                for r in self._reds_by_colour.get(self._colour[b], ()):
                    if (b, r) in clashes:
                        continue
                    got = cache.get((b, r))
                    if got is not None and got[0] == epoch:
                        ev = got[1]
                    else:
                        mark = len(self._journal)
                        ev = self._fold(r, b)
                        self._rollback(mark)
                        if ev < 0:
                            clashes.add((b, r))
                        else:
                            cache[(b, r)] = (epoch, ev)
                    if ev >= 0:
                        consistent += 1
                        if ev > ev_b:
                            runner_up = max(runner_up, ev_b)
                            ev_b, r_b = ev, r
                        else:
                            runner_up = max(runner_up, ev)
                lead = ev_b - runner_up
                if consistent and lead > best:
                    best, best_pair = lead, (r_b, b)
                if not consistent:
                    self._set_red(b)
                    self.stats["promotions"] += 1
                    promoted = True
            epoch += 1
            if promoted:
                continue
            if best < k:
                return
            mark = len(self._journal)
            self._decisions.append(mark)
            if self._fold(*best_pair) < 0:   # cannot happen after a complete tentative fold; kept safe
                self._rollback(mark)
                clashes.add(best_pair[::-1])
            else:
                self.stats["merges"] += 1

    def _attainable_minimum(self) -> int:
        """``min_evidence``, lowered (not below 2) to what an automaton of ``n_red`` blocks can show.

        Evidence counts distinct blocks other than the red candidate, so with
        ``n_red`` red blocks about ``n_red - 1`` agreements is all that a
        world with few distinguishable states (an aliased loop) can ever give.
        """
        return max(min(self._k, self.n_red - 1), min(self._k, 2))

    # ------------------------------------------------------------ undo
    def _decision_of(self, t: int) -> int:
        """The journal index of the fold decision containing journal entry ``t``."""
        import bisect

        i = bisect.bisect_right(self._decisions, t) - 1
        return self._decisions[i]

    def _responsible(self, u: int, w: int) -> int:
        """Latest fold decision (journal index) that made nodes ``u`` and ``w`` share a block; -1 if none."""
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
                if self._uf[x] == x:
                    break
                x = self._uf[x]
            # walk w up to the first common ancestor
            edges = []
            y = w
            while y not in path_u:
                edges.append(y)
                y = self._uf[y]
            x = u
            while x != y:
                edges.append(x)
                x = self._uf[x]
            for z in edges:
                just = self._just[z]
                if just < 0:       # a fold union (or a conflict root, which joins nothing)
                    latest = max(latest, self._decision_of(self._uf_time[z]))
                else:              # placed by following the transition that ``just`` created
                    pending.append((self._parent[z], self._parent[just]))
                    pending.append((just, self._uf[z]))
        return latest

    @property
    def decisions(self) -> list[int]:
        """The merge decisions in force, as journal positions (oldest first)."""
        return list(self._decisions) if self._A is not None else []

    def contradicted_merge(self) -> int:
        """The latest merge decision behind a contradicted transition placed since the last sleep; -1 if none.

        >>> FoldMerger().contradicted_merge()
        -1
        """
        t = -1
        if self._A is not None:
            for node, child in self._conflicts[self._settled:]:
                t = max(t, self._responsible(self._parent[node], self._parent[child]))
        return t

    def undo(self, decision: int) -> list[int]:
        """Undo merge ``decision`` (a journal position from :attr:`decisions`) and every change after it.

        Blocks, transitions and placements return exactly to their state
        before the merge; returns the level-1 states that became unplaced (to
        be placed again: the next :meth:`sleep` does it).
        """
        if decision not in self.decisions:
            raise ValueError(f"{decision!r} is not a merge decision in force")
        unplaced: list[int] = []
        self._rollback(decision, unplaced)
        self.stats["undos"] += 1
        self._pending.extend(unplaced)
        return sorted(x - 1 for x in unplaced)

    def _place_pending(self) -> None:
        pending = sorted(set(x for x in self._pending if self._uf[x] < 0))
        self._pending = []
        for node in pending:
            self._place(node)

    def _resolve_conflicts(self) -> int:
        """Roll back the decisions behind contradicted transitions and place again; returns rounds used."""
        rounds = 0
        while len(self._conflicts) > self._settled and rounds < self.max_undo_rounds:
            rounds += 1
            t = self.contradicted_merge()
            if t < 0:      # no merge is behind them (not with deterministic data): their new blocks stay
                self._settled = len(self._conflicts)
                break
            self.undo(t)
            self._place_pending()
            self._blue_fringe()
        return rounds

    # ------------------------------------------------------------ sleep
    def sleep(self, memory, clusters, rng=None) -> list[dict]:
        """Consolidate: place what is new, undo contradicted merges, fold the blue fringe, write C.

        Every recorded level-1 state ends in exactly one cluster of
        ``clusters``.  States not recorded yet are recorded first from the
        links of ``memory`` (exact for deterministic worlds); ``rng`` is not
        used (folding is deterministic).  Returns one report: merges,
        promotions and undos of this sleep, red blocks and clusters.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1)
        >>> _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1, 0, 1, 0, 1, 0])]
        >>> cl = Clusters(n_states=mem.n_states)
        >>> FoldMerger(min_evidence=1).sleep(mem, cl)[0]["clusters"]
        2
        """
        self._check(memory)
        if self.n_recorded < memory.n_states:
            self.observe_tree(memory)
        before = dict(self.stats)
        self._place_pending()
        rounds = self._resolve_conflicts()
        self._blue_fringe()
        self.write_clusters(clusters, memory.n_states)
        report = {k: self.stats[k] - before[k] for k in ("merges", "promotions", "undos")}
        report.update(undo_rounds=rounds, red=self.n_red, clusters=clusters.n_clusters)
        return [report]

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
        self._check(memory)
        states = np.asarray(states, dtype=np.int64)
        if not len(states):
            return False
        nxt = memory.next_state
        emission = memory.emission
        start = memory.start_state
        self._grow(memory.n_states)
        clusters.grow(memory.n_states)
        assignment = clusters.assignment
        A = self._A
        added = False
        prev = self._last
        for h in states.tolist():
            node = h + 1
            if self._parent[node] < 0:
                if h == start:   # only a first observation creates the start state
                    pnode, a = 0, A
                else:
                    pnode, a = prev + 1, _link_action(nxt, prev, h)
                self._parent[node], self._action[node] = pnode, a
                self._colour[node] = int(emission[h])
                self._place(node)
                root = self._find(node)
                if root == node:
                    assignment[h] = -1
                    self._cid[node] = int(clusters.add_clusters([[h]])[0])
                    added = True
                else:
                    assignment[h] = self._cid[root]
            prev = h
        self._last = prev
        return bool(added)

    # ------------------------------------------------------------ files
    def state_dict(self) -> dict:
        """Arrays that fully describe the merger (``fold_*`` keys, for ``.npz`` files); empty before any data.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); sorted(fold.state_dict())[:3]
        ['fold_action', 'fold_cid', 'fold_colour']
        """
        if self._A is None:
            return {}
        A1 = self._A + 1
        has_row = np.array([d is not None for d in self._delta], dtype=bool)
        delta = np.full((len(self._delta), A1), -1, dtype=np.int64)
        dchild = np.full((len(self._delta), A1), -1, dtype=np.int64)
        rows = np.flatnonzero(has_row)
        if len(rows):
            delta[rows] = [self._delta[i] for i in rows]
            dchild[rows] = [self._dchild[i] for i in rows]
        journal = np.full((len(self._journal), 5), -1, dtype=np.int64)
        for i, op in enumerate(self._journal):
            journal[i, :len(op)] = op
        reds = [(c, x) for c, xs in self._reds_by_colour.items() for x in xs]
        cid = sorted(self._cid.items())
        return {
            "fold_sizes": np.array([self._n_obs, self._A, self._k, self._last, self._settled], dtype=np.int64),
            "fold_parent": np.asarray(self._parent, dtype=np.int64),
            "fold_action": np.asarray(self._action, dtype=np.int64),
            "fold_colour": np.asarray(self._colour, dtype=np.int64),
            "fold_uf": np.asarray(self._uf, dtype=np.int64),
            "fold_uf_time": np.asarray(self._uf_time, dtype=np.int64),
            "fold_just": np.asarray(self._just, dtype=np.int64),
            "fold_red": np.asarray(self._red, dtype=bool),
            "fold_has_row": has_row, "fold_delta": delta, "fold_dchild": dchild,
            "fold_reds": np.array(reds, dtype=np.int64).reshape(-1, 2),
            "fold_journal": journal,
            "fold_conflicts": np.array(self._conflicts, dtype=np.int64).reshape(-1, 2),
            "fold_decisions": np.asarray(self._decisions, dtype=np.int64),
            "fold_stats": np.array([self.stats[k] for k in _STATS], dtype=np.int64),
            "fold_cid": np.array(cid, dtype=np.int64).reshape(-1, 2),
            "fold_pending": np.asarray(self._pending, dtype=np.int64),
        }

    def load_state_dict(self, d, source: str = "<dict>") -> None:
        """Restore :meth:`state_dict` arrays (no ``fold_*`` keys: a fresh merger); errors name ``source``.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem)
        >>> back = FoldMerger(); back.load_state_dict(fold.state_dict()); back.block_of(2).tolist()
        [1, 2]
        """
        if "fold_sizes" not in d:
            self._A = None
            return
        try:
            n_obs, A, k, last, settled = (int(x) for x in d["fold_sizes"])
            arrays = {name: np.asarray(d[f"fold_{name}"]) for name in _ARRAYS}
        except (KeyError, ValueError) as e:
            raise ValueError(f"{source}: fold merger arrays are missing or malformed ({e})") from None
        n = len(arrays["parent"])
        if any(len(arrays[name]) != n for name in ("action", "colour", "uf", "uf_time", "just", "red", "has_row",
                                                  "delta", "dchild")) or arrays["delta"].shape[1:] != (A + 1,):
            raise ValueError(f"{source}: fold merger arrays have inconsistent shapes")
        self._init(n_obs, A)
        self._k, self._last, self._settled = k, last, settled
        for name in ("parent", "action", "colour", "uf", "uf_time", "just"):
            setattr(self, f"_{name}", arrays[name].astype(np.int64).tolist())
        self._red = arrays["red"].astype(bool).tolist()
        has = arrays["has_row"].astype(bool)
        self._delta = [row if ok else None for row, ok in zip(arrays["delta"].tolist(), has)]
        self._dchild = [row if ok else None for row, ok in zip(arrays["dchild"].tolist(), has)]
        self._reds_by_colour = {}
        for c, x in arrays["reds"].tolist():
            self._reds_by_colour.setdefault(c, []).append(x)
        self._journal = [tuple(row[:_OP_LEN[row[0]]]) for row in arrays["journal"].tolist()]
        self._conflicts = [tuple(row) for row in arrays["conflicts"].tolist()]
        self._decisions = arrays["decisions"].tolist()
        self.stats = dict(zip(_STATS, arrays["stats"].tolist()))
        self._cid = {r: c for r, c in arrays["cid"].tolist()}
        self._pending = arrays["pending"].tolist()

    def block_of(self, n_states: int) -> np.ndarray:
        """The block (root node) of each of the first ``n_states`` level-1 states; -1 if not placed.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); fold.block_of(2).tolist()
        [1, 2]
        """
        if self._A is None:
            return np.full(n_states, -1, dtype=np.int64)
        uf = np.asarray(self._uf, dtype=np.int64)
        m = min(n_states, len(uf) - 1)
        nodes = np.arange(1, m + 1)
        root = uf[nodes]
        placed = root >= 0
        root = np.where(placed, root, 0)
        while True:
            up = uf[root]
            if np.array_equal(up, root):
                break
            root = up
        out = np.full(n_states, -1, dtype=np.int64)
        out[:m] = np.where(placed, root, -1)
        return out

    def write_clusters(self, clusters, n_states: int) -> None:
        """Set ``clusters`` to the blocks: cluster ids in order of their root node.

        >>> from hmmmerge.clusters import Clusters
        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = FoldMerger(); fold.observe_tree(mem); cl = Clusters(n_states=2)
        >>> fold.write_clusters(cl, 2); cl.assignment.tolist()
        [0, 1]
        """
        clusters.grow(n_states)
        roots = self.block_of(n_states)
        clusters.assignment[:] = -1
        clusters.assignment[:n_states] = roots
        clusters.compact()
        blocks, first = np.unique(roots, return_index=True)
        ids = clusters.assignment[:n_states][first]
        self._cid = dict(zip(blocks[blocks >= 0].tolist(), ids[blocks >= 0].tolist()))


def _link_action(next_state: np.ndarray, prev: int, h: int) -> int:
    column = next_state[:, prev].tolist()
    if h not in column:
        raise ValueError(f"no level-1 link {prev} -> {h}: pass the actions of the steps")
    return column.index(h)
