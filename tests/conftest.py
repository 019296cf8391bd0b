"""Fixtures and reference implementations shared by the tests.

Reference implementations are written once here, as plainly as possible and
without the package's code, so that every test compares against the same
oracle: ``random_model`` (a random ActionHMM) and ``literal_algorithm_1``
(the paper's Algorithm 1 with Python dicts).  Worlds and walks used by
several test files are built once per session (none is ever changed):
``paper_world`` is the paper's 10x10 grid of 10 colours (colouring 0),
``paper_walk`` 80 episodes of 50 random moves in it (seed 1) and
``paper_walk_1000`` the paper's 1,000 training episodes (seed 0);
``small_world`` is a 4x4 grid of 4 colours (seed 1) and ``small_walk`` 8
episodes of 12 moves in it (seed 2).  ``load_script`` loads a script of
``benchmarks/`` as a module (they are not a package).  ``resumed_life``
checks that a learner saved mid-life and loaded goes on bit for bit.
``deep_sleep_spy`` records what replay's deep sleeps do (E-steps, noise
look-aheads).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hmmmerge import ActionHMM, gridworld, random_walk


def _random_model(rng, H, O, A, *, sparsity=0.0, sparse=False, zero_rows=0.0):
    """A random ActionHMM; ``sparsity`` zeroes entries (keeping one per row), ``zero_rows`` whole rows of T."""
    T = rng.random((A, H, H)) + 0.05
    if sparsity:
        mask = rng.random((A, H, H)) < sparsity
        keep = rng.integers(0, H, size=(A, H))
        mask[np.arange(A)[:, None], np.arange(H)[None, :], keep] = False
        T[mask] = 0.0
    T /= T.sum(axis=2, keepdims=True)
    if zero_rows:
        T[rng.random((A, H)) < zero_rows] = 0.0
    E = rng.random((H, O)) + 0.05
    if sparsity:
        emask = rng.random((H, O)) < sparsity
        emask[np.arange(H), rng.integers(0, O, size=H)] = False
        E[emask] = 0.0
    E /= E.sum(axis=1, keepdims=True)
    B = rng.random(H) + 0.05
    B /= B.sum()
    if sparse:
        return ActionHMM([sp.csr_matrix(T[a]) for a in range(A)], E, B)
    return ActionHMM(T, E, B)


def _literal_algorithm_1(episodes, n_actions):
    """Algorithm 1 with Python dicts, straight from the paper (plus the fixed start state).

    ``episodes``: lists of ``(obs, action)`` pairs.  Returns ``(T, E)``:
    ``T[(h, a)]`` the successor of state ``h`` under ``a`` (``h == "start"``
    for the first observation), ``E`` the observation of each state.
    """
    T, E = {}, []
    for ep in episodes:
        h = "start"
        for o, a in ep:
            nxt = T.get((h, a))
            if nxt is None or E[nxt] != o:
                nxt = len(E)
                E.append(o)
                T[(h, a)] = nxt
            h = nxt
    return T, E


def _load_script(name: str):
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resumed_life(make, first, second, path):
    """``make()`` lives through ``first`` then ``second`` (``whole``); another (``part``) lives through
    ``first``, is saved to ``path`` and loaded, and the loaded one (``back``) lives through ``second``.
    Asserts that the mergers of ``whole`` and ``back`` end with the same state, array for array; returns
    ``(whole, part, back)``."""
    from hmmmerge.agent import TwoLevelMemory

    whole = make().fit(first).partial_fit(second)
    part = make().fit(first)
    part.save(path)
    back = TwoLevelMemory.load(path).partial_fit(second)
    w, b = whole.merger_.state_dict(), back.merger_.state_dict()
    assert sorted(w) == sorted(b)
    assert all(np.array_equal(w[k], b[k]) for k in w), [k for k in w if not np.array_equal(w[k], b[k])]
    return whole, part, back


@pytest.fixture
def deep_sleep_spy(monkeypatch):
    """``(calls, noise)``: ``calls`` gets one entry per deep sleep of a :class:`~hmmmerge.replay.ReplayMerger`,
    the E-steps it made (one per iteration); ``noise`` one entry per noise look-ahead, True when made inside a
    deep sleep."""
    from hmmmerge.replay import ReplayMerger

    calls, noise, inside = [], [], [False]
    deep, counts, look = ReplayMerger._deep_sleep, ReplayMerger._expected_counts, ReplayMerger._views_read_as_noise

    def deep_sleep(self, *a, **k):
        inside[0] = True
        calls.append(0)
        try:
            return deep(self, *a, **k)
        finally:
            inside[0] = False

    def expected_counts(self, *a, **k):
        if inside[0]:
            calls[-1] += 1
        return counts(self, *a, **k)

    def views(self, *a, **k):
        noise.append(inside[0])
        return look(self, *a, **k)

    monkeypatch.setattr(ReplayMerger, "_deep_sleep", deep_sleep)
    monkeypatch.setattr(ReplayMerger, "_expected_counts", expected_counts)
    monkeypatch.setattr(ReplayMerger, "_views_read_as_noise", views)
    return calls, noise


@pytest.fixture(scope="session")
def resumed_life():
    """``resumed_life(make, first, second, path) -> (whole, part, back)``: a life saved after ``first`` and
    loaded goes on through ``second`` as the uninterrupted one (merger state compared array for array)."""
    return _resumed_life


@pytest.fixture(scope="session")
def load_script():
    """``load_script(name) -> module``: ``benchmarks/NAME.py`` loaded by path."""
    return _load_script


@pytest.fixture(scope="session")
def random_model():
    """``random_model(rng, H, O, A, *, sparsity=0, sparse=False, zero_rows=0) -> ActionHMM``."""
    return _random_model


@pytest.fixture(scope="session")
def literal_algorithm_1():
    """``literal_algorithm_1(episodes, n_actions) -> (T dict, E list)``: the paper's Algorithm 1."""
    return _literal_algorithm_1


@pytest.fixture(scope="session")
def paper_world():
    """The paper's world: ``gridworld(10, 10, n_colours=10, seed=0)``."""
    return gridworld(10, 10, n_colours=10, seed=0)


@pytest.fixture(scope="session")
def paper_walk(paper_world):
    """80 episodes of 50 random moves in :func:`paper_world` (seed 1)."""
    return random_walk(paper_world, 80, seed=1)


@pytest.fixture(scope="session")
def paper_walk_1000(paper_world):
    """The paper's training protocol: 1,000 episodes of 50 random moves in :func:`paper_world` (seed 0)."""
    return random_walk(paper_world, 1000, 50, seed=0)


@pytest.fixture(scope="session")
def small_world():
    """A 4x4 grid of 4 colours: ``gridworld(4, 4, n_colours=4, seed=1)``."""
    return gridworld(4, 4, n_colours=4, seed=1)


@pytest.fixture(scope="session")
def small_walk(small_world):
    """8 episodes of 12 random moves in :func:`small_world` (seed 2)."""
    return random_walk(small_world, 8, 12, seed=2)
