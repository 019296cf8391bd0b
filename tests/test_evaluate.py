"""The evaluator: surprise, accuracy, purity and position transitions against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t as student_t

from hmmmerge import ActionHMM, Trajectories, gridworld, random_walk
from hmmmerge.baselines.first_order import FirstOrderModel
from hmmmerge.evaluate import (
    cluster_labels,
    evaluate_model,
    position_transition_matrix,
    score_trajectories,
    surprise,
    weighted_purity,
)


@pytest.fixture(scope="module")
def world():
    return gridworld(10, 10, n_colours=10, seed=0)


@pytest.fixture(scope="module")
def first_order(world):
    return FirstOrderModel().fit(random_walk(world, 300, 50, seed=1), world.n_obs, world.n_actions).to_hmm()


# --------------------------------------------------------------------------- oracle
def test_oracle_scores_zero_surprise_and_full_accuracy(world):
    r = evaluate_model(world, world.to_hmm(), n_episodes=100, episode_length=50, seed=3)
    assert r.accuracy == 1.0
    assert r.surprise == 0.0 and r.surprise_ci == (0.0, 0.0)
    assert r.mean_true_prob == 1.0 and r.log_likelihood == 0.0
    assert r.no_prediction_share == 0.0 and r.zero_prob_steps == 0
    assert r.n_states == 100 and r.n_scored_steps == 100 * 50
    assert r.surprise_curve.tolist() == [0.0] * 51


# --------------------------------------------------------------------------- surprise against the filter
@pytest.mark.parametrize("score_first", [False, True])
def test_surprise_is_the_negative_log_likelihood(world, first_order, score_first):
    n, L, seed = 40, 30, 9
    res = surprise(world, first_order, n_episodes=n, episode_length=L, seed=seed, score_first=score_first)
    traj = random_walk(world, n, L, seed=seed)  # the same fresh episodes
    logp = first_order.run_filter(traj).log_probs
    first = 0 if score_first else 1
    per_step = -logp[:, first:]
    assert res.nats_per_step == pytest.approx(per_step.mean(), rel=1e-12)
    assert res.nats_per_episode == pytest.approx(per_step.sum(axis=1).mean(), rel=1e-12)
    if score_first:  # the paper's sur(E, M): -log P(o_{1:T} | a) per episode
        assert res.nats_per_episode == pytest.approx(-first_order.log_likelihood(traj) / n, rel=1e-12)
    np.testing.assert_allclose(res.curve, -logp.mean(axis=0), rtol=1e-12)
    assert len(res.curve) == L + 1
    np.testing.assert_allclose(res.per_episode, per_step.mean(axis=1), rtol=1e-12)
    half = student_t.ppf(0.975, n - 1) * per_step.mean(axis=1).std(ddof=1) / np.sqrt(n)
    assert res.ci95[0] == pytest.approx(res.nats_per_step - half)
    assert res.ci95[1] == pytest.approx(res.nats_per_step + half)
    assert res.n_scored_steps == n * (L + score_first) and res.smoothing is None
    d = res.as_dict()
    assert d["nats_per_step"] == res.nats_per_step and len(d["curve"]) == L + 1


def test_zero_probability_steps_are_infinite_unless_smoothed():
    # a 2-state world the model gets half wrong: it believes every move keeps the colour
    from hmmmerge import Environment

    env = Environment.from_arrays([[1, 0]], [0, 1])  # one action: swap
    model = ActionHMM(np.array([[[1.0, 0.0], [0.0, 1.0]]]), np.eye(2), [1.0, 0.0])
    res = surprise(env, model, n_episodes=5, episode_length=4, seed=0)
    assert res.nats_per_step == np.inf and res.ci95 == (np.inf, np.inf)
    # after each zero-probability step the filter restarts on the observed colour; every move is wrong
    assert res.zero_prob_steps == 5 * 4 and res.no_prediction_share == 0.0
    eps = 0.1
    sm = surprise(env, model, n_episodes=5, episode_length=4, seed=0, smoothing=eps)
    assert sm.smoothing == eps and sm.zero_prob_steps == 20
    assert sm.nats_per_step == pytest.approx(-np.log(eps / 2))
    r = evaluate_model(env, model, n_episodes=5, episode_length=4, smoothing=eps)
    assert r.smoothing == eps and r.accuracy == 0.0 and r.mean_true_prob == 0.0
    assert np.isfinite(r.surprise)


def test_smoothing_formula(world, first_order):
    eps = 0.05
    traj = random_walk(world, 10, 20, seed=4)
    r = score_trajectories(first_order, traj, smoothing=eps)
    p = np.exp(first_order.run_filter(traj).log_probs[:, 1:])
    assert r.surprise == pytest.approx(-np.log((1 - eps) * p + eps / world.n_obs).mean(), rel=1e-12)
    for bad in (0.0, 1.5, -0.1, "0.1", True, np.nan):
        with pytest.raises(ValueError, match="smoothing"):
            score_trajectories(first_order, traj, smoothing=bad)


# --------------------------------------------------------------------------- accuracy
def test_accuracy_is_argmax_with_missing_predictions_wrong(world):
    # first-order model that never saw action 3: no prediction after every "down" move
    train = random_walk(world, 300, 50, seed=5)
    obs, act = train.obs.copy(), train.actions.copy()
    mask = act == 3
    act[mask] = 2  # relabel: the model will have no data for action 3
    fo = FirstOrderModel().fit(Trajectories(obs, act), 10, 4).to_hmm()
    test = random_walk(world, 50, 50, seed=6)
    r = score_trajectories(fo, test)
    pred = fo.predict_obs(test)
    nopred = pred.sum(axis=2) == 0
    expected = ((pred.argmax(axis=2) == test.obs) & ~nopred)[:, 1:].mean()
    assert r.accuracy == pytest.approx(expected)
    assert r.no_prediction_share == pytest.approx((test.actions[:, 1:] == 3).mean())
    assert r.no_prediction_share > 0.15
    assert r.zero_prob_steps >= (test.actions[:, 1:] == 3).sum()
    assert r.surprise == np.inf
    # mean predicted probability of the true observation, missing predictions count 0
    picked = np.take_along_axis(pred, test.obs[:, :, None], axis=2)[:, 1:, 0]
    assert r.mean_true_prob == pytest.approx(picked.mean())


def test_ties_go_to_the_smallest_observation():
    hmm = ActionHMM(np.full((1, 3, 3), 1 / 3), np.eye(3), np.full(3, 1 / 3))
    traj = Trajectories([[2, 0, 1, 0, 2]], [[-1, 0, 0, 0, 0]])
    r = score_trajectories(hmm, traj, score_first=True)
    assert r.accuracy == pytest.approx(2 / 5)  # predicts 0 every time
    assert r.surprise == pytest.approx(np.log(3))


# --------------------------------------------------------------------------- bad inputs
def test_bad_inputs(world, first_order):
    other = gridworld(10, 10, n_colours=7, seed=0)
    with pytest.raises(ValueError, match="n_obs=10 but the environment has n_obs=7"):
        evaluate_model(other, first_order)
    with pytest.raises(ValueError, match="n_obs"):
        surprise(other, first_order)
    one_action = ActionHMM(np.ones((1, 10, 10)) / 10, np.eye(10), np.ones(10) / 10)
    with pytest.raises(ValueError, match="n_actions=1"):
        evaluate_model(world, one_action)
    with pytest.raises(ValueError, match="observation 12"):
        score_trajectories(first_order, Trajectories([[0, 12]], [[-1, 0]]))
    with pytest.raises(ValueError, match="action 7"):
        score_trajectories(first_order, Trajectories([[0, 1]], [[-1, 7]]))
    with pytest.raises(ValueError, match="no episodes"):
        score_trajectories(first_order, Trajectories(np.zeros((0, 5), int), np.zeros((0, 5), int)))
    with pytest.raises(ValueError, match="empty"):
        score_trajectories(first_order, Trajectories(np.zeros((2, 0), int), np.zeros((2, 0), int)))
    with pytest.raises(ValueError, match="nothing to score"):
        score_trajectories(first_order, Trajectories([[0]], [[-1]]))
    with pytest.raises(ValueError, match="empty"):
        evaluate_model(world, first_order, trajectories=Trajectories([[]], [[]]))
    with pytest.raises(TypeError, match="Environment"):
        surprise("grid", first_order)
    with pytest.raises(TypeError, match="ActionHMM"):
        evaluate_model(world, object())
    with pytest.raises(ValueError, match="n_episodes"):
        surprise(world, first_order, n_episodes=0)
    # a single episode has no confidence interval
    r = evaluate_model(world, first_order, n_episodes=1, episode_length=10)
    assert r.surprise_ci is None


# --------------------------------------------------------------------------- purity
def _purity_loop(assignment, labels, include_singletons):
    num = den = 0
    for c in set(assignment) - {-1}:
        members = [labels[i] for i in range(len(labels)) if assignment[i] == c]
        if len(members) < (1 if include_singletons else 2):
            continue
        top = max(members.count(x) for x in set(members))
        num += top  # purity * size
        den += len(members)
    return num / den if den else float("nan")


@pytest.mark.parametrize("seed", range(5))
def test_weighted_purity_against_loop(seed):
    rng = np.random.default_rng(seed)
    n = 200
    assignment = rng.integers(-1, 40, size=n)
    labels = rng.integers(0, 8, size=n)
    for inc in (False, True):
        assert weighted_purity(assignment, labels, include_singletons=inc) == pytest.approx(
            _purity_loop(assignment.tolist(), labels.tolist(), inc)
        )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("spread", ["dense", "sparse ids"])
def test_cluster_top_counts_against_loop(seed, spread):
    """Sizes and top label counts per cluster id, by the dense table and by the sorting fallback."""
    from hmmmerge.evaluate import cluster_top_counts

    rng = np.random.default_rng(seed)
    n = 300
    assignment = rng.integers(-1, 30, size=n)
    labels = rng.integers(0, 6, size=n)
    if spread == "sparse ids":  # ids x labels beyond the dense table: counted by sorting
        assignment = np.where(assignment >= 0, assignment * 10**4, -1)
        labels = labels * 10**3
    sizes, top = cluster_top_counts(assignment, labels)
    k = int(assignment.max()) + 1
    assert sizes.shape == top.shape == (k,) and sizes.dtype == top.dtype == np.int64
    for c in set(assignment.tolist()) - {-1}:
        members = labels[assignment == c].tolist()
        assert sizes[c] == len(members) and top[c] == max(members.count(x) for x in set(members))
    assert sizes.sum() == (assignment >= 0).sum() and top.sum() <= sizes.sum()


def test_purity_edge_cases():
    assert np.isnan(weighted_purity([-1, -1], [0, 1]))
    assert np.isnan(weighted_purity([0, 1, 2], [0, 1, 2]))  # only singletons, skipped
    assert weighted_purity([0, 1, 2], [0, 1, 2], include_singletons=True) == 1.0
    assert weighted_purity([3, 3, 3], [1, 1, 1]) == 1.0
    with pytest.raises(ValueError, match="assignment has 3 entries"):
        weighted_purity([0, 0, 1], [0, 1])
    with pytest.raises(ValueError, match="-1 for unassigned"):
        weighted_purity([0, -2], [0, 1])
    with pytest.raises(ValueError, match="integers"):
        weighted_purity([0.5, 1], [0, 1])


def test_cluster_labels_mode_and_ties():
    assert cluster_labels([0, 0, 1, 1, 2], [4, 2, 3, 1, 0]).tolist() == [2, 1, 0]  # ties -> smallest
    assert cluster_labels([0, 0, -1], [5, 5, 1], n_clusters=3).tolist() == [5, -1, -1]
    with pytest.raises(ValueError, match="n_clusters=2"):
        cluster_labels([0, 2], [0, 0], n_clusters=2)


# --------------------------------------------------------------------------- position transitions
def test_position_transitions_of_the_oracle_are_the_world(world):
    oracle = world.to_hmm()
    S = world.n_states
    tp = position_transition_matrix(oracle, np.arange(S), np.arange(S))
    expected = np.zeros((S, S))
    for a in range(world.n_actions):
        expected[np.arange(S), world.next_state[a]] += 1 / world.n_actions
    np.testing.assert_allclose(tp, expected)
    per = position_transition_matrix(oracle, np.arange(S), np.arange(S), per_action=True)
    assert per.shape == (4, S, S)
    np.testing.assert_allclose(per[1], oracle.T[1].toarray())


def test_position_transitions_against_loop():
    rng = np.random.default_rng(3)
    k, n, P, A = 9, 60, 5, 2
    T2 = rng.random((A, k, k)) * (rng.random((A, k, k)) < 0.4)
    T2[:, :, 0] += 1e-3
    T2[0, 4] = 0.0  # an unknown transition
    T2 /= np.where(T2.sum(2, keepdims=True) > 0, T2.sum(2, keepdims=True), 1)
    level2 = ActionHMM(T2, np.eye(k), np.full(k, 1 / k))
    assignment = rng.integers(-1, k - 1, size=n)  # cluster k-1 stays empty
    labels = rng.integers(0, P, size=n)
    cl = cluster_labels(assignment, labels, n_clusters=k)
    M = np.zeros((P, P))
    for a in range(A):
        for i in range(k):
            for j in range(k):
                if cl[i] >= 0 and cl[j] >= 0:
                    M[cl[i], cl[j]] += T2[a, i, j] / A
    sums = M.sum(1, keepdims=True)
    expected = np.divide(M, sums, out=np.zeros_like(M), where=sums > 0)
    got = position_transition_matrix(level2, assignment, labels, n_positions=P + 2)
    assert got.shape == (P + 2, P + 2)
    np.testing.assert_allclose(got[:P, :P], expected)
    assert (got[P:] == 0).all()
    with pytest.raises(ValueError, match="n_positions"):
        position_transition_matrix(level2, assignment, labels, n_positions=2)


# --------------------------------------------------------------------------- CLI
def _cli_json(capsys, argv):
    import json

    from hmmmerge.cli import main

    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_baseline_and_evaluate(capsys):
    common = ["--grid", "5x5", "--colours", "5", "--episodes", "200", "--episode-length", "20",
              "--eval-episodes", "30", "--seed", "3", "--json"]
    oracle = _cli_json(capsys, ["baseline", "oracle", *common])
    for key in ("accuracy", "surprise", "no_prediction_share", "n_states", "wall_s", "model", "episodes", "seed"):
        assert key in oracle
    assert oracle["accuracy"] == 1.0 and oracle["surprise"] == 0.0 and oracle["n_states"] == 25
    assert oracle["model"] == "oracle" and oracle["episodes"] == 200 and oracle["seed"] == 3
    fo = _cli_json(capsys, ["baseline", "first-order", *common, "--smoothing", "0.01"])
    assert fo["n_states"] == 5 and fo["smoothing"] == 0.01 and 0 < fo["accuracy"] < 1
    table = _cli_json(capsys, ["evaluate", *common, "--smoothing", "0.01", "--clones", "3", "--em-iter", "5",
                               "--bfmm-episodes", "10"])
    rows = {r["model"]: r for r in table["models"]}
    from hmmmerge.models import MODELS

    assert set(rows) == {name for name, entry in MODELS.items() if entry.table}
    for r in rows.values():
        assert 0 <= r["accuracy"] <= 1 and r["n_states"] >= 1 and r["surprise"] >= 0
    assert rows["oracle"]["accuracy"] == 1.0
    assert rows["em"]["n_states"] == 3 * 5
    assert rows["level1"]["n_states"] > rows["level2-none"]["n_states"] > 0
    # same training and evaluation walks as `baseline`: identical numbers
    assert rows["first-order"]["accuracy"] == fo["accuracy"]
    assert rows["first-order"]["surprise"] == fo["surprise"]
    assert table["world"]["n_states"] == 25


def test_cli_bad_arguments(capsys):
    from hmmmerge.cli import main

    assert main(["evaluate", "--models", "oracle,nope", "--json"]) == 2
    assert "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["baseline", "no-such-model"])
    with pytest.raises(SystemExit):
        main(["evaluate", "--smoothing", "0"])
