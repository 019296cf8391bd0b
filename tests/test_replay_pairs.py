"""The registry of view pairs of the sleep-replay learner: pairs whose kept counts have faded (the pairs that
only random views made) are dropped at sleeps, and filtering is what it is with the pair kept."""

import copy

import numpy as np
import pytest

import hmmmerge.replay as replay
from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.replay import ReplayMerger


def _dense_m_step(S, inside, scale, pc, slip):
    """The M-step as defined: ``Q ~ scale * S + pc`` on the pairs' blocks, ``T = (1 - slip) Q + slip mean_b Q_b``."""
    Q = (scale * S + pc) * inside
    z = Q.sum(axis=2, keepdims=True)
    Q = np.divide(Q, z, out=np.zeros_like(Q), where=z > 0)
    return Q, (1.0 - slip) * Q + slip * Q.mean(axis=0)


def plain_filter(T, B, starts, sizes, obs, acts):
    """The clone HMM's forward filter written plainly: the distribution over the clones of each step's view
    given the steps up to it (one row per step, over all clones)."""
    H = len(B)
    clones = [np.arange(starts[o], starts[o] + sizes[o]) for o in range(len(sizes))]
    out = np.zeros((len(obs), H))
    for t, (o, a) in enumerate(zip(obs, acts)):
        if a < 0:
            alpha = np.zeros(H)
            alpha[clones[o]] = B[clones[o]]
        else:
            alpha = np.zeros(H)
            for j in clones[o]:
                alpha[j] = sum(out[t - 1, i] * T[a, i, j] for i in clones[obs[t - 1]])
        out[t] = alpha / alpha.sum()
    return out


def _faded(m):
    """Per registered pair: whether every kept count adds at most PAIR_FLOOR of the pseudocount at the M-step."""
    floor = replay.PAIR_FLOOR * m.pseudocount / (m.window * m._g)
    return np.array([(m._S[:, m._starts[o]:m._starts[o] + m._sizes[o], m._starts[v]:m._starts[v] + m._sizes[v]]
                      <= floor).all() for o, v in m._pairs], dtype=bool)


NOISY = gridworld(6, 6, n_colours=12, seed=1, obs_noise=0.1)


def test_after_every_sleep_of_a_noisy_life_only_pairs_with_counts_stay_and_the_registry_is_smaller(monkeypatch):
    # 30 views on 36 cells: the world makes 136 pairs, the random views nearly all 900
    env = gridworld(6, 6, n_colours=30, seed=1, obs_noise=0.1)
    walk = random_walk(env, 300, 30, seed=4)
    checked = []
    sleep = ReplayMerger.sleep

    def checked_sleep(self, memory, clusters, rng=None):
        out = sleep(self, memory, clusters, rng)
        if "pairs_dropped" in out[0]:
            assert not _faded(self).any()
            # T, Q are the M-step of the kept counts on the pairs left, zero elsewhere; Z the row sums
            inside = self._has_pair[self._colour][:, self._colour][None]
            Qd, Td = _dense_m_step(self._g * self._S, inside, float(self.window), float(self.pseudocount), self._slip)
            # (1e-8: the row sums are kept through every update and split of the life; the prioritised draw's
            # life reaches 1.3e-9 of rounding on this walk)
            np.testing.assert_allclose(self._T, Td, rtol=1e-8, atol=1e-15)
            np.testing.assert_allclose(self._Q, Qd, rtol=1e-8, atol=1e-15)
            assert (self._S[~np.broadcast_to(inside, self._S.shape)] == 0).all()
            np.testing.assert_allclose(self._Z, self._S.sum(axis=2), rtol=1e-10, atol=1e-300)
            checked.append(out[0]["pairs_dropped"])
        return out

    def fit():
        return TwoLevelMemory(30, 4, merger=ReplayMerger(exact=False, n_clones=2, min_new=5), seed=2).fit(walk)

    with monkeypatch.context() as mp:
        mp.setattr(ReplayMerger, "sleep", checked_sleep)
        pairs = len(fit().merger_._pairs)
    assert len(checked) > 10 and sum(checked) > 0
    monkeypatch.setattr(ReplayMerger, "_drop_faded_pairs", lambda self: 0)
    kept_for_life = len(fit().merger_._pairs)
    assert pairs < 0.7 * kept_for_life


def _clean_life():
    env = gridworld(6, 6, n_colours=12, seed=1)
    agent = TwoLevelMemory(12, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5), sleep_every=10**9, seed=2)
    agent.fit(random_walk(env, 150, 30, seed=4))
    agent.sleep()
    return env, agent


