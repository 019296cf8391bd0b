"""Deep sleeps of the replay learner: batch EM over the buffer on small models (``ReplayMerger(deep=...)``)."""

import numpy as np
import pytest

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.evaluate import score_trajectories
import hmmmerge.replay as replay_module
from hmmmerge.replay import DEEP_MIX, FEW_VIEW_DEEP_MIX, ReplayMerger


def dense_em_step(Q, slip, B, colour, episodes, has_pair, scale, pc, kept=None, mix=1.0, floor=0.0):
    """One Baum-Welch step of the slip mixture written out on dense arrays (the oracle): the model is
    ``T_a = (1 - slip) Q_a + slip mean_b Q_b``; forward-backward over each episode on all ``H`` clones with
    deterministic emissions (clone ``i`` shows ``colour[i]``); each expected move ``i -> j`` recorded as ``a``
    is shared between the executed actions ``b`` by Bayes' rule (``(1 - slip) Q_a [b = a] + slip / A Q_b``
    over ``T_a``); the counts per episode are mixed with the ``kept`` ones, ``(1 - mix) kept + mix counts / n``
    (``kept = (S, first-step counts, slipped moves)``); then ``Q_b[i] = (scale * counts_b[i] + pc on the
    observed pairs' blocks) / row sum``, ``slip`` = the slipped share of the moves, at least ``floor``, and
    ``B = (scale * first-step counts + pc) / sum``.  Returns ``(Q, T, slip, B)``."""
    A, H, _ = Q.shape
    T = (1 - slip) * Q + slip * Q.mean(axis=0)
    S = np.zeros_like(Q)
    Bc = np.zeros(H)
    slipped = 0.0
    for obs, acts in episodes:
        E = (colour[None, :] == obs[:, None]).astype(float)     # (L, H)
        L = len(obs)
        alpha = np.zeros((L, H))
        alpha[0] = B * E[0]
        alpha[0] /= alpha[0].sum()
        for t in range(1, L):
            alpha[t] = alpha[t - 1] @ T[acts[t]] * E[t]
            alpha[t] /= alpha[t].sum()
        beta = np.ones((L, H))
        for t in range(L - 1, 0, -1):
            beta[t - 1] = T[acts[t]] @ (E[t] * beta[t])
            beta[t - 1] /= beta[t - 1].sum()
        post0 = alpha[0] * beta[0]
        Bc += post0 / post0.sum()
        for t in range(1, L):
            a = acts[t]
            xi = alpha[t - 1][:, None] * T[a] * (E[t] * beta[t])[None, :]
            xi /= xi.sum()
            r = np.divide(xi, T[a], out=np.zeros_like(xi), where=T[a] > 0)
            for b in range(A):
                S[b] += r * (slip / A * Q[b] + (1 - slip) * Q[a] * (b == a))
            slipped += (r * slip / A * Q.sum(axis=0)).sum()
    n = len(episodes)
    S, Bc, slipped = S / n, Bc / n, slipped / n
    if kept is not None:
        S, Bc, slipped = ((1 - mix) * k + mix * x for k, x in zip(kept, (S, Bc, slipped)))
    mask = has_pair[colour][:, colour]
    Qn = scale * S + pc * mask[None]
    rows = Qn.sum(axis=2, keepdims=True)
    Qn = np.divide(Qn, rows, out=np.zeros_like(Qn), where=rows > 0)
    e = max(slipped / S.sum(), floor) if slip > 0 else 0.0
    Bn = scale * Bc + pc
    return Qn, (1 - e) * Qn + e * Qn.mean(axis=0), e, Bn / Bn.sum()


@pytest.mark.parametrize("n_deep, slip, on", [(1, 0.0, False), (3, 0.0, False), (1, 0.2, False), (3, 0.2, False),
                                              (1, 0.2, True), (3, 0.2, True)])
