"""Estimator conventions shared by the learners (scikit-learn's ``BaseEstimator`` contract).

A learner stores each constructor parameter as an attribute of the same name
and does nothing else in ``__init__``; it declares their ranges once in a
class attribute ``_parameter_constraints`` (see
:func:`hmmmerge._validation.validate_params`) and ``fit`` checks them with
:meth:`Estimator._validate_params`; what it
learns ends with an underscore (``T_``, ``n_states_``).  From the constructor
signature this mixin derives :meth:`~Estimator.get_params`,
:meth:`~Estimator.set_params` and ``repr``, so ``type(m)(**m.get_params())``
is an unfitted copy of ``m``.
"""

from __future__ import annotations

import inspect

__all__ = ["Estimator", "ModelLearner", "NotFittedError", "clone"]


class NotFittedError(ValueError, AttributeError):
    """A learned attribute was asked for before ``fit``."""


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):  # arrays and other values without a single truth value
        return False


class Estimator:
    """Mixin: ``get_params`` / ``set_params`` / ``repr`` from ``__init__``'s signature.

    Examples
    --------
    >>> class Model(Estimator):
    ...     def __init__(self, n_states, pseudocount=0.0):
    ...         self.n_states = n_states
    ...         self.pseudocount = pseudocount
    >>> m = Model(3)
    >>> m
    Model(n_states=3)
    >>> m.set_params(pseudocount=0.5).get_params()
    {'n_states': 3, 'pseudocount': 0.5}
    """

    @classmethod
    def _param_names(cls) -> list[str]:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> dict:
        """The constructor parameters and their current values.

        ``deep=True`` also lists the parameters of parameters that are
        estimators, as ``name__param``.

        Returns
        -------
        dict

        See Also
        --------
        set_params
        """
        out = {}
        for name in self._param_names():
            value = getattr(self, name)
            out[name] = value
            if deep and isinstance(value, Estimator):
                out.update({f"{name}__{k}": v for k, v in value.get_params().items()})
        return out

    def set_params(self, **params):
        """Set constructor parameters (checked at the next ``fit``); returns ``self``.

        Raises
        ------
        ValueError for a name that is not a constructor parameter.

        See Also
        --------
        get_params
        """
        valid = self._param_names()
        for name, value in params.items():
            head, _, rest = name.partition("__")
            if head not in valid:
                raise ValueError(f"{name!r} is not a parameter of {type(self).__name__}; "
                                 f"valid: {', '.join(valid)}")
            if rest:
                getattr(self, head).set_params(**{rest: value})
            else:
                setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        shown = [f"{k}={v!r}" for k, v in self.get_params(deep=False).items()
                 if defaults.get(k, inspect.Parameter.empty) is inspect.Parameter.empty
                 or not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(shown)})"

    def _validate_params(self) -> None:
        """Check every parameter against ``_parameter_constraints``, recursing into estimator parameters."""
        from ._validation import validate_params

        validate_params(self)
        for name in self._param_names():
            value = getattr(self, name)
            if isinstance(value, Estimator):
                value._validate_params()

    def _check_fitted(self, attribute: str) -> None:
        """Raise :class:`NotFittedError` unless ``fit`` has set ``attribute``."""
        if not hasattr(self, attribute):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(traj) first")


def clone(obj):
    """An unfitted copy of ``obj``: ``type(obj)(**params)`` with its constructor parameters (not deep-copied).

    Works for any object that keeps its constructor parameters as attributes of the same name.

    >>> from hmmmerge.merging import SFMerger
    >>> m = SFMerger(gamma=0.5); c = clone(m)
    >>> c is not m, c.gamma
    (True, 0.5)
    """
    if isinstance(obj, Estimator):
        return type(obj)(**obj.get_params(deep=False))
    params = list(inspect.signature(type(obj).__init__).parameters.values())[1:]
    return type(obj)(**{p.name: getattr(obj, p.name) for p in params
                        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)})


class ModelLearner(Estimator):
    """An estimator whose fitted model is an ActionHMM (``to_hmm()``), scored by its likelihood."""

    def score(self, traj, actions=None) -> float:
        """Total log-likelihood in nats of ``traj`` under ``self.to_hmm()``, each episode restarting from ``B``.

        Returns
        -------
        float

        See Also
        --------
        hmmmerge.evaluate.score_trajectories : accuracy, surprise and the rest.

        Examples
        --------
        >>> from hmmmerge.baselines import FirstOrderModel
        >>> t = ([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
        >>> FirstOrderModel().fit(t).score(t)
        0.0
        """
        return self.to_hmm().log_likelihood(traj, actions)
