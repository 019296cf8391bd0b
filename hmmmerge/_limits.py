"""Size limits: refuse a request before allocating what it would need.

Every size a user controls (grid sides, colours, episodes, clones, seeds...)
is turned into an estimate of the memory it needs and checked here *before*
anything is allocated.  The budget is half of the physical memory, or 80% of
the process's address-space limit (``ulimit -v``) when that is lower; the
environment variable ``HMMMERGE_MAX_MEMORY`` (GiB, or ``inf``) sets it.
Counts with no memory cost but unbounded time (merge iterations, seeds) have
stated bounds in :data:`COUNT_LIMITS`.  The command line's ``--no-limits``
lifts both (the API: :func:`no_limits`).
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["SizeLimitError", "memory_budget", "check_memory", "check_count", "no_limits", "COUNT_LIMITS"]

#: stated bounds of counts that cost time rather than memory
COUNT_LIMITS = {"merge_iterations": 10_000, "seeds": 10_000, "em_iterations": 100_000, "world_states": 250_000,
                # edges followed by markov_radii, about 10^8 a second: a few seconds
                "radius_work": 500_000_000,
                # cells of the MiniGrid views from_gymnasium renders, about 1-2 us each in MiniGrid: a minute
                "view_cells": 30_000_000}

_enforced = [True]


class SizeLimitError(ValueError):
    """A request whose estimated memory (or count) is over the limit."""


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def memory_budget() -> float:
    """The memory (bytes) one request may need: see the module docstring.

    >>> memory_budget() > 0
    True
    """
    env = os.environ.get("HMMMERGE_MAX_MEMORY")
    if env:
        try:
            gib = float(env)
        except ValueError:
            raise ValueError(f"HMMMERGE_MAX_MEMORY must be a number of GiB or 'inf', got {env!r}") from None
        if not gib > 0:
            raise ValueError(f"HMMMERGE_MAX_MEMORY must be positive, got {env!r}")
        return gib * (1 << 30)
    budget = 0.5 * _physical_memory()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            budget = min(budget, 0.8 * soft)
    except (ImportError, ValueError, OSError):
        pass
    return budget


def _fmt(n_bytes: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes:.0f} B"


def check_memory(what: str, n_bytes: float) -> None:
    """Raise :class:`SizeLimitError` if ``n_bytes`` (an estimate for ``what``) is over the budget.

    >>> check_memory("--grid 10x10", 1e6)
    >>> check_memory("--grid 100000x100000", 1e15)
    Traceback (most recent call last):
    ...
    hmmmerge._limits.SizeLimitError: --grid 100000x100000 needs about 909 TiB, over the limit of ...
    """
    if not _enforced[0]:
        return
    budget = memory_budget()
    if n_bytes > budget:
        raise SizeLimitError(f"{what} needs about {_fmt(n_bytes)}, over the limit of {_fmt(budget)} "
                             "(set HMMMERGE_MAX_MEMORY=GiB or pass --no-limits to go beyond)")


def check_count(what: str, value: int, kind: str) -> None:
    """Raise :class:`SizeLimitError` if ``value`` is over the stated bound ``COUNT_LIMITS[kind]``.

    >>> check_count("--merge-iterations", 5, "merge_iterations")
    >>> check_count("--merge-iterations", 10**9, "merge_iterations")
    Traceback (most recent call last):
    ...
    hmmmerge._limits.SizeLimitError: --merge-iterations 1000000000 is over the limit of 10000 (pass --no-limits to go beyond)
    """
    limit = COUNT_LIMITS[kind]
    if _enforced[0] and value > limit:
        raise SizeLimitError(f"{what} {value} is over the limit of {limit} (pass --no-limits to go beyond)")


@contextlib.contextmanager
def no_limits(enabled: bool = True):
    """Within this block size checks are off (``enabled=False``: leave them on).

    >>> with no_limits():
    ...     check_memory("anything", 1e30)
    """
    before = _enforced[0]
    _enforced[0] = not enabled
    try:
        yield
    finally:
        _enforced[0] = before
