"""Statistical folding for noisy observations (``merge="fold-noisy"``): the engine with a likelihood-ratio test.

Moves are trusted, colours are not: a new level-1 state joins the successor
block of its parent's block under its action (placing never clashes), and a
block keeps the colour counts of its visits.  Two blocks are compared by the
log Bayes factor of "one cell" against "two cells" under the noise model
(:func:`pair_llr`); a fold's evidence sums these (capped per block), one pair
below ``-log 1000`` refutes it.  A sleep estimates the noise (unless given),
re-tests the committed decisions when level 1 has grown by ``retest_growth``,
folds the blue fringe (blocks seen ``min_visits`` times; merges need a lead of
``log(1 / risk)``), then writes C with a provisional pass (lead
``provisional_lead``, ``patience`` rounds) that is rolled back.  The
derivation of the defaults and the measurements: BENCHMARKS.md, "Design notes
of the fold family".

Examples
--------
>>> from hmmmerge import gridworld
>>> from hmmmerge.reproduce.beyond import bench_walks
>>> from hmmmerge.episodic import EpisodicMemory
>>> from hmmmerge.clusters import Clusters
>>> env = gridworld(4, 4, n_colours=4, seed=0)
>>> walk, _ = bench_walks(env, {"seed": 0, "episodes": 300, "episode_length": 20, "noise": 0.05})
>>> mem = EpisodicMemory(env.n_obs, env.n_actions)
>>> states, _ = mem.observe_trajectories(walk)
>>> fold = StatisticalFoldMerger(); fold.observe(mem, states, walk.actions)
>>> cl = Clusters(n_states=mem.n_states); _ = fold.sleep(mem, cl)
>>> cl.n_clusters, mem.n_states     # the 16 cells of the world, from thousands of level-1 states
(16, 5619)
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import Float, Int, check_float
from ._state import checked_state, no_state, noisy_state
from .engine import RED, UNION, Engine

__all__ = ["LikelihoodTest", "StatisticalFoldMerger", "pair_llr"]

_STATS = ("merges", "promotions", "ambiguous", "sleeps", "retests", "undone")
_REFUTE = math.log(1000.0)
"""Log odds against one cell at which a comparison refutes a merge (fixed: ``risk`` sets acceptance only)."""


def _log_marginal(counts, log_pi, L) -> float:
    """``F(c) = log sum_k pi_k exp(L c_k)`` (up to the factor that cancels in a Bayes factor)."""
    terms = [lp + L * c for lp, c in zip(log_pi, counts)]
    m = max(terms)
    return m + math.log(sum(math.exp(t - m) for t in terms))


def pair_llr(x, y, noise: float, pi=None) -> float:
    """Log Bayes factor of "one cell" against "two cells" for colour counts ``x`` and ``y``.

    ``noise``: the probability that an observation is replaced by a uniformly
    random colour; ``pi``: prior colour frequencies (uniform by default).

    >>> round(pair_llr([1, 0], [1, 0], 0.05), 2), round(pair_llr([1, 0], [0, 1], 0.05), 2)
    (0.64, -2.33)
    >>> round(pair_llr([30, 1], [0, 20], 0.05), 1)    # many visits of two colours: two cells
    -72.6
    """
    x, y = [int(v) for v in x], [int(v) for v in y]
    if len(x) != len(y) or not x:
        raise ValueError(f"x and y must be count vectors of one length, got {len(x)} and {len(y)}")
    if min(x + y) < 0:
        raise ValueError("colour counts must be non-negative")
    if not 1e-300 <= noise < 1:
        raise ValueError(f"noise must be in [1e-300, 1), got {noise!r}")
    K = len(x)
    pi = np.full(K, 1.0 / K) if pi is None else np.asarray(pi, dtype=float)
    if pi.shape != (K,) or (pi <= 0).any():
        raise ValueError("pi must hold one positive frequency per colour")
    log_pi = np.log(pi / pi.sum()).tolist()
    L = math.log((1 - noise + noise / K) / (noise / K))
    xy = [a + b for a, b in zip(x, y)]
    return _log_marginal(xy, log_pi, L) - _log_marginal(x, log_pi, L) - _log_marginal(y, log_pi, L)


def _below_one(low: float, none: bool = False):
    """A number in ``[low, 1)`` (``low`` 0: ``(0, 1)``), or None if ``none``."""
    def check(value, name):
        v = check_float(value, name, low=low, high=1, low_open=low == 0, allow_none=none)
        if v == 1:
            raise ValueError(f"{name} must be a number below 1, got {value!r}")
    return check


class LikelihoodTest:
    """The statistical test (the plug of :class:`~hmmmerge.fold.engine.Engine`): the evidence sums the
    pair log Bayes factors of the blocks folded into each block (its positive part capped at the largest);
    a pair below ``-log 1000`` (while re-testing: only between blocks both seen ``min_visits`` times) or a
    running evidence below ``-3 log 1000`` refutes the fold; blocks pool their colour counts."""

    def __init__(self, merger):
        self.m = merger

    def start(self):
        return [{}, 0.0]

    def pair(self, acc, x, y) -> bool:
        m = self.m
        cnt, tau = m._cnt, m._refute
        groups = acc[0]
        llr = m._llr(cnt[x], cnt[y])
        if llr < -tau and (not m._t0 or min(sum(cnt[x]), sum(cnt[y])) >= m._t0):
            return False
        if not groups:     # the candidates were chosen by this colour: no evidence
            llr = min(llr, 0.0)
        g = groups.get(x)
        if g is None:
            groups[x] = g = [0.0, -math.inf]
            old = 0.0
        else:
            old = min(g[0], g[1])
        g[0] += llr
        g[1] = max(g[1], llr)
        acc[1] += min(g[0], g[1]) - old
        return acc[1] >= -3 * tau   # else refuted beyond what agreements could plausibly repay

    def joined(self, x, y) -> None:
        cx, cy = self.m._cnt[x], self.m._cnt[y]
        for k in range(len(cx)):
            cx[k] += cy[k]

    def parted(self, x, y) -> None:
        cx, cy = self.m._cnt[x], self.m._cnt[y]
        for k in range(len(cx)):
            cx[k] -= cy[k]

    def evidence(self, acc) -> float:
        return acc[1]


class StatisticalFoldMerger(Engine):
    """Evidence-driven folding with a likelihood-ratio test, for noisy observations (module docstring).

    Parameters
    ----------
    risk : posterior risk of a merge; merges need a log-odds lead of ``tau = log(1 / risk)``
        (default 1e-3: ``tau = 6.9``); refutations (clashes, promotions) need odds of 1000:1.
    noise : probability that an observation is replaced by a random colour (None: estimated
        at every sleep from the positions near the start).
    min_visits : a blue block is neither merged nor promoted before its own transition was
        traversed this often (ALERGIA's ``t0``; default 3, see the module docstring).
    provisional_lead : C is written with the blue blocks that still wait decided provisionally
        (merged into their best red block when it leads the runner-up and "a new cell" by this
        many nats, promoted when every red block of their colour refutes them), then rolled back;
        default 0.5 (odds 1.6:1, the most probable decision); None: blocks that wait stay clusters
        of their own (module docstring, "Provisional decisions").
    patience : in the provisional pass, a blue block that neither merges nor is refuted through this
        many rounds in which other blocks changed (or through one round without changes) is promoted
        provisionally, so that no blue block is left (default 3; module docstring).
    retest_growth : whenever level 1 has grown by this factor since the last re-test, a sleep
        re-tests every committed decision on all the experience and undoes the refuted ones
        (default 2; None: never; module docstring, "Undo of committed merges").

    Attributes
    ----------
    n_recorded : level-1 states recorded so far.
    n_red : number of red (consolidated) blocks.
    noise_ : the noise rate used by the last sleep (None before).
    stats : counters: ``merges``, ``promotions``, ``ambiguous`` (actions of new states
        matched among several candidates), ``sleeps``, ``retests``, ``undone`` (decisions undone).

    Examples
    --------
    >>> from hmmmerge.episodic import EpisodicMemory
    >>> from hmmmerge.clusters import Clusters
    >>> mem = EpisodicMemory(n_obs=2, n_actions=1)
    >>> obs = [0, 1] * 6 + [0, 0] + [0, 1] * 4          # a two-state loop, one noisy observation
    >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate(obs)]
    >>> fold = StatisticalFoldMerger(noise=0.05, min_visits=1); fold.observe(mem, [states], [[-1] + [0] * 21])
    >>> cl = Clusters(n_states=mem.n_states); _ = fold.sleep(mem, cl)
    >>> cl.n_clusters, mem.n_states
    (2, 22)
    """

    _parameter_constraints = {"risk": _below_one(1e-300), "noise": _below_one(1e-300, none=True), "min_visits": Int(1),
                              "provisional_lead": Float(0, none=True), "patience": Int(1),
                              "retest_growth": Float(1, low_open=True, none=True)}
    _NODES = Engine._NODES + (("_cnt", None), ("_pos", -1), ("_nvis", 0))
    _STRICT_TREE = False   # a noisy memory's replaced links: the later one counts
    _t0 = 0             # while re-testing: a pair refutes only if both blocks have this many visits
    noise_ = None

    def __init__(self, risk: float = 1e-3, noise: float | None = None, min_visits: int = 3,
                 provisional_lead: float | None = 0.5, patience: int = 3, retest_growth: float | None = 2.0):
        self.risk = risk
        self.noise = noise
        self.min_visits = min_visits
        self.provisional_lead = provisional_lead
        self.patience = patience
        self.retest_growth = retest_growth

    def _make_test(self):
        return LikelihoodTest(self)

    def _init_params(self, n_obs: int, n_actions: int) -> None:
        self._K = int(n_obs)
        self._tau = math.log(1.0 / self.risk)
        self._refute = _REFUTE
        self._cnt[0] = [0] * n_obs               # per root: colour counts of its visits
        self._cid: dict[int, int] = {}          # block root -> cluster id (as last written or placed)
        self._next_cid: dict[tuple, int] = {}   # (cluster id, action) -> cluster id, as C was last written
        self._cid_counts = np.zeros((0, n_obs), dtype=np.int64)   # per cluster id: colour counts of its blocks
        self._total = [0] * n_obs                # visits per colour, over all blocks
        # per node (_pos): action-path position if at depth <= 2, else -1; colour counts per position
        self._shallow = [[0] * n_obs for _ in range(1 + n_actions + n_actions ** 2)]
        self._last = -1
        self._log: list[tuple[int, int, int]] = []   # committed decisions in order: (0, r, b) merge, (1, b, -1) promotion
        self._retested = 0                       # level-1 states recorded at the last re-test
        self.stats = dict.fromkeys(_STATS, 0)

    @property
    def n_red(self) -> int:
        return 0 if self._A is None else sum(1 for r in self._reds if self._uf[r] == r)

    def _find_compress(self, x: int) -> int:
        """``_find`` with path compression: only outside tentative folds (the journal must be empty)."""
        root = self._find(x)
        uf = self._uf
        while uf[x] != root:
            uf[x], x = root, uf[x]
        return root

    # ------------------------------------------------------------ experience
    def _record(self, node: int, pnode: int, a: int, colour: int) -> bool:
        """Record and place a new node; count its first visit.  Returns whether it started a block."""
        self._parent[node], self._action[node], self._colour[node] = pnode, a, colour
        self._nvis[node] = 1
        self._total[colour] += 1
        pk = self._pos[pnode] if pnode else -2
        pos = 0 if pk == -2 else 1 + a if pk == 0 else 1 + self._A * pk + a if 0 < pk <= self._A else -1
        self._pos[node] = pos
        if pos >= 0:
            self._shallow[pos][colour] += 1
        if self._uf[pnode] < 0:
            raise ValueError("level-1 states must be placed after their parents")
        return self._place(node, 1, self._find_compress)

    def _place(self, node: int, visits: int, find) -> bool:
        """Put a recorded node into the block its parent's block leads to under its action (else a block of
        its own, made that block's successor) and count ``visits`` of its colour; whether it started a block."""
        p = find(self._parent[node])
        a = self._action[node]
        q = self._delta[p][a]
        if q >= 0:
            root = find(q)
            self._uf[node] = root
        else:
            root = node
            self._make_root(node)
            self._cnt[node] = [0] * self._K
            self._delta[p][a] = node
        self._cnt[root][self._colour[node]] += visits
        return root == node

    def _visit(self, node: int) -> None:
        colour = self._colour[node]
        self._nvis[node] += 1
        self._cnt[self._find_compress(node)][colour] += 1
        self._total[colour] += 1
        if self._pos[node] >= 0:
            self._shallow[self._pos[node]][colour] += 1

    def _chunk_actions(self, nxt, states: list[int], first_prev: int, start: int) -> dict[int, tuple[int, int]]:
        """(parent node, action) of every new level-1 state of a chunk, from the links of level 1.

        A new state whose link was replaced later in the chunk is matched to
        the state that replaced it (the children of one parent under one action
        form a chain ending at the link); several possible chains are counted
        as ambiguous and the earliest replacement is taken.
        """
        parent_of: dict[int, int] = {}
        children: dict[int, list[int]] = {}
        prev = first_prev
        for h in states:
            node = h + 1
            if self._parent[node] < 0 and node not in parent_of:
                p = -1 if h == start else prev
                if p < 0 and h != start:
                    raise ValueError(f"level-1 state {h} has no known parent: feed the steps in order")
                parent_of[node] = p
                if p >= 0:
                    children.setdefault(p, []).append(h)
            prev = h
        out = {node: (0, self._A) for node, p in parent_of.items() if p < 0}
        for p, kids in children.items():
            column = nxt[:, p].tolist()
            link_action = {h: a for a, h in enumerate(column) if h >= 0}
            open_slots: list[tuple[int, int]] = []      # (child that may have replaced an earlier one, action)
            for h in reversed(kids):
                a = link_action.get(h)
                if a is None:
                    if not open_slots:
                        raise ValueError(f"no level-1 link leads to state {h}: pass the actions of the steps")
                    if len(open_slots) > 1:
                        self.stats["ambiguous"] += 1
                    j = min(range(len(open_slots)), key=lambda i: open_slots[i][0])
                    a = open_slots.pop(j)[1]
                else:
                    open_slots = [s for s in open_slots if s[1] != a]
                open_slots.append((h, a))
                out[h + 1] = (p + 1, a)
        return out

    def place(self, memory, clusters, states, rng=None) -> bool:
        """The agent's online hook: record, place and count the level-1 states of one chunk of steps.

        ``states`` are the level-1 states after consecutive steps of one
        episode (a chunk may continue the previous one).  New states join the
        block their parent's block leads to under their action, or start a new
        cluster.  Returns whether clusters were added.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1); fold = StatisticalFoldMerger(); cl = Clusters(n_states=0)
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1])]
        >>> fold.place(mem, cl, states), cl.assignment[:2].tolist()
        (True, [0, 1])
        >>> states = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 0])]
        >>> fold.place(mem, cl, states), cl.assignment[:3].tolist()   # a noisy colour joins the block
        (False, [0, 1, 1])
        """
        self._check(memory)
        states = np.asarray(states, dtype=np.int64).tolist()
        if not states:
            return False
        self._grow(memory.n_states)
        clusters.grow(memory.n_states)
        assignment = clusters.assignment
        emission = memory.emission
        new = self._chunk_actions(memory.next_state, states, self._last, memory.start_state)
        added = False
        for h in states:
            node = h + 1
            if node in new and self._parent[node] < 0:
                pnode, a = new[node]
                if self._record(node, pnode, a, int(emission[h])):
                    # a new block: the cluster the last sleep's automaton (C) leads to, else a new one
                    c = self._next_cid.get((self._cid.get(self._find(pnode), -1), a))
                    if c is None:
                        assignment[h] = -1
                        c = int(clusters.add_clusters([[h]])[0])
                        added = True
                    else:
                        assignment[h] = c
                    self._cid[node] = c
                else:
                    assignment[h] = self._cid[self._uf[node]]
            else:
                self._visit(node)
                if assignment[h] < 0:
                    assignment[h] = self._cid[self._find(node)]
        cids = assignment[np.asarray(states, dtype=np.int64)]
        self._count_cids(cids, memory.emission[np.asarray(states, dtype=np.int64)])
        self._last = states[-1]
        return bool(added)

    def _count_cids(self, cids, colours) -> None:
        """Add visits (cluster id, colour) to the per-cluster colour counts behind :meth:`emission`."""
        cids = np.asarray(cids, dtype=np.int64)
        need = int(cids.max(initial=-1)) + 1
        if need > len(self._cid_counts):
            grown = np.zeros((max(need, 2 * len(self._cid_counts)), self._K), dtype=np.int64)
            grown[:len(self._cid_counts)] = self._cid_counts
            self._cid_counts = grown
        np.add.at(self._cid_counts, (cids, np.asarray(colours, dtype=np.int64)), 1)

    def _recount_cids(self) -> None:
        """Per-cluster colour counts from the blocks' counts and ``_cid`` (after a write or a load)."""
        k = max(self._cid.values(), default=-1) + 1
        self._cid_counts = np.zeros((k, self._K), dtype=np.int64)
        if k:
            roots, ids = (list(v) for v in zip(*self._cid.items()))
            np.add.at(self._cid_counts, np.asarray(ids, dtype=np.int64),
                      np.asarray([self._cnt[r] for r in roots], dtype=np.int64))

    # ------------------------------------------------------------ the test
    def _noise_model(self) -> tuple[float, list[float], float]:
        """``(eps, log pi, L)`` from the counts so far (see the module docstring; a function of the saved state)."""
        K = self._K
        total = [1.0 + v for v in self._total]
        minority, visits = 1.0, 100.0
        for c in self._shallow:
            minority += sum(c) - max(c)
            visits += sum(c)
        eps = self.noise if self.noise is not None else min(0.5, minority / visits * K / max(K - 1, 1))
        s = sum(total)
        return eps, [math.log(t / s) for t in total], math.log((1 - eps + eps / K) / (eps / K))

    def _set_noise(self) -> None:
        """The noise rate and colour prior of this sleep."""
        self.noise_, self._log_pi, self._L = self._noise_model()
        self._F: dict[tuple, float] = {}       # F(counts) of this sleep's noise model (a cache)

    def _llr(self, x, y) -> float:
        F = self._F
        xy = tuple([a + b for a, b in zip(x, y)])
        x, y = tuple(x), tuple(y)
        for c in (xy, x, y):
            if c not in F:
                F[c] = _log_marginal(c, self._log_pi, self._L)
        return F[xy] - F[x] - F[y]

    def _blues(self) -> list[int]:
        """Non-red blocks that a red block leads to, most visits first."""
        out = set()
        for r in [0] + self._reds:
            if self._uf[r] != r:
                continue
            for t in self._delta[r]:
                if t >= 0:
                    t = self._find(t)
                    if not self._red[t]:
                        out.add(t)
        return sorted(out, key=lambda b: (-sum(self._cnt[b]), b))

    def _score(self, b: int, min_visits: int | None = None) -> tuple[float, float, int, bool]:
        """(best evidence, runner-up, best red, refuted by every red) of blue ``b``.

        ``min_visits`` given (the provisional pass): only red blocks whose most
        frequent colour is ``b``'s are compared, as the exact fold compares
        blocks of one colour (a tenth of the work with 10 colours).
        """
        tau = self._refute
        best, runner, best_r, refuted = -math.inf, -math.inf, -1, True
        cb = self._cnt[b]
        if sum(cb) < (self.min_visits if min_visits is None else min_visits):   # it waits (ALERGIA's t0)
            return best, runner, best_r, False
        colour = cb.index(max(cb)) if min_visits is not None else -1   # provisional: reds of its colour only
        for r in self._reds:
            if self._uf[r] != r:
                continue
            if colour >= 0 and self._cnt[r].index(max(self._cnt[r])) != colour:
                continue
            if self._llr(self._cnt[r], cb) < -tau:
                continue
            s = self._try(r, b)
            if s is None or s <= -tau:
                continue
            refuted = False
            if s > best:
                best, runner, best_r = s, best, r
            elif s > runner:
                runner = s
        return best, runner, best_r, refuted

    def _attainable(self) -> float:
        """``tau``, lowered to what an automaton of ``n_red`` blocks can show (as the exact fold's minimum).

        A block's agreement is worth at least ``g = -log max(pi)``; evidence
        counts blocks other than the red candidate, so with ``n_red`` red
        blocks about ``n_red - 1`` agreements (not fewer than 2) is all that a
        world with few distinguishable states can ever give.
        """
        g = -max(self._log_pi)
        need = math.ceil(self._tau / g)
        m = max(min(need, self.n_red - 1), min(need, 2))
        return min(self._tau, (m - 0.5) * g)

    def _blue_fringe(self, commit: bool = True) -> int:
        """Promote and merge blue blocks until nothing changes; the number of decisions.

        ``commit=False``: the provisional pass -- blocks seen fewer than
        ``min_visits`` times are decided too, and every change stays in the
        journal (promotions included) for :meth:`_end_provisional` to roll back.
        """
        min_visits = None if commit else 1
        decisions = 0
        stale: dict[int, int] = {}
        while True:
            tau = self._attainable() if commit else self.provisional_lead
            changed = False
            pending, waiting = [], []
            for b in self._blues():
                if self._uf[b] != b or self._red[b]:
                    continue
                best, runner, r, refuted = self._score(b, min_visits)
                waiting.append(b)
                if refuted:
                    self._red[b] = True
                    self._reds.append(b)
                    if commit:
                        self.stats["promotions"] += 1
                        self._log.append((1, b, -1))
                    else:
                        self._journal.append((RED, b))
                    changed = True
                    decisions += 1
                    continue
                lead = best - max(runner, 0.0)
                if best >= tau and lead >= tau:
                    pending.append((-lead, b, r))
            for _, b, r in sorted(pending):
                if self._uf[b] != b or self._uf[r] != r or self._red[b]:
                    continue
                mark = len(self._journal)
                s = self._fold(r, b)
                if s is None or s < tau:
                    self._rollback(mark)
                    continue
                if commit:
                    self._journal.clear()     # committed
                    self.stats["merges"] += 1
                    self._log.append((0, r, b))
                changed = True
                decisions += 1
            if not commit:
                # a blue block that waited through a round of changes, or when nothing qualifies: "a new
                # cell", so that its successors become blue blocks and are decided in turn
                waiting = [b for b in waiting if self._uf[b] == b and not self._red[b]]
                stale = {b: stale.get(b, 0) + 1 for b in waiting}
                promote = [b for b in waiting if stale[b] > self.patience or not changed]
                for b in promote:
                    self._promote(b)
                changed = changed or bool(promote)
                decisions += len(promote)
            if not changed:
                return decisions

    def _retest(self, keep: bool = False) -> int:
        """Re-test every committed decision on all the experience so far; undo the refuted ones.

        The committed blocks are rebuilt from level 1 (every recorded state
        placed in creation order with its visits, as :meth:`_record` places
        it) and the logged decisions are replayed in order, each fold tested
        again by the same test (a pair of blocks, both seen ``min_visits``
        times, or the running evidence refuting "one cell" at 1000:1).  Placing along merged blocks and
        folding closed under determinisation give the same blocks whichever
        comes first, so when nothing is refuted the rebuilt state equals the
        current one and is discarded; otherwise it replaces the current one:
        the refuted merges (and promotions whose block was merged by an
        earlier decision) are undone, their blocks are blue again and the
        blue fringe decides them with the evidence that refuted them.  Level
        1 is never modified.  Returns the number of decisions undone.
        ``keep``: keep the rebuilt state even when nothing was undone (tests).
        """
        n = len(self._parent)
        names = ("_uf", "_cnt", "_delta", "_dchild", "_red", "_reds")
        saved = [getattr(self, name) for name in names]
        self._uf, self._cnt, self._red = [-1] * n, [None] * n, [False] * n
        self._delta, self._dchild, self._reds = [None] * n, [None] * n, []
        self._make_root(0)
        self._cnt[0], self._red[0] = [0] * self._K, True
        for u in range(1, n):
            if saved[0][u] >= 0:
                self._place(u, self._nvis[u], self._find)
        kept, undone = [], 0
        self._t0 = self.min_visits
        for kind, x, y in self._log:
            if kind == 1:
                b = self._find(x)
                if self._red[b]:
                    undone += 1
                    continue
                self._red[b] = True
                self._reds.append(b)
                kept.append((1, b, -1))
                continue
            r, b = self._find(x), self._find(y)
            if r == b:
                kept.append((kind, r, b))
                continue
            s = self._fold(r, b)
            if s is None:
                self._rollback(0)
                undone += 1
            else:
                self._journal.clear()
                kept.append((kind, r, b))
        self._t0 = 0
        if not undone and not keep:
            for name, value in zip(names, saved):
                setattr(self, name, value)
            return 0
        self._log = kept
        return undone

    def _provisional_folds(self) -> None:
        """Decide the blue blocks seen fewer than ``min_visits`` times too, provisionally (journaled).

        C is written with these decisions; :meth:`_end_provisional` then rolls
        them back, so the next sleep decides again on its own data: a
        provisional fold that later evidence refutes is simply not made again,
        and one that stands is made for good once its blocks have the visits.
        """
        self._provisional = self._blue_fringe(commit=False) if self.provisional_lead is not None else 0

    def _write_next_cids(self) -> None:
        """The transitions of C as written (cluster, action) -> cluster, for placing new blocks until the next sleep.

        Key cluster -1 is the virtual start state.  O(blocks x actions).
        """
        cid, delta, nxt = self._cid, self._delta, {}
        for x, c in [(0, -1)] + list(cid.items()):
            if self._uf[x] != x:
                continue
            for a, t in enumerate(delta[x]):
                if t >= 0:
                    ct = cid.get(self._find(t))
                    if ct is not None:
                        nxt[c, a] = ct
        self._next_cid = nxt

    def _end_provisional(self) -> None:
        """Roll the provisional folds back; their blocks keep the cluster ids C was written with."""
        if not self._journal:
            return
        unions = [op[1] for op in self._journal if op[0] == UNION]
        cid = {y: self._cid[self._find(y)] for y in unions}
        self._rollback(0)
        self._cid.update(cid)

    # ------------------------------------------------------------ sleep
    _REPORTED = ("merges", "promotions", "undone")

    def _consolidate(self, memory, clusters) -> dict:
        """A sleep (:meth:`Engine.sleep`): estimate the noise, re-test the committed decisions (on
        schedule), fold the blue fringe, write C with the provisional folds, then roll those back."""
        self._set_noise()
        n = self.n_recorded
        if self.retest_growth is not None and self._log and n >= self.retest_growth * max(self._retested, 1):
            self._retested = n
            self.stats["retests"] += 1
            self.stats["undone"] += self._retest()
        self._blue_fringe()
        self.stats["sleeps"] += 1
        self._provisional_folds()
        self.write_clusters(clusters, memory.n_states)
        self._write_next_cids()
        self._end_provisional()
        return dict(provisional=self._provisional, noise=self.noise_, red=self.n_red, clusters=clusters.n_clusters)

    # ------------------------------------------------------------ clusters
    def write_clusters(self, clusters, n_states: int) -> None:
        """Set ``clusters`` to the blocks (:meth:`Engine.write_clusters`) and count their colours."""
        super().write_clusters(clusters, n_states)
        self._recount_cids()

    def emission(self, clusters, n_states: int) -> np.ndarray:
        """Noise-aware emission of each cluster: the posterior predictive of its blocks' colour counts.

        Under the noise model a cell whose visits show counts ``c`` has colour
        ``k`` with probability ``∝ pi_k exp(L c_k)``; it emits ``j`` with
        probability ``sum_k P(k | c) p_k(j)``.  Every colour keeps at least
        ``noise / K``, so a noisy observation never has probability 0
        (``level2_hmm``'s ``C^T E1`` gives 0 to every colour no member state
        happened to show, and a filter loses its belief there).  The noise
        rate and colour prior are estimated from the counts so far (also
        before the first sleep).  ``clusters`` must be as this merger last
        wrote or placed them; ``n_states`` is not used (kept for callers that
        pass the memory's size).

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1)
        >>> _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 8)]
        >>> fold = StatisticalFoldMerger(noise=0.1, min_visits=1); cl = Clusters(n_states=mem.n_states); _ = fold.sleep(mem, cl)
        >>> fold.emission(cl, mem.n_states).round(2).tolist()
        [[0.95, 0.05], [0.05, 0.95]]
        """
        if self._A is None:
            raise ValueError("no level-1 state recorded yet: the blocks are not known")
        k = clusters.n_clusters
        if len(self._cid_counts) < k or (k and len(self._cid) < k):
            raise ValueError("the clusters are not the ones this merger wrote")
        counts = self._cid_counts[:k].astype(np.float64)
        eps, log_pi, L = self._noise_model()
        logit = np.asarray(log_pi)[None, :] + L * counts
        post = np.exp(logit - logit.max(axis=1, keepdims=True))
        post /= post.sum(axis=1, keepdims=True)
        return post * (1 - eps) + eps / self._K

    def level2_hmm(self, memory, clusters):
        """:func:`~hmmmerge.clusters.level2_hmm` with the noise-aware :meth:`emission` in place of ``C^T E1``.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> from hmmmerge.clusters import Clusters
        >>> mem = EpisodicMemory(2, 1)
        >>> _ = [mem.observe(o, -1 if t == 0 else 0) for t, o in enumerate([0, 1] * 8)]
        >>> fold = StatisticalFoldMerger(noise=0.1, min_visits=1); cl = Clusters(n_states=mem.n_states); _ = fold.sleep(mem, cl)
        >>> fold.level2_hmm(mem, cl).log_likelihood([[0, 1, 1, 1]], [[-1, 0, 0, 0]]) < 0   # a noisy step is possible
        True
        """
        from ..clusters import level2_hmm
        from ..hmm import ActionHMM

        clusters.grow(memory.n_states)
        base = level2_hmm(memory, clusters)
        return ActionHMM(base.T, self.emission(clusters, memory.n_states), base.B)

    # ------------------------------------------------------------ files
    def state_dict(self) -> dict:
        """Arrays that fully describe the merger (``foldnoisy_*`` keys, for ``.npz`` files); empty before data.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = StatisticalFoldMerger(); fold.observe_tree(mem); sorted(fold.state_dict())[:3]
        ['foldnoisy_action', 'foldnoisy_cid', 'foldnoisy_colour']
        """
        if self._A is None:
            return {}
        n = len(self._uf)
        has_row = np.array([d is not None for d in self._delta], dtype=bool)
        delta = np.full((n, self._A + 1), -1, dtype=np.int64)
        cnt = np.zeros((n, self._K), dtype=np.int64)
        rows = np.flatnonzero(has_row)
        if len(rows):
            delta[rows] = [self._delta[i] for i in rows]
            cnt[rows] = [self._cnt[i] if self._cnt[i] is not None else [0] * self._K for i in rows]
        return {
            "foldnoisy_sizes": np.array([self._K, self._A, self._last], dtype=np.int64),
            "foldnoisy_parent": np.asarray(self._parent, dtype=np.int64),
            "foldnoisy_action": np.asarray(self._action, dtype=np.int64),
            "foldnoisy_colour": np.asarray(self._colour, dtype=np.int64),
            "foldnoisy_pos": np.asarray(self._pos, dtype=np.int64),
            "foldnoisy_shallow": np.asarray(self._shallow, dtype=np.int64),
            "foldnoisy_uf": np.asarray(self._uf, dtype=np.int64),
            "foldnoisy_red": np.asarray(self._red, dtype=bool),
            "foldnoisy_has_row": has_row, "foldnoisy_delta": delta, "foldnoisy_counts": cnt,
            "foldnoisy_reds": np.asarray(self._reds, dtype=np.int64),
            "foldnoisy_cid": np.array(sorted(self._cid.items()), dtype=np.int64).reshape(-1, 2),
            "foldnoisy_next_cid": np.array(sorted((c, a, t) for (c, a), t in self._next_cid.items()),
                                           dtype=np.int64).reshape(-1, 3),
            "foldnoisy_stats": np.array([self.stats[k] for k in _STATS], dtype=np.int64),
            "foldnoisy_visits": np.asarray(self._nvis, dtype=np.int64),
            "foldnoisy_log": np.asarray(self._log, dtype=np.int64).reshape(-1, 3),
            "foldnoisy_retested": np.array([self._retested], dtype=np.int64),
        }

    def load_state_dict(self, d, source: str = "<dict>") -> None:
        """Restore :meth:`state_dict` arrays (no ``foldnoisy_*`` keys: a fresh merger); errors name ``source``.

        >>> from hmmmerge.episodic import EpisodicMemory
        >>> mem = EpisodicMemory(2, 1); _ = [mem.observe(o, a) for o, a in [(0, -1), (1, 0)]]
        >>> fold = StatisticalFoldMerger(); fold.observe_tree(mem)
        >>> back = StatisticalFoldMerger(); back.load_state_dict(fold.state_dict()); back.block_of(2).tolist()
        [1, 2]
        """
        self._validate_params()
        if "foldnoisy_sizes" not in d:
            checked_state(lambda d: no_state(d, "foldnoisy_sizes"), d, source)
            self._A = None
            return
        a = checked_state(noisy_state, d, source)
        K, A, n, has = a["K"], a["A"], a["n"], a["has_row"].tolist()
        self._init(K, A)
        self._last = a["last"]
        for name in ("parent", "action", "colour", "pos", "uf", "shallow", "red", "reds"):
            setattr(self, f"_{name}", a[name].tolist())
        self._delta = [row if ok else None for row, ok in zip(a["delta"].tolist(), has)]
        self._dchild = [[-1] * (A + 1) if ok else None for ok in has]   # not used by this test
        self._cnt = [row if ok else None for row, ok in zip(a["counts"].tolist(), has)]
        self._cid = dict(a["cid"].tolist())
        self._recount_cids()
        self._next_cid = {(c, act): t for c, act, t in a["next_cid"].tolist()}
        self.stats = dict.fromkeys(_STATS, 0)
        self.stats.update(zip(_STATS, a["stats"].tolist()))
        self._nvis = a["visits"].tolist()
        self._log = [tuple(row) for row in a["log"].tolist()]
        self._retested = a["retested"]
        roots = np.flatnonzero(a["uf"] == np.arange(n))
        self._total = a["counts"][roots].sum(axis=0).tolist()
