"""Slow sleeps (SLOW_SLEEP_*) and the thinned noise look-ahead (NOISE_SKIP_*) of the sleep-replay learner: the
gate, the schedule of sleeps and replayed episodes, which sleeps run the look-ahead, and files mid-life.

The real gate asks for more than 400 clones; here it is scaled down (monkeypatch) to 40 clones (a 4x4 grid of 8
colours, 5 clones per view), the same code path at a test's cost, and views are replaced after 6 updates (3
sleeps of 2 iterations, as on the gated models of 450-600 clones) instead of NOISE_AFTER's 20."""

import numpy as np
import pytest

import hmmmerge._replay_kernels as kernels
import hmmmerge.replay as replay
from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.replay import ReplayMerger

LENGTH = 20


def small(**noise):
    """A 4x4 grid of 8 colours: 5 clones per view learn it within a few sleeps."""
    return gridworld(4, 4, n_colours=8, **noise)


def _life(monkeypatch, clones, per_view, env=None, episodes=30, n_clones=5, min_new=3, n_replay=4, seed=0, walk=None):
    """A life of ``episodes`` walks in which a sleep is due before every episode; the merger's sleep reports,
    each with the episodes ended before it, and the agent."""
    monkeypatch.setattr(replay, "SLOW_SLEEP_CLONES", clones)
    monkeypatch.setattr(replay, "SLOW_SLEEP_PER_VIEW", per_view)
    merger = ReplayMerger(n_clones=n_clones, min_new=min_new, replay=n_replay, n_iter=2, exact=False)
    reports = []
    sleep = ReplayMerger.sleep

    def recorded(self, memory, clusters, rng=None):
        out = sleep(self, memory, clusters, rng)
        reports.extend(out)
        return out

    monkeypatch.setattr(ReplayMerger, "sleep", recorded)
    agent = TwoLevelMemory(8, 4, merger=merger, sleep_every=LENGTH, seed=seed)
    walk = random_walk(env or small(), episodes, episode_length=LENGTH, seed=seed) if walk is None else walk
    agent.fit(walk)
    return reports, agent


def _schedule(n_episodes, min_new, n_replay, window=200):
    """The (new, replayed) pairs of the sleeps that learn, from the rule alone: a sleep is due before every
    episode after the first (the episode before it is ended in the next one: not new yet); the first one with
    a new episode learns, later ones once ``min_new`` episodes are new."""
    out, learned = [], 0
    for ended in range(n_episodes - 1):
        new = ended - learned
        if new and (not out or new >= min_new):
            old = min(ended, window) - new
            out.append((new, min(n_replay, old)))
            learned = ended
    return out


@pytest.mark.parametrize("clones, per_view, factor", [
    (30, 5, 2),     # 40 clones > 30, 5 per view >= 5: slow sleeps
    (40, 5, 1),     # 40 clones, not more than 40: every sleep
    (30, 6, 1),     # 5 clones per view < 6: every sleep
])
def test_sleeps_wait_for_factor_times_min_new_and_replay_factor_times_replay_only_above_the_gate(
        monkeypatch, clones, per_view, factor):
    reports, agent = _life(monkeypatch, clones, per_view)
    assert agent.merger_.sleep_factor_ == factor
    learned = [(r["new"], r["replayed"]) for r in reports if r["new"] and not r.get("postponed")]
    assert learned == _schedule(30, 3 * factor, 4 * factor)
    assert sum(1 for r in reports if r.get("postponed") or not r["new"]) == len(reports) - len(learned)


def test_the_real_gate_is_more_than_400_clones_and_25_per_view():
    """30x30-c20 (20 views x 30) and 20x20-c15 (15 x 30) are gated; MiniGrid FourRooms' 3x3 view (30 x 20) and
    the paper grid (10 x 30) are not."""
    def factor(views, per_view):
        m = ReplayMerger(n_clones=per_view)
        m._init(views, 4)
        return m._sleep_factor()

    # 16 x 25 = 400 clones are not more than 400; 14 x 30 = 420 and 17 x 25 = 425 are; 21 x 24 = 504 have < 25 per view
    assert [factor(20, 30), factor(15, 30), factor(30, 20), factor(10, 30), factor(16, 25), factor(14, 30),
            factor(17, 25), factor(21, 24)] == [2, 2, 1, 1, 1, 2, 2, 1]


def _look_aheads(monkeypatch):
    """Count the calls of the noise look-ahead's kernel, as the sleeps make them."""
    calls = []
    real = kernels.noise_odds

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(kernels, "noise_odds", counted)
    return calls


def _quiet_rule(monkeypatch):
    monkeypatch.setattr(replay, "NOISE_AFTER", 6)


