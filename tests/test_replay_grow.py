"""Views grown past the even layout from random starts (``GROW_VIEW_CAP``, ``ReplayMerger._grow``).

The lives here are short: the tests that need growth lower ``GROW_AFTER`` (about 400 episodes by default)."""

import numpy as np
import pytest

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
import hmmmerge.replay as replay_module
from hmmmerge.replay import GROW_AFTER, GROW_STEP, GROW_VIEW_CAP, ReplayMerger


@pytest.fixture(scope="module")
def world():
    return gridworld(rows=14, cols=14, n_colours=4, seed=0)   # 49 places per view on 4 x 30 clones


def _life(env, n, start="random", seed=0):
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", seed=seed)
    return agent.fit(random_walk(env, n, 50, seed=seed, start=start))


@pytest.fixture(scope="module")
def grown(world):
    mp = pytest.MonkeyPatch()
    mp.setattr(replay_module, "GROW_AFTER", 0)
    try:
        return _life(world, 150)
    finally:
        mp.undo()


def test_a_view_of_more_places_than_clones_grows_from_random_starts_and_the_checkpoint_keeps_it(grown):
    agent = grown
    m = agent.merger_
    assert m._sizes.max() > 30 and m._sizes.max() <= GROW_VIEW_CAP
    assert m.n_clones_total == int(m._sizes.sum())
    # the size gates keep the even layout's regime (deep sleeps), the iterations follow the clones grown
    assert m.n_deep_ > 0 and not m._mid
    back = ReplayMerger()
    back.load_state_dict(m.state_dict())
    assert np.array_equal(back._sizes, m._sizes) and np.array_equal(back._T, m._T)
    assert back.n_deep_ == m.n_deep_ and back.n_iter_ == m.n_iter_
    # every level-1 state's clone still shows the state's view
    n = m._n_seen
    cs = m._clone_state[:n]
    seen = cs >= 0
    assert np.array_equal(m._colour[cs[seen]], agent.memory_.emission[:n][seen])


def test_a_grown_checkpoint_loads_only_into_a_merger_that_may_grow(grown):
    sd = grown.merger_.state_dict()
    for other in (ReplayMerger(n_clones=30), ReplayMerger(n_clones=40)):
        with pytest.raises(ValueError, match="clones for 4 observations"):
            other.load_state_dict(sd)


def test_grow_carries_the_model_over_and_adds_empty_spares(world, monkeypatch):
    """One view grown by hand: the kept counts, the clones of level-1 states and the split evidence move
    to the new indices; the new clones hold no counts; the buffer's likelihood hardly moves."""
    agent = _life(world, 100)
    m = agent.merger_
    assert m._sizes.tolist() == [30] * 4
    S0, Sb0, cs0, H0 = m._g * m._S.copy(), m._Sb.copy(), m._clone_state[:m._n_seen].copy(), m._H
    code0, count0 = (x.copy() for x in m._evidence)
    obs = np.concatenate([e[0] for e in m._episodes])
    acts = np.concatenate([e[1] for e in m._episodes])
    ll0 = m._data(obs, acts).log_likelihood(m._T, m._B)
    monkeypatch.setattr(replay_module, "GROW_AFTER", 0)
    m._wanting = np.array([0, 2, 0, 0])
    assert m._grow(agent.memory_) == GROW_STEP
    assert m._sizes.tolist() == [30, 30 + GROW_STEP, 30, 30] and m._H == H0 + GROW_STEP
    idx = np.concatenate([np.arange(60), np.arange(60 + GROW_STEP, H0 + GROW_STEP)])   # old -> new index
    new = np.arange(60, 60 + GROW_STEP)
    assert np.allclose(m._g * m._S[:, idx][:, :, idx], S0) and np.array_equal(m._Sb[idx], Sb0)
    assert not m._S[:, new].any() and not m._S[:, :, new].any() and not m._Sb[new].any()
    assert np.array_equal(m._clone_state[:m._n_seen], np.where(cs0 >= 0, idx[np.maximum(cs0, 0)], -1))
    A, K, H = m._A, m._K, m._H
    of0, of = code0 // ((A * H0 + 1) * (A * K)), m._evidence[0] // ((A * H + 1) * (A * K))
    assert np.array_equal(of, idx[of0]) and np.array_equal(m._evidence[1], count0)
    assert np.allclose(m._T.sum(axis=2)[:, idx], 1.0)
    ll = m._data(obs, acts).log_likelihood(m._T, m._B)
    assert abs(ll - ll0) < 0.01 * len(obs)
    # the next sleep runs on the grown model
    agent.partial_fit(random_walk(world, 10, 50, seed=9, start="random"))
    assert agent.merger_._H >= H0 + GROW_STEP


def test_grow_waits_for_random_starts_for_a_view_wanting_spares_and_for_grow_after_updates(world, monkeypatch):
    random = _life(world, 60)
    r = random.merger_
    assert 0 < r._updates < GROW_AFTER
    r._wanting = np.array([0, 0, 0, 25])
    assert r._grow(random.memory_) == 0 and r._sizes.tolist() == [30] * 4   # too young
    monkeypatch.setattr(replay_module, "GROW_AFTER", 0)
    agent = TwoLevelMemory(world.n_obs, world.n_actions, merger=ReplayMerger(exact=False), seed=0)
    m = agent.fit(random_walk(world, 60, 50, seed=0)).merger_   # the fixed start
    m._wanting = np.array([3, 0, 0, 0])
    assert m._grow(agent.memory_) == 0 and m._sizes.tolist() == [30] * 4
    r._wanting = np.zeros(4, dtype=np.int64)
    assert r._grow(random.memory_) == 0
    r._wanting = np.array([0, 0, 0, 25])
    assert r._grow(random.memory_) == GROW_VIEW_CAP - 30 and r._sizes[3] == GROW_VIEW_CAP
