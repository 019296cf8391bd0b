"""AALpy's RPNI and ALERGIA converted to ActionHMM: the converted model predicts what the automaton predicts."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aalpy")

from hmmmerge import Trajectories, gridworld, random_walk  # noqa: E402
from hmmmerge.baselines.aalpy_models import (  # noqa: E402
    RESET, AlergiaModel, RPNIModel, alergia_data, rpni_data,
)
from hmmmerge.evaluate import score_trajectories  # noqa: E402


@pytest.fixture(scope="module")
def world_data():
    env = gridworld(4, 4, n_colours=3, seed=0)
    return env, random_walk(env, 60, 12, seed=0), random_walk(env, 20, 12, seed=1)


def test_rpni_hmm_predicts_the_machine_output(world_data):
    env, train, test = world_data
    model = RPNIModel().fit(train, env.n_obs, env.n_actions)
    machine, hmm = model.automaton_, model.to_hmm()
    assert hmm.n_states == len(machine.states) - 1  # the synthetic root is dropped
    pred = hmm.predict_obs(test)
    compared = 0
    for n in range(test.n_episodes):
        machine.reset_to_initial()
        expected_first = machine.step(RESET)
        assert pred[n, 0].argmax() == expected_first and pred[n, 0].max() == 1.0
        for t in range(1, test.obs.shape[1]):
            a = int(test.actions[n, t])
            if a not in machine.current_state.transitions:
                assert pred[n, t].sum() == 0.0  # undefined input: no prediction
                break
            out = machine.step(a)
            assert pred[n, t].max() == 1.0 and pred[n, t].argmax() == out
            compared += 1
            if out != test.obs[n, t]:
                break  # the filter restarts on a wrong prediction, the machine does not
    assert compared > 50


def test_rpni_is_consistent_with_its_training_data(world_data):
    env, train, _ = world_data
    hmm = RPNIModel().fit(train, env.n_obs, env.n_actions).to_hmm()
    r = score_trajectories(hmm, train)
    assert r.accuracy == 1.0 and r.surprise == 0.0


def test_alergia_hmm_predicts_the_mdp_distribution(world_data):
    env, train, test = world_data
    model = AlergiaModel(eps=0.5).fit(train, env.n_obs, env.n_actions)
    mdp, hmm = model.automaton_, model.to_hmm()
    pred = hmm.predict_obs(train[:10])
    checked = 0
    for n in range(10):
        mdp.reset_to_initial()
        for t in range(train.obs.shape[1]):
            a = RESET if t == 0 else int(train.actions[n, t])
            want = np.zeros(env.n_obs)
            for nxt, p in mdp.current_state.transitions.get(a, []):
                want[nxt.output] += p
            np.testing.assert_allclose(pred[n, t], want / want.sum(), atol=1e-6)  # AALpy rounds to 1e-8ish
            assert mdp.step_to(a, int(train.obs[n, t])) is not None
            checked += 1
    assert checked == 10 * train.obs.shape[1]


def test_noisy_data_rpni_refuses_alergia_accepts():
    env = gridworld(3, 3, n_colours=3, seed=0)
    traj = random_walk(env, 30, 10, seed=0)
    obs = traj.obs.copy()
    obs[1:, 3] = (obs[1:, 3] + 1) % 3  # the same prefix now has two colours
    obs[0, 3] = traj.obs[0, 3]
    a = traj.actions.copy()
    a[1:, 1:4] = a[0, 1:4]
    noisy = Trajectories(obs, a)
    with pytest.raises(ValueError, match="RPNI needs deterministic data"):
        RPNIModel().fit(noisy, 3, 4)
    hmm = AlergiaModel().fit(noisy, 3, 4).to_hmm()
    assert np.isfinite(hmm.log_likelihood(noisy))


def test_no_common_start_rpni_refuses_alergia_learns_the_start_distribution():
    env = gridworld(3, 3, n_colours=3, seed=0)
    rng = np.random.default_rng(0)
    starts = [random_walk(env, 1, 8, seed=rng) for _ in range(2)]
    traj = Trajectories(np.vstack([starts[0].obs, (starts[1].obs + 1) % 3]), np.vstack([s.actions for s in starts]))
    with pytest.raises(ValueError, match="common start"):
        RPNIModel().fit(traj, 3, 4)
    hmm = AlergiaModel().fit(traj, 3, 4).to_hmm()
    assert sorted(np.flatnonzero(hmm.B @ hmm.E).tolist()) == sorted({int(traj.obs[0, 0]), int(traj.obs[1, 0])})


def test_data_formats():
    t = Trajectories([[0, 1, 1]], [[-1, 0, 1]])
    assert rpni_data(t) == [[(), -1], [(-1,), 0], [(-1, 0), 1], [(-1, 0, 1), 1]]
    assert alergia_data(t) == [[-1, (-1, 0), (0, 1), (1, 1)]]


def test_bad_arguments():
    t = Trajectories([[0, 1, 0]], [[-1, 0, 0]])
    with pytest.raises(ValueError, match="eps"):
        AlergiaModel(eps=0.0).fit(t)
    with pytest.raises(ValueError, match="algorithm"):
        RPNIModel(algorithm="fast").fit(t)
    with pytest.raises(ValueError, match="not fitted"):
        RPNIModel().to_hmm()
    with pytest.raises(TypeError, match="Trajectories"):
        AlergiaModel().fit([[0, 1]])
