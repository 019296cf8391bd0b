"""The Bayes-factor test of replay's lumping (``_replay_kernels._log_bayes_factor``): the closed form of
Dirichlet-multinomial marginals against the Polya urn, its invariants, and what it changes in the lumping:
thin clones with different futures are kept apart where Hoeffding's bound lumps them, clones that agree or
share no action still lump."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge.replay import ReplayMerger


def log_bf(x, y, alpha, nb, floor=0.0):
    """The kernel's log Bayes factor of dense (A, nb) count vectors ``x`` and ``y`` (actions whose
    frequencies all differ by less than ``floor`` left out)."""
    from hmmmerge._replay_kernels import _log_bayes_factor

    A = x.shape[0]
    vec, pool = x.ravel().copy(), y.ravel().copy()
    vsup, psup = np.flatnonzero(vec).astype(np.int64), np.flatnonzero(pool).astype(np.int64)
    tol = np.where((x.sum(axis=1) > 0) & (y.sum(axis=1) > 0), 0.0, -1.0)
    vsup_full, psup_full = np.zeros(A * nb, dtype=np.int64), np.zeros(A * nb, dtype=np.int64)
    vsup_full[:len(vsup)], psup_full[:len(psup)] = vsup, psup
    scratch = [np.zeros(A) for _ in range(5)]
    return _log_bayes_factor(vec, vsup_full, len(vsup), pool, psup_full, len(psup), tol, nb, A, alpha, floor,
                             x.sum(axis=1), y.sum(axis=1), *scratch)


def polya(v, k, alpha):
    """log P(a sequence with counts ``v``) under a Dirichlet(alpha, ..., alpha) over ``k`` outcomes, by the
    Polya urn: each draw has probability (alpha + draws of its outcome so far) / (k alpha + draws so far)."""
    out, t = 0.0, 0
    for c in v:
        for j in range(int(c)):
            out += np.log(alpha + j) - np.log(k * alpha + t)
            t += 1
    return out


def gammaln_form(x, y, alpha):
    """The closed form with scipy's gammaln, per action on the next blocks either side saw."""
    from scipy.special import gammaln

    out = 0.0
    for a in range(x.shape[0]):
        if x[a].sum() == 0 or y[a].sum() == 0:
            continue
        seen = (x[a] > 0) | (y[a] > 0)
        k = seen.sum()

        def dm(v):
            return gammaln(k * alpha) - gammaln(v.sum() + k * alpha) + (gammaln(v[seen] + alpha) - gammaln(alpha)).sum()

        out += dm(x[a]) + dm(y[a]) - dm(x[a] + y[a])
    return out


counts = st.integers(1, 3).flatmap(lambda A: st.integers(1, 5).flatmap(lambda nb: st.tuples(
    st.just(nb),
    st.lists(st.integers(0, 6), min_size=A * nb, max_size=A * nb),
    st.lists(st.integers(0, 6), min_size=A * nb, max_size=A * nb))))


@settings(max_examples=200, deadline=None)
@given(counts, st.sampled_from([0.001, 0.01, 0.05, 0.3, 1.0]))
def test_the_log_bayes_factor_is_the_polya_urn_of_both_sides_against_the_pooled_one(c, alpha):
    nb, x, y = c
    x, y = np.array(x, float).reshape(-1, nb), np.array(y, float).reshape(-1, nb)
    want = 0.0
    for a in range(x.shape[0]):
        if x[a].sum() and y[a].sum():   # an action one side never took is not tested
            k = int(((x[a] > 0) | (y[a] > 0)).sum())
            want += polya(x[a], k, alpha) + polya(y[a], k, alpha) - polya(x[a] + y[a], k, alpha)
    assert log_bf(x, y, alpha, nb) == pytest.approx(want, rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(0, 2**32 - 1), st.floats(0.001, 1.0))
def test_soft_counts_follow_the_gammaln_closed_form_and_the_invariants(A, nb, seed, alpha):
    rng = np.random.default_rng(seed)
    x = rng.gamma(0.5, 3.0, (A, nb)) * (rng.random((A, nb)) < 0.6)
    y = rng.gamma(0.5, 3.0, (A, nb)) * (rng.random((A, nb)) < 0.6)
    x[x < 1e-3] = 0.0
    y[y < 1e-3] = 0.0
    f = log_bf(x, y, alpha, nb)
    assert f == pytest.approx(gammaln_form(x, y, alpha), rel=1e-9, abs=1e-9)
    # swapping the sides gives the same factor
    assert log_bf(y, x, alpha, nb) == pytest.approx(f, rel=1e-12, abs=1e-12)
    # identical evidence never tells apart: P(x)^2 <= P(x + x) (Jensen), the factor is at most 0
    assert log_bf(x, x, alpha, nb) <= 1e-9
    # no action in common: nothing is tested
    if A > 1:
        y1, x1 = y.copy(), x.copy()
        x1[1:] = 0.0
        y1[:1] = 0.0
        assert log_bf(x1, y1, alpha, nb) == 0.0


