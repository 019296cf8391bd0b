"""The model registry: one name, one model, one set of defaults, for the library and the CLI alike."""

import numpy as np
import pytest

from hmmmerge import gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.baselines import BestFirstMerging, CloneHMM, ContextModel, FirstOrderModel
from hmmmerge.fold import FoldMerger
from hmmmerge.fold_noisy import StatisticalFoldMerger
from hmmmerge.replay import ReplayMerger
from hmmmerge.models import MODELS, build_model, fit_model
from hmmmerge.cli import build_parser
from hmmmerge.commands.evaluate import model_params
from hmmmerge.episodic import EpisodicMemory


@pytest.fixture(scope="module")
def small():
    env = gridworld(4, 4, n_colours=3, seed=2)
    return env, random_walk(env, 40, 15, seed=4)  # 640 steps: one sleep, so level 2 exists


def _same_hmm(a, b):
    dense = [m.to_dense() for m in (a, b)]
    return all(np.array_equal(getattr(dense[0], k), getattr(dense[1], k)) for k in ("T", "E", "B"))


def test_cli_choices_are_the_registry():
    for name in MODELS:
        assert build_parser().parse_args(["baseline", name]).model == name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["baseline", "first_order"])
    # the names README and ARCHITECTURE use for `hmmmerge baseline`
    assert {"em", "bfmm", "first-order", "context", "oracle"} <= set(MODELS)
    assert all(name == name.lower() and "_" not in name for name in MODELS)


def test_cli_defaults_are_the_registry_defaults():
    args = build_parser().parse_args(["evaluate"])
    for name, entry in MODELS.items():
        assert model_params(name, args) == {o.param: entry.defaults[o.param] for o in entry.options}
    assert MODELS["em"].defaults["n_clones"] == 30 and MODELS["em"].defaults["n_iter"] == 150
    args = build_parser().parse_args(["baseline", "em", "--clones", "4", "--em-iter", "7", "--bfmm-episodes", "3"])
    assert model_params("em", args) == {"n_clones": 4, "n_iter": 7}
    assert model_params("bfmm", args) == {"n_episodes": 3, "search": "pairs", "structure_prior": 1.0}


def test_registry_builds_what_direct_construction_builds(small):
    env, train = small
    direct = {
        "oracle": env.to_hmm(),
        "first-order": FirstOrderModel(pseudocount=0.5).fit(train, env.n_obs, env.n_actions).to_hmm(),
        "context": ContextModel(order=2).fit(train, env.n_obs, env.n_actions).to_hmm(),
        "em": CloneHMM(n_clones=2, n_iter=4, seed=[3, 1]).fit(train, env.n_obs, env.n_actions).to_hmm(),
        "em-split": CloneHMM(n_clones=12, n_iter=60, seed=[3, 1], split_rounds=3, split_surprise=0.5,  # splits 3
                             merge_rounds=3)
        .fit(train, env.n_obs, env.n_actions).to_hmm(),
        "bfmm": BestFirstMerging(seed=[3, 1]).fit(train[:5], env.n_obs, env.n_actions).to_hmm(),
        "level2-random": TwoLevelMemory(env.n_obs, env.n_actions, merge="random", initial_size=3,
                                        seed=[3, 1]).fit(train).level2_hmm(),
        "level2-fold": TwoLevelMemory(env.n_obs, env.n_actions, merger=FoldMerger(), seed=[3, 1]).fit(train).level2_hmm(),
        "level2-fold-noisy": TwoLevelMemory(env.n_obs, env.n_actions, merger=StatisticalFoldMerger(),
                                            seed=[3, 1]).fit(train).level2_hmm(),
        "level2-replay": TwoLevelMemory(env.n_obs, env.n_actions, merger=ReplayMerger(), seed=[3, 1]).fit(train).level2_hmm(),
    }
    if "rpni" in MODELS:   # AALpy installed
        from hmmmerge.baselines.aalpy_models import AlergiaModel, RPNIModel

        direct["rpni"] = RPNIModel().fit(train, env.n_obs, env.n_actions).to_hmm()
        direct["alergia"] = AlergiaModel(eps=0.1).fit(train, env.n_obs, env.n_actions).to_hmm()
    mem = EpisodicMemory(env.n_obs, env.n_actions)
    mem.observe_trajectories(train)
    direct["level1"] = mem.to_hmm()
    params = {"first-order": {"pseudocount": 0.5}, "context": {"order": 2}, "em": {"n_clones": 2, "n_iter": 4},
              "em-split": {"n_clones": 12, "n_iter": 60, "split_surprise": 0.5},
              "bfmm": {"n_episodes": 5}, "level2-random": {"initial_size": 3}, "alergia": {"eps": 0.1}}
    for merge in ("sf", "none"):
        direct[f"level2-{merge}"] = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, seed=[3, 1]).fit(train).to_hmm()
    assert set(direct) == set(MODELS)  # every entry checked
    for name, expected in direct.items():
        got = build_model(name, train, env=env, seed=[3, 1], **params.get(name, {}))
        assert _same_hmm(got, expected), name


def test_every_input_form_and_alphabet_default(small):
    env, train = small
    ref = build_model("first-order", train, env=env)
    assert _same_hmm(build_model("first-order", (train.obs, train.actions), env=env), ref)
    assert _same_hmm(build_model("first-order", train, env.n_obs, env.n_actions), ref)
    learner = fit_model("em", train, env=env, n_clones=1, n_iter=2)
    assert isinstance(learner, CloneHMM) and learner.n_clones == 1 and learner.n_iter_ <= 2


def test_bad_names_and_parameters(small):
    env, train = small
    with pytest.raises(ValueError, match="unknown model 'first_order'; choose from oracle, first-order"):
        build_model("first_order", train, env=env)
    with pytest.raises(ValueError, match="model 'em' has no parameter 'clones'; its parameters: n_clones"):
        build_model("em", train, env=env, clones=3)
    with pytest.raises(ValueError, match="oracle is the true world"):
        build_model("oracle")
    with pytest.raises(ValueError, match="n_obs=2 does not cover observation 2"):
        build_model("first-order", train, n_obs=2)
    with pytest.raises(TypeError, match="Trajectories"):
        build_model("level1", None, env=env)
