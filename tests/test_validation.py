"""The shared validation layer, the estimator mixin and the package's import graph."""

import ast
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hmmmerge
from hmmmerge import Trajectories
from hmmmerge._estimator import Estimator, NotFittedError
from hmmmerge._validation import (
    InvalidParameterError,
    alphabet_sizes,
    as_sequence,
    as_trajectories,
    check_float,
    check_int,
    check_symbols,
)

PACKAGE = Path(hmmmerge.__file__).parent


# --------------------------------------------------------------------------- import graph
def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Package modules imported at module level (imports inside functions are deliberate laziness)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
    return out


def package_import_graph() -> nx.DiGraph:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        g.add_edges_from((name, dep) for dep in _top_level_imports(path, name, set(files)) if dep != name)
    return g


def test_package_has_no_import_cycle():
    g = package_import_graph()
    # the parent package's __init__ imports its submodules; a cycle is a submodule importing back
    assert "hmmmerge.worlds" in g and g.has_edge("hmmmerge.worlds", "hmmmerge.environment")
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], cycles


def test_trajectories_and_the_model_depend_on_no_world():
    g = package_import_graph()
    assert set(g.successors("hmmmerge.trajectories")) == set()
    assert "hmmmerge.environment" not in nx.descendants(g, "hmmmerge.hmm")
    assert "hmmmerge.environment" not in nx.descendants(g, "hmmmerge.baselines.first_order")
    import hmmmerge.rollouts
    import hmmmerge.trajectories

    assert hmmmerge.rollouts.Trajectories is hmmmerge.trajectories.Trajectories is Trajectories


# --------------------------------------------------------------------------- scalars
@given(st.integers(-50, 50), st.one_of(st.none(), st.integers(-10, 10)), st.one_of(st.none(), st.integers(-10, 10)))
def test_check_int_accepts_exactly_the_range(v, low, high):
    inside = (low is None or v >= low) and (high is None or v <= high)
    if inside:
        assert check_int(v, "k", low=low, high=high) == v
        assert check_int(np.int32(v), "k", low=low, high=high) == v
    else:
        with pytest.raises(ValueError, match="^k must be"):
            check_int(v, "k", low=low, high=high)


@pytest.mark.parametrize("bad", [True, 1.0, "3", None, np.float64(2.0), [1]])
def test_check_int_rejects_non_integers_with_a_type_error(bad):
    with pytest.raises(TypeError, match="n_iter must be an integer >= 0"):
        check_int(bad, "n_iter", low=0)
    with pytest.raises(InvalidParameterError):  # also a ValueError, as scikit-learn's
        check_int(bad, "n_iter", low=0)
    assert check_int(None, "n", allow_none=True) is None


@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_check_float_accepts_exactly_finite_values_in_range(v, low_open):
    inside = math.isfinite(v) and (v > 0 if low_open else v >= 0) and v <= 1
    if inside:
        assert check_float(v, "eps", low=0, high=1, low_open=low_open) == v
    else:
        with pytest.raises(ValueError, match=r"eps must be a finite number in [\(\[]0, 1\]"):
            check_float(v, "eps", low=0, high=1, low_open=low_open)


def test_check_float_rejects_bools_and_strings():
    for bad in (True, "0.1", None):
        with pytest.raises(TypeError, match="pseudocount"):
            check_float(bad, "pseudocount", low=0)


# --------------------------------------------------------------------------- data
episodes = st.integers(1, 4).flatmap(lambda n: st.integers(0, 5).flatmap(lambda m: st.tuples(
    st.lists(st.lists(st.integers(0, 6), min_size=m + 1, max_size=m + 1), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(0, 3), min_size=m, max_size=m), min_size=n, max_size=n))))


@settings(max_examples=60, deadline=None)
@given(episodes)
def test_every_accepted_form_gives_the_same_trajectories(data):
    obs = np.array(data[0])
    acts = np.column_stack([np.full(len(obs), -1), np.array(data[1], dtype=np.int64).reshape(len(obs), -1)])
    ref = Trajectories(obs, acts)
    forms = [ref, (obs, acts), (obs.ravel(), acts.ravel())]
    for form in forms:
        t = as_trajectories(form)
        assert np.array_equal(t.obs, obs) and np.array_equal(t.actions, acts)
        o, a = as_sequence(form)
        assert np.array_equal(o, obs.ravel()) and np.array_equal(a, acts.ravel())
    t = as_trajectories(obs, acts)
    assert np.array_equal(t.obs, obs)
    with_states = Trajectories(obs, acts, states=obs + 1)
    assert as_trajectories(with_states) is with_states  # ground truth kept
    # alphabet sizes: brute force over the episodes
    n_obs, n_actions = alphabet_sizes(t.obs, t.actions)
    assert n_obs == max(max(row) for row in data[0]) + 1
    assert n_actions == max([max(row) for row in data[1] if row] + [0]) + 1
    check_symbols(t.obs, t.actions, n_obs, n_actions)
    if n_obs > 1:
        with pytest.raises(ValueError, match=f"observation {n_obs - 1}, outside 0..{n_obs - 2}"):
            check_symbols(t.obs, t.actions, n_obs - 1, n_actions)


