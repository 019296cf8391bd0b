"""The pgmpy export: our filter against pgmpy's exact inference on the same model."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hmmmerge import ActionHMM
from hmmmerge.factor_graph import (
    draw_factor_graph,
    pgmpy_filter,
    to_dynamic_bayesian_network,
    to_factor_graph,
    to_markov_network,
    two_level_factor_graph,
)

pytest.importorskip("pgmpy")


# --------------------------------------------------------------------------- factor graph + VE / BP
@pytest.mark.parametrize(
    "H, O, A, L, sparsity, sparse",
    [(30, 5, 3, 40, 0.0, False), (30, 4, 4, 40, 0.7, True), (7, 3, 1, 25, 0.0, False)],
)
def test_variable_elimination_matches_filter(H, O, A, L, sparsity, sparse, random_model):
    rng = np.random.default_rng(H + L + A)
    hmm = random_model(rng, H, O, A, sparsity=sparsity, sparse=sparse)
    traj = hmm.sample(1, L - 1, seed=3)
    fg, ev = to_factor_graph(hmm, traj.obs[0], traj.actions[0])
    ll, post = pgmpy_filter(fg, ev, method="ve")
    assert ll == pytest.approx(hmm.log_likelihood(traj), rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(post, hmm.filter(traj)[0], rtol=1e-9, atol=1e-12)


def test_belief_propagation_matches_filter(random_model):
    rng = np.random.default_rng(11)
    hmm = random_model(rng, 20, 4, 2, sparsity=0.5)
    traj = hmm.sample(1, 9, seed=4)
    fg, ev = to_factor_graph(hmm, traj.obs[0], traj.actions[0])
    ll, post = pgmpy_filter(fg, ev, method="bp")
    assert ll == pytest.approx(hmm.log_likelihood(traj), rel=1e-9)
    np.testing.assert_allclose(post, hmm.filter(traj)[0], rtol=1e-9, atol=1e-12)


def test_factor_graph_structure_passes_pgmpy_checks(random_model):
    rng = np.random.default_rng(2)
    hmm = random_model(rng, 3, 2, 2)
    fg, ev = to_factor_graph(hmm, [0, 1, 1], [-1, 1, 0])
    assert fg.check_model()
    assert sorted(fg.get_variable_nodes()) == ["A_1", "A_2", "H_0", "H_1", "H_2", "O_0", "O_1", "O_2"]
    assert ev == {"O_0": 0, "O_1": 1, "O_2": 1, "A_1": 1, "A_2": 0}
    assert len(fg.factors) == 1 + 3 + 2  # B, three emissions, two transitions
    trans = [f for f in fg.factors if "A_1" in f.variables][0]
    assert trans.variables == ["H_0", "A_1", "H_1"]
    np.testing.assert_array_equal(trans.values[:, 1, :], hmm.T[1])
    assert to_markov_network(fg).check_model()


def test_factor_graph_bad_inputs(random_model):
    rng = np.random.default_rng(0)
    hmm = random_model(rng, 3, 2, 2)
    with pytest.raises(ValueError, match="obs holds observation 2"):
        to_factor_graph(hmm, [0, 2], [-1, 0])
    with pytest.raises(ValueError, match="actions holds action 5"):
        to_factor_graph(hmm, [0, 1], [-1, 5])
    with pytest.raises(ValueError, match="actions are required"):
        to_factor_graph(hmm, [0, 1])
    with pytest.raises(ValueError, match="1-D"):
        to_factor_graph(hmm, [[0, 1]], [[-1, 0]])
    with pytest.raises(ValueError, match="states"):
        to_factor_graph(random_model(rng, 12, 2, 1), [0, 1], max_states=10)
    fg, ev = to_factor_graph(hmm, [0, 1], [-1, 0])
    with pytest.raises(ValueError, match="method"):
        pgmpy_filter(fg, ev, method="exact")


# --------------------------------------------------------------------------- DBN
def test_dbn_cpds_and_pgmpy_forward_inference(random_model):
    from pgmpy.inference import DBNInference

    rng = np.random.default_rng(5)
    hmm = random_model(rng, 4, 3, 2)
    dbn = to_dynamic_bayesian_network(hmm)
    assert dbn.check_model()
    cpd = dbn.get_cpds(node=("H", 1))
    assert [str(v) for v in cpd.variables] == ["('H', 1)", "('H', 0)", "('A', 1)"]
    # P(H_1 = j | H_0 = i, A_1 = a) = T[a][i, j]
    vals = cpd.get_values().reshape(4, 4, 2)
    np.testing.assert_allclose(vals.transpose(2, 1, 0), hmm.T)
    np.testing.assert_allclose(dbn.get_cpds(node=("O", 1)).get_values(), hmm.E.T)

    obs, acts = [0, 2, 1, 1], [-1, 1, 0, 1]
    ev = {("O", t): obs[t] for t in range(4)}
    ev.update({("A", t): acts[t] for t in range(1, 4)})
    ev[("A", 0)] = 0  # slice 0 has no move; P(H_0 | A_0) = B for every value
    ours = hmm.filter(obs, acts)
    inference = DBNInference(dbn)
    for t in (1, 3):
        sub = {k: v for k, v in ev.items() if k[1] <= t}
        res = inference.forward_inference([("H", t)], sub)
        np.testing.assert_allclose(res[("H", t)].values, ours[t], rtol=1e-9)


def test_dbn_missing_rows():
    T = np.zeros((2, 3, 3))
    T[0] = np.eye(3)[[1, 2, 0]]
    T[1, 0, 2] = 1.0  # rows 1 and 2 of action 1 unknown
    hmm = ActionHMM(T, np.eye(3), [1.0, 0, 0])
    with pytest.raises(ValueError, match=r"T\[1\] row 1 sums to 0"):
        to_dynamic_bayesian_network(hmm)
    with pytest.raises(ValueError, match="missing"):
        to_dynamic_bayesian_network(hmm, missing="drop")
    for missing, expected_row1 in (("uniform", [1 / 3] * 3), ("stay", [0.0, 1.0, 0.0])):
        dbn = to_dynamic_bayesian_network(hmm, missing=missing)
        assert dbn.check_model()
        vals = dbn.get_cpds(node=("H", 1)).get_values().reshape(3, 3, 2)  # (h1, h0, a)
        np.testing.assert_allclose(vals[:, 1, 1], expected_row1)
        np.testing.assert_allclose(vals[:, 0, 1], [0.0, 0.0, 1.0])


# --------------------------------------------------------------------------- two-level memory
@pytest.mark.parametrize("sparse_c", [False, True])
def test_two_level_graph_matches_level1_filter_times_C(sparse_c, random_model):
    rng = np.random.default_rng(8)
    n, k, L = 12, 4, 15
    level1 = random_model(rng, n, 3, 2, sparsity=0.6, sparse=True)
    assign = rng.integers(0, k, size=n)
    assign[[2, 7]] = -1  # two states without a cluster
    C = np.zeros((n, k))
    C[np.flatnonzero(assign >= 0), assign[assign >= 0]] = 1.0
    C[5] = [0.5, 0.25, 0.25, 0.0]  # a soft connection, as the paper allows
    traj = level1.sample(1, L - 1, seed=1)
    fg, ev = two_level_factor_graph(level1, sp.csr_matrix(C) if sparse_c else C, traj.obs[0], traj.actions[0])
    assert {f"H1_{t}" for t in range(L)} <= set(to_markov_network(fg).nodes())
    ll, post2 = pgmpy_filter(fg, ev, variable="H2", method="ve")
    assert ll == pytest.approx(level1.log_likelihood(traj), rel=1e-9)
    belief1 = level1.filter(traj)[0]
    expected = np.hstack([belief1 @ C, belief1[:, [2, 7]].sum(axis=1, keepdims=True)])  # extra "no cluster"
    np.testing.assert_allclose(post2, expected, rtol=1e-9, atol=1e-12)
    _, post1 = pgmpy_filter(fg, ev, variable="H1", method="ve")
    np.testing.assert_allclose(post1, belief1, rtol=1e-9, atol=1e-12)


def test_two_level_graph_validation():
    level1 = ActionHMM.from_deterministic([[1, 2, -1]], [0, 1, 1], n_obs=2)
    for C, match in (
        (np.ones((2, 2)) / 2, r"shape \(3, k\)"),
        (np.array([[1.0, 0], [0, 0.5], [0, 1]]), "C row 1 sums to 0.5"),
        (np.array([[1.0, 0], [-1, 2], [0, 1]]), "negative"),
        (np.array([[1.0, np.nan], [0, 1], [0, 1]]), "NaN"),
        (np.zeros((3, 0)), "no columns"),
    ):
        with pytest.raises(ValueError, match=match):
            two_level_factor_graph(level1, C, [0, 1], [-1, 0])
    fg, _ = two_level_factor_graph(level1, np.array([[1, 0], [0, 1], [0, 1]]), [0, 1], [-1, 0])
    cfac = [f for f in fg.factors if "H2_0" in f.variables][0]
    assert cfac.cardinality.tolist() == [3, 2]  # no extra value when every state has a cluster


def test_draw_two_level_graph(tmp_path):
    level1 = ActionHMM.from_deterministic([[1, 2, 0], [0, 0, 1]], [0, 1, 1], n_obs=2)
    C = np.array([[1, 0], [0, 1], [0, 1]])
    fg, ev = two_level_factor_graph(level1, C, [0, 1, 1], [-1, 0, 0])
    out = tmp_path / "two_level.png"
    ax = draw_factor_graph(fg, out, evidence=ev, title="two-level memory")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    texts = {t.get_text() for t in ax.texts}
    assert {"B", "T1", "E", "C"} <= texts
