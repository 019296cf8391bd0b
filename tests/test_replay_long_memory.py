"""Long memory from random starts (``LONG_MEMORY_WINDOW``, ``LONG_MEMORY_ITER`` of :mod:`hmmmerge.replay`): a model
too large for the other deep sleeps whose episodes start with different views keeps a longer buffer and re-counts all of
it in deep sleeps without the noise look-ahead; other lives keep the path without it.

The size gate is moved onto a 9-clone model (3 views x 3) and the long buffer to 40 episodes (window 20)."""

import numpy as np
import pytest

import hmmmerge.replay as R
from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.replay import ReplayMerger

ENV = gridworld(4, 4, n_colours=3, seed=1)


@pytest.fixture
def gate(monkeypatch):
    monkeypatch.setattr(R, "DEEP_MAX_CLONES", 8)          # 9 clones: no deep sleeps of DEEP_BUDGET // H ...
    monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", 8)    # ... nor light ones
    monkeypatch.setattr(R, "LONG_MEMORY_WINDOW", 40)


def _life(walk, deep=None):
    """Sleeps of 4 new episodes; per sleep (episodes buffered before it, its deep episodes, new episodes)."""
    agent = TwoLevelMemory(3, 4, merger=ReplayMerger(n_clones=3, window=20, min_new=1, deep=deep),
                           sleep_every=10**6, seed=0)
    out = []
    for b in range(0, len(walk), 4):
        agent.partial_fit(walk[b:b + 4])
        buffered = len(agent.merger_._episodes)
        for r in agent.sleep():
            if r["phase"] == "replay" and not r.get("postponed"):
                out.append((buffered, r["deep_episodes"], r["new"]))
    return agent, out


def test_random_starts_on_a_large_model_keep_a_long_buffer_re_counted_without_the_noise_look_ahead(gate, deep_sleep_spy):
    calls, noise = deep_sleep_spy
    agent, life = _life(random_walk(ENV, 120, 12, seed=2, start="random"))
    m = agent.merger_
    assert m.exact_end_reason_ == "start" and m._H == 9 and m.n_deep_ == 0 and m._long_memory()
    assert max(b for b, _, _ in life) == 40 == len(m._episodes)         # longer than the window (20)
    deep = [(b, d) for b, d, _ in life if d]
    assert len(deep) >= 8 and all(d == b for b, d in deep)             # the whole buffer, at every deep sleep
    since = 0
    for b, d, new in life:                                             # one every window // 2 episodes learned
        since += new
        assert bool(d) == (since >= 10)
        since = 0 if d else since
    assert calls == [R.LONG_MEMORY_ITER] * len(deep) and R.LONG_MEMORY_ITER == 1
    assert any(noise) is False and len(noise) > 0                      # look-aheads at sleeps, none in deep ones


@pytest.mark.parametrize("case", ["fixed start", "noisy fixed start", "deep=0", "small model", "many views"])
def test_other_lives_keep_the_window_and_make_no_deep_sleeps(gate, monkeypatch, case):
    if case == "small model":
        monkeypatch.setattr(R, "LIGHT_DEEP_MAX_CLONES", 9)   # 9 clones: light deep sleeps instead
    if case == "many views":
        monkeypatch.setattr(R, "ALLOC_MANY_VIEWS", 2)        # 3 views are many (MiniGrid's rule)
    if case == "fixed start":
        walk = random_walk(ENV.with_noise(slip=0.2), 80, 12, seed=2)
    elif case == "noisy fixed start":   # a noisy first view ends the exact phase by "start" too
        walk = random_walk(ENV.with_noise(obs_noise=0.1), 120, 12, seed=2)
    else:
        walk = random_walk(ENV, 120, 12, seed=2, start="random")   # the walk of the test above
    agent, life = _life(walk, deep=0 if case == "deep=0" else None)
    m = agent.merger_
    assert not m._long_memory() and max(b for b, _, _ in life) <= 20
    assert m.exact_end_reason_ == ("contradiction" if case == "fixed start" else "start")
    if case != "small model":
        assert not any(d for _, d, _ in life)


def test_a_life_with_long_memory_resumes_from_a_file_as_it_would_have_gone_on(gate, tmp_path, resumed_life):
    first = random_walk(ENV, 50, 12, seed=0, start="random")
    second = random_walk(ENV, 30, 12, seed=1, start="random")
    make = lambda: TwoLevelMemory(3, 4, merger=ReplayMerger(n_clones=3, window=20, min_new=1),  # noqa: E731
                                  sleep_every=4, seed=3)
    whole, part, back = resumed_life(make, first, second, tmp_path / "a.npz")
    assert part.merger_._long_memory() and len(part.merger_._episodes) == 40 and 0 < part.merger_._since_deep
    assert back.merger_._long_memory() and len(whole.merger_._episodes) == 40


def test_a_life_of_long_memory_keeps_its_split_evidence_longer(gate, monkeypatch):
    """LONG_MEMORY_SPLIT_MEMORY: the split evidence of earlier sleeps fades by it, not by SPLIT_MEMORY, on a model of long
    memory (more evidence kept over the life); other lives keep SPLIT_MEMORY."""
    walk = random_walk(ENV, 120, 12, seed=2, start="random")
    agent, _ = _life(walk)
    m = agent.merger_
    assert m._long_memory() and m._split_memory() == R.LONG_MEMORY_SPLIT_MEMORY > R.SPLIT_MEMORY
    kept = m._evidence[1].sum()
    monkeypatch.setattr(R, "LONG_MEMORY_SPLIT_MEMORY", R.SPLIT_MEMORY)
    short, _ = _life(walk)
    assert kept > 1.2 * short.merger_._evidence[1].sum()
    fixed, _ = _life(random_walk(ENV.with_noise(slip=0.2), 80, 12, seed=2))
    assert not fixed.merger_._long_memory() and fixed.merger_._split_memory() == R.SPLIT_MEMORY
