"""The variable-order context baseline against a brute-force longest-match predictor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import ActionHMM, Trajectories, gridworld, random_walk
from hmmmerge.baselines.context import ContextModel
from hmmmerge.baselines.first_order import FirstOrderModel
from hmmmerge.evaluate import score_trajectories


def brute_force_predictions(train: Trajectories, test: Trajectories, order: int, n_obs: int,
                            pseudocount: float = 0.0) -> np.ndarray:
    """(N, L+1, O): for each step, scan the training data for the longest suffix of the history
    (at most ``order`` pairs) followed by the step's action; predict the counts seen there."""
    pairs = [list(zip(a.tolist(), o.tolist())) for a, o in zip(train.actions, train.obs)]
    out = np.zeros(test.obs.shape + (n_obs,))
    first = np.bincount(train.obs[:, 0], minlength=n_obs) + pseudocount
    for n in range(test.n_episodes):
        hist = [(-1, int(test.obs[n, 0]))]
        out[n, 0] = first / first.sum()
        for t in range(1, test.obs.shape[1]):
            a = int(test.actions[n, t])
            for ln in range(min(order, len(hist)), -1, -1):
                suffix = hist[len(hist) - ln:]
                counts = np.zeros(n_obs)
                for ep in pairs:
                    for j in range(ln - 1, len(ep) - 1):
                        if ep[j + 1][0] == a and ep[j - ln + 1: j + 1] == suffix:
                            counts[ep[j + 1][1]] += 1
                if counts.sum() > 0:
                    counts += pseudocount
                    out[n, t] = counts / counts.sum()
                    break
            else:
                if pseudocount > 0:
                    out[n, t] = 1.0 / n_obs
            hist.append((a, int(test.obs[n, t])))
    return out


def _random_stochastic_data(seed, n_obs=3, n_actions=2, n_hidden=4, n_train=6, n_test=3, length=7):
    """Episodes of a random stochastic action-HMM: not a deterministic world, every count matters."""
    rng = np.random.default_rng(seed)
    T = rng.dirichlet(np.full(n_hidden, 0.5), size=(n_actions, n_hidden))
    E = rng.dirichlet(np.full(n_obs, 0.5), size=n_hidden)
    hmm = ActionHMM(T, E, rng.dirichlet(np.ones(n_hidden)))
    train = hmm.sample(n_train, length, seed=rng)
    test = hmm.sample(n_test, length, seed=rng)
    return Trajectories(train.obs, train.actions), Trajectories(test.obs, test.actions)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.integers(1, 4), pseudocount=st.sampled_from([0.5, 1.0]))
def test_predictions_equal_brute_force_with_pseudocount(seed, order, pseudocount):
    # with a pseudocount no step has probability 0, so the automaton follows every history exactly
    train, test = _random_stochastic_data(seed)
    model = ContextModel(order=order, pseudocount=pseudocount).fit(train, n_obs=3, n_actions=2)
    got = model.to_hmm().predict_obs(test)
    want = brute_force_predictions(train, test, order, 3, pseudocount)
    np.testing.assert_allclose(got, want, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.integers(1, 5))
def test_predictions_on_training_episodes_equal_brute_force(seed, order):
    # on its own training episodes every observation was seen after its context: no zero step
    train, _ = _random_stochastic_data(seed)
    hmm = ContextModel(order=order).fit(train, n_obs=3, n_actions=2).to_hmm()
    r = hmm.run_filter(train, predictions=True)
    assert not r.no_prediction.any() and np.isfinite(r.log_probs).all()
    np.testing.assert_allclose(r.predictions, brute_force_predictions(train, train, order, 3), atol=1e-12)


def test_grid_world_held_out_matches_brute_force():
    env = gridworld(4, 4, n_colours=3, seed=1)
    train, test = random_walk(env, 40, 15, seed=0), random_walk(env, 4, 15, seed=1)
    model = ContextModel(order=3, pseudocount=0.1).fit(train, env.n_obs, env.n_actions)
    np.testing.assert_allclose(model.to_hmm().predict_obs(test),
                               brute_force_predictions(train, test, 3, env.n_obs, 0.1), atol=1e-12)