def _thin_world(m=3.0):
    """One action.  Colour 0: clone 0 (a busy place, 10 moves to clone 3), clone 1 (a rarely visited place:
    ``m`` moves to clone 4, another view), clone 2 (3 moves to clone 3: the busy place again, thinly).
    Colours 1 and 2: clones 3 and 4, each going back to clone 0."""
    counts = np.zeros((1, 5, 5))
    counts[0, 0, 3], counts[0, 1, 4], counts[0, 2, 3] = 10.0, m, 3.0
    counts[0, 3, 0] = counts[0, 4, 0] = 10.0
    return counts, np.array([0, 0, 0, 1, 2])


def test_thin_clones_with_different_futures_are_kept_apart_where_hoeffding_lumps_them():
    from hmmmerge._replay_kernels import lump_clones

    bound, threshold = float(np.sqrt(0.5 * np.log(2 / 0.05))), float(np.log(1 / 0.05))
    for m in (1.0, 3.0):
        counts, colour = _thin_world(m)
        # Hoeffding: |1 - 0| < 1.36 (1/sqrt(10) + 1/sqrt(m)), so clone 1 joins clone 0's group
        hoeffding = lump_clones(counts, colour, bound, 0.2, 50)
        assert hoeffding[0] == hoeffding[1] == hoeffding[2]
        # m moves to X against 10 to Y under a sharp prior (one main successor): decisive (log factor 6.2
        # for one move, 10.4 for three, > log 20 = 3.0); clone 2 agrees with clone 0 and still lumps
        sharp = lump_clones(counts, colour, bound, 0.2, 50, 0.01, threshold)
        assert sharp[0] == sharp[2] != sharp[1] and sharp[3] != sharp[4]
    # a broad prior (a world far from deterministic, alpha 1): one move against 10 (log factor 1.8) lumps
    # as Hoeffding does; three moves (4.5) do not
    counts, colour = _thin_world(1.0)
    assert lump_clones(counts, colour, bound, 0.2, 50, 1.0, threshold).tolist() == [0, 0, 0, 1, 2]
    counts, colour = _thin_world(3.0)
    assert lump_clones(counts, colour, bound, 0.2, 50, 1.0, threshold)[1] != 0


def test_frequencies_within_the_tolerance_are_not_evidence():
    # a place seen 400 times with 7.6% of its moves off the main successor, its duplicate 790 times with
    # 1.7%: decisive for the Bayes factor, but within the 0.2 tolerance (EM's own imprecision)
    x, y = np.array([[32.0, 394.0]]), np.array([[14.0, 777.0]])
    assert log_bf(x, y, 0.03, 2) > 7.0 > np.log(20)
    assert log_bf(x, y, 0.03, 2, floor=0.2) == 0.0
    # one action within it, one beyond: only the second counts
    x2, y2 = np.vstack([x, [[0.0, 3.0]]]), np.vstack([y, [[10.0, 0.0]]])
    assert log_bf(x2, y2, 0.03, 2, floor=0.2) == pytest.approx(log_bf(x2[1:], y2[1:], 0.03, 2))


def test_a_clone_with_no_action_in_common_still_lumps():
    from hmmmerge._replay_kernels import lump_clones

    counts, colour = _thin_world()
    two = np.zeros((2, 5, 5))
    two[0] = counts[0]
    two[1, 1, 4], two[0, 1, 4] = 3.0, 0.0    # clone 1 moves by action 1 only: no action shared with clone 0
    block = lump_clones(two, colour, 1.36, 0.2, 50, 0.01, 3.0)
    assert block[0] == block[1] == block[2]


def test_the_merger_takes_its_concentration_from_its_noise_and_slip_estimates():
    m = ReplayMerger(dirichlet=0.01)
    m._noise, m._slip = 0.0, 0.001
    assert m._concentration() == 0.01
    m._noise, m._slip = 0.04, 0.03
    assert m._concentration() == pytest.approx(0.07)
    m.dirichlet = 0.0
    assert m._concentration() == 0.0
    with pytest.raises(ValueError, match="dirichlet"):
        ReplayMerger(dirichlet=-0.1)._validate_params()


def test_without_the_bayes_factor_test_the_lumping_is_hoeffding_alone():
    from hmmmerge import gridworld, random_walk
    from hmmmerge._replay_kernels import lump_clones_pairs
    from hmmmerge.agent import TwoLevelMemory

    agent = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False, dirichlet=0.0), seed=0).fit(random_walk(gridworld(), 60, seed=1))
    m = agent.merger_
    m._lump()
    hoeffding = lump_clones_pairs(m._S, m._g / m._var, m._pairs, m._starts, m._sizes, m._colour,
                                  float(np.sqrt(0.5 * np.log(2.0 / m.risk))), m.tolerance, 50)
    assert m._block.tolist() == hoeffding.tolist()
    m.dirichlet = 0.01
    m._noise, m._slip = 0.02, 0.01
    m._lump()
    sharp = lump_clones_pairs(m._S, m._g / m._var, m._pairs, m._starts, m._sizes, m._colour,
                              float(np.sqrt(0.5 * np.log(2.0 / m.risk))), m.tolerance, 50, 0.03, np.log(1 / m.risk))
    assert m._block.tolist() == sharp.tolist()