def test_ragged_episodes_only_as_a_sequence():
    obs, acts = np.array([0, 1, 1, 0, 1]), np.array([-1, 0, -1, 1, 0])
    o, a = as_sequence((obs, acts))
    assert o.tolist() == obs.tolist() and a.tolist() == acts.tolist()
    with pytest.raises(ValueError, match="different lengths"):
        as_trajectories((obs, acts))


@pytest.mark.parametrize("data, message", [
    (([0, 1], [0, 0]), "must be -1"),
    (([0, 1, 0], [0, -1, 0]), r"actions\[0\] must be -1"),
    (([0, -1], [-1, 0]), "negative"),
    (([0, 1], [-1, -2]), "negative action"),
    (([0, 1, 0], [-1, -1, -2]), "only -1"),
    (([0, 1], [-1]), "shape"),
    ((np.zeros((0, 3), dtype=int), np.zeros((0, 3), dtype=int)), "no episodes"),
    (([0.5, 1.0], [-1, 0]), "integers"),
])
def test_bad_data_is_refused_by_name(data, message):
    with pytest.raises(ValueError, match=message):
        as_trajectories(data)


def test_bad_forms_and_sizes():
    with pytest.raises(TypeError, match="pair"):
        as_trajectories([[0, 1]])
    with pytest.raises(ValueError, match="not both"):
        as_trajectories(Trajectories([[0]], [[-1]]), [[-1]])
    with pytest.raises(ValueError, match="n_actions=1 does not cover action 1"):
        alphabet_sizes([[0, 0, 0]], [[-1, 0, 1]], n_actions=1)
    with pytest.raises(TypeError, match="n_obs must be a positive integer"):
        alphabet_sizes([[0]], [[-1]], n_obs=2.0)
    with pytest.raises(ValueError, match="action 4, outside 0..3"):
        check_symbols([[0, 0]], [[-1, 4]], n_obs=1, n_actions=4)
    with pytest.raises(ValueError, match="observation -1"):
        check_symbols([[-1]], [[-1]], n_obs=1, n_actions=4)


# --------------------------------------------------------------------------- estimator mixin
class Toy(Estimator):
    def __init__(self, n_states, pseudocount=0.0, seed=None, weights=None):
        self.n_states = n_states
        self.pseudocount = pseudocount
        self.seed = seed
        self.weights = weights

    def fit(self):
        self.total_ = self.n_states + self.pseudocount
        return self


def test_params_round_trip_and_clone():
    m = Toy(3, seed=[1, 2], weights=np.ones(2))
    params = m.get_params()
    assert list(params) == ["n_states", "pseudocount", "seed", "weights"]
    copy = Toy(**params)
    assert copy.get_params(deep=False).keys() == params.keys() and copy.seed == [1, 2]
    assert repr(m) == "Toy(n_states=3, seed=[1, 2], weights=array([1., 1.]))"
    assert repr(Toy(3, pseudocount=0.0)) == "Toy(n_states=3)"
    assert repr(Toy(3, pseudocount=0)) == "Toy(n_states=3, pseudocount=0)"  # another type is shown
    assert m.set_params(pseudocount=0.5) is m and m.pseudocount == 0.5


def test_nested_params():
    outer = Toy(Toy(2))
    assert outer.get_params()["n_states__n_states"] == 2
    outer.set_params(n_states__pseudocount=1.5)
    assert outer.n_states.pseudocount == 1.5


def test_set_params_refuses_unknown_names_and_fitted_check():
    with pytest.raises(ValueError, match="'n_clones' is not a parameter of Toy; valid: n_states"):
        Toy(1).set_params(n_clones=3)
    m = Toy(1)
    with pytest.raises(NotFittedError, match="Toy is not fitted yet"):
        m._check_fitted("total_")
    m.fit()._check_fitted("total_")
