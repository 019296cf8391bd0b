"""Clones per view by visits (``ReplayMerger(alloc="visits")``): the rule against a brute force, its bounds,
the layout a merger takes at its first sleep, and checkpoints of it."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.evaluate import evaluate_model
from hmmmerge.replay import (ALLOC_EVEN_VIEWS, ALLOC_MANY_VIEWS, ALLOC_PRIOR, ALLOC_STEPS, ALLOC_WAIT_VIEWS, BUDGET_FLOOR, CLONE_BUDGET, CLONE_CAP, CLONE_FLOOR, DEEP_BUDGET, DEEP_MAX_CLONES, FEW_VIEW_CLONES,
                              FEW_VIEWS, ITER_BUDGET, ReplayMerger, allocate_clones)


def brute_force(visits, total, floor, cap):
    """The rule as stated, one clone at a time: every view ``floor``; then, while clones remain, the seen view
    below ``cap`` with the largest ``visits / (clones + 1)`` (the lowest index on a tie) takes one."""
    n = [floor] * len(visits)
    for _ in range(total - floor * len(visits)):
        best, q_best = -1, -1.0
        for v, x in enumerate(visits):
            if x > 0 and n[v] < cap and x / (n[v] + 1) > q_best:
                best, q_best = v, x / (n[v] + 1)
        if best < 0:
            break
        n[best] += 1
    return n


def test_hand_made_counts_match_the_brute_force():
    visits = [145, 40, 22, 22, 6, 5, 1, 1, 0, 0, 3, 60]
    for total, floor, cap in [(60, 1, 30), (40, 1, 30), (12, 1, 30), (200, 1, 30), (100, 2, 10), (30, 2, 3)]:
        got = allocate_clones(visits, total, floor, cap)
        assert got.tolist() == brute_force(visits, total, floor, cap), (total, floor, cap)
    # by hand: 145 and 60 share the first clones above the floor (quotients 72.5, 48.3, 36.25, 30, 29 ...)
    assert allocate_clones([145, 60, 0], 8, 1, 30).tolist() == [5, 2, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=12), st.integers(1, 4), st.integers(0, 8),
       st.integers(0, 150))
def test_the_rule_is_the_brute_force_and_keeps_its_bounds(visits, floor, extra_cap, extra_total):
    cap = floor + extra_cap
    total = floor * len(visits) + extra_total
    got = allocate_clones(np.array(visits), total, floor, cap)
    assert got.tolist() == brute_force(visits, total, floor, cap)
    assert got.sum() <= total and (got >= floor).all() and (got <= cap).all()
    seen = np.array(visits) > 0
    assert (got[~seen] == floor).all()                       # a view never seen keeps its floor
    if got.sum() < total:                                    # clones left only when every seen view is full
        assert (got[seen] == cap).all()


def test_even_views_from_four_to_twenty_keep_thirty_each():
    # the default total of 4 to 20 views is 30 per view: every seen view reaches the cap
    for k in (4, 10, 20):
        m = ReplayMerger()
        total = k * m._clones_per_observation(k)
        visits = np.random.default_rng(k).integers(1, 1000, k)
        assert allocate_clones(visits, total, CLONE_FLOOR, CLONE_CAP).tolist() == [30] * k


@pytest.mark.parametrize("args, msg", [(([], 3, 1, 2), "non-empty"), (([1, -1], 3, 1, 2), ">= 0"),
                                       (([1, 2], 3, 0, 2), "floor"), (([1, 2], 3, 3, 2), "floor"),
                                       (([1, 2], 1, 1, 2), "cannot give")])
def test_bad_arguments_are_refused(args, msg):
    with pytest.raises(ValueError, match=msg):
        allocate_clones(*args)


def uneven_world():
    """A 6x6 grid of 25 views: one colour on 12 cells, 24 cells of a view of their own (the 12 in the first
    two rows start the walk, so the common view is seen most)."""
    colours = np.arange(36).reshape(6, 6) - 11
    colours[colours < 0] = 0
    colours[colours == 24] = 0
    return gridworld(6, 6, n_colours=25, colours=colours, start=(0, 0))


def fitted(alloc, episodes=12, seed=0, more=10, **kw):
    """A replay agent on the uneven world: ``episodes`` walks, one sleep after them (the last episode is still
    being lived, so the sleep learns from the others), then 10 more walks with the usual sleeps."""
    env = uneven_world()
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", merger=ReplayMerger(exact=False, alloc=alloc, **kw),
                           sleep_every=10**6, seed=seed)
    walk = random_walk(env, episodes + more, 50, seed=seed)
    agent.partial_fit(walk[:episodes])
    agent.sleep()
    agent.sleep_every = 500
    return env, agent.partial_fit(walk[episodes:])


def test_first_sleep_deals_clones_by_visits():
    env, agent = fitted("visits", episodes=4, more=60)
    m = agent.merger_
    walk = random_walk(env, 64, 50, seed=0)
    even = m._clones_per_observation(env.n_obs)
    assert even == 24
    visits = np.bincount(walk.obs[:3].ravel(), minlength=env.n_obs)   # the episodes of the first sleep
    seen = visits > 0
    # the most seen view asks for more than the cap of the seen views' clones: they share them by visits;
    # a view not seen yet keeps the even count
    assert visits.max() / visits.sum() * even * seen.sum() > CLONE_CAP
    expected = np.full(env.n_obs, even)
    expected[seen] = allocate_clones(visits[seen], even * int(seen.sum()), CLONE_FLOOR, CLONE_CAP)
    assert len(set(expected.tolist())) > 2 and (~seen).any() and expected.min() < even // 2
    assert m._sizes.tolist() == expected.tolist()
    assert m._sizes[0] == CLONE_CAP and m._H == int(expected.sum()) <= env.n_obs * even
    assert np.array_equal(m._colour, np.repeat(np.arange(env.n_obs), m._sizes))
    # views of one place with the fewest clones: seen later, held by level-1 states, and level 2 predicts
    few = np.flatnonzero(m._sizes == m._sizes.min())
    later = few[np.isin(few, walk.obs[3:])]
    held = np.add.reduceat(m._clone_n, m._starts) > 0
    assert len(later) and held[later].all()
    fresh = random_walk(env, 20, 50, seed=99)
    assert evaluate_model(env, agent.level2_hmm(), trajectories=fresh, smoothing=1e-3).accuracy > 0.9


def test_even_is_the_layout_of_before_and_visits_is_the_same_on_the_paper_grid():
    env, agent = fitted("even")
    assert agent.merger_._sizes.tolist() == [24] * 25
    grid = gridworld()
    walk = random_walk(grid, 30, 50, seed=1)
    runs = [TwoLevelMemory(10, 4, merge="replay", merger=ReplayMerger(exact=False, alloc=a), seed=1).fit(walk) for a in ("visits", "even")]
    a, b = (r.history() for r in runs)
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert np.array_equal(runs[0].merger_._T, runs[1].merger_._T)


def test_even_visits_keep_the_even_layout():
    # 144 views of one place each (5 clones each): no view's share of the visits asks for more than the
    # cap of the seen views' clones, so nothing moves
    env = gridworld(12, 12, n_colours=144, colours=np.arange(144).reshape(12, 12))
    agent = TwoLevelMemory(144, 4, merger=ReplayMerger(exact=False), sleep_every=10**6, seed=1)
    walk = random_walk(env, 11, 50, seed=1)   # (seed 0 and 2: the start cell asks for 37 and 54 clones)
    agent.partial_fit(walk)
    agent.sleep()
    visits = np.bincount(walk.obs[:10].ravel(), minlength=144)
    assert 0 < visits.max() / visits.sum() * 5 * (visits > 0).sum() <= CLONE_CAP
    assert agent.merger_._sizes.tolist() == [5] * 144


def test_explicit_n_clones_is_even():
    env, agent = fitted("visits", n_clones=3)
    assert agent.merger_._sizes.tolist() == [3] * 25


def test_bad_alloc_is_refused():
    env = uneven_world()
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", merger=ReplayMerger(exact=False, alloc="uneven"), seed=0)
    with pytest.raises(ValueError, match="alloc must be one of"):
        agent.fit(random_walk(env, 2, 10, seed=0))


def test_checkpoint_keeps_the_layout_and_resumes_exactly(tmp_path):
    env, agent = fitted("visits")
    assert len(set(agent.merger_._sizes.tolist())) > 1
    path = os.path.join(tmp_path, "agent.npz")
    agent.save(path)
    back = TwoLevelMemory.load(path)
    assert np.array_equal(back.merger_._sizes, agent.merger_._sizes)
    more = random_walk(env, 15, 50, seed=7)
    a, b = agent.partial_fit(more).history(), back.partial_fit(more).history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert np.array_equal(agent.merger_._T, back.merger_._T)


def test_old_files_without_a_layout_load_even_and_bad_layouts_are_named():
    env, agent = fitted("even")
    d = agent.merger_.state_dict()
    old = {k: v for k, v in d.items() if k != "replay_clone_sizes"}
    back = ReplayMerger()
    back.load_state_dict(old)
    assert back._sizes.tolist() == [24] * 25 and np.array_equal(back._T, agent.merger_._T)
    _, uneven = fitted("visits")
    d = uneven.merger_.state_dict()
    bad = dict(d, replay_clone_sizes=d["replay_clone_sizes"][::-1].copy())
    bad["replay_clone_sizes"][0] += 1
    with pytest.raises(ValueError, match="replay_clone_sizes sum to"):
        ReplayMerger().load_state_dict(bad, source="x.npz")
    with pytest.raises(ValueError, match="alloc='even'"):   # an uneven layout is not an even merger's
        ReplayMerger(alloc="even").load_state_dict(d, source="x.npz")


def test_views_of_one_clone_keep_working(monkeypatch):
    # every view of one place in one clone (the rule gives that to a rarely seen view): the kernels take
    # blocks of one clone, the states of those views are held by it and level 2 predicts as well
    import hmmmerge.replay as replay

    monkeypatch.setattr(replay, "allocate_clones", lambda visits, total, floor, cap: np.where(
        np.arange(len(visits)) == 0, cap, floor))
    env, agent = fitted("visits", episodes=4, more=60)
    m = agent.merger_
    assert m._sizes[0] == CLONE_CAP
    ones = np.flatnonzero(m._sizes == 1)
    assert len(ones) >= 15 and (m._clone_n[m._starts[ones]] > 0).all()
    fresh = random_walk(env, 20, 50, seed=99)
    assert evaluate_model(env, agent.level2_hmm(), trajectories=fresh, smoothing=1e-3).accuracy > 0.9


def default_layout(k):
    """The default clones per view for ``k`` views, from the rules as stated (class docstring): FEW_VIEW_CLONES
    up to FEW_VIEWS views, else the largest of 30, 29, ... whose total fits CLONE_BUDGET, not below BUDGET_FLOOR
    (5 from 101 views), searched one count at a time."""
    if k <= FEW_VIEWS:
        return FEW_VIEW_CLONES
    floor = BUDGET_FLOOR if k <= 100 else 5
    n = 30
    while n > floor and n * k > CLONE_BUDGET:
        n -= 1
    return n


def test_default_layout_is_the_rule_as_stated():
    for k in range(1, 400):
        assert ReplayMerger()._clones_per_observation(k) == default_layout(k), k
    assert ReplayMerger(n_clones=7)._clones_per_observation(2) == 7   # n_clones set: the rule is not asked


def test_31_to_100_views_keep_the_clone_budget():
    # the budget holds from 31 views on (20 per view made 800 clones of 40 views, 1,200 of 60) as far as
    # BUDGET_FLOOR per view allows, and a view never gets fewer than that floor; below 31 views nothing changed
    assert 6 <= BUDGET_FLOOR <= 20
    for k in range(31, 101):
        per = ReplayMerger()._clones_per_observation(k)
        assert per >= BUDGET_FLOOR, k
        if k * BUDGET_FLOOR <= CLONE_BUDGET:
            assert CLONE_BUDGET - k < k * per <= CLONE_BUDGET, k   # the budget, not less than one clone per view
        else:
            assert per == BUDGET_FLOOR, k
    assert [ReplayMerger()._clones_per_observation(k) for k in (21, 25, 30)] == [28, 24, 20]


def test_31_to_100_views_keep_the_even_layout():
    # 40 views (15 clones each): the most seen view of the first sleep's sample (fixed start) asks for more than
    # CLONE_CAP, which would share the clones by visits below 31 views; from 31 to 100 views the layout stays even
    env = gridworld(10, 10, n_colours=40, seed=0, start=(0, 0))
    assert env.n_obs == 40 and ALLOC_EVEN_VIEWS <= 40 <= ALLOC_MANY_VIEWS
    walk = random_walk(env, 30, 50, seed=0)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(exact=False), sleep_every=10**6, seed=0)
    m = agent.partial_fit(walk[:10]).merger_
    agent.sleep()
    visits = np.bincount(walk.obs[:9].ravel(), minlength=40)
    assert visits.max() * 600 > CLONE_CAP * visits.sum()          # the sample asks for more than the cap
    assert m._T is not None and m._H == 600 and m._sizes.tolist() == [15] * 40
    agent.sleep_every = 500
    agent.partial_fit(walk[10:])
    assert m._sizes.tolist() == [15] * 40


@pytest.mark.parametrize("n_colours", [2, 3, 4])
def test_few_views_keep_their_layout_and_deep_sleeps(n_colours):
    # with at most FEW_VIEWS views every view keeps FEW_VIEW_CLONES through the first sleep's allocation by
    # visits (its cap is the even count, never cut to CLONE_CAP), and the model sleeps deeply; 4 views keep 30
    env = gridworld(n_colours=n_colours)
    walk = random_walk(env.with_noise(obs_noise=0.05), 40, 50, seed=1)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", seed=0).fit(walk)
    agent.sleep()
    m = agent.merger_
    assert m._T is not None and not m.exact_phase_      # replay's own model is drawn
    per = FEW_VIEW_CLONES if n_colours <= FEW_VIEWS else 30
    visits = np.bincount(walk.obs.ravel(), minlength=env.n_obs)
    assert visits.max() * n_colours > visits.sum()      # uneven visits: the allocation by visits was asked
    assert m._sizes.tolist() == [per] * n_colours and m._H == per * n_colours <= DEEP_MAX_CLONES
    assert m.n_deep_ == DEEP_BUDGET // m._H > 0 and m.n_iter_ == min(8, max(2, ITER_BUDGET // m._H))
    back = ReplayMerger()
    back.load_state_dict(m.state_dict())                 # a checkpoint of that layout loads
    assert back._sizes.tolist() == m._sizes.tolist() and np.array_equal(back._T, m._T)


def many_views_world():
    """A 12x12 grid of 121 views (more than ALLOC_MANY_VIEWS): the 24 cells of the first two rows share one
    view, every other cell has a view of its own (5 clones each in the even layout, 605 in all)."""
    colours = np.arange(144).reshape(12, 12) - 23
    colours[colours < 0] = 0
    return gridworld(12, 12, n_colours=121, colours=colours, start=(0, 0))


def test_many_views_wait_for_a_sample_and_share_fewer_clones_by_its_visits():
    from hmmmerge.replay import ALLOC_MANY_VIEWS, ALLOC_MEAN, ALLOC_STEPS

    env = many_views_world()
    assert env.n_obs > ALLOC_MANY_VIEWS
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(exact=False), sleep_every=10**6, seed=0)
    walk = random_walk(env, 80, 50, seed=0)
    m = agent.partial_fit(walk[:40]).merger_
    even, H = 5, 5 * env.n_obs
    assert m._clones_per_observation(env.n_obs) == even and m._H == H
    # 39 episodes lived (51 views each) hold fewer than ALLOC_STEPS x H steps: the first sleep waits
    assert 39 * 51 < ALLOC_STEPS * H <= 54 * 51
    r = agent.sleep()[0]
    assert r["postponed"] and m._T is None and agent.n_clusters_ == 0 and m._sizes.tolist() == [even] * env.n_obs
    agent.partial_fit(walk[40:55])
    r = agent.sleep()[0]
    assert not r.get("postponed") and r["new"] == 54 and m._T is not None
    # the clones are shared by the visits of all 54 episodes, ALLOC_MEAN per seen view on average
    visits = np.bincount(walk.obs[:54].ravel(), minlength=env.n_obs)
    seen = visits > 0
    expected = np.full(env.n_obs, even)
    expected[seen] = allocate_clones(visits[seen], ALLOC_MEAN * int(seen.sum()), CLONE_FLOOR, CLONE_CAP)
    assert m._sizes.tolist() == expected.tolist() and m._sizes[0] == CLONE_CAP
    assert m._H == ALLOC_MEAN * int(seen.sum()) + even * int((~seen).sum()) < H
    # a sample of the first 10 episodes alone would have dealt them otherwise
    first = np.bincount(walk.obs[:10].ravel(), minlength=env.n_obs)[seen]
    assert allocate_clones(first, ALLOC_MEAN * int(seen.sum()), CLONE_FLOOR, CLONE_CAP).tolist() != expected[seen].tolist()
    agent.sleep_every = 500
    agent.partial_fit(walk[55:])
    fresh = random_walk(env, 20, 50, seed=99)
    assert evaluate_model(env, agent.level2_hmm(), trajectories=fresh, smoothing=1e-3).accuracy > 0.9


def test_a_merger_of_at_most_100_views_keeps_its_first_sleep():
    # 25 views from a fixed start: the first sleep is not postponed (the rules of a sample are off)
    env, agent = fitted("visits", episodes=4, more=0)
    assert not agent.merger_._many_views() and agent.merger_._T is not None
    assert not agent.merger_._waits_for_sample()


def test_21_to_30_views_from_random_starts_wait_for_a_sample_and_count_pseudo_visits(tmp_path):
    # random starts end the exact phase by "start"; the first sleep of stepwise EM then waits for ALLOC_STEPS x H
    # new steps and shares the clones by all of them, each seen view's visits counted ALLOC_PRIOR more, and it
    # learns them in chunks of min_new episodes (the catch-up) without dealing the clones again by a chunk's visits
    env = uneven_world()
    assert ALLOC_WAIT_VIEWS <= env.n_obs < ALLOC_EVEN_VIEWS and ALLOC_PRIOR > 0
    walk = random_walk(env, 60, 50, seed=0, start="random")
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", sleep_every=10**6, seed=0)
    m = agent.partial_fit(walk[:48]).merger_
    even, H = 24, 24 * env.n_obs
    # 47 episodes lived (51 views each) hold fewer than ALLOC_STEPS x H steps: the first sleep waits
    assert 47 * 51 < ALLOC_STEPS * H <= 48 * 51
    r = agent.sleep()[-1]
    assert m.exact_end_reason_ == "start" and m._waits_for_sample()
    assert r["postponed"] and m._T is None and agent.n_clusters_ == 0 and m._sizes.tolist() == [even] * 25
    path = os.path.join(tmp_path, "agent.npz")   # a checkpoint taken while the first sleep waits
    agent.save(path)
    back = TwoLevelMemory.load(path)
    agent.partial_fit(walk[48:49])
    r = agent.sleep()[-1]
    assert not r.get("postponed") and r["new"] == 48 and r["catch_up"] > 1 and m._T is not None
    visits = np.bincount(walk.obs[:48].ravel(), minlength=env.n_obs)
    seen = visits > 0
    expected = np.full(env.n_obs, even)
    expected[seen] = allocate_clones(visits[seen] + ALLOC_PRIOR, even * int(seen.sum()), CLONE_FLOOR, CLONE_CAP)
    assert m._sizes.tolist() == expected.tolist() and m._sizes[0] == CLONE_CAP and m._H == H
    # the pseudo-visits moved clones back towards the even count (the fewest a view has), and the first 10
    # episodes (the first chunk) would have dealt them otherwise
    plain = allocate_clones(visits[seen], even * int(seen.sum()), CLONE_FLOOR, CLONE_CAP)
    assert plain.min() < expected[seen].min()
    first = np.bincount(walk.obs[:10].ravel(), minlength=env.n_obs)[seen]
    assert allocate_clones(first + ALLOC_PRIOR, even * int(seen.sum()), CLONE_FLOOR, CLONE_CAP).tolist() != expected[seen].tolist()
    # the checkpoint taken while it waited resumes exactly
    back.partial_fit(walk[48:49])
    back.sleep()
    a, b = agent.partial_fit(walk[49:]), back.partial_fit(walk[49:])
    assert b.merger_._sizes.tolist() == expected.tolist() and np.array_equal(a.merger_._T, b.merger_._T)
    ha, hb = a.history(), b.history()
    assert all(np.array_equal(ha[k], hb[k], equal_nan=True) for k in ha)
    fresh = random_walk(env, 20, 50, seed=99, start="random")
    assert evaluate_model(env, a.level2_hmm(), trajectories=fresh, smoothing=1e-3, start="random").accuracy > 0.9


def test_21_to_30_views_from_a_fixed_start_keep_the_first_sleeps_sample():
    # a noisy first view ends the exact phase by "start" from the fixed start too, but most episodes start alike:
    # the first sleep does not wait and its visits count as they are (a sample from one start is local: the rule
    # of random starts cost the 25-colour grid with noise 0.004)
    env = uneven_world()
    walk = random_walk(env.with_noise(obs_noise=0.1), 12, 50, seed=0)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", sleep_every=10**6, seed=0).partial_fit(walk)
    m = agent.merger_
    assert m.exact_end_reason_ == "start" and not m._starts_spread() and not m._waits_for_sample()
    agent.sleep()
    assert m._T is not None
    visits = np.bincount(walk.obs[:11].ravel(), minlength=env.n_obs)   # the first sleep's 11 episodes
    seen = visits > 0
    expected = np.full(env.n_obs, 24)
    expected[seen] = allocate_clones(visits[seen], 24 * int(seen.sum()), CLONE_FLOOR, CLONE_CAP)
    assert m._sizes.tolist() == expected.tolist() and expected.min() < 10