def test_a_deep_sleep_is_batch_em_over_the_buffered_episodes(n_deep, slip, on):
    env = gridworld(4, 4, n_colours=3, seed=1)
    merger = ReplayMerger(exact=False, n_clones=3, slip=slip, deep=0, window=12, split=0.0, slip_floor=on)
    agent = TwoLevelMemory(3, 4, merger=merger, sleep_every=60, seed=0).fit(random_walk(env, 16, 12, seed=2))
    agent.sleep()
    m = agent.merger_
    assert len(m._episodes) == 12 and m._n_new == 0
    Q, e, B = m._Q.copy(), m._slip, m._B.copy()
    kept = (m._g * m._S.copy(), m._Sb.copy(), m._Sslip)
    var = (1 - DEEP_MIX) ** 2 * m._var + DEEP_MIX ** 2 / 12
    # slip_floor=True: the stepwise sleeps' off-view moves per row (a deep sleep does not count them), their
    # weighted median share x A / (A - 1) by brute force over the candidates, at most the initial slip
    floor = 0.0
    if on:
        seen = m._Stot > 0
        share, w = m._Soff[seen] / m._Stot[seen], m._Stot[seen]
        median = min(v for v in share.tolist() if w[share <= v].sum() >= 0.5 * w.sum())
        floor = min(median * 4 / 3, slip)
    for _ in range(n_deep):
        Q, T, e, B = dense_em_step(Q, e, B, m._colour, [x[:2] for x in m._episodes], m._has_pair,
                                   float(m.window), float(m.pseudocount), kept, DEEP_MIX, floor)
    m._n_deep = n_deep
    assert m._deep_sleep() == 12
    assert np.allclose(m._Q, Q, atol=1e-9) and np.allclose(m._T, T, atol=1e-9) and np.allclose(m._B, B, atol=1e-9)
    assert np.isclose(m._slip, e, atol=1e-12) and (e > 0.01 if slip else e == 0.0)
    assert not on or m._Sslip / m._kept_sums()[1] < e == floor   # here the floor holds e above EM's share
    # every move kept: the mix of the kept moves per episode and the buffer's; the sample grows
    moves = sum(int((x[1] >= 0).sum()) for x in m._episodes) / 12
    assert np.isclose(m._g * m._S.sum(), (1 - DEEP_MIX) * kept[0].sum() + DEEP_MIX * moves)
    assert np.isclose(m._var, var) and 0 < DEEP_MIX <= 1


@pytest.mark.parametrize("n_deep", [1, 3])
def test_a_few_view_deep_sleep_is_batch_em_over_the_last_episodes(n_deep, monkeypatch):
    # at most 3 views: over the buffer and the episodes it dropped (FEW_VIEW_DEEP_EPISODES in all, here 15), the
    # kept counts mixed by FEW_VIEW_DEEP_MIX, about deep x window passes (12 x n_deep / 15 iterations, at least 2)
    monkeypatch.setattr(replay_module, "FEW_VIEW_DEEP_EPISODES", 15)
    env = gridworld(4, 4, n_colours=3, seed=1)
    merger = ReplayMerger(exact=False, n_clones=3, slip=0.2, deep=n_deep, window=12, split=0.0, slip_floor=False,
                          min_new=1)
    agent = TwoLevelMemory(3, 4, merger=merger, sleep_every=60, seed=0).fit(random_walk(env, 20, 12, seed=2))
    agent.sleep()
    m = agent.merger_
    assert len(m._episodes) == 12 and len(m._old) == 3 and m._n_new == 0
    eps = [x[:2] for x in m._old] + [x[:2] for x in m._episodes]
    # pairs the older episodes made and the buffer's did not (faded, dropped) come back first, as in the sleep
    m._add_pairs(np.concatenate([x[0] for x in eps]), np.concatenate([x[1] for x in eps]))
    m._noise = 0.0   # no view read as noise (the oracle below reads the views as they are)
    Q, e, B = m._Q.copy(), m._slip, m._B.copy()
    kept = (m._g * m._S.copy(), m._Sb.copy(), m._Sslip)
    mix = FEW_VIEW_DEEP_MIX
    var = (1 - mix) ** 2 * m._var + mix ** 2 / 15
    n_iter = {1: 1, 3: 2}[n_deep]
    assert m._long_deep_iterations(15) == n_iter
    for _ in range(n_iter):
        Q, T, e, B = dense_em_step(Q, e, B, m._colour, eps, m._has_pair, float(m.window), float(m.pseudocount),
                                   kept, mix, 0.0)
    assert m._deep_sleep() == 15
    assert np.allclose(m._Q, Q, atol=1e-9) and np.allclose(m._T, T, atol=1e-9) and np.allclose(m._B, B, atol=1e-9)
    assert np.isclose(m._slip, e, atol=1e-12) and e > 0.0
    assert np.isclose(m._var, var) and 0 < mix <= 1


