"""The pure-Python fold merger as it first landed (main at 0b8663b, docstrings dropped), kept as the
reference for ``hmmmerge.fold``: the numba kernels must reproduce it decision for decision
(``tests/test_fold_kernels.py``; ``benchmarks/bench_fold.py --sections speed`` times both).  Not part of
the package.  Change it only together with the algorithm, in the same way (it is the readable
specification).  Changes since 0b8663b: the provisional pass (``provisional_lead``; ``_blue_fringe``
with ``provisional=True``, ``_provisional_pass``, ``_drop_provisional``) and the colour fold
that opens the provisional pass (``colour_evidence``, ``colour_past``, ``_fold_colours``)."""
from __future__ import annotations
from hmmmerge.fold import default_min_evidence
import numpy as np
from hmmmerge._validation import check_int
__all__ = ['FoldMerger', 'default_min_evidence']
_PLACE, _ROOT, _UNION, _DELTA, _RED, _CONFLICT = range(6)
_OP_LEN = (2, 2, 2, 5, 2, 1)
_STATS = ('merges', 'promotions', 'undos', 'conflicts')
_ARRAYS = ('parent', 'action', 'colour', 'uf', 'uf_time', 'just', 'red', 'has_row', 'delta', 'dchild', 'reds', 'journal', 'conflicts', 'decisions', 'stats', 'cid', 'pending')

