"""Light deep sleeps and the longer split memory of mid-size replay models (``LIGHT_DEEP_MAX_CLONES``).

The window is 136-240 clones in all by default; these tests move it onto a 9-clone model (3 views x 3)."""

import numpy as np
import pytest

import hmmmerge.replay as R
from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.replay import ReplayMerger


def _agent(split=8.0):
    merger = ReplayMerger(exact=False, n_clones=3, window=20, min_new=1, split=split)
    return TwoLevelMemory(3, 4, merger=merger, sleep_every=10**6, seed=0)


def _life(agent, walk, spy=None):
    """Sleeps of 4 new episodes; per sleep (deep episodes, new episodes, iterations of its deep sleep)."""
    out = []
    for b in range(0, len(walk), 4):
        agent.partial_fit(walk[b:b + 4])
        if spy is not None:
            spy.clear()
        report = agent.sleep()[0]
        out.append((report["deep_episodes"], report["new"], list(spy) if spy is not None else None))
    return out


def test_a_model_in_the_window_sleeps_lightly_once_every_window_of_learned_episodes(monkeypatch, deep_sleep_spy):
    monkeypatch.setattr(R, "DEEP_MAX_CLONES", 8)          # 9 clones: no deep sleeps of DEEP_BUDGET // H ...
    monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", 9)    # ... but light ones
    calls = deep_sleep_spy[0]
    walk = random_walk(gridworld(4, 4, n_colours=3, seed=1), 80, 12, seed=2)
    agent = _agent()
    life = _life(agent, walk, calls)
    assert agent.merger_.n_deep_ == 0 and agent.merger_._H == 9
    want, since, buffered = [], 0, 0
    for deep, new, iters in life:
        since, buffered = since + new, min(buffered + new, 20)
        light = since >= 20                  # a whole window (20) learned since the last: the buffer, 2 passes
        want.append((buffered if light else 0, new, [R.LIGHT_DEEP_ITER] if light else []))
        since = 0 if light else since
    assert life == want and sum(d > 0 for d, _, _ in life) == 3 and R.LIGHT_DEEP_ITER == 2


def _evidence_decay(monkeypatch):
    """Per split test: (evidence weight before, after, triples of the batch) with no split made."""
    seen, split = [], ReplayMerger._split

    def spy(self, d):
        before = 0.0 if self._evidence is None else float(self._evidence[1].sum())
        new = int((d.acts[1:] >= 0).sum())
        n = split(self, d)
        assert n == 0
        seen.append((before, float(self._evidence[1].sum()), new))
        return n

    monkeypatch.setattr(ReplayMerger, "_split", spy)
    return seen


@pytest.mark.parametrize("inside", [True, False])
def test_the_split_evidence_decays_by_the_window_s_memory(monkeypatch, inside):
    monkeypatch.setattr(R, "DEEP_MAX_CLONES", 8)
    monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", 9 if inside else 8)
    monkeypatch.setattr(R, "SPLIT_MEMORY_MID", 0.8)     # distinct from SPLIT_MEMORY (0.5)
    seen = _evidence_decay(monkeypatch)
    walk = random_walk(gridworld(4, 4, n_colours=3, seed=1), 32, 12, seed=2)
    _life(_agent(split=1e9), walk)       # no split: the evidence only decays and grows
    memory = 0.8 if inside else R.SPLIT_MEMORY
    assert len(seen) == 8 and R.SPLIT_MEMORY == 0.5
    # a weight of 1 stays above the forgetting floor (0.05) for 4 sleeps: until then the total is exactly
    # kept x memory + new; later weights under the floor are dropped
    for k, (before, after, new) in enumerate(seen):
        assert after <= memory * before + new + 1e-9
        assert k >= 4 or np.isclose(after, memory * before + new, rtol=1e-12)


@pytest.mark.parametrize("window", [(8, 9, None), (9, 20, None), (8, 8, None), (8, 9, 0), (8, 9, 3)])
def test_models_outside_the_window_keep_the_path_without_light_deep_sleeps(monkeypatch, window):
    """Outside the window (deep sleeps of DEEP_BUDGET // H, more than LIGHT_DEEP_MAX_CLONES clones, or ``deep``
    given) the light sleep's constants change nothing; inside (the first case) they do."""
    deep_max, light_max, deep = window
    monkeypatch.setattr(R, "DEEP_MAX_CLONES", deep_max)
    monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", light_max)
    walk = random_walk(gridworld(4, 4, n_colours=3, seed=1), 48, 12, seed=2)

    def run():
        merger = ReplayMerger(exact=False, n_clones=3, window=20, min_new=1, deep=deep)
        agent = TwoLevelMemory(3, 4, merger=merger, sleep_every=10**6, seed=0)
        return _life(agent, walk), agent.merger_.state_dict()

    (life, a), _ = run(), None
    monkeypatch.setattr(R, "LIGHT_DEEP_ITER", 5)
    monkeypatch.setattr(R, "SPLIT_MEMORY_MID", 0.2)
    other, b = run()
    same = life == other and sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert same == (window != (8, 9, None))
    if deep_max == 9 or deep:
        assert any(d for d, _, _ in life)       # the deep sleeps of main stay
    elif window != (8, 9, None):
        assert not any(d for d, _, _ in life)


def test_a_life_with_light_deep_sleeps_resumes_from_a_file_as_it_would_have_gone_on(monkeypatch, tmp_path, resumed_life):
    monkeypatch.setattr(R, "DEEP_MAX_CLONES", 8)
    monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", 9)
    env = gridworld(4, 4, n_colours=3, seed=1)
    first, second = random_walk(env, 30, 12, seed=0), random_walk(env, 30, 12, seed=1)
    make = lambda: TwoLevelMemory(3, 4, merger=ReplayMerger(exact=False, n_clones=3, window=16, min_new=1),  # noqa: E731
                                  sleep_every=60, seed=3)
    _, part, back = resumed_life(make, first, second, tmp_path / "a.npz")
    assert 0 < part.merger_._since_deep < 16 and part.merger_._mid   # a light sleep made, the next one pending
    assert back.merger_._mid