def test_on_clean_views_the_look_ahead_runs_at_every_4th_sleep_once_the_rate_is_low_and_still_updates_it(monkeypatch):
    _quiet_rule(monkeypatch)
    calls = _look_aheads(monkeypatch)
    seen = []
    real = ReplayMerger._sleep_once

    def watched(self, memory, clusters, rng, **kw):
        before = (self._updates, self._noise, len(calls))
        out = real(self, memory, clusters, rng, **kw)
        if out["new"] and not out.get("postponed"):
            seen.append((*before, len(calls) - before[2], self._noise, out["noise_look_ahead"]))
        return out

    monkeypatch.setattr(ReplayMerger, "_sleep_once", watched)
    _life(monkeypatch, 30, 5, episodes=80, min_new=1)
    assert len(seen) > 20
    idle = 0
    skipped = 0
    for i, (updates, rate, _, ran, after, flag) in enumerate(seen):
        quiet = updates >= replay.NOISE_AFTER and rate < replay.NOISE_SKIP_RATE
        # the first sleep (no update yet) has no look-ahead; later, a quiet model runs it at every 4th sleep
        want = i > 0 and not (quiet and idle < replay.NOISE_SKIP_EVERY - 1)
        assert ran == int(want) and flag == want, (i, updates, rate, idle)
        idle = idle + 1 if i > 0 and not want else 0
        skipped += not want and i > 0
        if not want:
            assert after == rate   # a skipped look-ahead leaves the rate as it was
        elif i > 1:
            assert after != rate   # the rate is updated where it runs (a running average of a fresh estimate)
    assert skipped >= 10   # the clean grid's rate falls below NOISE_SKIP_RATE: most late sleeps skip it
    tail = [s[3] for s in seen[-12:]]
    assert sum(tail) == 3   # every 4th of the last 12 sleeps


def test_noise_appearing_later_is_read_within_4_sleeps_and_the_look_ahead_then_runs_at_every_sleep(monkeypatch):
    _quiet_rule(monkeypatch)
    calls = _look_aheads(monkeypatch)
    clean = random_walk(small(), 60, episode_length=LENGTH, seed=0)
    reports, agent = _life(monkeypatch, 30, 5, walk=clean, min_new=1)
    assert agent.merger_._noise < replay.NOISE_SKIP_RATE and agent.merger_.sleep_factor_ == 2
    n = len(reports)
    agent.partial_fit(random_walk(small(obs_noise=0.3), 40, episode_length=LENGTH, seed=5))
    later = [r for r in reports[n:] if r["new"] and not r.get("postponed")]
    ran = [r["noise_look_ahead"] for r in later]
    assert True in ran[:replay.NOISE_SKIP_EVERY]   # the look-ahead ran within 4 sleeps of the noise's start
    loud = next(i for i, r in enumerate(later) if r["noise_rate"] >= replay.NOISE_SKIP_RATE)
    assert loud < 2 * replay.NOISE_SKIP_EVERY and all(ran[loud + 1:])   # once read, at every sleep
    assert sum(r["views_read_as_noise"] for r in later) > 0
    assert len(calls) == sum(r.get("noise_look_ahead", False) for r in reports)


def _gated_life(monkeypatch, first, tmp_path=None):
    """A gated life (8 views x 5 clones, the gate scaled down) on ``first``; saved and loaded with ``tmp_path``."""
    monkeypatch.setattr(replay, "SLOW_SLEEP_CLONES", 30)
    monkeypatch.setattr(replay, "SLOW_SLEEP_PER_VIEW", 5)
    _quiet_rule(monkeypatch)
    agent = TwoLevelMemory(8, 4, merger=ReplayMerger(n_clones=5, min_new=3, replay=4, n_iter=2, exact=False),
                           sleep_every=LENGTH, seed=3).fit(first)
    if tmp_path is not None:
        agent.save(tmp_path / "a.npz")
        agent = TwoLevelMemory.load(tmp_path / "a.npz")
    return agent


def test_a_gated_life_saved_mid_way_continues_bit_identically(monkeypatch, tmp_path):
    env = small(slip=0.05)
    first, second = random_walk(env, 70, episode_length=LENGTH, seed=0), random_walk(env, 25, episode_length=LENGTH, seed=1)
    back = _gated_life(monkeypatch, first, tmp_path)
    m = back.merger_
    assert m.sleep_factor_ == 2 and m._noise < replay.NOISE_SKIP_RATE
    assert 0 < m._noise_idle < replay.NOISE_SKIP_EVERY   # saved between two look-aheads: the count matters
    assert m._n_new > 0                                   # and between two sleeps
    back.partial_fit(second)
    whole = _gated_life(monkeypatch, first).partial_fit(second)
    h1, h2 = whole.history(), back.history()
    assert all(np.array_equal(h1[k], h2[k], equal_nan=True) for k in h1)
    w, b = whole.merger_.state_dict(), back.merger_.state_dict()
    assert sorted(w) == sorted(b) and all(np.array_equal(w[k], b[k]) for k in w)


