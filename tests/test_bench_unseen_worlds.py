"""benchmarks/bench_unseen_worlds.py: its worlds and conditions, its runs, and its tables (the main benchmark's)."""

import argparse
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_unseen_worlds.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_unseen_worlds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worlds_and_conditions(bench):
    sizes = {name: bench.build_world(name, 0, "clean").n_states for name in bench.WORLDS}
    assert sizes == {"grid-15x15-c8": 225, "grid-20x20-c15": 400, "grid-30x30-c20": 900, "torus-12x12-c6": 144,
                     "rooms-7-c6": 100, "graph-100-a4-c12": 100}
    assert bench.build_world("graph-100-a4-c12", 1, "clean").n_actions == 4
    both = bench.build_world("torus-12x12-c6", 1, bench.COMBINED)
    assert not both.is_deterministic and both.obs_noise == 0.05
    assert set(bench.TARGET_CONDITIONS) == set(bench.CONDITIONS) - {bench.COMBINED}
    config = {"world": "rooms-7-c6", "colouring": 1, "seed": 1, "episodes": 20, "episode_length": 10,
              "eval_episodes": 5}
    clean = bench.build_world("rooms-7-c6", 1, "clean")
    a, _ = bench.walks(clean, dict(config, condition="clean"))
    b, _ = bench.walks(clean, dict(config, condition="random-start"))
    assert (a.states[:, 0] == clean.start).all() and len(set(b.states[:, 0].tolist())) > 5
    with pytest.raises(ValueError, match="unknown world"):
        bench.build_world("grid-99", 0, "clean")


def test_runs_cap_fold_and_tables_leave_the_combined_condition_out_of_the_targets(bench):
    args = argparse.Namespace(worlds=["grid-15x15-c8"], conditions=list(bench.CONDITIONS), seeds=[0, 1],
                              learners=["oracle", "em", "fold", "replay"], cpu_limit=120.0, capped=["fold"],
                              capped_limit=20.0, capped_runs=1, episodes=1000, episode_length=50, eval_episodes=100)
    configs = bench.configurations(args)
    fold = [(c, lim) for c, lim in configs if c["learner"] == "fold"]
    assert len(fold) == 2 + 5 and {lim for _, lim in fold} == {20.0}
    assert len(configs) == 6 * 2 * 3 + len(fold)
    keys = {bench.W.run_key(c) for c, _ in configs}
    assert len(keys) == len(configs)
    records = []
    for c, _ in configs:
        acc = {"oracle": 0.95, "em": 0.9, "fold": 0.8, "replay": 0.93}[c["learner"]]
        records.append({"config": c, "status": "ok", "cpu_limit": 120.0, "heldout_accuracy": acc,
                        "oracle_accuracy": 0.95, "fit_cpu_s": 2.0, "block_cpu_s": [0.2] * 10,
                        "online_accuracy": acc})
    md = "\n".join(bench.report(records, args.learners, args.conditions, "replay"))
    targets = md.split("targets for `replay`")[1].split("\n", 1)[1]
    assert "| slip-0.05 | 2 | +0.030 | -0.020 | yes |" in targets and bench.COMBINED not in targets.split("Bounds")[0]
    assert "| grid-15x15-c8 |" in md and f"| {bench.COMBINED} | replay | 2 | 0.930 ± 0.000" in md


def test_doc_markers_are_its_own(bench, tmp_path):
    doc = tmp_path / "B.md"
    doc.write_text(f"x\n{bench.W.DOC_BEGIN}\nmain\n{bench.W.DOC_END}\n{bench.DOC_BEGIN}\nold\n{bench.DOC_END}\ny\n")
    bench.W.update_doc(str(doc), ["new"], bench.DOC_BEGIN, bench.DOC_END)
    assert doc.read_text() == (f"x\n{bench.W.DOC_BEGIN}\nmain\n{bench.W.DOC_END}\n{bench.DOC_BEGIN}\nnew\n"
                               f"{bench.DOC_END}\ny\n")
