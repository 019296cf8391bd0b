"""The first-order baseline: counts, closed-form likelihood, and its limits."""

from __future__ import annotations

import numpy as np
import pytest

from hmmmerge import Trajectories, gridworld, random_walk
from hmmmerge.baselines.first_order import FirstOrderModel
from hmmmerge.evaluate import evaluate_model


@pytest.fixture(scope="module")
def data():
    env = gridworld(6, 6, n_colours=4, seed=2)
    return env, random_walk(env, 150, 30, seed=0)


def test_counts_against_loop(data):
    env, traj = data
    fo = FirstOrderModel().fit(traj, env.n_obs, env.n_actions)
    counts = np.zeros((4, 4, 4))
    for n in range(traj.n_episodes):
        for t in range(1, traj.obs.shape[1]):
            counts[traj.actions[n, t], traj.obs[n, t - 1], traj.obs[n, t]] += 1
    np.testing.assert_array_equal(fo.counts_, counts)
    np.testing.assert_array_equal(fo.start_counts_, np.bincount(traj.obs[:, 0], minlength=4))
    hmm = fo.to_hmm()
    assert hmm.n_states == env.n_obs and (hmm.E == np.eye(4)).all()
    np.testing.assert_allclose(hmm.T, counts / counts.sum(axis=2, keepdims=True))


def test_score_is_the_closed_form(data):
    # the belief is always the last observation, so log P = log B[o_0] + sum log T[a_t][o_{t-1}, o_t]
    env, traj = data
    fo = FirstOrderModel(pseudocount=0.5).fit(traj[:100], env.n_obs, env.n_actions)
    hmm = fo.to_hmm()
    test = traj[100:]
    T = hmm.T
    expected = np.log(hmm.B[test.obs[:, 0]]).sum()
    expected += np.log(T[test.actions[:, 1:], test.obs[:, :-1], test.obs[:, 1:]]).sum()
    assert fo.score(test) == pytest.approx(expected, rel=1e-12)


def test_unseen_rows_and_pseudocount():
    traj = Trajectories([[0, 1, 1, 0]], [[-1, 0, 0, 0]])
    fo = FirstOrderModel().fit(traj, n_obs=3, n_actions=2)
    hmm = fo.to_hmm()
    assert hmm.T[1].sum() == 0.0  # action 1 never seen: no prediction
    assert hmm.T[0][2].sum() == 0.0  # observation 2 never seen
    assert hmm.B.tolist() == [1.0, 0.0, 0.0]
    r = hmm.run_filter([[0, 1]], [[-1, 1]])
    assert r.no_prediction[0, 1]
    smooth = FirstOrderModel(pseudocount=1.0).fit(traj, n_obs=3, n_actions=2).to_hmm()
    np.testing.assert_allclose(smooth.T[1], np.full((3, 3), 1 / 3))
    np.testing.assert_allclose(smooth.T[0][0], [1 / 4, 2 / 4, 1 / 4])  # counts 0->0: 0, 0->1: 1
    np.testing.assert_allclose(smooth.B, [2 / 4, 1 / 4, 1 / 4])


def test_first_order_is_the_oracle_when_colours_are_unique():
    env = gridworld(3, 3, n_colours=9, seed=0)  # every cell its own colour
    fo = FirstOrderModel().fit(random_walk(env, 300, 30, seed=1), env.n_obs, env.n_actions)
    r = evaluate_model(env, fo.to_hmm(), n_episodes=50, episode_length=30, seed=2)
    assert r.accuracy == 1.0 and r.surprise == 0.0


def test_first_order_is_not_enough_on_the_paper_world(paper_world, paper_walk_1000):
    env = paper_world
    fo = FirstOrderModel().fit(paper_walk_1000, env.n_obs, env.n_actions)
    r = evaluate_model(env, fo.to_hmm(), n_episodes=200, seed=1, smoothing=1e-3)
    oracle = evaluate_model(env, env.to_hmm(), n_episodes=200, seed=1)
    assert r.accuracy < 0.75 < oracle.accuracy
    assert r.surprise > 0.5 > oracle.surprise
    assert r.no_prediction_share == 0.0  # every (colour, move) pair was seen in 1000 episodes


def test_validation():
    traj = Trajectories([[0, 2]], [[-1, 1]])
    with pytest.raises(ValueError, match="n_obs=2"):
        FirstOrderModel().fit(traj, n_obs=2)
    with pytest.raises(ValueError, match="n_actions=1"):
        FirstOrderModel().fit(traj, n_actions=1)
    with pytest.raises(ValueError, match="pseudocount"):
        FirstOrderModel(pseudocount=-1).fit(traj)  # checked in fit, as scikit-learn does
    with pytest.raises(ValueError, match="not fitted"):
        FirstOrderModel().to_hmm()
    with pytest.raises(TypeError, match="Trajectories"):
        FirstOrderModel().fit([[0, 1]])
    with pytest.raises(ValueError, match="no episodes"):
        FirstOrderModel().fit(Trajectories(np.zeros((0, 3), int), np.zeros((0, 3), int)))
    fo = FirstOrderModel().fit(traj)
    assert (fo.n_obs_, fo.n_actions_) == (3, 2)
    assert fo.fit(traj, n_obs=5).to_hmm().n_obs == 5  # refit resets the cached model


def test_estimator_conventions_and_input_forms():
    """Parameters as attributes, repr from them, the same fit from every accepted input form."""
    traj = random_walk(gridworld(4, 4, n_colours=3, seed=1), 20, 10, seed=2)
    fo = FirstOrderModel(pseudocount=0.5)
    assert fo.get_params() == {"pseudocount": 0.5} and repr(fo) == "FirstOrderModel(pseudocount=0.5)"
    assert repr(FirstOrderModel()) == "FirstOrderModel()"
    ref = fo.fit(traj).counts_.copy()
    for form in ((traj.obs, traj.actions), (traj.obs.ravel(), traj.actions.ravel())):
        assert np.array_equal(FirstOrderModel(**fo.get_params()).fit(form).counts_, ref)
    # a new fit starts afresh: the counts of the first data are gone
    half = traj[:10]
    assert np.array_equal(fo.fit(traj).fit(half).counts_, FirstOrderModel().fit(half).counts_)
