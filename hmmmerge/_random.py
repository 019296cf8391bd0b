"""Seeds: every random choice in hmmmerge goes through a numpy Generator."""

from __future__ import annotations

from numbers import Integral

import numpy as np

from ._validation import InvalidParameterError


def as_generator(seed) -> np.random.Generator:
    """A ``numpy.random.Generator`` from an int seed, a tuple of ints, a Generator (returned as is) or ``None``.

    >>> int(as_generator(3).integers(100)) == int(as_generator(3).integers(100))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or _is_seed_int(seed):
        return np.random.default_rng(seed)
    if isinstance(seed, (tuple, list)) and seed and all(_is_seed_int(s) for s in seed):
        return np.random.default_rng([int(s) for s in seed])  # e.g. (run seed, episode offset)
    raise InvalidParameterError(f"seed must be a non-negative int (or a tuple of them), a numpy Generator or None, got {seed!r}")


def check_seed(value, name: str = "seed") -> None:
    """A constraint for ``_parameter_constraints``: ``value`` is something :func:`as_generator` accepts.

    >>> check_seed(-1)
    Traceback (most recent call last):
    ...
    hmmmerge._validation.InvalidParameterError: seed must be a non-negative int (or a tuple of them), a numpy Generator or None, got -1
    """
    try:
        as_generator(value)
    except InvalidParameterError:
        raise InvalidParameterError(f"{name} must be a non-negative int (or a tuple of them), a numpy Generator "
                                    f"or None, got {value!r}") from None


def _is_seed_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool) and x >= 0