class FoldMerger:

    def __init__(self, min_evidence: int | None=None, max_undo_rounds: int=50, provisional_lead: int | None=1,
                 colour_evidence: int | None=20, colour_past: int=1):
        self.min_evidence = check_int(min_evidence, 'min_evidence', low=0, allow_none=True)
        self.max_undo_rounds = check_int(max_undo_rounds, 'max_undo_rounds', low=1)
        self.provisional_lead = check_int(provisional_lead, 'provisional_lead', low=1, allow_none=True)
        self.colour_evidence = check_int(colour_evidence, 'colour_evidence', low=0, allow_none=True)
        self.colour_past = check_int(colour_past, 'colour_past', low=0)
        self._A = None

    def _init(self, n_obs: int, n_actions: int) -> None:
        self._A = int(n_actions)
        self._n_obs = int(n_obs)
        self._k = default_min_evidence(n_obs) if self.min_evidence is None else self.min_evidence
        self._parent = [-1]
        self._action = [-1]
        self._colour = [-1]
        self._uf = [0]
        self._uf_time = [-1]
        self._just = [-1]
        self._delta = [[-1] * (n_actions + 1)]
        self._dchild = [[-1] * (n_actions + 1)]
        self._red = [True]
        self._reds_by_colour: dict[int, list[int]] = {}
        self._journal: list[tuple] = []
        self._conflicts: list[tuple[int, int]] = []
        self._settled = 0
        self._decisions: list[int] = []
        self.stats = {'merges': 0, 'promotions': 0, 'undos': 0, 'conflicts': 0}
        self._cid: dict[int, int] = {}
        self._last = -1
        self._pending: list[int] = []
        self._prov = [-1, 0, 0]

    def _check(self, memory) -> None:
        if self._A is None:
            self._init(memory.n_obs, memory.n_actions)
        elif (memory.n_obs, memory.n_actions) != (self._n_obs, self._A):
            raise ValueError(f'the memory has {memory.n_obs} observations / {memory.n_actions} actions; this merger was fed {self._n_obs} / {self._A}')

    @property
    def n_recorded(self) -> int:
        return 0 if self._A is None else len(self._parent) - 1

    @property
    def n_red(self) -> int:
        return 0 if self._A is None else sum((len(v) for v in self._reds_by_colour.values()))

    @property
    def evidence_minimum(self) -> int | None:
        return None if self._A is None else self._k

    def _find(self, x: int) -> int:
        uf = self._uf
        while uf[x] != x:
            x = uf[x]
        return x

    def _log(self, *op) -> None:
        self._journal.append(op)

    def _rollback(self, t: int, unplaced: list | None=None) -> None:
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

    def _grow(self, n: int) -> None:
        grow = n + 1 - len(self._parent)
        if grow > 0:
            for lst, v in ((self._parent, -1), (self._action, -1), (self._colour, -1), (self._uf, -1), (self._uf_time, -1), (self._just, -1), (self._red, False)):
                lst.extend([v] * grow)
            self._delta.extend([None] * grow)
            self._dchild.extend([None] * grow)

    def observe(self, memory, states, actions=None) -> None:
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
                if self._parent[node] < 0 and node > 0 and (h >= 0):
                    if t == 0:
                        pnode, a = (0, A)
                    else:
                        a = acts[t] if acts is not None else _link_action(nxt, prev, h)
                        pnode = prev + 1
                    self._parent[node] = pnode
                    self._action[node] = a
                    self._colour[node] = int(emission[h])
                    self._place(node)
                prev = h

    def observe_tree(self, memory) -> None:
        self._check(memory)
        n = memory.n_states
        start = self.n_recorded
        parent = np.full(n, -2, dtype=np.int64)
        action = np.full(n, -1, dtype=np.int64)
        nxt = memory.next_state
        for a in range(self._A):
            src = np.flatnonzero(nxt[a] >= start)
            if (parent[nxt[a, src]] != -2).any():
                raise ValueError('a level-1 state has two incoming links: not a prefix tree')
            parent[nxt[a, src]] = src
            action[nxt[a, src]] = a
        self._grow(n)
        for h in range(start, n):
            if parent[h] == -2:
                if h != memory.start_state:
                    raise ValueError(f'level-1 state {h} has no incoming link (a replaced link?): use observe() with the step stream')
                pnode, a = (0, self._A)
            else:
                pnode, a = (int(parent[h]) + 1, int(action[h]))
            node = h + 1
            self._parent[node], self._action[node] = (pnode, a)
            self._colour[node] = int(memory.emission[h])
            self._place(node)

    def _place(self, node: int) -> None:
        pnode = self._parent[node]
        if self._uf[pnode] < 0:
            raise ValueError('level-1 states must be placed after their parents')
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
            self._make_root(node, t)
            self._conflicts.append((node, self._dchild[p][a]))
            self._log(_CONFLICT)
            self.stats['conflicts'] += 1
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

    def _fold(self, r: int, b: int) -> int:
        compared: set[int] = set()
        stack = [(r, b)]
        A1 = self._A + 1
        colour, delta, dchild, uf, red = (self._colour, self._delta, self._dchild, self._uf, self._red)
        uf_time, just, journal = (self._uf_time, self._just, self._journal)
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
            if red[y] and (not red[x]):
                x, y = (y, x)
            compared.add(x)
            uf[y] = x
            uf_time[y] = len(journal)
            just[y] = -1
            journal.append((_UNION, y))
            dx, dy, cx = (delta[x], delta[y], dchild[x])
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
        out, seen = ([], set())
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

    def _evaluate(self, b: int, clashes: set) -> tuple[int, int, int, int]:
        consistent, ev_b, r_b, runner_up = (0, -1, -1, 0)
        for r in self._reds_by_colour.get(self._colour[b], ()):
            if (b, r) in clashes:
                continue
            mark = len(self._journal)
            ev = self._fold(r, b)
            self._rollback(mark)
            if ev < 0:
                clashes.add((b, r))
                continue
            consistent += 1
            if ev > ev_b:
                runner_up = max(runner_up, ev_b)
                ev_b, r_b = (ev, r)
            else:
                runner_up = max(runner_up, ev)
        return (consistent, ev_b, r_b, runner_up)

    def _blue_fringe(self, lead: int | None=None, provisional: bool=False) -> None:
        clashes: set[tuple[int, int]] = set()
        while True:
            k = self._attainable_minimum(self._k if lead is None else lead)
            blues = self._blues()
            if not blues:
                return
            best, best_pair, promoted = (-1, None, False)
            eligible_pairs, waiting = ([], [])
            for b in blues:
                consistent, ev_b, r_b, runner_up = self._evaluate(b, clashes)
                if consistent and (ev_b - runner_up >= k or (provisional and consistent == 1)):
                    eligible_pairs.append((ev_b - runner_up, r_b, b))
                    if ev_b - runner_up > best:
                        best, best_pair = (ev_b - runner_up, (r_b, b))
                elif consistent:
                    waiting.append(b)
                else:
                    self._set_red(b)
                    self.stats['promotions'] += 1
                    promoted = True
            if promoted:
                continue
            if provisional:
                if eligible_pairs:
                    for _, r, b in sorted(eligible_pairs, key=lambda e: -e[0]):
                        if self._find(b) == b:
                            self._merge(self._find(r), b)
                elif waiting:
                    for b in waiting:
                        self._set_red(b)
                        self.stats['promotions'] += 1
                else:
                    return
                continue
            if best < 0:
                return
            if not self._merge(*best_pair):
                clashes.add(best_pair[::-1])

    def _merge(self, r: int, b: int) -> bool:
        mark = len(self._journal)
        self._decisions.append(mark)
        if self._fold(r, b) < 0:
            self._rollback(mark)
            return False
        self.stats['merges'] += 1
        return True

    def _attainable_minimum(self, k: int) -> int:
        return max(min(k, self.n_red - 1), min(k, 2))

    def _provisional_pass(self) -> None:
        self._prov = [-1, 0, 0]
        if self.provisional_lead is None:
            return
        mark, before = (len(self._journal), dict(self.stats))
        if self.colour_evidence is not None:
            self._fold_colours()
        self._blue_fringe(self.provisional_lead, provisional=True)
        done = [self.stats[k] - before[k] for k in ('merges', 'promotions')]
        self.stats.update(merges=before['merges'], promotions=before['promotions'])
        if any(done):
            self._prov = [mark] + done

    def _fold_colours(self) -> None:
        # for depth 0 .. colour_past: the blocks reached from the start (the roots of contradicting states
        # are not), grouped by colour and the (action, parent colour) of depth steps back from the block's
        # first state ((-1, -1) before the start); a group (in key order, blocks by node) folds into its
        # first red block (else its first block) when no fold clashes and the summed evidence is at
        # least colour_evidence: one decision per group
        for depth in range(self.colour_past + 1):
            reached, frontier = {0}, [0]
            while frontier:
                x = frontier.pop()
                for t in self._delta[x]:
                    if t >= 0 and self._find(t) not in reached:
                        reached.add(self._find(t))
                        frontier.append(self._find(t))
            groups: dict[tuple, list[int]] = {}
            for x in sorted(reached - {0}):
                key, y = [self._colour[x]], x
                for _ in range(depth):
                    p = self._parent[y] if y > 0 else -1
                    key += [self._action[y] if y > 0 else -1, self._colour[p] if p >= 0 else -1]
                    y = p
                groups.setdefault(tuple(key), []).append(x)
            for key in sorted(groups):
                group = groups[key]
                if len(group) < 2 or sum(self._red[x] for x in group) > 1:
                    continue    # two red blocks of one colour clash: the later was promoted for clashing
                mark = len(self._journal)
                self._decisions.append(mark)
                target = next((x for x in group if self._red[x]), group[0])
                total = 0
                for y in group:
                    if self._find(target) == self._find(y):
                        continue
                    ev = self._fold(self._find(target), self._find(y))
                    if ev < 0:
                        total = -1
                        break
                    total += ev
                if total < self.colour_evidence:
                    self._rollback(mark)
                else:
                    self.stats['merges'] += 1

    def _drop_provisional(self) -> None:
        mark = self._prov[0]
        self._prov = [-1, 0, 0]
        if mark >= 0:
            self._rollback(mark, self._pending)

    def _decision_of(self, t: int) -> int:
        import bisect
        i = bisect.bisect_right(self._decisions, t) - 1
        return self._decisions[i]

    def _responsible(self, u: int, w: int) -> int:
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
                if just < 0:
                    latest = max(latest, self._decision_of(self._uf_time[z]))
                else:
                    pending.append((self._parent[z], self._parent[just]))
                    pending.append((just, self._uf[z]))
        return latest

    @property
    def decisions(self) -> list[int]:
        return list(self._decisions) if self._A is not None else []

    def contradicted_merge(self) -> int:
        t = -1
        if self._A is not None:
            for node, child in self._conflicts[self._settled:]:
                t = max(t, self._responsible(self._parent[node], self._parent[child]))
        return t

    def undo(self, decision: int) -> list[int]:
        if decision not in self.decisions:
            raise ValueError(f'{decision!r} is not a merge decision in force')
        unplaced: list[int] = []
        self._rollback(decision, unplaced)
        self.stats['undos'] += 1
        self._pending.extend(unplaced)
        return sorted((x - 1 for x in unplaced))

    def _place_pending(self) -> None:
        pending = sorted(set((x for x in self._pending if self._uf[x] < 0)))
        self._pending = []
        for node in pending:
            self._place(node)

    def _resolve_conflicts(self) -> int:
        rounds = 0
        while len(self._conflicts) > self._settled and rounds < self.max_undo_rounds:
            rounds += 1
            t = self.contradicted_merge()
            if t < 0:
                self._settled = len(self._conflicts)
                break
            self.undo(t)
            self._place_pending()
            self._blue_fringe()
        return rounds

    def sleep(self, memory, clusters, rng=None) -> list[dict]:
        self._check(memory)
        if self.n_recorded < memory.n_states:
            self.observe_tree(memory)
        before = dict(self.stats)
        self._drop_provisional()
        self._place_pending()
        rounds = self._resolve_conflicts()
        self._blue_fringe()
        self._provisional_pass()
        self.write_clusters(clusters, memory.n_states)
        report = {k: self.stats[k] - before[k] for k in ('merges', 'promotions', 'undos')}
        report.update(undo_rounds=rounds, red=self.n_red, clusters=clusters.n_clusters,
                      provisional_merges=self._prov[1], provisional_promotions=self._prov[2])
        return [report]

    def place(self, memory, clusters, states, rng=None) -> bool:
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
                if h == start:
                    pnode, a = (0, A)
                else:
                    pnode, a = (prev + 1, _link_action(nxt, prev, h))
                self._parent[node], self._action[node] = (pnode, a)
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

    def state_dict(self) -> dict:
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
        return {'fold_sizes': np.array([self._n_obs, self._A, self._k, self._last, self._settled], dtype=np.int64), 'fold_parent': np.asarray(self._parent, dtype=np.int64), 'fold_action': np.asarray(self._action, dtype=np.int64), 'fold_colour': np.asarray(self._colour, dtype=np.int64), 'fold_uf': np.asarray(self._uf, dtype=np.int64), 'fold_uf_time': np.asarray(self._uf_time, dtype=np.int64), 'fold_just': np.asarray(self._just, dtype=np.int64), 'fold_red': np.asarray(self._red, dtype=bool), 'fold_has_row': has_row, 'fold_delta': delta, 'fold_dchild': dchild, 'fold_reds': np.array(reds, dtype=np.int64).reshape(-1, 2), 'fold_journal': journal, 'fold_conflicts': np.array(self._conflicts, dtype=np.int64).reshape(-1, 2), 'fold_decisions': np.asarray(self._decisions, dtype=np.int64), 'fold_stats': np.array([self.stats[k] for k in _STATS], dtype=np.int64), 'fold_cid': np.array(cid, dtype=np.int64).reshape(-1, 2), 'fold_pending': np.asarray(self._pending, dtype=np.int64), 'fold_provisional': np.asarray(self._prov, dtype=np.int64)}

    def load_state_dict(self, d, source: str='<dict>') -> None:
        if 'fold_sizes' not in d:
            self._A = None
            return
        try:
            n_obs, A, k, last, settled = (int(x) for x in d['fold_sizes'])
            arrays = {name: np.asarray(d[f'fold_{name}']) for name in _ARRAYS}
        except (KeyError, ValueError) as e:
            raise ValueError(f'{source}: fold merger arrays are missing or malformed ({e})') from None
        n = len(arrays['parent'])
        if any((len(arrays[name]) != n for name in ('action', 'colour', 'uf', 'uf_time', 'just', 'red', 'has_row', 'delta', 'dchild'))) or arrays['delta'].shape[1:] != (A + 1,):
            raise ValueError(f'{source}: fold merger arrays have inconsistent shapes')
        self._init(n_obs, A)
        self._k, self._last, self._settled = (k, last, settled)
        for name in ('parent', 'action', 'colour', 'uf', 'uf_time', 'just'):
            setattr(self, f'_{name}', arrays[name].astype(np.int64).tolist())
        self._red = arrays['red'].astype(bool).tolist()
        has = arrays['has_row'].astype(bool)
        self._delta = [row if ok else None for row, ok in zip(arrays['delta'].tolist(), has)]
        self._dchild = [row if ok else None for row, ok in zip(arrays['dchild'].tolist(), has)]
        self._reds_by_colour = {}
        for c, x in arrays['reds'].tolist():
            self._reds_by_colour.setdefault(c, []).append(x)
        self._journal = [tuple(row[:_OP_LEN[row[0]]]) for row in arrays['journal'].tolist()]
        self._conflicts = [tuple(row) for row in arrays['conflicts'].tolist()]
        self._decisions = arrays['decisions'].tolist()
        self.stats = dict(zip(_STATS, arrays['stats'].tolist()))
        self._cid = {r: c for r, c in arrays['cid'].tolist()}
        self._pending = arrays['pending'].tolist()
        self._prov = np.asarray(d['fold_provisional'] if 'fold_provisional' in d else [-1, 0, 0]).tolist()

    def block_of(self, n_states: int) -> np.ndarray:
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
        raise ValueError(f'no level-1 link {prev} -> {h}: pass the actions of the steps')
    return column.index(h)
