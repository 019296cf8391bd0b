"""One validation layer: the checks every public entry point runs on its arguments.

In the spirit of scikit-learn's ``check_scalar`` and scipy's ``validate_graph``:
checks happen once, at the boundary, and every error names the argument.

* :func:`check_int`, :func:`check_float` -- scalar parameters;
* :func:`as_trajectories` -- the one accepted form of data: a
  :class:`~hmmmerge.trajectories.Trajectories`, a pair ``(obs, actions)``, or
  ``obs`` and ``actions`` given separately (2-D episodes x steps, or 1-D);
  :func:`as_sequence` -- the same inputs as one flat sequence whose ``-1``
  actions start the episodes (episodes may then differ in length);
* :func:`alphabet_sizes` -- ``n_obs`` / ``n_actions`` defaulted from the data
  or checked to cover it;
* :func:`check_symbols` -- observations and actions inside a model's alphabet;
* :class:`Int`, :class:`Float`, :class:`Options`, :class:`Bool` and
  :func:`validate_params` -- the declarative form: an estimator lists its
  parameters once in ``_parameter_constraints`` and ``fit`` checks them all.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .trajectories import Trajectories

__all__ = [
    "Bool",
    "Float",
    "Int",
    "InvalidParameterError",
    "Options",
    "validate_params",
    "alphabet_sizes",
    "as_sequence",
    "as_trajectories",
    "check_float",
    "check_int",
    "check_symbols",
]


class InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type; both a ``ValueError`` and a ``TypeError`` (as in scikit-learn)."""


def _bounds(low, high, low_open=False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low}, {high}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low}"
    if high is not None:
        return f" <= {high}"
    return ""


