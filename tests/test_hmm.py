"""ActionHMM: the scaled forward filter against brute force, hmmlearn and closed forms."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import ActionHMM, Trajectories, gridworld, random_walk


# --------------------------------------------------------------------------- helpers
def dense_T(hmm):
    return np.stack([m.toarray() for m in hmm.T]) if hmm.is_sparse else hmm.T


def brute_force(hmm, obs, actions):
    """Joint P(o_0..o_t, h_t) for every t by summing over all hidden paths (no filter code)."""
    T, E, B = dense_T(hmm), hmm.E, hmm.B
    H, L = hmm.n_states, len(obs)
    loglik, preds, posts = [], [], []
    for t in range(L):
        joint_h = np.zeros(H)  # P(o_0..o_t, h_t)
        joint_pred = np.zeros(hmm.n_obs)  # P(o_0..o_{t-1}, o_t = k)
        for path in itertools.product(range(H), repeat=t + 1):
            p = B[path[0]]
            for s in range(1, t + 1):
                p *= T[actions[s], path[s - 1], path[s]]
            for s in range(t):
                p *= E[path[s], obs[s]]
            joint_pred += p * E[path[t]]
            joint_h[path[t]] += p * E[path[t], obs[t]]
        prev = joint_pred.sum()  # P(o_0..o_{t-1})
        preds.append(joint_pred / prev)
        posts.append(joint_h / joint_h.sum())
        loglik.append(np.log(joint_h.sum()))
    return loglik[-1], np.array(preds), np.array(posts)


def random_episode(rng, hmm, L):
    obs = rng.integers(0, hmm.n_obs, size=L)
    acts = rng.integers(0, hmm.n_actions, size=L)
    acts[0] = -1
    return obs, acts


# --------------------------------------------------------------------------- brute force
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_against_brute_force(seed, sparse, random_model):
    rng = np.random.default_rng(seed)
    H, O, A = 3, 3, 2 + seed % 2
    hmm = random_model(rng, H, O, A, sparsity=0.3 if sparse else 0.0, sparse=sparse)
    episodes = [hmm.sample(1, 5, seed=seed * 10 + k) for k in range(3)]  # positive probability
    obs = np.concatenate([e.obs for e in episodes])
    acts = np.concatenate([e.actions for e in episodes])
    total = 0.0
    preds, posts = hmm.predict_obs(obs, acts), hmm.filter(obs, acts)
    for n in range(len(episodes)):
        ll, bp, bpost = brute_force(hmm, obs[n], acts[n])
        total += ll
        np.testing.assert_allclose(preds[n], bp, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(posts[n], bpost, rtol=1e-10, atol=1e-13)
        # a single episode gives 2-D results and the same numbers
        np.testing.assert_allclose(hmm.predict_obs(obs[n], acts[n]), bp, rtol=1e-10, atol=1e-13)
        assert hmm.log_likelihood(obs[n], acts[n]) == pytest.approx(ll, rel=1e-10)
    assert hmm.log_likelihood(obs, acts) == pytest.approx(total, rel=1e-10)
    assert hmm.log_likelihood(Trajectories(obs, acts)) == pytest.approx(total, rel=1e-10)


def test_predictions_are_distributions_and_match_log_probs(random_model):
    rng = np.random.default_rng(7)
    hmm = random_model(rng, 6, 4, 3)
    traj = hmm.sample(5, 20, seed=1)
    r = hmm.run_filter(traj, predictions=True, posteriors=True)
    np.testing.assert_allclose(r.predictions.sum(axis=2), 1.0, atol=1e-12)
    np.testing.assert_allclose(r.posteriors.sum(axis=2), 1.0, atol=1e-12)
    picked = np.take_along_axis(r.predictions, traj.obs[:, :, None], axis=2)[:, :, 0]
    np.testing.assert_allclose(np.log(picked), r.log_probs, rtol=1e-12)
    assert r.log_likelihood == pytest.approx(r.log_probs.sum())


# --------------------------------------------------------------------------- hmmlearn
@pytest.mark.parametrize("seed", range(3))
def test_against_hmmlearn_one_action(seed, random_model):
    from hmmlearn.hmm import CategoricalHMM

    rng = np.random.default_rng(100 + seed)
    H, O = 5 + seed, 4
    hmm = random_model(rng, H, O, 1)
    traj = hmm.sample(4, 30, seed=seed)
    for impl in ("log", "scaling"):
        ref = CategoricalHMM(n_components=H, n_features=O, implementation=impl)
        ref.startprob_, ref.transmat_, ref.emissionprob_ = hmm.B, hmm.T[0], hmm.E
        X = traj.obs.reshape(-1, 1)
        lengths = [traj.obs.shape[1]] * traj.n_episodes
        assert hmm.log_likelihood(traj.obs) == pytest.approx(ref.score(X, lengths), rel=1e-10)
        # per-episode filtered posterior at the last step equals hmmlearn's smoothed one there
        post = ref.predict_proba(traj.obs[0].reshape(-1, 1))
        np.testing.assert_allclose(hmm.filter(traj.obs[0])[-1], post[-1], rtol=1e-8, atol=1e-12)


# --------------------------------------------------------------------------- sparse == dense
@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    H=st.integers(1, 7),
    O=st.integers(1, 4),
    A=st.integers(1, 3),
    zero_rows=st.sampled_from([0.0, 0.3, 0.8]),
    sparsity=st.sampled_from([0.0, 0.5, 0.9]),
)
def test_sparse_equals_dense(seed, H, O, A, zero_rows, sparsity, random_model):
    rng = np.random.default_rng(seed)
    dense = random_model(rng, H, O, A, sparsity=sparsity, zero_rows=zero_rows)
    sparse = ActionHMM([sp.csr_matrix(dense.T[a]) for a in range(A)], dense.E, dense.B)
    assert sparse.is_sparse and not dense.is_sparse
    # arbitrary (not sampled) observations: exercises zero-probability steps and restarts
    obs = rng.integers(0, O, size=(3, 12))
    acts = rng.integers(0, A, size=(3, 12))
    acts[:, 0] = -1
    rd = dense.run_filter(obs, acts, predictions=True, posteriors=True)
    rs = sparse.run_filter(obs, acts, predictions=True, posteriors=True)
    np.testing.assert_array_equal(rd.no_prediction, rs.no_prediction)
    np.testing.assert_array_equal(np.isneginf(rd.log_probs), np.isneginf(rs.log_probs))
    fin = np.isfinite(rd.log_probs)
    np.testing.assert_allclose(rd.log_probs[fin], rs.log_probs[fin], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rd.predictions, rs.predictions, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(rd.posteriors, rs.posteriors, rtol=1e-12, atol=1e-14)
    assert sparse.to_dense().T.shape == (A, H, H)


# --------------------------------------------------------------------------- zero rows / restart
def _partial_model():
    # states 0, 1 emit observation 0; state 2 emits 1; state 3 emits 0 or 2
    E = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0.5, 0, 0.5]], dtype=float)
    T = np.zeros((1, 4, 4))
    T[0, 0, 2] = 1.0  # 0 -> 2; state 1 has no successor (zero row)
    T[0, 2, 3] = 1.0  # 2 -> 3
    T[0, 3, 0] = 1.0  # 3 -> 0
    return T, E


def test_zero_rows_renormalise_over_states_with_successors():
    T, E = _partial_model()
    hmm = ActionHMM(T, E, [0.5, 0.5, 0, 0])
    r = hmm.run_filter([[0, 1]], [[-1, 0]], predictions=True)
    # belief {0: .5, 1: .5}; only state 0 has a successor, so the prediction is T[0][0] -> state 2 -> obs 1
    assert r.predictions[0, 1].tolist() == [0.0, 1.0, 0.0]
    assert r.log_probs[0, 1] == 0.0 and not r.no_prediction[0, 1]
    # the first step is predicted from B: P(o=0) = 1
    assert r.log_probs[0, 0] == 0.0


@pytest.mark.parametrize("sparse", [False, True])
def test_no_prediction_and_recovery(sparse):
    T, E = _partial_model()
    Tm = [sp.csr_matrix(T[0])] if sparse else T
    hmm = ActionHMM(Tm, E, [0, 1.0, 0, 0])  # start in state 1, which has no successor
    r = hmm.run_filter([[0, 1, 0, 1]], [[-1, 0, 0, 0]], predictions=True, posteriors=True)
    assert r.no_prediction[0].tolist() == [False, True, False, False]
    assert r.log_probs[0, 1] == -np.inf
    assert r.predictions[0, 1].tolist() == [0.0, 0.0, 0.0]
    # restart from the states emitting o_1 = 1, i.e. state 2; then 2 -> 3 emits 0 w.p. 0.5
    assert r.posteriors[0, 1].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert r.log_probs[0, 2] == pytest.approx(np.log(0.5))
    assert r.predictions[0, 2].tolist() == [0.5, 0.0, 0.5]
    # then 3 -> 0 -> predicts obs 0 with prob 1, but we saw 1: zero probability *with* a prediction
    assert r.log_probs[0, 3] == -np.inf and not r.no_prediction[0, 3]
    assert r.posteriors[0, 3].tolist() == [0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("sparse", [False, True])
def test_restart_weights_by_emission_and_falls_back_to_B(sparse):
    E = np.array([[0.2, 0.8, 0.0], [0.6, 0.4, 0.0], [0.0, 0.0, 1.0]])
    T = np.array([[[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]])  # everything -> state 2
    B = np.array([0.25, 0.75, 0.0])
    hmm = ActionHMM([sp.csr_matrix(T[0])] if sparse else T, E, B)
    post = hmm.filter([2, 0], [-1, 0])
    # o_0 = 2 has probability 0 under B; restart: states emitting 2 -> state 2
    assert post[0].tolist() == [0.0, 0.0, 1.0]
    # o_1 = 0 impossible from state 2: restart proportional to E[:, 0] = (0.2, 0.6, 0)
    np.testing.assert_allclose(post[1], [0.25, 0.75, 0.0])
    # an observation no state emits restarts from B
    E2 = np.array([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]])
    hmm2 = ActionHMM([sp.csr_matrix(T[0])] if sparse else T, E2, B)
    np.testing.assert_allclose(hmm2.filter([2, 0], [-1, 0])[0], B)


# --------------------------------------------------------------------------- long sequences
def test_million_steps_closed_form():
    # two states, any move lands in either with prob 1/2; E identity: every step has P = 1/2
    hmm = ActionHMM(np.full((2, 2, 2), 0.5), np.eye(2), [0.5, 0.5])
    rng = np.random.default_rng(0)
    L = 1_000_000
    obs = rng.integers(0, 2, size=L)
    acts = rng.integers(0, 2, size=L)
    acts[0] = -1
    ll = hmm.log_likelihood(obs, acts)
    assert np.isfinite(ll)
    assert ll == pytest.approx(L * np.log(0.5), rel=1e-12)


def test_million_steps_equals_sum_of_independent_chunks():
    # state 0 is the only emitter of observation 0 and is rarely visited, so every
    # occurrence of o = 0 pins the belief: the likelihood factorises at those points
    rng = np.random.default_rng(1)
    H, O, A = 4, 3, 2
    T = rng.random((A, H, H)) + 0.1
    T[:, :, 0] = 0.0015
    T /= T.sum(axis=2, keepdims=True)
    E = np.array([[1.0, 0, 0], [0, 0.7, 0.3], [0, 0.2, 0.8], [0, 0.5, 0.5]])
    B = np.array([1.0, 0, 0, 0])
    hmm = ActionHMM(T, E, B)
    # any sequence has positive probability (all transitions into states 1..3 are positive);
    # o = 0 appears rarely, as in a sample, but drawing it directly avoids a 1e6-step Python loop
    L = 1_000_000
    obs = np.where(rng.random(L) < 0.001, 0, rng.integers(1, O, size=L))
    obs[0] = 0
    acts = rng.integers(0, A, size=L)
    acts[0] = -1
    ll = hmm.log_likelihood(obs, acts)
    assert np.isfinite(ll) and ll < -1e5
    cuts = np.flatnonzero(obs == 0)
    assert cuts[0] == 0 and 100 < len(cuts) < 5000
    bounds = list(cuts) + [len(obs) - 1]
    parts = 0.0
    for s, e in zip(bounds[:-1], bounds[1:]):
        # chunk o_s..o_e from a fresh start in state 0 (o_s = 0 has probability 1 there)
        a = acts[s : e + 1].copy()
        a[0] = -1
        parts += hmm.log_likelihood(obs[s : e + 1], a)
    assert ll == pytest.approx(parts, rel=1e-9)


# --------------------------------------------------------------------------- validation
GOOD_T = np.array([[[0.5, 0.5], [0.0, 1.0]]])
GOOD_E = np.eye(2)
GOOD_B = np.array([1.0, 0.0])


@pytest.mark.parametrize(
    "T, E, B, match",
    [
        (np.array([[[0.5, 0.4], [0.0, 1.0]]]), GOOD_E, GOOD_B, r"T\[0\] row 0 sums to 0.9"),
        (np.array([[[1.5, -0.5], [0.0, 1.0]]]), GOOD_E, GOOD_B, "negative"),
        (np.array([[[np.nan, 1.0], [0.0, 1.0]]]), GOOD_E, GOOD_B, "NaN"),
        (np.ones((1, 3, 3)) / 3, GOOD_E, GOOD_B, r"T\[0\] has shape \(3, 3\)"),
        (GOOD_T, np.array([[0.5, 0.6], [0, 1]]), GOOD_B, "E row 0 sums"),
        (GOOD_T, np.array([[np.nan, 1.0], [0, 1]]), GOOD_B, "E holds NaN"),
        (GOOD_T, GOOD_E, np.array([0.5, 0.4]), "B sums"),
        (GOOD_T, GOOD_E, np.array([1.0, 0.0, 0.0]), "B must have shape"),
        (GOOD_T, np.ones(2), GOOD_B, "E must be 2-D"),
    ],
)
def test_constructor_validation(T, E, B, match):
    with pytest.raises(ValueError, match=match):
        ActionHMM(T, E, B)


def test_constructor_validation_sparse_and_types():
    with pytest.raises(ValueError, match=r"T\[1\] row 1 sums"):
        ActionHMM([sp.csr_matrix(GOOD_T[0]), sp.csr_matrix([[1.0, 0.0], [0.0, 0.3]])], GOOD_E, GOOD_B)
    with pytest.raises(ValueError, match="negative"):
        ActionHMM([sp.csr_matrix([[1.5, -0.5], [0.0, 1.0]])], GOOD_E, GOOD_B)
    with pytest.raises(TypeError, match="T must be"):
        ActionHMM("not a tensor", GOOD_E, GOOD_B)
    with pytest.raises(ValueError, match="no actions"):
        ActionHMM([], GOOD_E, GOOD_B)
    # zero rows are allowed: "no prediction", not an error
    ActionHMM(np.zeros((1, 2, 2)), GOOD_E, GOOD_B)


@pytest.mark.parametrize(
    "obs, acts, match",
    [
        ([[0, 2]], [[-1, 0]], "obs holds observation 2, outside 0..1"),
        ([[0, 1]], [[-1, 1]], "actions holds action 1, outside 0..0"),
        ([[0, 1]], [[0, 0]], r"actions\[:, 0\] must be -1"),
        ([[0, -1]], [[-1, 0]], "negative"),
        (np.zeros((1, 0), dtype=int), np.zeros((1, 0), dtype=int), "empty"),
        (np.zeros((0, 3), dtype=int), np.zeros((0, 3), dtype=int), "no episodes"),
        ([[0, 1, 0]], [[-1, 0]], "shape"),
        ([[0.0, 1.0]], [[-1, 0]], "integers"),
    ],
)
def test_filter_input_validation(obs, acts, match):
    hmm = ActionHMM(GOOD_T, GOOD_E, GOOD_B)
    with pytest.raises(ValueError, match=match):
        hmm.log_likelihood(obs, acts)


def test_actions_required_with_several_actions():
    hmm = ActionHMM(np.stack([GOOD_T[0], GOOD_T[0]]), GOOD_E, GOOD_B)
    with pytest.raises(ValueError, match="actions are required"):
        hmm.log_likelihood([0, 1])


# --------------------------------------------------------------------------- sampling
def test_sample_statistics(random_model):
    rng = np.random.default_rng(5)
    H, O, A = 3, 3, 2
    hmm = random_model(rng, H, O, A)
    n, L = 4000, 25
    traj = hmm.sample(n, L, seed=11)
    s, o, a = traj.states, traj.obs, traj.actions
    assert (a[:, 0] == -1).all() and set(np.unique(a[:, 1:])) == {0, 1}

    def close(emp_counts, probs):
        total = emp_counts.sum()
        sigma = np.sqrt(probs * (1 - probs) / total)
        assert np.all(np.abs(emp_counts / total - probs) <= 5 * sigma + 1e-12)

    close(np.bincount(s[:, 0], minlength=H), hmm.B)
    for i in range(H):
        close(np.bincount(o[s == i], minlength=O), hmm.E[i])
        for act in range(A):
            sel = (s[:, :-1] == i) & (a[:, 1:] == act)
            close(np.bincount(s[:, 1:][sel], minlength=H), hmm.T[act][i])


def test_sample_given_actions_seeded_and_sparse_identical(random_model):
    rng = np.random.default_rng(6)
    hmm = random_model(rng, 4, 3, 2, sparsity=0.5)
    sparse = ActionHMM([sp.csr_matrix(m) for m in hmm.T], hmm.E, hmm.B)
    acts = np.ones((3, 8), dtype=int)
    acts[:, 0] = -1
    t1 = hmm.sample(3, 7, seed=2, actions=acts)
    t2 = sparse.sample(3, 7, seed=2, actions=acts)
    assert (t1.actions == acts).all()
    np.testing.assert_array_equal(t1.obs, t2.obs)
    np.testing.assert_array_equal(t1.states, t2.states)
    assert np.isfinite(hmm.log_likelihood(t1))  # sampled data has positive probability
    with pytest.raises(ValueError, match="cannot sample"):
        ActionHMM(np.zeros((1, 2, 2)), GOOD_E, GOOD_B).sample(1, 2)
    with pytest.raises(ValueError, match="actions must have shape"):
        hmm.sample(2, 7, actions=acts)


# --------------------------------------------------------------------------- oracle
@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_scores_zero_and_predicts_perfectly(seed):
    env = gridworld(10, 10, n_colours=10, seed=seed)
    oracle = env.to_hmm()
    traj = random_walk(env, 200, 50, seed=seed)
    r = oracle.run_filter(traj, predictions=True, posteriors=True)
    assert r.log_likelihood == 0.0
    assert not r.no_prediction.any()
    assert (r.predictions.argmax(axis=2) == traj.obs).all()
    assert (r.predictions.max(axis=2) == 1.0).all()
    # the belief is the true state
    assert (r.posteriors.argmax(axis=2) == traj.states).all()
    assert (r.posteriors.max(axis=2) == 1.0).all()
