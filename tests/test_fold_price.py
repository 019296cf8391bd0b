"""The fold's priced work counter (``PRICE``, ``PRICE_LIMIT`` of :mod:`hmmmerge.fold._kernels`): what it counts
against a pure-Python fold on the kernels' own arrays, that a price limit stops a sleep (where the work limit
alone would not), and that the counter changes nothing the fold decides."""

import numpy as np
import pytest

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.fold import _kernels as K
from hmmmerge.fold.exact import WorkLimitReached


def _fold_oracle(st, r, b):
    """Fold ``b`` into ``r`` on copies of the state's arrays: (pairs popped, evidence or -1 on a clash)."""
    uf, delta = st.uf.copy(), st.delta.copy()

    def find(x):
        while uf[x] != x:
            x = uf[x]
        return x

    stack, pops, compared = [(r, b)], 0, set()
    while stack:
        x, y = stack.pop()
        pops += 1
        x, y = find(x), find(y)
        if x == y:
            continue
        if st.colour[x] != st.colour[y]:
            return pops, -1
        if st.red[y] and not st.red[x]:
            x, y = y, x
        compared.add(x)
        uf[y] = x
        rx, ry = st.row[x], st.row[y]
        for a in range(delta.shape[1]):
            if delta[ry, a] < 0:
                continue
            if delta[rx, a] < 0:
                delta[rx, a] = delta[ry, a]
            else:
                stack.append((delta[rx, a], delta[ry, a]))
    return pops, len(compared) - 1


def _mid_life(episodes=20, more=20, seed=0):
    """A fold that slept on ``episodes`` episodes and then placed ``more``: red blocks and new blue ones."""
    walk = random_walk(gridworld(), episodes + more, seed=seed)
    agent = TwoLevelMemory(10, 4, merge="fold", sleep_every=10**6, seed=0).fit(walk[:episodes])
    agent.sleep()
    return agent.partial_fit(walk[episodes:])


@pytest.mark.parametrize("seed", [0, 1])
def test_a_tentative_fold_is_priced_16_plus_2_per_pair_popped(seed):
    st = _mid_life(seed=seed).merger_._st
    out = np.empty(len(st.parent) * st.delta.shape[1], dtype=np.int64)
    blues = out[:K.blues(st, out)].copy()
    stack = np.empty((2 + st.delta.shape[1] * (st.sc[K.NROOTS] + 1), 2), dtype=np.int64)
    reds = st.reds[:st.sc[K.NRED]].copy()
    assert len(blues) >= 2 and len(reds) >= 5
    tried = 0
    for b in blues:
        want = [_fold_oracle(st, r, b) for r in reds if st.colour[r] == st.colour[b]]
        price, work, jlen = st.sc[K.PRICE], st.sc[K.WORK], st.sc[K.JLEN]
        consistent, ev_b, _, _ = K._evaluate(st, b, {np.int64(-1)}, stack)
        assert st.sc[K.PRICE] - price == sum(16 + 2 * pops for pops, _ in want)
        assert consistent == sum(ev >= 0 for _, ev in want) and ev_b == max([-1] + [ev for _, ev in want])
        assert st.sc[K.JLEN] == jlen and st.sc[K.WORK] - work >= len(reds)   # rolled back; WORK as before
        tried += len(want)
    assert tried >= 4


def _sleep_with(limits):
    """A fold fitted on 30 episodes whose first sleep runs under ``limits`` ({slot: what the sleep may spend}:
    WORK for WORK_LIMIT, WORK + PRICE for PRICE_LIMIT): its agent and (WORK, PRICE) spent, or None when the
    sleep stopped at a limit."""
    agent = TwoLevelMemory(10, 4, merge="fold", sleep_every=10**6, seed=0).fit(random_walk(gridworld(), 30, seed=0))
    sc = agent.merger_._st.sc
    w, p = int(sc[K.WORK]), int(sc[K.PRICE])
    for slot, value in limits.items():
        sc[slot] = (w if slot == K.WORK_LIMIT else w + p) + value
    try:
        agent.sleep()
    except WorkLimitReached:
        return agent, None
    sc = agent.merger_._st.sc
    return agent, (int(sc[K.WORK]) - w, int(sc[K.PRICE]) - p)


def test_a_price_limit_stops_a_sleep_that_its_work_alone_fits_and_without_one_nothing_changes():
    free, (work, price) = _sleep_with({})
    assert work > 0 and price > 0
    # the limit is on WORK + PRICE: a sleep whose WORK alone fits under it stops all the same
    assert _sleep_with({K.WORK_LIMIT: work + 1})[1] == (work, price)
    assert _sleep_with({K.PRICE_LIMIT: work + 1})[1] is None
    assert _sleep_with({K.PRICE_LIMIT: 1})[1] is None
    within, spent = _sleep_with({K.PRICE_LIMIT: work + price + 1})   # just over: the same sleep
    assert spent == (work, price)
    n = free.memory_.n_states
    assert np.array_equal(free.clusters_.assignment[:n], within.clusters_.assignment[:n])
    assert free.merger_.stats == within.merger_.stats
