"""One contract for every learner of the catalogue (hmmmerge.models.MODELS) and every merge mode (MERGERS).

Each learner: constructed unfitted with parameters as attributes (nothing learned), get_params /
set_params / repr agree, ``type(m)(**m.get_params())`` is an unfitted copy that fits to the same
model, ``fit`` returns ``self`` and starts afresh, ``partial_fit`` over two halves equals ``fit``
over the whole where it exists, ``to_hmm()`` is an ActionHMM of the data's alphabet whose start
distribution and transition rows are distributions, and ``save`` / ``load`` (where supported)
give the same model back.  Each merger: the agent's deep ``get_params`` reaches every one of its
constructor parameters, and an agent built with it as an object equals the one built by name.
"""

import inspect

import numpy as np
import pytest

from hmmmerge import gridworld, random_walk
from hmmmerge._estimator import Estimator
from hmmmerge.agent import TwoLevelMemory
from hmmmerge.hmm import ActionHMM
from hmmmerge.models import MERGERS, MODELS, make_learner, merger_class

#: small settings so that every learner fits in well under a second
SMALL = {"em": {"n_clones": 2, "n_iter": 3}, "level2-sf": {"sleep_every": 100}, "level2-random": {"sleep_every": 100},
         "level2-none": {"sleep_every": 100}, "level2-fold": {"sleep_every": 100},
         "level2-fold-noisy": {"sleep_every": 100}, "level2-replay": {"sleep_every": 20}}


@pytest.fixture(scope="module")
def data(small_world):
    return small_world, random_walk(small_world, 16, 12, seed=2)


def _learner(name, env):
    return make_learner(name, env.n_obs, env.n_actions, env=env, seed=3, **SMALL.get(name, {}))


def _fit(learner, name, traj, env):
    if "n_obs" in MODELS[name].takes or name == "oracle":
        return learner.fit(traj)
    return learner.fit(traj, env.n_obs, env.n_actions)


def _dense(hmm):
    return [t.toarray() if hasattr(t, "toarray") else np.asarray(t) for t in hmm.T], np.asarray(hmm.E), hmm.B


def _same_model(a, b) -> bool:
    (ta, ea, ba), (tb, eb, bb) = _dense(a), _dense(b)
    return (len(ta) == len(tb) and all(np.array_equal(x, y) for x, y in zip(ta, tb))
            and np.array_equal(ea, eb) and np.array_equal(ba, bb))


@pytest.mark.parametrize("name", list(MODELS))
def test_parameters_are_attributes_and_clones_are_unfitted_copies(name, data):
    env, _ = data
    m = _learner(name, env)
    assert isinstance(m, Estimator)
    params = m.get_params(deep=False)
    assert set(params) == set(type(m)._param_names())
    assert all(getattr(m, k) is v or getattr(m, k) == v for k, v in params.items())
    assert not [k for k in vars(m) if k.endswith("_") and not k.startswith("_")]   # nothing learned yet
    twin = type(m)(**m.get_params(deep=False))
    assert twin.get_params(deep=False).keys() == params.keys() and repr(twin) == repr(m)
    with pytest.raises(ValueError, match="not a parameter"):
        m.set_params(no_such_parameter=1)
    if params:
        key = next(iter(params))
        assert m.set_params(**{key: params[key]}) is m


@pytest.mark.parametrize("name", list(MODELS))
def test_fit_starts_afresh_and_to_hmm_is_a_model_of_the_alphabet(name, data):
    env, traj = data
    m = _learner(name, env)
    assert _fit(m, name, traj, env) is m
    hmm = m.to_hmm()
    assert isinstance(hmm, ActionHMM) and hmm.n_obs == env.n_obs and hmm.n_actions == env.n_actions
    T, E, B = _dense(hmm)
    assert np.isclose(B.sum(), 1) and (B >= 0).all()
    for t in T:   # rows are distributions, or all zero (a transition never seen)
        sums = t.sum(axis=1)
        assert np.all(np.isclose(sums, 1) | np.isclose(sums, 0)), name
    twin = type(m)(**m.get_params(deep=False))
    assert _same_model(_fit(twin, name, traj, env).to_hmm(), hmm)        # the clone fits to the same model
    other = random_walk(env, 5, 12, seed=9)
    assert _same_model(_fit(_fit(m, name, other, env), name, traj, env).to_hmm(), hmm)   # fit starts afresh