def test_a_file_before_the_thinned_look_ahead_loads_with_the_look_ahead_just_run_and_a_bad_count_is_refused(
        monkeypatch):
    saved = _gated_life(monkeypatch, random_walk(small(), 70, episode_length=LENGTH, seed=0))
    d = saved.merger_.state_dict()
    assert saved.merger_._noise_idle > 0
    old = {k: v for k, v in d.items() if k != "replay_noise_idle"}
    back = ReplayMerger(n_clones=5, min_new=3, replay=4, n_iter=2, exact=False)
    back.load_state_dict(old)
    assert back._noise_idle == 0 and np.array_equal(back._T, saved.merger_._T)
    back.load_state_dict(d)
    assert back._noise_idle == saved.merger_._noise_idle
    with pytest.raises(ValueError, match="replay_noise_idle"):
        back.load_state_dict(dict(d, replay_noise_idle=np.array([replay.NOISE_SKIP_EVERY])))


@pytest.mark.parametrize("clones, factor", [(30, 2), (40, 1)])
def test_after_an_exact_phase_the_catch_up_learns_every_buffered_episode_in_sleeps_of_the_factor(monkeypatch, clones,
                                                                                                 factor):
    """The first sleep after the exact phase learns the buffer as the sleeps of a life without the phase would
    have: ``factor x min_new`` new episodes at a time (the rest with the last), none postponed nor lost."""
    monkeypatch.setattr(replay, "SLOW_SLEEP_CLONES", clones)
    monkeypatch.setattr(replay, "SLOW_SLEEP_PER_VIEW", 5)
    subs = []
    real = ReplayMerger._sleep_once

    def watched(self, memory, clusters, rng, **kw):
        out = real(self, memory, clusters, rng, **kw)
        subs.append(out)
        return out

    monkeypatch.setattr(ReplayMerger, "_sleep_once", watched)
    agent = TwoLevelMemory(8, 4, merger=ReplayMerger(n_clones=5, min_new=3, replay=4, n_iter=2),
                           sleep_every=LENGTH, seed=0).fit(random_walk(small(), 40, episode_length=LENGTH, seed=0))
    assert agent.merger_.exact_phase_ and not subs
    agent.partial_fit(random_walk(small(), 3, episode_length=LENGTH, seed=1, start="random"))
    assert not agent.merger_.exact_phase_ and agent.merger_.sleep_factor_ == factor
    # the 40 clean episodes: the phase ended in the 41st, which is ended (new) at the next sleep
    buffered = agent.merger_.exact_ended_ - 1
    want = [3 * factor] * (buffered // (3 * factor) - 1) + [3 * factor + buffered % (3 * factor)]
    assert [s["new"] for s in subs[:len(want)]] == want and sum(want) == buffered
    assert not any(s.get("postponed") for s in subs[:len(want)])
    assert [s["new"] for s in subs[len(want):]] == [1]   # the next sleep: one new episode (postponed)


@pytest.mark.parametrize("skip_clones, per_view, thinned", [(39, 5, True), (40, 5, False), (39, 6, False)])
def test_a_model_of_more_than_noise_skip_clones_thins_its_look_ahead_without_slow_sleeps(monkeypatch, skip_clones,
                                                                                         per_view, thinned):
    """NOISE_SKIP_CLONES, NOISE_SKIP_PER_VIEW: a model of more clones with enough per view (scaled down: 40 clones,
    5 per view, the slow-sleep gate out of reach) keeps every sleep but runs its look-ahead at every 4th one once
    the rate is low; at the clone bound or under the per-view one, at every sleep."""
    _quiet_rule(monkeypatch)
    monkeypatch.setattr(replay, "NOISE_SKIP_CLONES", skip_clones)
    monkeypatch.setattr(replay, "NOISE_SKIP_PER_VIEW", per_view)
    reports, agent = _life(monkeypatch, 40, 5, episodes=150, min_new=2, n_replay=8)
    assert agent.merger_.sleep_factor_ == 1 and agent.merger_._noise < replay.NOISE_SKIP_RATE
    learned = [r for r in reports if r["new"] and not r.get("postponed")]
    ran = [bool(r.get("noise_look_ahead", False)) for r in learned[1:]]
    if thinned:
        assert ran.count(False) >= 10 and sum(ran[-12:]) == 3   # every 4th of the last 12 sleeps
    else:
        assert all(ran)
