"""The slip share's floor of the replay learner (``ReplayMerger(slip_floor=True)``,
:func:`hmmmerge.replay.slip_share_floor`): ``e`` is at least the moves'-weighted median share of a row's recorded
moves to another view than its most common one, times ``A / (A - 1)``, capped at the initial ``slip``."""

import os
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.replay import ReplayMerger
from hmmmerge.replay import slip_share_floor as slip_floor

sys.path.insert(0, os.path.dirname(__file__))
from test_replay_cost import _absorb_inputs  # noqa: E402  (random views, pairs and counts)


def _median_by_candidates(share, weight):
    """The weighted median by brute force: the smallest share ``v`` whose rows ``share <= v`` hold at least
    half the weight."""
    half = 0.5 * weight.sum()
    return min(v for v in share.tolist() if weight[share <= v].sum() >= half)


def test_the_floor_of_a_hand_made_count_matrix():
    # recorded moves of rows (action, clone) to three views: the moves to other views than the row's top
    counts = np.array([[[8.0, 2.0, 0.0],    # share 0.2, 10 moves
                        [5.0, 0.0, 0.0]],   # share 0,    5 moves
                       [[0.0, 9.0, 1.0],    # share 0.1, 10 moves
                        [1.0, 1.0, 3.0]]])  # share 0.4,  5 moves
    off = counts.sum(axis=2) - counts.max(axis=2)
    tot = counts.sum(axis=2)
    # sorted shares 0 (5), 0.1 (10), 0.2 (10), 0.4 (5): half the 30 moves is reached at 0.1; x 4 / 3
    assert np.isclose(slip_floor(off, tot, 4), 0.1 * 4 / 3)
    assert np.isclose(slip_floor(off, tot, 2), 0.1 * 2)
    # rows with no moves do not count; one action: nothing to slip to; no moves: no floor
    assert np.isclose(slip_floor(np.r_[off.ravel(), 0.0], np.r_[tot.ravel(), 0.0], 4), 0.1 * 4 / 3)
    assert slip_floor(off, tot, 1) == 0.0 and slip_floor(np.zeros(3), np.zeros(3), 4) == 0.0
    # a deterministic world's rows each go to one view: no floor
    assert slip_floor(np.zeros((2, 2)), tot, 4) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(2, 5), st.booleans(), st.integers(0, 10**6))
def test_the_floor_is_the_weighted_median_found_by_brute_force(n, A, ties, seed):
    rng = np.random.default_rng(seed)
    tot = rng.integers(0, 6, n).astype(float) if ties else rng.random(n) * (rng.random(n) < 0.8)
    off = np.floor(tot * rng.random(n)) if ties else tot * rng.random(n)
    seen = tot > 0
    want = 0.0 if not seen.any() else _median_by_candidates(off[seen] / tot[seen], tot[seen]) * A / (A - 1)
    assert np.isclose(slip_floor(off, tot, A), want, rtol=1e-12, atol=0.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 3), st.sampled_from([0.0, 0.05, 0.3]),
       st.sampled_from([0.0, 0.3]), st.integers(0, 10**6))
def test_absorb_counts_reports_each_rows_moves_to_its_top_view_and_all_its_moves(K, max_size, A, slip, floor, seed):
    """The view moves counted in absorb_counts are, per row ``(a, i)``, the largest and the sum of its
    recorded counts per next view over the batch's blocks that take counts (not the rows the floor drops),
    and counting them changes nothing else."""
    from hmmmerge._replay_kernels import absorb_counts

    starts, sizes, pairs, H, S, Q, C, on, Z = _absorb_inputs(np.random.default_rng(seed), K, max_size, A)
    vmax, vtot = np.zeros((A, H)), np.zeros((A, H))
    for p in np.flatnonzero(on).tolist():
        rows, cols = range(starts[pairs[p, 0]], starts[pairs[p, 0]] + sizes[pairs[p, 0]]), \
            slice(starts[pairs[p, 1]], starts[pairs[p, 1]] + sizes[pairs[p, 1]])
        for i in rows:
            if (C[:, i, cols] > floor).any():
                blk = C[:, i, cols].sum(axis=1)
                vtot[:, i] += blk
                vmax[:, i] = np.maximum(vmax[:, i], blk)
    got, plain = [S.copy(), C.copy(), Z.copy()], [S.copy(), C.copy(), Z.copy()]
    vm = (np.zeros((A, H)), np.zeros((A, H)))
    s_got = absorb_counts(got[0], got[1], Q, got[2], pairs, on, starts, sizes, slip, 0.37, floor, vm)
    s_plain = absorb_counts(plain[0], plain[1], Q, plain[2], pairs, on, starts, sizes, slip, 0.37, floor)
    np.testing.assert_allclose(vm[0], vmax, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vm[1], vtot, rtol=1e-12, atol=1e-12)
    assert s_got == s_plain and all(np.array_equal(g, w) for g, w in zip(got, plain))


