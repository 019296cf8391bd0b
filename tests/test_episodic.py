"""Level 1 (Algorithm 1): hand-made sequences, batch == step-by-step, the HMM view, files."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Trajectories, gridworld, random_walk
from hmmmerge.episodic import EpisodicMemory


def test_states_created_and_reused():
    mem = EpisodicMemory(n_obs=3, n_actions=2)
    assert mem.observe(0, -1) == 0          # first state
    assert mem.observe(1, 0) == 1           # new: no T(0, 0)
    assert mem.observe(2, 1) == 2
    assert mem.n_states == 3
    # the same episode again reuses every state
    assert [mem.observe(o, a) for o, a in [(0, -1), (1, 0), (2, 1)]] == [0, 1, 2]
    assert mem.n_states == 3
    # a different observation after the same action: new state, link overwritten
    assert mem.observe(0, -1) == 0
    assert mem.observe(2, 0) == 3
    assert mem.next_state[0, 0] == 3
    assert mem.emission.tolist() == [0, 1, 2, 2]
    # the counter never reuses an index: state 1 still exists, unreachable via (0, 0)
    assert mem.observe(1, 0) == 4


def test_first_observation_differs_creates_new_start():
    mem = EpisodicMemory(2, 1)
    mem.observe(0, -1)
    mem.observe(1, -1)
    assert mem.start_state == 1 and mem.n_states == 2


def test_batch_equals_step_by_step_and_literal(literal_algorithm_1):
    env = gridworld(5, 5, n_colours=3, seed=2)
    traj = random_walk(env, 40, episode_length=12, seed=3)
    batch = EpisodicMemory(env.n_obs, env.n_actions)
    states, pred = batch.observe_trajectories(traj)
    step = EpisodicMemory(env.n_obs, env.n_actions)
    for e in range(traj.n_episodes):
        for t in range(traj.obs.shape[1]):
            h_expected = step.next_state[traj.actions[e, t], step.current_state] if t else step.start_state
            p = step.emission[h_expected] if h_expected >= 0 else -1
            assert pred[e, t] == p
            assert step.observe(traj.obs[e, t], traj.actions[e, t], traj.states[e, t]) == states[e, t]
    assert np.array_equal(batch.next_state, step.next_state)
    assert np.array_equal(batch.emission, step.emission)
    assert np.array_equal(batch.labels, step.labels)
    T, E = literal_algorithm_1([list(zip(o, a)) for o, a in zip(traj.obs, traj.actions)], env.n_actions)
    assert E == batch.emission.tolist()
    for (h, a), nxt in T.items():
        if h != "start":
            assert batch.next_state[a, h] == nxt


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=8),
                min_size=1, max_size=6))
def test_matches_literal_algorithm_on_random_sequences(literal_algorithm_1, raw):
    episodes = [[(o, -1 if t == 0 else a) for t, (o, a) in enumerate(ep)] for ep in raw]
    mem = EpisodicMemory(3, 3, capacity=1)
    for ep in episodes:
        for o, a in ep:
            mem.observe(o, a)
    T, E = literal_algorithm_1(episodes, 3)
    assert mem.emission.tolist() == E
    assert mem.n_states == len(E)
    known = {(h, a): n for (h, a), n in T.items() if h != "start"}
    assert {(h, a): int(mem.next_state[a, h]) for a in range(3) for h in range(mem.n_states)
            if mem.next_state[a, h] >= 0} == known


def test_labels_are_true_states_at_creation():
    env = gridworld(4, 4, n_colours=2, seed=0)
    traj = random_walk(env, 30, episode_length=10, seed=0)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    states, _ = mem.observe_trajectories(traj)
    first = {}
    for h, s in zip(states.ravel(), traj.states.ravel()):
        first.setdefault(int(h), int(s))
    assert [first[h] for h in range(mem.n_states)] == mem.labels.tolist()
    assert np.array_equal(env.obs[mem.labels], mem.emission)


def test_to_hmm_scores_stored_episodes_perfectly():
    env = gridworld(5, 5, n_colours=4, seed=1)
    traj = random_walk(env, 25, episode_length=15, seed=1)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(traj)
    hmm = mem.to_hmm()
    # the last episode is stored exactly along its path (links may be overwritten for older ones)
    assert hmm.log_likelihood(traj[-1:]) == 0.0
    assert hmm.n_states == mem.n_states


def test_save_load_roundtrip(tmp_path):
    env = gridworld(4, 4, n_colours=3, seed=0)
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(random_walk(env, 10, seed=0))
    path = tmp_path / "mem.npz"
    mem.save(path)
    back = EpisodicMemory.load(path)
    for name in ("next_state", "emission", "labels"):
        assert np.array_equal(getattr(back, name), getattr(mem, name))
    assert (back.n_states, back.current_state, back.start_state) == (mem.n_states, mem.current_state, mem.start_state)
    bad = dict(np.load(path))
    bad["l1_emission"] = bad["l1_emission"][:-1]
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ValueError, match="bad.npz"):
        EpisodicMemory.load(tmp_path / "bad.npz")


def test_bad_inputs():
    with pytest.raises(ValueError, match="n_obs"):
        EpisodicMemory(0, 4)
    mem = EpisodicMemory(3, 2)
    with pytest.raises(ValueError, match="observation 3"):
        mem.observe(3, -1)
    with pytest.raises(ValueError, match="action -1|first observation"):
        mem.observe(0, 1)  # an episode must start with action -1
    mem.observe(0, -1)
    with pytest.raises(ValueError, match="action 2"):
        mem.observe(0, 2)
    with pytest.raises(ValueError, match="observation 5"):
        mem.observe_trajectories(Trajectories([[0, 5]], [[-1, 0]]))
    with pytest.raises(ValueError, match="action 7"):
        mem.observe_trajectories(Trajectories([[0, 1]], [[-1, 7]]))
    with pytest.raises(TypeError):
        mem.observe_trajectories(np.zeros((2, 2)))


def test_state_dict_with_links_algorithm_1_cannot_make_is_refused():
    """Two incoming links, or a link back to an older state, cannot come from Algorithm 1 (the kept
    per-depth counts rely on it): loading such arrays names the problem."""
    from hmmmerge.episodic import EpisodicMemory

    mem = EpisodicMemory(2, 2)
    for o, a in [(0, -1), (1, 0), (0, 1)]:
        mem.observe(o, a)
    good = mem.state_dict()
    assert EpisodicMemory.from_state_dict(good).n_states == 3
    for a, h, target in [(1, 0, 1), (0, 2, 0)]:  # state 1 gets a second parent; state 2 links back to 0
        bad = dict(good)
        bad["l1_next_state"] = good["l1_next_state"].copy()
        bad["l1_next_state"][a, h] = target
        with pytest.raises(ValueError, match="Algorithm 1"):
            EpisodicMemory.from_state_dict(bad, source="x.npz")


def test_views_are_read_only_and_not_copies():
    mem = EpisodicMemory(2, 2, capacity=16)
    for o, a in [(0, -1), (1, 0), (0, 1)]:
        mem.observe(o, a)
    nxt_buf, em_buf, lab_buf, _ = mem.buffers()
    views = {"next_state": mem.next_state, "emission": mem.emission, "labels": mem.labels,
             "kernel next_state": mem.kernel_arrays()[0], "kernel emission": mem.kernel_arrays()[1],
             "states_emitting": mem.states_emitting(0)}
    for name, view in views.items():
        assert not view.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            view[...] = 0
    for view, buf in [(views["next_state"], nxt_buf), (views["emission"], em_buf), (views["labels"], lab_buf),
                      (views["kernel next_state"], nxt_buf), (views["kernel emission"], em_buf)]:
        assert np.shares_memory(view, buf)
    assert mem.kernel_arrays()[0].flags.c_contiguous and mem.kernel_arrays()[0].shape == nxt_buf.shape
    # the memory itself still writes: a view taken before sees the new state (no reallocation below capacity)
    before = mem.kernel_arrays()[1]
    mem.observe(1, 1)
    assert mem.emission.tolist() == [0, 1, 0, 1] and before[3] == 1
    assert nxt_buf.flags.writeable and em_buf.flags.writeable