def check_int(value, name: str, *, low: int | None = None, high: int | None = None,
              allow_none: bool = False) -> int | None:
    """``value`` as an ``int`` if it is an integer (not a bool) in ``[low, high]``.

    Returns
    -------
    int, or ``None`` when ``value`` is ``None`` and ``allow_none``.

    Raises
    ------
    InvalidParameterError if ``value`` is not an integer; ValueError if it is out of range.

    See Also
    --------
    check_float

    Examples
    --------
    >>> check_int(3, "n_iter", low=0)
    3
    >>> check_int(0, "n_episodes", low=1)
    Traceback (most recent call last):
    ...
    ValueError: n_episodes must be a positive integer, got 0
    """
    if value is None and allow_none:
        return None
    what = "a positive integer" if (low == 1 and high is None) else "an integer" + _bounds(low, high)
    what += " or None" if allow_none else ""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidParameterError(f"{name} must be {what}, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def check_float(value, name: str, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as a ``float`` if it is a finite real number (not a bool) in the given range.

    ``low_open=True`` excludes ``low`` itself.

    Returns
    -------
    float, or ``None`` when ``value`` is ``None`` and ``allow_none``.

    See Also
    --------
    check_int

    Examples
    --------
    >>> check_float(1e-3, "pseudocount", low=0)
    0.001
    >>> check_float(float("nan"), "tol", low=0)
    Traceback (most recent call last):
    ...
    ValueError: tol must be a finite number >= 0, got nan
    """
    if value is None and allow_none:
        return None
    what = "a finite number" + _bounds(low, high, low_open) + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidParameterError(f"{name} must be {what}, got {value!r}")
    v = float(value)
    if (not math.isfinite(v) or (low is not None and (v <= low if low_open else v < low))
            or (high is not None and v > high)):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return v


# ------------------------------------------------------------------ declarative constraints
#: the largest integer a parameter may take unless its table says less: what an int64 kernel holds
INT_MAX = 2**62


class Int:
    """An integer parameter in ``[low, high]`` (``high`` defaults to :data:`INT_MAX`), ``None`` if ``none``.

    >>> Int(1)(0, "min_visits")
    Traceback (most recent call last):
    ...
    ValueError: min_visits must be a positive integer, got 0
    >>> Int(1)(10**30, "min_visits")
    Traceback (most recent call last):
    ...
    ValueError: min_visits must be a positive integer at most 2**62, got 1000000000000000000000000000000
    """

    def __init__(self, low: int | None = None, high: int | None = INT_MAX, none: bool = False):
        self.low, self.high, self.none = low, high, none

    def __call__(self, value, name: str):
        if self.high != INT_MAX:
            return check_int(value, name, low=self.low, high=self.high, allow_none=self.none)
        out = check_int(value, name, low=self.low, allow_none=self.none)
        if out is not None and out > INT_MAX:
            what = "a positive integer" if self.low == 1 else "an integer" + _bounds(self.low, None)
            raise ValueError(f"{name} must be {what} at most 2**62, got {value!r}")
        return out


class Float:
    """A finite real parameter in the given range (``low_open`` excludes ``low``), ``None`` if ``none``.

    >>> Float(0, 1)(0.5, "p")
    0.5
    """

    def __init__(self, low: float | None = None, high: float | None = None, low_open: bool = False,
                 none: bool = False):
        self.low, self.high, self.low_open, self.none = low, high, low_open, none

    def __call__(self, value, name: str):
        return check_float(value, name, low=self.low, high=self.high, low_open=self.low_open,
                           allow_none=self.none)


class Options:
    """A parameter that is one of ``values`` (compared with ``==``, type included).

    >>> Options("sf", "random")("fold", "merge")
    Traceback (most recent call last):
    ...
    ValueError: merge must be one of 'sf', 'random', got 'fold'
    """

    def __init__(self, *values):
        self.values = values

    def __call__(self, value, name: str):
        for v in self.values:
            if type(v) is type(value) and v == value:
                return value
        raise ValueError(f"{name} must be one of {', '.join(map(repr, self.values))}, got {value!r}")


class Bool:
    """A ``bool`` parameter (``numpy.bool_`` accepted).

    >>> Bool()(1, "split")
    Traceback (most recent call last):
    ...
    hmmmerge._validation.InvalidParameterError: split must be True or False, got 1
    """

    def __call__(self, value, name: str):
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidParameterError(f"{name} must be True or False, got {value!r}")
        return bool(value)


def validate_params(estimator) -> None:
    """Check every parameter of ``estimator`` against its class's ``_parameter_constraints``.

    The table maps a parameter name to one constraint (:class:`Int`,
    :class:`Float`, :class:`Options`, :class:`Bool`, or any callable
    ``check(value, name)`` that raises with a message naming ``name``) or to
    a tuple of them, any of which may accept the value.  A parameter missing
    from the table is not checked; a table entry that is not a parameter is a
    programming error.

    >>> from hmmmerge._estimator import Estimator
    >>> class Model(Estimator):
    ...     _parameter_constraints = {"n_iter": Int(1, 1000)}
    ...     def __init__(self, n_iter=10):
    ...         self.n_iter = n_iter
    >>> validate_params(Model(n_iter=0))
    Traceback (most recent call last):
    ...
    ValueError: n_iter must be an integer in [1, 1000], got 0
    """
    table = getattr(type(estimator), "_parameter_constraints", {})
    names = set(type(estimator)._param_names())
    for name, rule in table.items():
        if name not in names:
            raise AssertionError(f"{type(estimator).__name__}._parameter_constraints names {name!r}, "
                                 "which is not a constructor parameter")
        value = getattr(estimator, name)
        rules = rule if isinstance(rule, tuple) else (rule,)
        errors = []
        for r in rules:
            try:
                r(value, name)
                break
            except (ValueError, TypeError) as e:
                errors.append(e)
        else:
            if len(errors) == 1:
                raise errors[0]
            raise InvalidParameterError("; or ".join(str(e) for e in errors))


# ------------------------------------------------------------------ data
def _pair(data, actions):
    """``(obs, actions)`` arrays from the accepted input forms (not yet checked)."""
    if isinstance(data, Trajectories):
        if actions is not None:
            raise ValueError("pass either Trajectories or (obs, actions), not both")
        return data.obs, data.actions
    if actions is None:
        if isinstance(data, tuple) and len(data) == 2:
            data, actions = data
        else:
            raise TypeError("data must be a Trajectories, a pair (obs, actions), or obs with actions= given; "
                            f"got {type(data).__name__} without actions")
    obs, acts = np.asarray(data), np.asarray(actions)
    if obs.shape != acts.shape:
        raise ValueError(f"actions has shape {acts.shape} but obs has {obs.shape}")
    return obs, acts


def _check_flat(obs: np.ndarray, acts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Checks of a 1-D sequence whose ``-1`` actions start episodes."""
    if obs.size == 0:
        raise ValueError("obs is empty: each episode needs at least its first observation")
    for name, x in (("obs", obs), ("actions", acts)):
        if not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {x.dtype}")
    if acts[0] != -1:
        raise ValueError("actions[0] must be -1 (the first observation comes with no move)")
    if obs.min() < 0:
        raise ValueError(f"obs holds a negative value ({int(obs.min())})")
    if acts.min() < -1:
        raise ValueError(f"actions holds {int(acts.min())}; only -1 (episode start) may be negative")
    return obs.astype(np.int64), acts.astype(np.int64)


def as_sequence(data, actions=None) -> tuple[np.ndarray, np.ndarray]:
    """The data as one flat sequence ``(obs, actions)``: int64, 1-D, ``-1`` at every episode start.

    Accepts what :func:`as_trajectories` accepts; a 1-D pair may hold
    episodes of different lengths (each starts at a ``-1`` action).

    Returns
    -------
    obs, actions : 1-D int64 arrays of equal length.

    See Also
    --------
    as_trajectories

    Examples
    --------
    >>> obs, acts = as_sequence(([0, 1, 1, 0, 1], [-1, 0, -1, 1, 0]))   # episodes of 2 and 3 steps
    >>> obs.tolist(), acts.tolist()
    ([0, 1, 1, 0, 1], [-1, 0, -1, 1, 0])
    """
    obs, acts = _pair(data, actions)
    if obs.ndim == 1:
        return _check_flat(obs, acts)
    t = as_trajectories(obs, acts)
    return t.obs.ravel(), t.actions.ravel()


def as_trajectories(data, actions=None) -> Trajectories:
    """The data as a :class:`~hmmmerge.trajectories.Trajectories` of at least one episode.

    ``data`` is a ``Trajectories`` (returned as is), a pair ``(obs, actions)``
    (a tuple), or ``obs`` with ``actions`` given separately.  Arrays are 2-D
    (episodes x steps) or 1-D: one sequence where every ``-1`` action starts
    an episode (these episodes must be of one length here; see
    :func:`as_sequence` for episodes of different lengths).

    Returns
    -------
    Trajectories

    See Also
    --------
    as_sequence, alphabet_sizes, check_symbols

    Examples
    --------
    >>> t = as_trajectories(([0, 1, 0, 1], [-1, 0, -1, 1]))   # two episodes of one move
    >>> t.obs.tolist(), t.actions.tolist()
    ([[0, 1], [0, 1]], [[-1, 0], [-1, 1]])
    """
    obs, acts = _pair(data, actions)
    if isinstance(data, Trajectories):
        if data.n_episodes == 0:
            raise ValueError("the data hold no episodes")
        return data
    if obs.ndim == 1 and obs.size and np.issubdtype(acts.dtype, np.integer) and (acts[1:] == -1).any():
        obs, acts = _check_flat(obs, acts)
        starts = np.flatnonzero(acts == -1)
        lengths = np.diff(np.append(starts, obs.size))
        if (lengths != lengths[0]).any():
            raise ValueError(
                f"the 1-D sequence holds episodes of different lengths ({int(lengths.min())} to "
                f"{int(lengths.max())} steps); this model needs episodes of one length"
            )
        obs, acts = obs.reshape(len(starts), -1), acts.reshape(len(starts), -1)
    t = Trajectories(obs, acts)
    if t.n_episodes == 0:
        raise ValueError("the data hold no episodes")
    return t


def alphabet_sizes(obs, actions, n_obs=None, n_actions=None) -> tuple[int, int]:
    """``(n_obs, n_actions)``: the given sizes checked to cover the data, or the data's largest value + 1.

    ``actions`` may hold ``-1`` (episode starts), which is not an action.

    Returns
    -------
    n_obs, n_actions : int

    Examples
    --------
    >>> alphabet_sizes([[0, 2, 1]], [[-1, 0, 1]])
    (3, 2)
    >>> alphabet_sizes([[0, 2, 1]], [[-1, 0, 1]], n_obs=2)
    Traceback (most recent call last):
    ...
    ValueError: n_obs=2 does not cover observation 2 in the data (needs >= 3)
    """
    obs, actions = np.asarray(obs), np.asarray(actions)
    moves = actions[actions >= 0]
    seen = {"n_obs": int(obs.max()) + 1, "n_actions": int(moves.max()) + 1 if moves.size else 1}
    out = []
    for name, given, what in (("n_obs", n_obs, "observation"), ("n_actions", n_actions, "action")):
        if given is None:
            out.append(seen[name])
            continue
        given = check_int(given, name, low=1)
        if given < seen[name]:
            raise ValueError(f"{name}={given} does not cover {what} {seen[name] - 1} in the data "
                             f"(needs >= {seen[name]})")
        out.append(given)
    return out[0], out[1]


def check_symbols(obs, actions, n_obs: int, n_actions: int) -> None:
    """Raise ``ValueError`` unless every observation is in ``0..n_obs-1`` and every action in ``0..n_actions-1``.

    ``actions`` may hold ``-1`` (episode starts).

    See Also
    --------
    alphabet_sizes

    Examples
    --------
    >>> check_symbols([[0, 1]], [[-1, 0]], n_obs=2, n_actions=1)
    >>> check_symbols([[0, 4]], [[-1, 0]], n_obs=2, n_actions=1)
    Traceback (most recent call last):
    ...
    ValueError: obs holds observation 4, outside 0..1 (n_obs=2)
    """
    obs, actions = np.asarray(obs), np.asarray(actions)
    if obs.size and (obs.min() < 0 or obs.max() >= n_obs):
        bad = int(obs.min()) if obs.min() < 0 else int(obs.max())
        raise ValueError(f"obs holds observation {bad}, outside 0..{n_obs - 1} (n_obs={n_obs})")
    if actions.size and (actions.min() < -1 or actions.max() >= n_actions):
        bad = int(actions.min()) if actions.min() < -1 else int(actions.max())
        raise ValueError(f"actions holds action {bad}, outside 0..{n_actions - 1} (n_actions={n_actions})")