def test_the_floor_vanishes_on_a_clean_world_and_holds_e_under_slips():
    """Clean: the learned clones send nearly every row to one view, the floor falls under EM's own share and
    ``e`` is EM's.  Slips 0.1: EM's share sinks below the share the rows show, and ``e`` is held at the floor
    (measured at 300 episodes: clean floor 1e-5 vs EM 4e-5; slipped floor 0.033 vs EM 0.023)."""
    for slip, n in ((0.0, 300), (0.1, 300)):
        env = gridworld(6, 6, n_colours=4, seed=1)
        env = env.with_noise(slip=slip) if slip else env
        m = TwoLevelMemory(4, 4, merger=ReplayMerger(exact=False, slip_floor=True), seed=0).fit(random_walk(env, n, 30, seed=0)).merger_
        floor, em = slip_floor(m._Soff, m._Stot, 4), m._Sslip / m._kept_sums()[1]
        if slip:
            assert 0.02 < floor < float(m.slip) and em < floor and m._slip == floor
        else:
            assert floor < 1e-3 and m._slip == em


def test_a_file_before_the_floor_loads_and_a_damaged_floor_is_refused(tmp_path):
    import pytest

    env = gridworld(5, 5, n_colours=4, seed=1).with_noise(slip=0.1)
    agent = TwoLevelMemory(4, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5, slip_floor=True), seed=3).fit(
        random_walk(env, 40, 20, seed=0))
    d = agent.merger_.state_dict()
    assert d["replay_slip_floor"][1].any()
    old = {k: v for k, v in d.items() if k != "replay_slip_floor"}
    fresh = ReplayMerger(n_clones=3, min_new=5, slip_floor=True)
    fresh.load_state_dict(old)   # a file before the floor: none kept, counted again from the next sleep
    assert fresh._Soff is None and fresh._slip == agent.merger_._slip
    back = ReplayMerger(n_clones=3, min_new=5, slip_floor=True)
    back.load_state_dict(d)
    assert np.array_equal(back._Soff, agent.merger_._Soff) and np.array_equal(back._Stot, agent.merger_._Stot)
    for damage, match in ((lambda x: x[:, :, :-1], "shape"), (lambda x: -x, "outside"),
                          (lambda x: x * np.nan, "NaN"), (lambda x: x[::-1], "more moves")):
        bad = dict(d, replay_slip_floor=damage(d["replay_slip_floor"]))
        with pytest.raises(ValueError, match=r"^a\.npz: replay_slip_floor") as err:
            ReplayMerger(n_clones=3).load_state_dict(bad, source="a.npz")
        assert match in str(err.value)


def test_on_by_default_and_a_life_with_the_floor_resumes_from_a_file_as_it_would_have_gone_on(tmp_path, resumed_life):
    env = gridworld(5, 5, n_colours=4, seed=1).with_noise(slip=0.1)
    first, second = random_walk(env, 40, 20, seed=0), random_walk(env, 30, 20, seed=1)
    assert ReplayMerger().slip_floor
    plain = TwoLevelMemory(4, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5, slip_floor=False),
                           seed=3).fit(first).merger_
    assert plain._Soff is None and not plain.state_dict()["replay_slip_floor"].any()
    assert plain._slip == plain._Sslip / plain._kept_sums()[1]   # EM's share alone

    def make():
        return TwoLevelMemory(4, 4, merger=ReplayMerger(exact=False, n_clones=3, min_new=5), seed=3)

    whole, _, back = resumed_life(make, first, second, tmp_path / "a.npz")
    assert back.merger_.slip_floor
    assert whole.merger_._slip > whole.merger_._Sslip / whole.merger_._kept_sums()[1]   # the floor holds e
