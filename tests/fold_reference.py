"""The exact fold in pure Python: the engine's lists (:class:`hmmmerge.fold.engine.Engine`) with the exact
colour-clash test and the exact fold's sleep (:class:`hmmmerge.fold.exact.ExactFold`), and placing, blue fringe
and colour fold written here without the kernels.  The numba kernels of :class:`hmmmerge.fold.FoldMerger` must
reproduce it decision for decision (``tests/test_fold_kernels.py``; ``benchmarks/bench_fold.py --sections
speed`` times both).  It writes agent files (:meth:`FoldMerger.state_dict`) for the kernels to resume, and
reads none.  Not part of the package; change it only together with the algorithm."""
from __future__ import annotations

import numpy as np

from hmmmerge.fold import default_min_evidence
from hmmmerge.fold.engine import CONFLICT, DELTA, PLACE, ROOT, Engine, link_action
from hmmmerge.fold.exact import ExactFold

__all__ = ['FoldMerger', 'default_min_evidence']
_STATS = ('merges', 'promotions', 'undos', 'conflicts')


class FoldMerger(ExactFold):
    _NODES = Engine._NODES + (('_uf_time', -1), ('_just', -1))

    def _init_params(self, n_obs, n_actions):
        super()._init_params(n_obs, n_actions)
        self._conflicts, self._settled, self._decisions = [], 0, []
        self._counts = {'merges': 0, 'promotions': 0, 'conflicts': 0}
        self._cid = {}

    @property
    def stats(self):
        return {**self._counts, 'undos': self._undos} if self._A is not None else dict.fromkeys(_STATS, 0)

    @property
    def n_red(self):
        return 0 if self._A is None else len(self._reds)

    # the journal, as ExactFold needs it
    def _joined(self, x, y):
        self._uf_time[y] = len(self._journal)
        self._just[y] = -1

    def _undo(self, op):
        assert op[0] == CONFLICT
        self._conflicts.pop()
        self._settled = min(self._settled, len(self._conflicts))

    def _rollback(self, t, unplaced=None):
        super()._rollback(t, unplaced)
        while self._decisions and self._decisions[-1] >= t:
            self._decisions.pop()

    def _links(self):
        return self._uf, self._just, self._parent, self._uf_time

    def _decisions_array(self):
        return np.asarray(self._decisions, dtype=np.int64)

    def _open_conflicts(self):
        return self._conflicts[self._settled:]

    def _settle(self):
        self._settled = len(self._conflicts)

    def _unwind(self, t):
        unplaced = []
        self._rollback(t, unplaced)
        return unplaced

    def _jlen(self):
        return len(self._journal)

    def _keep_counts(self, merges, promotions):
        self._counts.update(merges=merges, promotions=promotions)

    # experience
    def _place_all(self, nodes):
        for node in nodes:
            self._place(node)

    def _place(self, node):
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
                self._uf[node], self._uf_time[node], self._just[node] = q, t, self._dchild[p][a]
                self._journal.append((PLACE, node))
                return
            self._root(node, t)
            self._conflicts.append((node, self._dchild[p][a]))
            self._journal.append((CONFLICT,))
            self._counts['conflicts'] += 1
            return
        self._root(node, t)
        self._journal.append((DELTA, p, a, self._delta[p][a], self._dchild[p][a]))
        self._delta[p][a] = self._dchild[p][a] = node

    def _root(self, node, t):
        self._make_root(node)
        self._uf_time[node], self._just[node] = t, -1
        self._journal.append((ROOT, node))

    def _record(self, node, pnode, a, colour):
        self._parent[node], self._action[node], self._colour[node] = pnode, a, colour
        self._place(node)

    def place(self, memory, clusters, states, rng=None):
        self._check(memory)
        self._grow(memory.n_states)
        clusters.grow(memory.n_states)
        added, prev = False, self._last
        for h in np.asarray(states, dtype=np.int64).tolist():
            node = h + 1
            if self._parent[node] < 0:
                if h == memory.start_state:
                    self._record(node, 0, self._A, int(memory.emission[h]))
                else:
                    self._record(node, prev + 1, link_action(memory.next_state, prev, h), int(memory.emission[h]))
                root = self._find(node)
                if root == node:
                    clusters.assignment[h] = -1
                    self._cid[node] = int(clusters.add_clusters([[h]])[0])
                    added = True
                else:
                    clusters.assignment[h] = self._cid[root]
            prev = h
        self._last = prev
        return added

    # folding
    def _blues(self):
        out = set()
        for r in self._reds + [0]:
            for t in self._delta[r]:
                if t >= 0 and not self._red[self._find(t)]:
                    out.add(self._find(t))
        return sorted(out)

    def _evaluate(self, b, clashes):
        consistent, ev_b, r_b, runner_up = 0, -1, -1, 0
        for r in [r for r in self._reds if self._colour[r] == self._colour[b]]:
            if (b, r) in clashes:
                continue
            ev = self._try(r, b)
            if ev is None:
                clashes.add((b, r))
                continue
            consistent += 1
            if ev > ev_b:
                runner_up = max(runner_up, ev_b)
                ev_b, r_b = ev, r
            else:
                runner_up = max(runner_up, ev)
        return consistent, ev_b, r_b, runner_up

    def _blue_fringe(self, k_single=None, provisional=False, k=None):
        k_single = self._k_single if k_single is None else k_single
        clashes = set()
        while True:
            kk = self._k if k is None else k
            kk = max(min(kk, self.n_red - 1), min(kk, 2))
            blues = self._blues()
            if not blues:
                return
            best, best_pair, promoted = -1, None, False
            eligible, waiting = [], []
            for b in blues:
                consistent, ev_b, r_b, runner_up = self._evaluate(b, clashes)
                lead = ev_b - runner_up
                if consistent and (lead >= kk or (consistent == 1 and 0 <= k_single <= ev_b)):
                    eligible.append((lead, r_b, b))
                    if lead > best:
                        best, best_pair = lead, (r_b, b)
                elif consistent:
                    waiting.append(b)
                else:
                    self._promote(b)
                    self._counts['promotions'] += 1
                    promoted = True
            if promoted:
                continue
            if not provisional:
                if best < 0:
                    return
                if not self._merge(*best_pair):
                    clashes.add(best_pair[::-1])
            elif eligible:
                for _, r, b in sorted(eligible, key=lambda e: -e[0]):
                    if self._find(b) == b:
                        self._merge(self._find(r), b)
            elif waiting:
                for b in waiting:
                    self._promote(b)
                    self._counts['promotions'] += 1
            else:
                return

    def _merge(self, r, b):
        mark = len(self._journal)
        self._decisions.append(mark)
        if self._fold(r, b) is None:
            self._rollback(mark)
            return False
        self._counts['merges'] += 1
        return True

    def _fold_colours_at(self, depth):
        # the blocks reached from the start (the roots of contradicting states are not), grouped by colour and
        # the (action, parent colour) of depth steps back from the block's first state ((-1, -1) before the
        # start); a group (in key order, blocks by node) folds into its first red block (else its first block)
        # when no fold clashes and the summed evidence is at least colour_evidence: one decision per group
        reached, frontier = {0}, [0]
        while frontier:
            for t in self._delta[frontier.pop()]:
                if t >= 0 and self._find(t) not in reached:
                    reached.add(self._find(t))
                    frontier.append(self._find(t))
        groups = {}
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
                if self._find(target) != self._find(y):
                    ev = self._fold(self._find(target), self._find(y))
                    if ev is None:
                        total = -1
                        break
                    total += ev
            if total < self.colour_evidence:
                self._rollback(mark)
            else:
                self._counts['merges'] += 1

    # files and clusters
    def state_dict(self):
        if self._A is None:
            return {}
        has_row = np.array([d is not None for d in self._delta], dtype=bool)
        delta = np.full((len(self._delta), self._A + 1), -1, dtype=np.int64)
        dchild = delta.copy()
        delta[has_row] = [d for d in self._delta if d is not None]
        dchild[has_row] = [d for d in self._dchild if d is not None]
        journal = np.full((len(self._journal), 5), -1, dtype=np.int64)
        for i, op in enumerate(self._journal):
            journal[i, :len(op)] = op
        out = {f'fold_{name}': np.asarray(getattr(self, f'_{name}'), dtype=bool if name == 'red' else np.int64)
               for name in ('parent', 'action', 'colour', 'uf', 'uf_time', 'just', 'red', 'decisions', 'pending')}
        stats = self.stats
        out.update(fold_sizes=np.array([self._n_obs, self._A, self._k, self._last, self._settled]),
                   fold_has_row=has_row, fold_delta=delta, fold_dchild=dchild, fold_journal=journal,
                   fold_reds=np.array([(self._colour[x], x) for x in self._reds], dtype=np.int64).reshape(-1, 2),
                   fold_conflicts=np.array(self._conflicts, dtype=np.int64).reshape(-1, 2),
                   fold_stats=np.array([stats[k] for k in _STATS], dtype=np.int64),
                   fold_cid=np.array(sorted(self._cid.items()), dtype=np.int64).reshape(-1, 2),
                   fold_provisional=np.asarray(self._prov, dtype=np.int64))
        return out
