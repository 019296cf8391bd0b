"""Seeds: every random choice in hmmmerge goes through a numpy Generator."""

from __future__ import annotations

from numbers import Integral

import numpy as np


def as_generator(seed) -> np.random.Generator:
    """A ``numpy.random.Generator`` from an int seed, a Generator (returned as is) or ``None``.

    >>> as_generator(3).integers(100) == as_generator(3).integers(100)
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or (isinstance(seed, Integral) and not isinstance(seed, bool) and seed >= 0):
        return np.random.default_rng(seed)
    raise TypeError(f"seed must be a non-negative int, a numpy Generator or None, got {seed!r}")
