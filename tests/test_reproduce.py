"""`hmmmerge reproduce --quick`: every figure and CSV, with values that mean what they say."""

from __future__ import annotations

import functools
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hmmmerge.reproduce import FIGURES, PROTOCOLS
from hmmmerge.reproduce.figures import (final_table, purity_random_numbers, smooth, structure_matrices,
                                        true_position_matrix)
from hmmmerge.reproduce.runs import world

QUICK = PROTOCOLS["quick"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    proc = subprocess.run([sys.executable, "-m", "hmmmerge", "reproduce", "--quick", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, json.loads(proc.stdout)


def _csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return rows


def _col(rows, key):
    return np.array([float(r[key]) if r[key] != "" else np.nan for r in rows])


def test_every_figure_and_csv_is_written(quick):
    out, res = quick
    assert res["protocol"] == "quick"
    for name in FIGURES:
        if name == "final_values":
            assert os.path.getsize(out / "final_values.csv") > 0 and os.path.getsize(out / "final_values.md") > 0
            continue
        for ext in ("png", "csv"):
            path = out / f"{name}.{ext}"
            assert path.is_file() and path.stat().st_size > 500, path
        assert open(out / f"{name}.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.path.basename(f) for f in res["files"]) == sorted(
        [f"{n}.{e}" for n in FIGURES if n != "final_values" for e in ("png", "csv")]
        + ["final_values.csv", "final_values.md"])
    assert res["runs"]["learning"]["runs"] == QUICK.n_learning_runs


def test_learning_curves(quick):
    out, _ = quick
    acc = _csv(out / "sf_gw_acc.csv")
    assert len(acc) == QUICK.episodes  # one smoothed value per episode
    assert _col(acc, "episode").tolist() == list(range(1, QUICK.episodes + 1))
    groups = [f"{m}_size{s}" for m in QUICK.merges for s in QUICK.sizes] + ["first_order"]
    for g in groups:
        mean, std = _col(acc, f"{g}_mean"), _col(acc, f"{g}_std")
        assert np.all((mean >= 0) & (mean <= 1)) and np.all(std >= 0), g
    # the first-order line is the same for every configuration of a seed, and it learns: > chance (0.1)
    assert _col(acc, "first_order_mean")[-1] > 0.3
    # level 1 alone (size 1, no merges) hardly ever predicts a fresh path
    assert _col(acc, "none_size1_mean")[-1] < 0.2
    pur = _csv(out / "sf_gw_purity.csv")
    for g in groups[:-1]:
        v = _col(pur, f"{g}_mean")
        v = v[np.isfinite(v)]
        assert np.all((v >= 0) & (v <= 1 + 1e-12)), g
    assert np.all(np.isnan(_col(pur, "none_size1_mean")))  # only singletons: the authors skip them
    ncl = _csv(out / "sf_gw_n_clusters.csv")
    final = {g: _col(ncl, f"{g}_mean")[-1] for g in groups[:-1]}
    for size in QUICK.sizes:  # merging removes clusters
        assert final[f"sf_size{size}"] < final[f"none_size{size}"]
        assert final[f"random_size{size}"] < final[f"none_size{size}"]
    assert final["none_size1"] > final["none_size10"] > final["none_size100"]


def test_final_table_against_the_paper(quick):
    out, res = quick
    rows = _csv(out / "final_values.csv")
    by = {(r["size"], r["merge"], r["metric"]): r for r in rows}
    assert len(rows) == 3 * len(QUICK.sizes) * len(QUICK.merges) + 1
    for r in rows:
        if r["paper"] and r["ours"]:
            assert float(r["diff"]) == pytest.approx(float(r["ours"]) - float(r["paper"]))
    assert float(by[("10", "sf", "accuracy")]["paper"]) == 0.785
    assert float(by[("-", "first_order", "accuracy")]["paper"]) == 0.528
    # SF merges beat random merges at size 10 (paired: the same episodes), as in the paper
    assert float(by[("10", "sf", "accuracy")]["ours"]) > float(by[("10", "random", "accuracy")]["ours"])
    assert res["table"][0]["metric"] == "accuracy"


def test_section_3_1_figures(quick):
    out, _ = quick
    acc = _csv(out / "size_purity_merge_acc.csv")
    pure = {int(r["size"]): r for r in acc if float(r["purity"]) == 1.0}
    for r in acc:
        assert 0 <= float(r["correct_mean"]) <= 1 and 0 <= float(r["actual_purity"]) <= 1
        # balanced colouring: 10 positions per colour, so a random candidate is right 1 time in 10
        assert float(r["random_accuracy"]) == pytest.approx(0.1, abs=0.02)
    sizes = sorted(pure)
    assert float(pure[sizes[-1]]["correct_mean"]) > 0.8 > float(pure[1]["correct_mean"])
    assert float(pure[1]["correct_mean"]) > 0.12  # better than random even for single states
    sim = _csv(out / "true_sim.csv")
    s1 = {int(r["size"]): float(r["similarity_mean"]) for r in sim if float(r["purity"]) == 1.0}
    assert all(0 < v <= 1 for v in s1.values())
    assert s1[sizes[-1]] > s1[1] + 0.2  # larger pure clusters give SFs closer to the truth
    pos = _csv(out / "size_pos_acc.csv")
    assert len(pos) == 3 * len([s for s in QUICK.pos_sizes if s in QUICK.cluster_sizes]) * 100
    for m in range(3):
        obs = world(m).obs
        rows = [r for r in pos if int(r["map"]) == m and int(r["size"]) == QUICK.pos_sizes[0]]
        assert [int(r["colour"]) for r in rows] == obs.tolist()


def test_purity_random_matches_the_hypergeometric_law(quick):
    out, _ = quick
    rows = _csv(out / "purity_random.csv")
    for r in rows:
        clones, size = int(r["clones"]), int(r["size"])
        assert abs(float(r["sim_mean"]) - float(r["exact_mean"])) < 0.02
        assert 1.0 / clones - 1e-12 <= float(r["exact_mean"]) <= 1.0
        if clones == 1 or size == 1:
            assert float(r["exact_mean"]) == pytest.approx(1.0)
        if clones == 2 and size == 2:  # pure iff both draws share a label: (n-1)/(2n-1) of pairs
            n = QUICK.purity_states_per_clone
            assert float(r["exact_prob_pure"]) == pytest.approx((n - 1) / (2 * n - 1))
    for clones in {int(r["clones"]) for r in rows} - {1}:
        means = [float(r["exact_mean"]) for r in rows if int(r["clones"]) == clones]
        assert all(a >= b - 1e-12 for a, b in zip(means, means[1:]))  # larger random clusters are less pure


def test_structure_figure(quick):
    out, res = quick
    rows = _csv(out / "sf_gw_structure.csv")
    models = {r["model"] for r in rows}
    assert models == {"none", "random", "sf", "ground truth"}
    for model in models:
        M = np.zeros((100, 100))
        for r in rows:
            if r["model"] == model:
                M[int(r["from_position"]), int(r["to_position"])] = float(r["probability"])
        sums = M.sum(1)
        assert np.all(np.isclose(sums, 1) | np.isclose(sums, 0)), model
        if model == "ground truth":
            np.testing.assert_allclose(M, true_position_matrix(world(0)))
    summary = res["figures"]["sf_gw_structure"]
    assert summary["ground truth"]["off_structure"] == 0.0
    for m in ("none", "random", "sf"):
        assert 0 < summary[m]["off_structure"] < 1


# --------------------------------------------------------------------------- units, no sweep
def test_smooth_is_gaussian_filter_inside_and_nan_aware():
    from scipy.ndimage import gaussian_filter1d

    x = np.random.default_rng(0).random(300)
    inner = slice(100, 200)  # far from the ends the truncated kernel is the full kernel
    np.testing.assert_allclose(smooth(x, 5)[inner], gaussian_filter1d(x, 5)[inner], rtol=1e-10)
    y = x.copy()
    y[:10] = np.nan
    s = smooth(y, 5)
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s[150], smooth(x, 5)[150])
    assert smooth(np.full(40, 0.3), 20) == pytest.approx(np.full(40, 0.3))  # constant in, constant out


def test_true_position_matrix_is_the_world_averaged_over_actions():
    env = world(1)
    T = true_position_matrix(env)
    hmm = env.to_hmm()
    dense = np.mean([t.toarray() if hasattr(t, "toarray") else np.asarray(t) for t in hmm.T], axis=0)
    np.testing.assert_allclose(T, dense)
    res = structure_matrices([], [], T)
    assert res["ground truth"]["tv"] == 0.0


def test_final_table_arithmetic():
    ep = 60
    configs, results = [], []
    for seed, acc in ((0, 0.7), (1, 0.9)):
        for merge in ("sf", "random"):
            configs.append({"colouring": 0, "seed": seed, "merge": merge, "size": 10})
            a = acc if merge == "sf" else acc - 0.2
            results.append({"l2_accuracy": np.full(ep, a), "first_order_accuracy": np.full(ep, 0.5),
                            "purity_no_singletons": np.full(ep, 0.6), "n_clusters": np.full(ep, 500.0)})
    rows = {(r["merge"], r["metric"]): r for r in final_table(configs, results, sigma=20)}
    sf = rows[("sf", "accuracy")]
    assert sf["ours"] == pytest.approx(0.8) and sf["ours_std"] == pytest.approx(0.1)
    assert sf["diff"] == pytest.approx(0.8 - 0.785) and sf["diff_in_std"] == pytest.approx(0.015 / 0.1)
    assert rows[("random", "accuracy")]["ours"] == pytest.approx(0.6)
    assert rows[("first_order", "accuracy")]["runs"] == 2  # one line per (colouring, seed)


def test_purity_numbers_small_case():
    r = purity_random_numbers([3], [3], 1, 500)[0]  # 3 states, 3 labels, one cluster of all: purity 1/3
    assert r["sim_mean"] == pytest.approx(1 / 3) and r["exact_mean"] == pytest.approx(1 / 3)


def test_demo_small(tmp_path, capsys):
    """`hmmmerge demo` end to end on a short run: table, figure, and the oracle at the physical limit."""
    from hmmmerge.cli import main

    args = ["demo", "--out", str(tmp_path), "--episodes", "20", "--json"]
    assert main(args + ["--executor", "serial"]) == 0
    res = json.loads(capsys.readouterr().out)
    for f in res["files"]:
        assert os.path.getsize(f) > 0
    rows = {r["model"]: r for r in res["table"]}
    assert rows["oracle (true world)"]["heldout_accuracy"] == 1.0
    assert len([m for m in rows if m.startswith("two-level")]) == 7   # sf / random / none x 2 sizes, fold
    assert "two-level, fold consolidation (beyond the paper)" in rows
    for r in res["table"]:
        for k in ("online_accuracy", "heldout_accuracy"):
            assert r[k] is None or 0 <= r[k] <= 1  # JSON has no NaN: a missing value is null
    if res["em"]:
        assert "EM (clone HMM, 20 clones/colour)" in rows
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["runs"]["agent"]["ran"] == 0  # cached: only redrawn


def test_authors_sf_reaches_the_agent(tmp_path, monkeypatch):
    """`--authors-sf` marks every learning config and the run builds the agent with the authors' SF weighting."""
    from hmmmerge import agent as agent_module
    from hmmmerge.reproduce import PROTOCOLS, learning_sweep
    from hmmmerge.reproduce.runs import AUTHORS_SF, learning_run

    sweep = learning_sweep(str(tmp_path), PROTOCOLS["quick"], authors_sf=True)
    assert all(c["authors_sf"] for c in sweep.configs)
    assert not any("authors_sf" in c for c in learning_sweep(str(tmp_path), PROTOCOLS["quick"]).configs)
    seen = {}
    original = agent_module.TwoLevelMemory.__init__

    @functools.wraps(original)
    def spy(self, *args, **kw):
        seen.update(kw)
        original(self, *args, **kw)

    monkeypatch.setattr(agent_module.TwoLevelMemory, "__init__", spy)
    learning_run(dict(next(c for c in sweep.configs if c["merge"] == "sf"), episodes=5))
    merger = seen["merger"]
    assert merger.sf_scale == AUTHORS_SF["sf_scale"] and merger.min_depth == AUTHORS_SF["min_depth"]


def test_beyond_paper_curves(quick):
    out, res = quick
    rows = _csv(out / "beyond_paper.csv")
    assert len(rows) == QUICK.episodes
    from hmmmerge.models import select

    for k in [*select("beyond"), "context"]:
        mean = _col(rows, f"{k}_mean")
        assert np.all((mean >= 0) & (mean <= 1)), k
    # the context model has no data before its first refit (episode 50): it predicts nothing there
    assert _col(rows, "context_mean")[0] < 0.05
    # EM trained on all episodes beats the paper's online learner at the end of this short run
    assert _col(rows, "em_heldout")[0] > _col(rows, "sf_mean")[-1]
    summary = res["figures"]["beyond_paper"]
    assert 0 <= summary["sf_last50"] <= 1 and summary["em_heldout"] > 0.9
