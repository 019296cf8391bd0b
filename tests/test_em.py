"""Tests of the EM baseline (action-conditioned clone HMM) against brute force,
a dense reference implementation and hmmlearn."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, Trajectories, random_walk
from hmmmerge.baselines import _em_kernels as K
from hmmmerge.baselines.em import CloneHMM, _Data, clone_surprise, em_step, split_clone


# ----------------------------------------------------------------- helpers
def random_clone_parameters(rng, n_clones, n_actions):
    H = int(np.sum(n_clones))
    T = rng.random((n_actions, H, H)) + 0.05
    T /= T.sum(axis=2, keepdims=True)
    B = rng.random(H) + 0.05
    B /= B.sum()
    return T, B


def random_episodes(rng, n_obs, n_actions, lengths):
    obs = [rng.integers(0, n_obs, size=L) for L in lengths]
    acts = [np.concatenate([[-1], rng.integers(0, n_actions, size=L - 1)]) for L in lengths]
    return obs, acts


def emission(n_clones, n_obs):
    state_obs = np.repeat(np.arange(n_obs), n_clones)
    E = np.zeros((len(state_obs), n_obs))
    E[np.arange(len(state_obs)), state_obs] = 1.0
    return E


def brute_force(T, B, E, obs, acts):
    """Enumerate every hidden path of one episode.

    Returns P(X), the posteriors (L, H), the expected transition counts
    (A, H, H), and the best path with its joint probability.
    """
    A, H, _ = T.shape
    L = len(obs)
    total = 0.0
    gamma = np.zeros((L, H))
    xi = np.zeros((A, H, H))
    best, best_p = None, -1.0
    for path in itertools.product(range(H), repeat=L):
        p = B[path[0]] * E[path[0], obs[0]]
        for t in range(1, L):
            p *= T[acts[t], path[t - 1], path[t]] * E[path[t], obs[t]]
        if p == 0.0:
            continue
        total += p
        for t in range(L):
            gamma[t, path[t]] += p
        for t in range(1, L):
            xi[acts[t], path[t - 1], path[t]] += p
        if p > best_p:
            best, best_p = path, p
    return total, gamma / total, xi / total, np.array(best), best_p


def dense_em_counts(T, B, E, obs_list, acts_list):
    """Dense scaled forward-backward over all H states (O(H^2) per step)."""
    A, H, _ = T.shape
    C = np.zeros_like(T)
    Bc = np.zeros(H)
    ll = 0.0
    for obs, acts in zip(obs_list, acts_list):
        L = len(obs)
        alpha = np.zeros((L, H))
        c = np.zeros(L)
        a0 = B * E[:, obs[0]]
        c[0] = a0.sum()
        alpha[0] = a0 / c[0]
        for t in range(1, L):
            at = (alpha[t - 1] @ T[acts[t]]) * E[:, obs[t]]
            c[t] = at.sum()
            alpha[t] = at / c[t]
        beta = np.ones((L, H))
        for t in range(L - 2, -1, -1):
            beta[t] = T[acts[t + 1]] @ (E[:, obs[t + 1]] * beta[t + 1]) / c[t + 1]
        for t in range(1, L):
            C[acts[t]] += np.outer(alpha[t - 1], E[:, obs[t]] * beta[t] / c[t]) * T[acts[t]]
        Bc += alpha[0] * beta[0]
        ll += np.log(c).sum()
    return ll, C, Bc


def layout(obs_list, acts_list, n_clones):
    return _Data(K, np.concatenate(obs_list), np.concatenate(acts_list), np.asarray(n_clones))


def aliased_cycle():
    """A 4-cycle (actions 0 forward, 1 back) coloured 0, 0, 1, 1: first order cannot predict it."""
    nxt = [[1, 2, 3, 0], [3, 0, 1, 2]]
    return Environment.from_arrays(nxt, [0, 0, 1, 1], start=0)


# ------------------------------------------------- exact inference checks
@pytest.mark.parametrize("seed", range(4))
def test_forward_backward_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_clones = [2, 1, 2][: 2 + seed % 2]
    O, A = len(n_clones), 2
    T, B = random_clone_parameters(rng, n_clones, A)
    E = emission(n_clones, O)
    obs_list, acts_list = random_episodes(rng, O, A, [5, 4, 1])
    d = layout(obs_list, acts_list, n_clones)
    ll = d.log_likelihood(T, B)
    gamma = d.posteriors(T, B)
    ll_bf, off = 0.0, 0
    for obs, acts in zip(obs_list, acts_list):
        p, g, _, _, _ = brute_force(T, B, E, obs, acts)
        ll_bf += np.log(p)
        for t in range(len(obs)):
            s0 = int(np.sum(n_clones[: obs[t]]))
            n = n_clones[obs[t]]
            np.testing.assert_allclose(gamma[d.off[off + t] : d.off[off + t + 1]], g[t, s0 : s0 + n], atol=1e-12)
            assert g[t].sum() == pytest.approx(g[t, s0 : s0 + n].sum())  # mass only on the observed block
        off += len(obs)
    assert ll == pytest.approx(ll_bf, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_expected_counts_match_dense_reference_and_brute_force(seed):
    rng = np.random.default_rng(10 + seed)
    n_clones = [3, 2, 1]
    A = 2
    T, B = random_clone_parameters(rng, n_clones, A)
    E = emission(n_clones, 3)
    obs_list, acts_list = random_episodes(rng, 3, A, [6, 3, 5])
    ll, C, Bc = layout(obs_list, acts_list, n_clones).expected_counts(T, B)
    ll_d, C_d, Bc_d = dense_em_counts(T, B, E, obs_list, acts_list)
    assert ll == pytest.approx(ll_d, rel=1e-12)
    np.testing.assert_allclose(C, C_d, atol=1e-12)
    np.testing.assert_allclose(Bc, Bc_d, atol=1e-12)
    assert C.sum() == pytest.approx(sum(len(o) - 1 for o in obs_list))
    # brute force on the first episode alone
    _, g, xi, _, _ = brute_force(T, B, E, obs_list[0], acts_list[0])
    _, C1, Bc1 = layout(obs_list[:1], acts_list[:1], n_clones).expected_counts(T, B)
    np.testing.assert_allclose(C1, xi, atol=1e-12)
    np.testing.assert_allclose(Bc1, g[0], atol=1e-12)


def test_m_step_is_normalised_counts_plus_pseudocount():
    rng = np.random.default_rng(5)
    n_clones, A, pc = [2, 2], 2, 0.1
    T, B = random_clone_parameters(rng, n_clones, A)
    obs_list, acts_list = random_episodes(rng, 2, A, [8, 8])
    d = layout(obs_list, acts_list, n_clones)
    ll, C, Bc = d.expected_counts(T, B)
    ll2, T2, B2 = em_step(d, T, B, pc)
    assert ll2 == ll
    np.testing.assert_allclose(T2, (C + pc) / (C + pc).sum(axis=2, keepdims=True))
    np.testing.assert_allclose(B2, (Bc + pc) / (Bc + pc).sum())


def test_agrees_with_hmmlearn_for_one_action():
    hmmlearn = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(3)
    n_clones = [2, 3]
    T, B = random_clone_parameters(rng, n_clones, 1)
    E = emission(n_clones, 2)
    lengths = [30, 12, 25]
    obs_list, acts_list = random_episodes(rng, 2, 1, lengths)
    ref = hmmlearn.CategoricalHMM(n_components=5, n_iter=1, params="st", init_params="", implementation="scaling")
    ref.startprob_, ref.transmat_, ref.emissionprob_ = B, T[0], E
    X = np.concatenate(obs_list)[:, None]
    d = layout(obs_list, acts_list, n_clones)
    assert d.log_likelihood(T, B) == pytest.approx(ref.score(X, lengths), rel=1e-10)
    np.testing.assert_allclose(
        d.posteriors(T, B), ref.predict_proba(X, lengths)[np.arange(len(X)).repeat(np.array(n_clones)[X[:, 0]]),
                                                            _block_columns(X[:, 0], n_clones)], atol=1e-10
    )
    ref.fit(X, lengths)  # one Baum-Welch iteration, no prior
    _, T2, B2 = em_step(d, T, B, 0.0)
    np.testing.assert_allclose(T2[0], ref.transmat_, atol=1e-10)
    np.testing.assert_allclose(B2, ref.startprob_, atol=1e-10)


def _block_columns(obs, n_clones):
    starts = np.concatenate([[0], np.cumsum(n_clones)[:-1]])
    return np.concatenate([starts[o] + np.arange(n_clones[o]) for o in obs])


@pytest.mark.parametrize("seed", range(5))
def test_viterbi_matches_brute_force_argmax(seed):
    rng = np.random.default_rng(20 + seed)
    n_clones = [2, 2, 1]
    T, B = random_clone_parameters(rng, n_clones, 2)
    E = emission(n_clones, 3)
    obs_list, acts_list = random_episodes(rng, 3, 2, [6, 4])
    lp, path = layout(obs_list, acts_list, n_clones).viterbi(T, B)
    expected_lp, off = 0.0, 0
    for obs, acts in zip(obs_list, acts_list):
        _, _, _, best, best_p = brute_force(T, B, E, obs, acts)
        np.testing.assert_array_equal(path[off : off + len(obs)], best)
        expected_lp += np.log(best_p)
        off += len(obs)
    assert lp == pytest.approx(expected_lp, rel=1e-12)


def test_viterbi_respects_zero_transitions():
    # deterministic chain: the only path of positive probability is decoded
    T = np.zeros((1, 4, 4))
    T[0, 0, 2] = T[0, 2, 1] = T[0, 1, 3] = T[0, 3, 0] = 1.0  # clones 0,1 emit 0; 2,3 emit 1
    d = layout([np.array([0, 1, 0, 1, 0])], [np.array([-1, 0, 0, 0, 0])], [2, 2])
    lp, path = d.viterbi(T, np.array([1.0, 0, 0, 0]))
    assert path.tolist() == [0, 2, 1, 3, 0] and lp == 0.0


# ------------------------------------------------------------ learning
episodes = st.integers(1, 3).flatmap(
    lambda n: st.lists(st.integers(1, 9), min_size=n, max_size=n)
)


@settings(max_examples=25, deadline=None)
@given(
    lengths=episodes,
    n_obs=st.integers(1, 3),
    n_actions=st.integers(1, 2),
    clones=st.integers(1, 3),
    pseudocount=st.sampled_from([0.0, 0.01, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_em_never_decreases_the_objective(lengths, n_obs, n_actions, clones, pseudocount, seed):
    rng = np.random.default_rng(seed)
    obs_list, acts_list = random_episodes(rng, n_obs, n_actions, lengths)
    # episodes of different lengths: fit them concatenated as a pair of 1-D arrays
    m = CloneHMM(n_clones=clones, n_iter=12, pseudocount=pseudocount, tol=0.0, seed=seed)
    m.fit((np.concatenate(obs_list), np.concatenate(acts_list)), n_obs=n_obs, n_actions=n_actions)
    obj = m.train_objective_
    assert np.all(np.diff(obj) >= -1e-9 * (1 + np.abs(obj[:-1]))), obj
    if pseudocount == 0.0:
        ll = m.train_log_likelihood_
        assert np.all(np.diff(ll) >= -1e-9 * (1 + np.abs(ll[:-1])))
        assert m.log_likelihood_ >= ll[-1] - 1e-9 * (1 + abs(ll[-1]))


def test_viterbi_refinement_never_decreases_best_path():
    env = aliased_cycle()
    traj = random_walk(env, 30, 15, seed=4)
    m = CloneHMM(n_clones=3, n_iter=5, pseudocount=0.01, seed=2, viterbi_refine=True, tol=0.0).fit(traj)
    v = m.viterbi_log_likelihood_
    assert len(v) >= 1 and np.all(np.diff(v) >= -1e-9)
    lp, states = m.decode(traj)
    assert states.shape == traj.obs.shape
    assert np.array_equal(m.state_obs_[states], traj.obs)


def test_deterministic_under_seed():
    env = aliased_cycle()
    traj = random_walk(env, 10, 10, seed=1)
    a = CloneHMM(n_clones=2, n_iter=5, seed=7).fit(traj)
    b = CloneHMM(n_clones=2, n_iter=5, seed=7).fit(traj)
    c = CloneHMM(n_clones=2, n_iter=5, seed=8).fit(traj)
    np.testing.assert_array_equal(a.T_, b.T_)
    np.testing.assert_array_equal(a.train_log_likelihood_, b.train_log_likelihood_)
    assert not np.array_equal(a.T_, c.T_)
    g = CloneHMM(n_clones=2, n_iter=5, seed=np.random.default_rng(7)).fit(traj)
    np.testing.assert_array_equal(g.T_, a.T_)
    s1 = CloneHMM(n_clones=2, n_iter=2, seed=[1, 7]).fit(traj)
    s2 = CloneHMM(n_clones=2, n_iter=2, seed=[1, 7]).fit(traj)
    np.testing.assert_array_equal(s1.T_, s2.T_)


def test_episodes_restart_from_B():
    rng = np.random.default_rng(0)
    n_clones = [2, 2]
    T, B = random_clone_parameters(rng, n_clones, 2)
    obs_list, acts_list = random_episodes(rng, 2, 2, [7, 5])
    both = layout(obs_list, acts_list, n_clones).log_likelihood(T, B)
    apart = sum(layout([o], [a], n_clones).log_likelihood(T, B) for o, a in zip(obs_list, acts_list))
    assert both == pytest.approx(apart, rel=1e-12)
    # joining the episodes with a move is a different sequence
    joined_acts = np.concatenate([acts_list[0], [0], acts_list[1][1:]])
    joined = layout([np.concatenate(obs_list)], [joined_acts], n_clones).log_likelihood(T, B)
    assert joined != pytest.approx(both)
    # Trajectories, a 2-D pair and flattened 1-D pair all give the same fit
    traj = random_walk(aliased_cycle(), 6, 8, seed=3)
    m1 = CloneHMM(n_clones=2, n_iter=4).fit(traj)
    m2 = CloneHMM(n_clones=2, n_iter=4).fit((traj.obs, traj.actions))
    m3 = CloneHMM(n_clones=2, n_iter=4).fit((traj.obs.ravel(), traj.actions.ravel()))
    np.testing.assert_allclose(m1.T_, m2.T_)
    np.testing.assert_allclose(m1.T_, m3.T_)
    # the initial distribution is learned from the episodes' first observations
    assert m1.B_[m1.state_obs_ == traj.obs[0, 0]].sum() > 0.99


def test_score_and_to_hmm_agree_with_the_kernel():
    traj = random_walk(aliased_cycle(), 12, 9, seed=5)
    m = CloneHMM(n_clones=[2, 3], n_iter=6, pseudocount=0.05).fit(traj)
    hmm = m.to_hmm()
    assert CloneHMM(n_clones=[1, 1, 2], n_iter=1).fit(traj).to_hmm().n_obs == 3  # n_obs from n_clones
    assert hmm.n_states == 5 and hmm.E[:2, 0].tolist() == [1.0, 1.0] and hmm.E[2:, 1].tolist() == [1, 1, 1]
    assert m.score(traj) == pytest.approx(m.log_likelihood_, rel=1e-10)
    assert m.to_hmm(sparse=True).log_likelihood(traj) == pytest.approx(m.log_likelihood_, rel=1e-10)
    post = m.posteriors(traj)
    assert post.shape == (12, 10, 5)
    np.testing.assert_allclose(post.sum(axis=2), 1.0)


def test_recovers_aliased_cycle():
    env = aliased_cycle()
    train = random_walk(env, 60, 20, seed=0)
    test = random_walk(env, 50, 20, seed=99)
    m = CloneHMM(n_clones=3, n_iter=200, pseudocount=1e-4, tol=1e-4, seed=0, n_init=3).fit(train)
    res = m.to_hmm().run_filter(test, predictions=True)
    surprise = -res.log_probs[:, 1:].mean()
    accuracy = (res.predictions[:, 1:].argmax(axis=2) == test.obs[:, 1:]).mean()
    assert surprise < 0.01 and accuracy == 1.0
    # a first-order model (one clone per colour) cannot: the cycle is aliased
    m1 = CloneHMM(n_clones=1, n_iter=50, pseudocount=1e-4, seed=0).fit(train)
    assert -m1.to_hmm().run_filter(test).log_probs[:, 1:].mean() > 0.3


# --------------------------------------------------------------- inputs
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n_clones": 0}, "n_clones"),
        ({"n_clones": [2, 0]}, "n_clones"),
        ({"n_clones": [2, 2, 2]}, "n_clones"),
        ({"n_clones": 2.5}, "n_clones"),
        ({"n_iter": -1}, "n_iter"),
        ({"pseudocount": -0.1}, "pseudocount"),
        ({"tol": float("nan")}, "tol"),
        ({"n_init": 0}, "n_init"),
        ({"viterbi_pseudocount": -1.0}, "viterbi_pseudocount"),
        ({"seed": [1, -2]}, "seed"),
        ({"split_rounds": -1}, "split_rounds"),
        ({"split_surprise": -1.0}, "split_surprise"),
        ({"merge_rounds": -1}, "merge_rounds"),
        ({"merge_rounds": 1.5}, "merge_rounds"),
    ],
)
def test_bad_parameters_raise(kwargs, field):
    traj = Trajectories(obs=[[0, 1, 0]], actions=[[-1, 0, 1]])
    with pytest.raises(ValueError, match=field):
        CloneHMM(**kwargs).fit(traj, n_obs=2)


def test_bad_data_raise():
    m = CloneHMM(n_clones=2)
    with pytest.raises(ValueError, match="obs"):
        m.fit(([0, 3, 1], [-1, 0, 0]), n_obs=2)
    with pytest.raises(ValueError, match="actions"):
        m.fit(([0, 1, 1], [-1, 0, 2]), n_actions=2)
    with pytest.raises(ValueError, match="shape"):
        m.fit(([0, 1, 1], [-1, 0]))
    with pytest.raises(ValueError, match=r"actions\[0\]"):
        m.fit(([0, 1], [0, 0]))
    with pytest.raises(ValueError, match=r"actions\[:, 0\]"):
        m.fit(([[0, 1]], [[0, 0]]))
    with pytest.raises(ValueError, match="n_obs"):
        m.fit(([0, 1], [-1, 0]), n_obs=0)
    with pytest.raises(TypeError, match="Trajectories, a pair"):
        m.fit("not data")
    with pytest.raises(ValueError, match="not fitted"):
        CloneHMM().to_hmm()
    fitted = CloneHMM(n_clones=1, n_iter=2).fit(([0, 1], [-1, 0]))
    with pytest.raises(ValueError, match="obs"):
        fitted.score([0, 2], [-1, 0])


@pytest.mark.parametrize("bad, message", [(0, ">= 1"), (2.5, "an integer"), (True, "an integer"), ([[2]], "1-D"),
                                          ([2, 0], ">= 1 for every"), ([1.0, 2.0], "hold integers"),
                                          ([2, 2, 2], "3 entries but there are n_obs=2")])
def test_bad_n_clones_refused_by_fit_naming_it(bad, message):
    traj = random_walk(aliased_cycle(), 3, 5, seed=0)
    m = CloneHMM(n_clones=bad, n_iter=1)   # the constructor only stores it
    with pytest.raises(ValueError, match=f"n_clones .*{message}"):
        m.fit(traj, n_obs=2)


# ----------------------------------------------------------------- clone splitting
@pytest.mark.parametrize("seed", range(4))
def test_splitting_an_unused_clone_keeps_the_likelihood(seed):
    """Brute force over every hidden path: a split clone and its copy explain the data exactly as the one
    clone did (the copy had no incoming transition and no start mass)."""
    rng = np.random.default_rng(seed)
    n_clones, n_actions = [3, 2], 2
    T, B = random_clone_parameters(rng, n_clones, n_actions)
    E = emission(n_clones, 2)
    T[:, :, 2] = 0.0  # clone 2 (of view 0) is unreachable
    T /= T.sum(axis=2, keepdims=True)
    B[2] = 0.0
    B /= B.sum()
    obs, acts = random_episodes(rng, 2, n_actions, [5])
    before = brute_force(T, B, E, obs[0], acts[0])[0]
    T2, B2 = T.copy(), B.copy()
    split_clone(T2, B2, 0, 2, rng.random((n_actions, 5)), 0.3)
    assert np.allclose(T2.sum(axis=2), 1.0) and B2.sum() == pytest.approx(1.0)
    assert T2[:, :, 2].sum() > 0 and B2[2] > 0  # the copy is used
    assert brute_force(T2, B2, E, obs[0], acts[0])[0] == pytest.approx(before, rel=1e-12)


def _grid_walks():
    from hmmmerge import gridworld

    env = gridworld(6, 6, n_colours=6, seed=1)
    return env, random_walk(env, 150, 30, seed=1)


def test_clone_surprise_flags_a_clone_standing_for_two_places():
    env, walks = _grid_walks()
    em = CloneHMM(n_clones=12, n_iter=60, seed=1).fit(walks)
    data = _Data(K, *em._sequence(walks, em.n_obs_, em.n_actions_)[:2], em.n_clones_)
    surprise, occupancy = clone_surprise(data, em.T_, em.B_)
    assert occupancy.sum() == pytest.approx(walks.obs.size)
    h = int(surprise.argmax())
    assert surprise[h] > 20
    places = np.bincount(walks.states.ravel()[em.decode(walks)[1].ravel() == h], minlength=env.n_states)
    assert (places > 0).sum() >= 2 and np.sort(places)[-2] >= 5  # the most surprising clone is two places


def test_split_rounds_separate_the_places_and_raise_the_likelihood():
    env, walks = _grid_walks()
    plain = CloneHMM(n_clones=12, n_iter=60, seed=1).fit(walks)
    split = CloneHMM(n_clones=12, n_iter=60, seed=1, split_rounds=2).fit(walks)
    assert plain.split_log_.shape == (0, 2) and split.split_log_.shape[0] >= 1
    assert split.log_likelihood_ > plain.log_likelihood_ + 40  # was -111 nats, -58 after one split

    def mixed(model):  # decoded steps not on their clone's most frequent place
        states, path = walks.states.ravel(), model.decode(walks)[1].ravel()
        counts = np.zeros((model.n_states_, env.n_states))
        np.add.at(counts, (path, states), 1)
        return int((counts.sum(axis=1) - counts.max(axis=1)).sum())

    assert mixed(plain) >= 60 and mixed(split) < 0.6 * mixed(plain)  # 90 -> 48: a clone of 3 places split
    unsplit = CloneHMM(n_clones=12, n_iter=60, seed=1, split_rounds=2, split_surprise=1e9).fit(walks)
    assert np.array_equal(unsplit.T_, plain.T_) and unsplit.split_log_.shape == (0, 2)