def test_few_view_deep_sleeps_look_ahead_over_the_buffer_only_and_keep_older_views_as_read(monkeypatch):
    monkeypatch.setattr(replay_module, "FEW_VIEW_DEEP_EPISODES", 30)
    env = gridworld(4, 4, n_colours=3, seed=1).with_noise(obs_noise=0.1)
    walk = random_walk(env, 80, 12, seed=2)
    seen, orig = [], ReplayMerger._views_read_as_noise

    def spy(self, d, obs, acts, update=True):   # a deep sleep's look-ahead: its steps, the buffer's, repairs
        out = orig(self, d, obs, acts, update)
        if not update:
            seen.append((len(obs), sum(len(e[0]) for e in self._episodes), out[1]))
        return out

    monkeypatch.setattr(ReplayMerger, "_views_read_as_noise", spy)
    merger = ReplayMerger(exact=False, n_clones=3, window=12, deep=2, min_new=1)
    m = TwoLevelMemory(3, 4, merger=merger, sleep_every=60, seed=0).fit(walk).merger_
    assert len(seen) >= 5 and all(n == buffered for n, buffered, _ in seen)
    assert sum(r for *_, r in seen) > 0    # views were read as noise
    assert len(m._old) == 18 and len(m._read) == len(m._episodes) == 12
    # the older episodes, as the last deep sleep that had them buffered read them: the walk's actions, its
    # views but a few read as noise (replaced by another view)
    first = 79 - 12 - 18       # the last episode of the walk is not ended (it is the current one)
    changed = 0
    for i, (views, acts) in enumerate(m._old):
        assert np.array_equal(acts, np.ravel(walk[first + i].actions))
        changed += int((views != np.ravel(walk[first + i].obs)).sum())
    assert 0 < changed < 0.25 * 18 * 13   # (measured: 31 of 234; about 7% of the views are noisy)


@pytest.mark.parametrize("n_colours", [3, 4])
def test_deep_sleeps_come_once_every_half_window_of_learned_episodes(n_colours, monkeypatch):
    # 4 views: over the buffer (20 episodes); at most 3: over the last FEW_VIEW_DEEP_EPISODES (here 50)
    monkeypatch.setattr(replay_module, "FEW_VIEW_DEEP_EPISODES", 50)
    env = gridworld(4, 4, n_colours=n_colours, seed=1)
    agent = TwoLevelMemory(n_colours, 4, merger=ReplayMerger(exact=False, n_clones=3, window=20, deep=2, min_new=1),
                           sleep_every=10**6, seed=0)
    walk = random_walk(env, 60, 12, seed=2)
    cap = 50 if n_colours == 3 else 20
    deep, want, since, buffered = [], [], 0, 0
    for b in range(0, 60, 4):      # sleeps of about 4 new episodes (the last one is ended by the next chunk)
        agent.partial_fit(walk[b:b + 4])
        report = agent.sleep()[0]
        deep.append(report["deep_episodes"])
        since, buffered = since + report["new"], min(buffered + report["new"], cap)
        want.append(buffered if since >= 10 else 0)   # half the window (20) learned since the last: all it keeps
        since = 0 if since >= 10 else since
    assert deep == want and sum(d > 0 for d in deep) == 5 and max(deep) == cap
    m = agent.merger_
    assert len(m._episodes) == 20 and len(m._old) == (30 if n_colours == 3 else 0)
    # the kept older episodes are the ones the buffer dropped last, in order: with the buffer, the views of
    # the last episodes ended
    kept = np.concatenate([e[0] for e in m._old] + [e[0] for e in m._episodes])
    ended = len(m._old) + len(m._episodes) + m._n_new
    assert np.array_equal(kept, np.concatenate([np.ravel(walk[i].obs) for i in range(59 - ended, 59)]))
    off = TwoLevelMemory(n_colours, 4, merger=ReplayMerger(exact=False, n_clones=3, window=20, deep=0, min_new=1),
                         sleep_every=10**6, seed=0)
    off.partial_fit(walk[:12])
    assert off.sleep()[0]["deep_episodes"] == 0 and off.merger_.n_deep_ == 0