def test_states_are_contexts_and_the_automaton_is_deterministic_per_observation():
    env = gridworld(5, 5, n_colours=4, seed=0)
    model = ContextModel(order=3).fit(random_walk(env, 100, 20, seed=0), env.n_obs, env.n_actions)
    hmm = model.to_hmm()
    assert hmm.n_states == model.n_contexts_ == len(np.unique(model.contexts_))
    assert set(model.context_lengths_.tolist()) == {1, 2, 3}
    assert ((hmm.E == 0) | (hmm.E == 1)).all()
    for a in range(env.n_actions):
        T = hmm.T[a].tocsr()
        for s in range(0, hmm.n_states, 97):
            succ = T.indices[T.indptr[s]:T.indptr[s + 1]]
            emitted = hmm.E[succ].argmax(axis=1)
            assert len(set(emitted.tolist())) == len(succ)  # one successor per next observation


def test_order_one_without_actions_in_context_is_close_to_first_order():
    # order 1 conditions on (last action, last observation); in a world with no walls the last action
    # carries no information about the next colour beyond the colour itself, so order 1 ~ first order
    from hmmmerge.gallery import torus

    env = torus(5, 5, n_colours=4, seed=0)
    train, test = random_walk(env, 400, 30, seed=0), random_walk(env, 50, 30, seed=1)
    ctx = score_trajectories(ContextModel(order=1).fit(train, 4, 4).to_hmm(), test)
    fo = score_trajectories(FirstOrderModel().fit(train, 4, 4).to_hmm(), test)
    assert abs(ctx.accuracy - fo.accuracy) < 0.05


def test_longer_contexts_help_on_the_paper_world(paper_world):
    env = paper_world
    train, test = random_walk(env, 300, seed=0), random_walk(env, 30, seed=1)
    acc = {k: score_trajectories(ContextModel(order=k).fit(train, 10, 4).to_hmm(), test).accuracy
           for k in (1, 3)}
    assert acc[3] > acc[1] + 0.2


def test_unseen_action_makes_no_prediction():
    t = Trajectories([[0, 1, 0]], [[-1, 0, 0]])
    hmm = ContextModel(order=2).fit(t, n_obs=2, n_actions=2).to_hmm()
    r = hmm.run_filter([[0, 1]], [[-1, 1]])
    assert r.no_prediction[0, 1]


@pytest.mark.parametrize("kwargs, match", [
    (dict(order=0), "order"), (dict(order=True), "order"), (dict(order=2.5), "order"),
    (dict(pseudocount=-1.0), "pseudocount"), (dict(pseudocount=float("nan")), "pseudocount"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContextModel(**kwargs).fit(Trajectories([[0, 1, 0]], [[-1, 0, 0]]))


def test_bad_fit_inputs():
    t = Trajectories([[0, 1, 0]], [[-1, 0, 0]])
    with pytest.raises(TypeError, match="Trajectories"):
        ContextModel().fit([[0, 1]])
    with pytest.raises(ValueError, match="n_obs"):
        ContextModel().fit(t, n_obs=1)
    with pytest.raises(ValueError, match="62 bits"):
        ContextModel(order=40).fit(t, n_obs=50, n_actions=4)
    with pytest.raises(ValueError, match="not fitted"):
        ContextModel().to_hmm()


def test_cli_baseline_context_scores_the_model_on_the_evaluate_walks(capsys):
    import json

    from hmmmerge.cli import main
    from hmmmerge.commands.evaluate import experiment_generators

    argv = ["baseline", "context", "--grid", "5x5", "--colours", "4", "--episodes", "150", "--episode-length",
            "20", "--eval-episodes", "20", "--seed", "2", "--context-order", "3", "--smoothing", "0.01", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("accuracy", "surprise", "no_prediction_share", "n_states", "wall_s", "model", "episodes"):
        assert key in out
    env = gridworld(5, 5, n_colours=4, seed=2)
    train_rng, eval_rng = experiment_generators(2)
    train, test = random_walk(env, 150, 20, seed=train_rng), random_walk(env, 20, 20, seed=eval_rng)
    model = ContextModel(order=3).fit(train, 4, 4)
    want = score_trajectories(model.to_hmm(), test, smoothing=0.01)
    assert out["model"] == "context" and out["n_states"] == model.n_contexts_
    assert out["accuracy"] == want.accuracy and out["surprise"] == pytest.approx(want.surprise)
