"""Replay's lumping skips, in each refinement round, the blocks whose clones lead only into blocks that the last
round did not split (``_replay_kernels.lump_clones_pairs``; BENCHMARKS.md, "Big-model sleeps, session 16"): the
blocks are those of testing every block in every round (``skip=False``), bit for bit."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge._replay_kernels import lump_clones_pairs


def _chain_counts(rng, K, per_view, A, noise):
    """Counts of a walk on a ring of places, each view shown by several places (so that telling clones apart
    needs several rounds: a split far along the ring travels back one block per round), with a little noise."""
    H = K * per_view
    n_places = H
    view_of_place = rng.integers(0, K, size=n_places)
    view_of_place[:K] = np.arange(K)   # every view used
    order = np.argsort(view_of_place, kind="stable")
    clone_of_place = np.empty(n_places, dtype=np.int64)
    clone_of_place[order] = np.arange(n_places)   # clones of a view are contiguous
    counts = np.zeros((A, H, H))
    for p in range(n_places):
        for a in range(A):
            q = (p + a + 1) % n_places if rng.random() > 0.3 else (p * (a + 2) + 1) % n_places
            counts[a, clone_of_place[p], clone_of_place[q]] += rng.integers(5, 40)
    counts += noise * rng.random(counts.shape) * (rng.random(counts.shape) < 0.05)
    colour = np.sort(view_of_place).astype(np.int64)
    sizes = np.bincount(colour, minlength=K).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return counts, colour, starts, sizes


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), K=st.integers(2, 6), per_view=st.integers(2, 6), A=st.integers(1, 3),
       noise=st.sampled_from([0.0, 0.5, 3.0]), alpha=st.sampled_from([0.0, 0.2]),
       bound=st.sampled_from([0.05, 0.3, 1.36]))
def test_skipping_unchanged_blocks_gives_the_blocks_of_testing_every_block(seed, K, per_view, A, noise, alpha, bound):
    rng = np.random.default_rng(seed)
    counts, colour, starts, sizes = _chain_counts(rng, K, per_view, A, noise)
    # the blocks of every observed pair (views o -> o2 where counts has mass)
    view_mass = np.add.reduceat(np.add.reduceat(counts.sum(axis=0), starts, axis=0), starts, axis=1)
    pairs = np.argwhere(view_mass > 0).astype(np.int64)
    on = np.zeros(counts.shape, dtype=bool)
    for o, o2 in pairs:
        on[:, starts[o]:starts[o] + sizes[o], starts[o2]:starts[o2] + sizes[o2]] = True
    counts = np.where(on, counts, 0.0)
    for rounds in (1, 2, 3, 50):
        args = (counts, 1.0, pairs, starts, sizes, colour, bound, 0.01, rounds, alpha, 3.0)
        assert np.array_equal(lump_clones_pairs(*args), lump_clones_pairs(*args, skip=False)), rounds


def test_a_split_travels_back_along_a_chain_one_block_per_round():
    """A chain of 6 places of one view, the last of which ends elsewhere: round r tells apart the place r steps
    from the end, so the partition is reached in several rounds, where skipped blocks must still be re-tested."""
    H = 6
    counts = np.zeros((1, H + 1, H + 1))
    for i in range(H - 1):
        counts[0, i, i + 1] = 30.0
    counts[0, H - 1, H] = 30.0   # the last place leads to the other view
    counts[0, H, H] = 30.0
    colour = np.array([0] * H + [1], dtype=np.int64)
    starts, sizes = np.array([0, H], dtype=np.int64), np.array([H, 1], dtype=np.int64)
    pairs = np.array([[0, 0], [0, 1], [1, 1]], dtype=np.int64)
    blocks = [lump_clones_pairs(counts, 1.0, pairs, starts, sizes, colour, 0.3, 0.01, r, 0.0, 3.0) for r in (1, 2, 50)]
    assert [int(b.max()) + 1 for b in blocks] == [3, 4, H + 1]   # one more place told apart per round
    for r, b in zip((1, 2, 50), blocks):
        assert np.array_equal(b, lump_clones_pairs(counts, 1.0, pairs, starts, sizes, colour, 0.3, 0.01, r, 0.0,
                                                   3.0, skip=False))