@pytest.mark.parametrize("name", [n for n in MODELS if hasattr(MODELS[n].learner_class, "partial_fit")])
def test_partial_fit_over_halves_equals_fit_over_the_whole(name, data):
    env, traj = data
    whole = _fit(_learner(name, env), name, traj, env).to_hmm()
    m = _learner(name, env)
    m.partial_fit(traj[:7])
    assert m.partial_fit(traj[7:]) is m
    assert _same_model(m.to_hmm(), whole)


@pytest.mark.parametrize("name", [n for n in MODELS if hasattr(MODELS[n].learner_class, "load")
                                  and n != "oracle"])
def test_save_and_load_give_the_same_model(name, data, tmp_path):
    env, traj = data
    m = _fit(_learner(name, env), name, traj, env)
    m.save(tmp_path / "m.npz")
    back = type(m).load(tmp_path / "m.npz")
    assert _same_model(back.to_hmm(), m.to_hmm())
    assert back.get_params(deep=False).keys() == m.get_params(deep=False).keys()


@pytest.mark.parametrize("merge", list(MERGERS))
def test_mergers_as_objects_equal_mergers_by_name_and_reach_get_params(merge, data):
    env, traj = data
    cls = merger_class(merge)
    by_name = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, sleep_every=100, seed=3).fit(traj)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merger=cls(), sleep_every=100, seed=3)
    deep = agent.get_params()
    names = [p for p in inspect.signature(cls).parameters]
    if isinstance(agent.merger, Estimator):
        assert {f"merger__{p}" for p in names} <= set(deep)
    agent.fit(traj)
    assert agent.merge_ == merge and agent.merger_ is not agent.merger
    assert np.array_equal(agent.history()["l2_accuracy"], by_name.history()["l2_accuracy"])
    assert _same_model(agent.to_hmm(), by_name.to_hmm())


@pytest.mark.parametrize("cls", sorted({MODELS[n].learner_class for n in MODELS}
                                       | {merger_class(m) for m in MERGERS}, key=lambda c: c.__name__))
def test_every_parameter_has_a_declared_constraint(cls):
    """Parameters are checked by one mechanism: a ``_parameter_constraints`` entry for each constructor parameter."""
    table = getattr(cls, "_parameter_constraints", {})
    assert set(table) == set(cls._param_names()), cls.__name__
    assert all(callable(rule) or (isinstance(rule, tuple) and all(map(callable, rule))) for rule in table.values())


def _numba_kernels():
    """Every numba dispatcher defined in a module of the package."""
    import importlib
    import pkgutil

    import hmmmerge
    from numba.core.registry import CPUDispatcher

    for m in pkgutil.walk_packages(hmmmerge.__path__, "hmmmerge."):
        if m.name.endswith("__main__"):   # runs the CLI on import
            continue
        try:
            module = importlib.import_module(m.name)
        except ModuleNotFoundError as e:   # optional extras (gymnasium, minigrid, aalpy) hold no kernels
            if e.name.split(".")[0] in ("gymnasium", "minigrid", "aalpy"):
                continue
            raise
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == m.name:
                yield f"{m.name}.{name}", obj


def test_no_numba_kernel_has_an_array_default():
    # numba types an omitted array default by the default object's identity, which is new in every
    # process: such a kernel is compiled afresh in every process and its on-disk cache grows without end
    kernels = dict(_numba_kernels())
    assert "hmmmerge._replay_kernels._m_step_pairs" in kernels
    bad = [name for name, k in kernels.items()
           if any(isinstance(p.default, np.ndarray) for p in inspect.signature(k.py_func).parameters.values())]
    assert bad == []


def test_the_replay_m_step_is_compiled_once_for_every_call_form():
    from hmmmerge._replay_kernels import _m_step_pairs
    from hmmmerge.replay import ReplayMerger

    life = TwoLevelMemory(10, 4, merger=ReplayMerger(exact=False), seed=0).fit(random_walk(gridworld(), 60, seed=0))
    assert life.merger_.n_clones_total > 0
    assert len(_m_step_pairs.signatures) == 1
