"""Merging a clone HMM's duplicate clones (hmmmerge.baselines.clone_merge) and CloneHMM(merge_rounds)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, random_walk
from hmmmerge.baselines.clone_merge import merge_duplicates, odd_visits
from hmmmerge.baselines.em import CloneHMM


def futures(next_state, obs, s, depth):
    """Brute force: the views seen along every action sequence of length ``depth`` from state ``s``."""
    A = len(next_state)
    out = []
    for seq in itertools.product(range(A), repeat=depth):
        t, seen = s, []
        for a in seq:
            t = next_state[a][t]
            seen.append(obs[t])
        out.append(tuple(seen))
    return tuple(out)


def planted(next_state, obs, n_copies, n_episodes, length, seed):
    """Counts of walks in a deterministic world whose every state is spread over ``n_copies`` clones: each
    episode uses one copy (drawn at random) of every state.  Clone ``s * n_copies + k`` is copy ``k`` of ``s``."""
    rng = np.random.default_rng(seed)
    A, S = len(next_state), len(obs)
    C = np.zeros((A, S * n_copies, S * n_copies))
    start = np.zeros(S * n_copies)
    for _ in range(n_episodes):
        k, s = int(rng.integers(n_copies)), int(rng.integers(S))
        start[s * n_copies + k] += 1
        for a in rng.integers(A, size=length):
            t = next_state[a][s]
            C[a, s * n_copies + k, t * n_copies + k] += 1
            s = t
    return C, start, np.repeat(obs, n_copies)


@st.composite
def worlds(draw):
    S = draw(st.integers(3, 7))
    A = draw(st.integers(1, 3))
    next_state = [draw(st.lists(st.integers(0, S - 1), min_size=S, max_size=S)) for _ in range(A)]
    obs = draw(st.lists(st.integers(0, 2), min_size=S, max_size=S))
    return next_state, obs


@settings(max_examples=40, deadline=None)
@given(worlds(), st.integers(1, 3), st.integers(0, 10**6))
def test_rich_data_recovers_the_minimal_machine(world_, n_copies, seed):
    """Every clone tried every move: two clones share a class exactly when their places have the same
    futures (brute force over all action sequences as long as the world has states)."""
    next_state, obs = world_
    S = len(obs)
    C, start, view = planted(next_state, obs, n_copies, 60 * n_copies * S, 40, seed)
    tried = C.sum(axis=2) > 0
    used = C.sum(axis=(0, 2)) + C.sum(axis=(0, 1)) + start > 0
    if not tried[:, used].all():  # a state no walk leaves by every move: not this test's case
        return
    labels = merge_duplicates(C, view, initial=start)
    fut = [(obs[s], futures(next_state, obs, s, S)) for s in range(S)]
    clones = np.flatnonzero(used)
    for i, j in itertools.combinations(clones, 2):
        same_place = fut[i // n_copies] == fut[j // n_copies]
        assert (labels[i] == labels[j]) == same_place, (i, j)
    assert (labels[~used] == -1).all()
    assert sorted(set(labels[used].tolist())) == list(range(labels.max() + 1))


@settings(max_examples=60, deadline=None)
@given(worlds(), st.integers(1, 3), st.integers(1, 12), st.integers(0, 10**6))
def test_merged_classes_agree_on_every_tried_move(world_, n_copies, n_episodes, seed):
    """Sparse data (untried moves are wildcards): within a class, the clones that tried a move went to one
    class; and a class never holds two views."""
    next_state, obs = world_
    C, start, view = planted(next_state, obs, n_copies, n_episodes, 6, seed)
    labels = merge_duplicates(C, view, initial=start)
    for x in range(labels.max() + 1):
        members = np.flatnonzero(labels == x)
        assert len(set(view[members].tolist())) == 1
        for a in range(C.shape[0]):
            succ = {int(labels[j]) for h in members for j in np.flatnonzero(C[a, h])}
            assert len(succ) <= 1, (x, a, succ)


def test_untried_moves_are_wildcards_and_aliasing_two_moves_deep_is_kept_apart():
    """Views 0 1 0 1 on a 4-cycle (move 0 forward, move 1 back) with a third view after place 2: places 0 and
    2 show the same view and the same next view by move 0; only two moves on do they differ."""
    # place p: clones of place 0 are 0 and 4 (4 tried only move 1); place 2: clone 2; extra place 5 (view 2)
    view = np.array([0, 1, 0, 1, 0, 2])
    C = np.zeros((2, 6, 6))
    C[0, 0, 1] = 3; C[0, 1, 2] = 3; C[0, 2, 3] = 3; C[0, 3, 0] = 3   # the cycle by move 0
    C[1, 4, 3] = 2                                                  # clone 4: place 0 by move 1 only
    C[1, 2, 5] = 2; C[1, 0, 3] = 1                                  # move 1 from place 2 shows view 2
    labels = merge_duplicates(C, view)
    assert labels[4] == labels[0]            # pooled: clone 4 tried only what clone 0 agrees with
    assert labels[0] != labels[2]            # aliased: 0 and 2 differ by move 1 (views 1 vs 2)
    C2 = C.copy()
    C2[1, 2, 5] = 0; C2[1, 2, 1] = 2         # now move 1 from place 2 shows view 1 too: one move deep agrees,
    C2[0, 1, 2] = 0; C2[0, 1, 5] = 3         # but place 1 leads by move 0 to view 2 (place 3 to view 0)
    view2 = view.copy()
    labels2 = merge_duplicates(C2, view2)
    assert labels2[0] != labels2[2]          # futures differ two moves on: kept apart by the recursion


def test_merge_duplicates_rejects_bad_input():
    C = np.zeros((1, 2, 2))
    with pytest.raises(ValueError, match="counts must be an"):
        merge_duplicates(np.zeros((2, 2)), [0, 0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        merge_duplicates(-C - 1, [0, 0])
    with pytest.raises(ValueError, match="state_obs must hold"):
        merge_duplicates(C, [0, 0, 1])
    with pytest.raises(ValueError, match="min_count"):
        merge_duplicates(C, [0, 0], min_count=0)
    with pytest.raises(ValueError, match="initial must be"):
        merge_duplicates(C, [0, 0], initial=[1.0])
    with pytest.raises(ValueError, match="one length"):
        odd_visits([0, 1], [0], [-1, 0], 2)
    with pytest.raises(ValueError, match="outside"):
        odd_visits([0, 5], [0, 1], [-1, 0], 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(-1, 1)), min_size=1, max_size=40))
def test_odd_visits_by_brute_force(steps):
    path, obs, acts = (np.array(x) for x in zip(*steps))
    acts[0] = -1
    got = odd_visits(path, obs, acts, 3)
    nxt = {}
    for t in range(len(path) - 1):
        if acts[t + 1] >= 0:
            nxt.setdefault((path[t], acts[t + 1]), []).append(obs[t + 1])
    usual = {k: max(sorted(set(v)), key=v.count) for k, v in nxt.items()}
    want = [t for t in range(len(path) - 1) if acts[t + 1] >= 0 and obs[t + 1] != usual[(path[t], acts[t + 1])]]
    assert got.tolist() == want


def test_merge_rounds_shrink_the_clone_hmm_and_keep_its_likelihood():
    """A 12-cell grid strip with 3 colours, EM with 6 clones per view: merging leaves one clone per place
    it can tell apart, and the training likelihood does not fall."""
    env = Environment.from_arrays(
        [[max(i - 1, 0) for i in range(12)], [min(i + 1, 11) for i in range(12)]],
        [0, 1, 2, 0, 2, 1, 1, 0, 2, 2, 1, 0])
    walks = random_walk(env, 150, 30, seed=3)
    plain = CloneHMM(n_clones=6, n_iter=80, seed=0).fit(walks)
    merged = CloneHMM(n_clones=6, n_iter=80, seed=0, merge_rounds=3).fit(walks)
    assert plain.merge_log_.shape == (0, 4) and merged.merge_log_.shape[0] >= 1
    assert merged.n_states_ < plain.n_states_ and merged.n_clones_.sum() == merged.n_states_
    assert merged.log_likelihood_ >= plain.log_likelihood_ - 1.0
    assert merged.to_hmm().log_likelihood(walks.obs, walks.actions) == pytest.approx(merged.log_likelihood_)
    # the model still describes fresh walks as well
    fresh = random_walk(env, 40, 30, seed=9)
    assert merged.score(fresh) >= plain.score(fresh) - 1.0


def test_moves_into_hardly_used_states_are_left_out():
    """Moves into states below ``min_count`` (dropped, label -1) are no successors: state 2's move 0 leads
    only there (0.3 + 0.3), so it counts as untried and state 2 joins state 0."""
    C = np.zeros((1, 5, 5))
    C[0, 0, 1] = C[0, 1, 0] = 5; C[0, 1, 2] = 3; C[0, 2, 3] = C[0, 2, 4] = 0.3
    labels = merge_duplicates(C, [0, 1, 0, 1, 1])
    assert labels.tolist() == [0, 1, 0, -1, -1]


def test_odd_visits_at_the_worlds_own_rate_are_not_kept_with_significance():
    """200 places on a cycle (move 0 goes round; place h shows view h % 5), 100 laps.  Slipping walk: on
    every fifth lap every next view is 5, at every place alike, so no place has more odd views than the
    path's rate (20 of 100 each).  Deterministic walk: a single odd view is far beyond a rate of 1 in
    20,000, so it is kept."""
    path = np.arange(20_000) % 200
    acts = np.zeros(path.size, dtype=int)
    acts[0] = -1
    views = path % 5
    slipping = views.copy()
    lap = np.arange(path.size) // 200
    slipping[1:][lap[:-1] % 5 == 0] = 5
    assert odd_visits(path, slipping, acts, 200).size == 4000
    assert odd_visits(path, slipping, acts, 200, significance=0.01).size == 0
    clean = views.copy()
    clean[1001] = 5
    assert odd_visits(path, clean, acts, 200, significance=0.01).tolist() == [1000]
    with pytest.raises(ValueError, match="significance"):
        odd_visits(path, clean, acts, 200, significance=0.0)