def test_a_pair_whose_counts_faded_is_dropped_and_filtering_is_as_with_the_pair_kept():
    env, agent = _clean_life()
    m = agent.merger_
    fresh = random_walk(env, 8, 30, seed=9)
    made = {(int(o), int(v)) for e in range(8) for o, v, a in zip(fresh.obs[e, :-1], fresh.obs[e, 1:],
                                                                   fresh.actions[e, 1:]) if a >= 0}
    p = next(i for i, (o, v) in enumerate(m._pairs.tolist()) if (o, v) in made)
    o, v = m._pairs[p]
    rows, cols = slice(m._starts[o], m._starts[o] + m._sizes[o]), slice(m._starts[v], m._starts[v] + m._sizes[v])
    # the pair's counts fade below the floor (as many sleeps without it would leave them): the model with
    # the pair kept is the M-step of those counts
    floor = replay.COUNT_FLOOR * m.pseudocount / (m.window * m._g)
    m._S[:, rows, cols] *= 0.5 * floor / m._S[:, rows, cols].max()
    m._Z = None
    redo = np.zeros(m._K, dtype=np.bool_)
    redo[o] = True
    m._m_step(redo)
    kept = copy.deepcopy(m)
    assert m._drop_faded_pairs() == 1
    assert not m._has_pair[o, v] and (o, v) not in set(map(tuple, m._pairs.tolist()))
    assert not m._T[:, rows, cols].any() and not m._S[:, rows, cols].any()
    # every held-out episode is filtered as with the pair kept; after a move that makes it, the belief is the
    # pseudocount's in both models (the faded counts weigh at most PAIR_FLOOR of it): equal within that share (place registers it)
    n_before = agent.memory_.n_states
    agent.partial_fit(fresh)
    assert not m._has_pair[o, v]   # registered for the filtering of the episodes that make it only
    states = agent.last_states_
    checked = passes = 0
    for e in range(8):
        want = plain_filter(kept._T, kept._B, kept._starts, kept._sizes, fresh.obs[e], fresh.actions[e])
        filtering = copy.deepcopy(m)   # the model place filters with: the episode's pairs registered
        filtering._add_pairs(fresh.obs[e], fresh.actions[e])
        got = plain_filter(filtering._T, m._B, m._starts, m._sizes, fresh.obs[e], fresh.actions[e])
        acts = fresh.actions[e]
        makes = (fresh.obs[e, :-1] == o) & (fresh.obs[e, 1:] == v) & (acts[1:] >= 0)
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * replay.PAIR_FLOOR if makes.any() else 1e-9)
        top = np.sort(want, axis=1)
        for t, s in enumerate(states[e]):
            if s >= n_before and m._clone_state[s] >= 0 and top[t, -1] - top[t, -2] > 2 * replay.PAIR_FLOOR:
                assert m._clone_state[s] == want[t].argmax()
                checked += 1
        passes += int(makes.any())
    assert checked > 50 and passes > 0


def test_resume_from_a_file_equals_an_uninterrupted_noisy_life_and_a_file_with_faded_pairs_loads(tmp_path, monkeypatch,
                                                                                                 resumed_life):
    # (a walk after which pairs have faded: 5 of 144, with the slip floor)
    first, second = random_walk(NOISY, 120, 30, seed=2), random_walk(NOISY, 60, 30, seed=1)

    def agent():
        return TwoLevelMemory(12, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5), seed=3)

    resumed_life(agent, first, second, tmp_path / "a.npz")
    # a file written before pairs were dropped holds faded pairs: it loads as the same model, and the life
    # goes on as the running agent's
    with monkeypatch.context() as mp:
        mp.setattr(ReplayMerger, "_drop_faded_pairs", lambda self: 0)
        old = agent().fit(first)
    assert _faded(old.merger_).any()
    old.save(tmp_path / "old.npz")
    loaded = TwoLevelMemory.load(tmp_path / "old.npz")
    assert np.array_equal(loaded.merger_._pairs, old.merger_._pairs)
    assert np.array_equal(loaded.merger_._T, old.merger_._T)
    old.partial_fit(second)
    loaded.partial_fit(second)
    w, b = old.merger_.state_dict(), loaded.merger_.state_dict()
    assert all(np.array_equal(w[k], b[k]) for k in w)
    assert not _faded(loaded.merger_).any()


@pytest.mark.parametrize("damage", [lambda x: x[1:], lambda x: np.concatenate([x, x[:1]])])
def test_a_file_whose_pairs_do_not_match_the_model_after_drops_is_refused(tmp_path, damage):
    agent = TwoLevelMemory(12, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5), seed=3).fit(
        random_walk(NOISY, 120, 30, seed=0))
    d = agent.merger_.state_dict()
    d["replay_pairs"] = damage(d["replay_pairs"])
    with pytest.raises(ValueError, match=r"^a\.npz: replay_") as err:
        ReplayMerger(n_clones=3).load_state_dict(d, source="a.npz")
    assert "\n" not in str(err.value)
