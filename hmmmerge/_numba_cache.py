"""Loading cached numba kernels without numba's compiler set-up (start-up of the ``hmmmerge`` program).

Before loading a kernel from its on-disk cache, numba refreshes its compiler
context: it imports every implementation module numba has (including
``scipy.linalg`` for a BLAS check), installs their registries and scans the
installed packages for extensions -- 0.1-0.15 s of CPU, paid once per process,
at the first kernel call.  None of it is used by machine code loaded from the
cache: that code is linked against numba's runtime (NRT) only.  Compiling does
need the registries, and numba's compiler refreshes the context itself before
every compilation, so a kernel that is not cached yet (or a new signature)
compiles exactly as before.

:func:`load_cached_kernels_lazily` makes numba's cache loader initialise the
runtime and skip the refresh.  The machine code loaded, hence every result, is
the same.  The program applies it for ``hmmmerge run`` (see
:func:`hmmmerge.cli.main`); a caller of the library keeps numba as it is.  It
touches numba's internals (``numba.core.caching.Cache``), so it is applied only
where they are as expected (numba 0.59-0.69 with these methods), otherwise not.
"""

from __future__ import annotations


def load_cached_kernels_lazily() -> bool:
    """Make numba load cached kernels without refreshing its compiler context; returns whether it applies
    (process-wide, for good: only the program calls it, see the module docstring)."""
    import numba
    from numba.core import caching
    from numba.core.runtime import rtsys

    cache = caching.Cache
    if getattr(cache.load_overload, "lazy", False):
        return True
    version = tuple(int(x) for x in numba.__version__.split(".")[:2] if x.isdigit())
    if not ((0, 59) <= version < (0, 70) and hasattr(cache, "_load_overload")
            and hasattr(cache, "_guard_against_spurious_io_errors") and hasattr(rtsys, "initialize")):
        return False

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)  # the runtime the cached machine code calls (allocations)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        # None if the `with` block swallowed an error, as in numba's own method

    load_overload.lazy = True
    cache.load_overload = load_overload
    return True
