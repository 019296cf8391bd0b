"""The exact phase of the replay learner (``ReplayMerger(exact=True)``): the proof that ends it against a brute
force, the fold's model while it lasts, the learner after it, the work bound, checkpoints and the sleep report."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hmmmerge.replay as replay_module
from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.clusters import level2_hmm
from hmmmerge.fold import FoldMerger
from hmmmerge.fold.exact import WorkLimitReached
from hmmmerge.replay import EXACT_REASONS, ReplayMerger


def brute_force_end(obs, acts):
    """(episode, reason) of the first step that no deterministic world seen from one start could give: an
    episode starting with another view than the first, or the same actions from the start followed by another
    view than an earlier episode saw; None when every episode is consistent with one."""
    seen = {}
    for e in range(len(obs)):
        if obs[e][0] != obs[0][0]:
            return e, "start"
        for t in range(1, len(obs[e])):
            key = tuple(acts[e][1:t + 1])
            if seen.setdefault(key, obs[e][t]) != obs[e][t]:
                return e, "contradiction"
    return None


@st.composite
def episode_sets(draw):
    """Episodes walked in a random deterministic machine, a few views then perhaps changed (or not)."""
    n_obs, n_actions = draw(st.integers(2, 3)), draw(st.integers(1, 2))
    n_states = draw(st.integers(1, 4))
    nxt = draw(st.lists(st.integers(0, n_states - 1), min_size=n_states * n_actions, max_size=n_states * n_actions))
    view = draw(st.lists(st.integers(0, n_obs - 1), min_size=n_states, max_size=n_states))
    n_eps, length = draw(st.integers(1, 7)), draw(st.integers(1, 6))
    acts = np.array(draw(st.lists(st.lists(st.integers(0, n_actions - 1), min_size=length, max_size=length),
                                  min_size=n_eps, max_size=n_eps)), dtype=np.int64).reshape(n_eps, length)
    obs = np.zeros((n_eps, length + 1), dtype=np.int64)
    for e in range(n_eps):
        s = 0
        obs[e, 0] = view[s]
        for t in range(length):
            s = nxt[s * n_actions + acts[e, t]]
            obs[e, t + 1] = view[s]
    for _ in range(draw(st.integers(0, 2))):   # views changed: a slip, a noisy view or another start
        e, t = draw(st.integers(0, n_eps - 1)), draw(st.integers(0, length))
        obs[e, t] = draw(st.integers(0, n_obs - 1))
    actions = np.concatenate([np.full((n_eps, 1), -1), acts], axis=1)
    return n_obs, n_actions, obs, actions


@settings(max_examples=60, deadline=None)
@given(episode_sets(), st.integers(1, 7))
def test_the_exact_phase_ends_exactly_where_a_brute_force_finds_the_first_contradiction(case, refresh):
    n_obs, n_actions, obs, actions = case
    agent = TwoLevelMemory(n_obs, n_actions, merge="replay", refresh_every=refresh, sleep_every=5, seed=0)
    m = agent.fit((obs, actions)).merger_
    want = brute_force_end(obs.tolist(), actions.tolist())
    if want is None:
        assert m.exact_phase_ and m.exact_ended_ is None and m.exact_end_reason_ is None
    else:
        assert not m.exact_phase_
        assert (m.exact_ended_, m.exact_end_reason_) == (want[0] + 1, want[1])


def test_on_a_clean_world_the_exact_phase_is_the_fold():
    walk = random_walk(gridworld(), 40, seed=0)
    fold = TwoLevelMemory(10, 4, merge="fold", seed=0).fit(walk)
    # min_new=1: the fold sleeps at every sleep of the agent, as merge="fold" does
    exact = TwoLevelMemory(10, 4, merger=ReplayMerger(min_new=1), seed=0).fit(walk)
    assert exact.merger_.exact_phase_ and exact.n_clusters_ == fold.n_clusters_
    n = fold.memory_.n_states
    assert np.array_equal(exact.clusters_.assignment[:n], fold.clusters_.assignment[:n])
    for name, p in fold.last_predictions_.items():
        assert np.array_equal(exact.last_predictions_[name], p), name
    a, b = exact.merger_.level2_hmm(exact.memory_, exact.clusters_), fold.level2_hmm()
    assert all((x != y).nnz == 0 for x, y in zip(a.T, b.T))
    assert np.array_equal(a.E, b.E) and np.array_equal(a.B, b.B)
    assert np.array_equal(fold.history()["l2_accuracy"], exact.history()["l2_accuracy"])


def test_random_starts_end_the_phase_before_the_first_sleep_and_the_life_is_the_learner_without_it():
    env = gridworld()
    walk = random_walk(env, 60, seed=1, start="random")
    runs = [TwoLevelMemory(10, 4, merger=ReplayMerger(exact=e), seed=2).fit(walk) for e in (True, False)]
    m = runs[0].merger_
    assert m.exact_end_reason_ == "start" and m.exact_ended_ <= 3
    assert runs[1].merger_.exact_ended_ == 0 and runs[1].merger_.exact_end_reason_ is None
    assert np.array_equal(m._T, runs[1].merger_._T) and np.array_equal(m._S, runs[1].merger_._S)
    n = runs[0].memory_.n_states
    assert np.array_equal(runs[0].clusters_.assignment[:n], runs[1].clusters_.assignment[:n])


def test_on_a_slip_world_the_phase_ends_and_stepwise_em_learns_the_buffered_episodes_in_sleeps_of_min_new():
    walk = random_walk(gridworld().with_noise(slip=0.2), 60, seed=0)
    agent = TwoLevelMemory(10, 4, merge="replay", sleep_every=10**6, seed=0).partial_fit(walk[:30])
    m = agent.merger_
    assert not m.exact_phase_ and m.exact_end_reason_ == "contradiction" and m.exact_ended_ <= 30
    assert agent.n_clusters_ == 0                     # C emptied: replay's level 2 starts at its first sleep
    r = agent.sleep()
    assert [x["phase"] for x in r] == ["replay"]
    assert r[0]["new"] == 29 and r[0]["catch_up"] == 2   # 29 episodes ended: 10 new, then 19
    assert m._updates == 2 * m.n_iter_ and m._n_new == 0 and agent.n_clusters_ > 0
    agent.partial_fit(walk[30:])
    assert agent.sleep()[0]["phase"] == "replay" and m.exact_ended_ <= 30


def test_the_work_bound_ends_the_phase_deterministically_and_replay_sleeps_at_once(monkeypatch):
    monkeypatch.setattr(replay_module, "EXACT_WORK_BASE", 1000)
    monkeypatch.setattr(replay_module, "EXACT_WORK_PER_STEP", 1)
    walk = random_walk(gridworld(), 40, seed=0)
    ended = []
    for _ in range(2):
        agent = TwoLevelMemory(10, 4, merge="replay", sleep_every=10**6, seed=0).partial_fit(walk[:25])
        reports = agent.sleep()
        assert [r["phase"] for r in reports] == ["exact", "replay"] and reports[0]["exact_ended"] == "work"
        m = agent.merger_
        assert not m.exact_phase_ and m.exact_end_reason_ == "work" and agent.n_clusters_ > 0
        assert m._work > 1000 + m._steps
        ended.append((m.exact_ended_, m._work, agent.clusters_.assignment[:agent.memory_.n_states].copy()))
    assert ended[0][:2] == ended[1][:2] and np.array_equal(ended[0][2], ended[1][2])


def _late_life(monkeypatch, per_step, episodes=80, chunk=10):
    """A clean life whose sleeps after episode 10 are late (EXACT_WORK_EPISODES patched), the late budget
    ``per_step``: the agent and, per fold sleep, (episodes lived, steps since the fold's last sleep as the
    budget counts them, the sleep's priced work (WORK + PRICE), its reports' phases, its WORK)."""
    from hmmmerge.fold._kernels import PRICE, WORK

    monkeypatch.setattr(replay_module, "EXACT_WORK_EPISODES", 10)
    monkeypatch.setattr(replay_module, "EXACT_LATE_PRICE_PER_STEP", per_step)
    walk = random_walk(gridworld(), episodes, seed=0)
    agent = TwoLevelMemory(10, 4, merge="replay", sleep_every=10**6, seed=0)
    trace = []
    for b in range(0, episodes, chunk):
        agent.partial_fit(walk[b:b + chunk])
        m = agent.merger_
        if not m.exact_phase_:
            break
        lived, new, steps, work, fold = m._lived, m._since_fold, m._steps, m._work, m._fold
        priced = int(fold._st.sc[WORK] + fold._st.sc[PRICE]) if fold._A is not None else 0
        reports = agent.sleep()
        if not reports[0].get("postponed"):
            sc = fold._st.sc
            trace.append((lived, new * steps // lived, int(sc[WORK] + sc[PRICE]) - priced,
                          [r["phase"] for r in reports], m._work - work))
    return agent, trace


def test_a_late_sleep_over_its_budget_per_step_ends_the_phase_and_one_within_does_not(monkeypatch):
    free, trace = _late_life(monkeypatch, 10**12)
    assert free.merger_.exact_phase_ and all(p == ["exact"] for *_, p, _ in trace)
    late = [(lived, n, w) for lived, n, w, _, _ in trace if lived > 10]
    assert len(late) >= 4 and all(n > 0 and w > 0 for _, n, w in late)
    # a budget just over every late sleep's priced work per step: the same life as without one
    within, t = _late_life(monkeypatch, max(w // n for _, n, w in late) + 1)
    assert within.merger_.exact_phase_ and t == trace
    n_states = free.memory_.n_states
    assert np.array_equal(within.clusters_.assignment[:n_states], free.clusters_.assignment[:n_states])
    # a budget at the median: the phase ends at the first late sleep over it, by the oracle of the trace
    per_step = sorted(w // n for _, n, w in late)[len(late) // 2]
    first = next(lived for lived, n, w in late if w > per_step * n)
    over, t = _late_life(monkeypatch, per_step)
    m = over.merger_
    assert not m.exact_phase_ and m.exact_end_reason_ == "work" and m.exact_ended_ == first
    assert t[-1][0] == first and t[-1][3] == ["exact", "replay"] and over.n_clusters_ > 0
    assert t[:-1] == trace[:len(t) - 1]


def test_the_late_budget_is_on_the_priced_work_not_on_work_alone(monkeypatch):
    _, trace = _late_life(monkeypatch, 10**12)
    late = [(lived, n, priced, work) for lived, n, priced, _, work in trace if lived > 10]
    assert all(priced > work for _, _, priced, work in late)   # pops and tentative folds are priced
    # a budget every sleep's WORK fits in, and some sleep's priced work does not: the phase ends
    per_step = max(work // n for _, n, _, work in late) + 1
    first = next((lived for lived, n, priced, _ in late if priced > per_step * n), None)
    assert first is not None
    over, t = _late_life(monkeypatch, per_step)
    assert over.merger_.exact_end_reason_ == "work" and over.merger_.exact_ended_ == first


def test_a_fold_with_a_work_limit_stops_mid_sleep_and_without_one_is_unchanged():
    from hmmmerge.fold._kernels import WORK, WORK_LIMIT

    walk = random_walk(gridworld(), 30, seed=0)
    a = TwoLevelMemory(10, 4, merge="fold", sleep_every=10**6, seed=0).fit(walk)
    b = TwoLevelMemory(10, 4, merge="fold", sleep_every=10**6, seed=0).fit(walk)
    b.merger_._st.sc[WORK_LIMIT] = 1   # a tiny limit: the first check stops the sleep
    with pytest.raises(WorkLimitReached):
        b.sleep()
    a.sleep()
    assert a.merger_._st.sc[WORK] > 1
    c = TwoLevelMemory(10, 4, merge="fold", sleep_every=10**6, seed=0).fit(walk)
    c.merger_._st.sc[WORK_LIMIT] = 10**15   # a limit never reached: the same sleep as without one
    c.sleep()
    n = a.memory_.n_states
    assert np.array_equal(a.clusters_.assignment[:n], c.clusters_.assignment[:n])


def test_the_sleep_report_says_which_phase():
    agent = TwoLevelMemory(10, 4, merge="replay", sleep_every=10**6, seed=0).fit(random_walk(gridworld(), 12, seed=0))
    r = agent.sleep()
    assert len(r) == 1 and r[0]["phase"] == "exact" and "merges" in r[0]
    off = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), sleep_every=10**6, seed=0)
    assert off.fit(random_walk(gridworld(), 12, seed=0)).sleep()[0]["phase"] == "replay"


@pytest.mark.parametrize("cut", [15, 45])   # saved in the exact phase / after it (slips from episode 30 on)
def test_a_life_saved_and_loaded_goes_on_as_the_life_without_the_file(tmp_path, cut):
    env = gridworld()
    walk = random_walk(env, 30, seed=0)
    slips = random_walk(env.with_noise(slip=0.3), 30, seed=1)
    obs = np.concatenate([walk.obs, slips.obs])
    acts = np.concatenate([walk.actions, slips.actions])
    whole = TwoLevelMemory(10, 4, merge="replay", sleep_every=300, seed=3).fit((obs, acts))
    part = TwoLevelMemory(10, 4, merge="replay", sleep_every=300, seed=3).fit((obs[:cut], acts[:cut]))
    assert part.merger_.exact_phase_ == (cut == 15)
    path = str(tmp_path / "agent.npz")
    part.save(path)
    back = TwoLevelMemory.load(path)
    assert back.merger_.exact_phase_ == part.merger_.exact_phase_
    assert back.merger_.exact_ended_ == part.merger_.exact_ended_
    back.partial_fit((obs[cut:], acts[cut:]))
    n = whole.memory_.n_states
    assert np.array_equal(whole.clusters_.assignment[:n], back.clusters_.assignment[:n])
    assert whole.merger_.exact_ended_ == back.merger_.exact_ended_ and whole.merger_.exact_end_reason_ == "contradiction"
    assert np.array_equal(whole.merger_._T, back.merger_._T)


def _merger(exact=True, episodes=15):
    return TwoLevelMemory(10, 4, merger=ReplayMerger(exact=exact), seed=0).fit(
        random_walk(gridworld(), episodes, seed=0)).merger_


def _state(exact=True, episodes=15):
    return _merger(exact, episodes).state_dict()


def test_checkpoint_keys_of_the_exact_phase_are_checked_and_old_files_load():
    m = _merger()
    d = m.state_dict()
    assert d["replay_exact"][0] == 1 and "replay_exact_fold_parent" in d
    back = ReplayMerger()
    back.load_state_dict(d)
    assert back.exact_phase_ and back._fold.n_recorded == back._n_seen == m._n_seen
    n = m._n_seen   # the trie of the phase, rebuilt from the fold's recorded tree, is the one built step by step
    assert np.array_equal(back._used[:, :n], m._used[:, :n]) and m._used[:, :n].sum() == n - 1
    with pytest.raises(ValueError, match="replay_exact holds out-of-range"):
        ReplayMerger().load_state_dict(dict(d, replay_exact=np.array([2, -1, -1, 0, 0, 0, 0, 0])), source="a.npz")
    with pytest.raises(ValueError, match="replay_exact has shape"):
        ReplayMerger().load_state_dict(dict(d, replay_exact=np.zeros(3, dtype=np.int64)), source="a.npz")
    with pytest.raises(ValueError, match="exact=False"):
        ReplayMerger(exact=False).load_state_dict(d, source="a.npz")
    with pytest.raises(ValueError, match="fold_sizes is missing"):
        ReplayMerger().load_state_dict({k: v for k, v in d.items() if k != "replay_exact_fold_sizes"}, source="a.npz")
    with pytest.raises(ValueError, match="a.npz"):   # the fold's own checks, named by the file
        ReplayMerger().load_state_dict(dict(d, replay_exact_fold_uf=-d["replay_exact_fold_uf"] - 5), source="a.npz")
    old = {k: v for k, v in _state(exact=False).items() if not k.startswith("replay_exact")}   # a file of before
    for exact in (True, False):
        m = ReplayMerger(exact=exact)
        m.load_state_dict(old)
        assert not m.exact_phase_ and m.exact_ended_ == 0 and m.exact_end_reason_ is None


def test_parameter_and_attributes():
    with pytest.raises((TypeError, ValueError), match="exact"):
        ReplayMerger(exact="yes")._validate_params()
    fresh = ReplayMerger()
    assert not fresh.exact_phase_ and fresh.exact_ended_ is None and fresh.exact_end_reason_ is None
    assert EXACT_REASONS == ("contradiction", "start", "work")
    assert isinstance(TwoLevelMemory(10, 4, merge="replay").fit(random_walk(gridworld(), 3, seed=0)).merger_._fold,
                      FoldMerger)


def test_the_benchmark_model_in_the_exact_phase_is_the_fold_level_2():
    agent = TwoLevelMemory(10, 4, merge="replay", seed=0).fit(random_walk(gridworld(), 20, seed=0))
    a = agent.merger_.level2_hmm(agent.memory_, agent.clusters_)
    b = level2_hmm(agent.memory_, agent.clusters_)
    assert np.array_equal(a.E, b.E) and all((x != y).nnz == 0 for x, y in zip(a.T, b.T))
    assert agent.merger_.emission(agent.clusters_, agent.memory_.n_states) is None