@pytest.mark.parametrize("n_obs, expected", [(3, 13), (4, 15), (5, 0), (6, 0), (8, 0), (10, 0), (30, 0)])
def test_default_deep_iterations_are_the_documented_counts(n_obs, expected):
    merger = ReplayMerger()
    merger._init(n_obs, 4)
    assert merger.n_deep_ == expected
    merger = ReplayMerger(deep=5)
    merger._init(n_obs, 4)
    assert merger.n_deep_ == 5


@pytest.mark.parametrize("noise", [0.0, 0.1])
def test_a_life_with_deep_sleeps_resumes_from_a_file_as_it_would_have_gone_on(tmp_path, resumed_life, noise):
    env = gridworld(4, 4, n_colours=3, seed=1).with_noise(obs_noise=noise)
    n_first = 18 if noise == 0 else 36   # noise: long enough for a deep sleep to read views as noise
    first, second = random_walk(env, n_first, 12, seed=0), random_walk(env, 18, 12, seed=1)
    make = lambda: TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False, n_clones=3, window=16, deep=2, min_new=1),  # noqa: E731
                                  sleep_every=60, seed=3)
    _, part, _ = resumed_life(make, first, second, tmp_path / "a.npz")
    assert part.merger_._since_deep > 0    # the file must carry the episodes since the last deep sleep
    assert len(part.merger_._old) == n_first - 1 - 16   # ... and the episodes the buffer dropped (3 views)
    # ... and with noisy views the buffered episodes' views as the last deep sleep read them
    assert any(r is not None for r in part.merger_._read) == (noise > 0)
    old = {k: v for k, v in part.merger_.state_dict().items() if k != "replay_since_deep"}
    fresh = ReplayMerger(n_clones=3, window=16, deep=2)
    fresh.load_state_dict(old)   # a file before deep sleeps: none made yet
    assert fresh._since_deep == 0
    old = {k: v for k, v in part.merger_.state_dict().items() if not k.startswith("replay_old_")}
    fresh = ReplayMerger(n_clones=3, window=16, deep=2)
    fresh.load_state_dict(old)   # a file before the few-view deep sleeps over older episodes: none kept
    assert fresh._old == [] and len(fresh._episodes) == 16
    state = part.merger_.state_dict()
    bad = dict(state, replay_old_actions=np.zeros_like(state["replay_old_actions"]))
    with pytest.raises(ValueError, match="replay_old_actions must be -1 exactly at the episodes' starts"):
        ReplayMerger(n_clones=3, window=16, deep=2).load_state_dict(bad)
    with pytest.raises(ValueError, match="replay_old_episode_lengths holds episodes, but this merger keeps none"):
        ReplayMerger(n_clones=3, window=16, deep=0).load_state_dict(state)
    with pytest.raises(ValueError, match="more than 0"):
        ReplayMerger(n_clones=3, window=1000, deep=2).load_state_dict(state)


def test_deep_sleeps_learn_a_three_colour_torus_with_slips_better_than_stepwise_em_alone():
    from hmmmerge.gallery import torus

    gain = []
    for seed in (0, 1, 2):
        env = torus(7, 7, n_colours=3, seed=seed).with_noise(slip=0.1)
        train, fresh = random_walk(env, 400, 50, seed=seed), random_walk(env, 100, 50, seed=100 + seed)
        acc = {}
        for deep in (0, None):
            # 30 clones per view, as measured below (3 views take 45 by default: tests/test_replay_alloc.py)
            agent = TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False, n_clones=30, deep=deep), seed=seed).fit(train)
            acc[deep] = score_trajectories(agent.level2_hmm(), fresh).accuracy
        assert agent.merger_.n_deep_ == 20
        gain.append(acc[None] - acc[0])
    # measured: +0.016, +0.006, +0.023 (stepwise EM alone 0.78-0.82 after 400 episodes; the benchmark's
    # 9x9 torus after 1,000 episodes: +0.03 to +0.07)
    assert min(gain) > 0.0 and np.mean(gain) >= 0.01, gain
