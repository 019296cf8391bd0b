"""The ``hmmmerge`` command line.

Each sub-command lives in :mod:`hmmmerge.commands` as a module with
``add_parser(subparsers)`` and ``run(args) -> int``; heavy imports happen
inside ``run`` so that ``hmmmerge --help`` answers at once.  Errors in the
arguments or the inputs print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

COMMANDS = ["env", "run", "evaluate", "baseline", "plan", "demo", "reproduce"]

#: commands whose start-up the program shortens by loading cached numba kernels without numba's compiler
#: set-up (see :mod:`hmmmerge._numba_cache`; results are the same)
LAZY_NUMBA_COMMANDS = {"run"}


#: options naming a file or a folder (their ``dest``): an empty value is refused rather than read as "none"
PATH_OPTIONS = ("graph", "plot", "out", "resume", "draw_factor_graph")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


#: each sub-command's one-line help, as its module's ``add_parser`` registers it (a test checks they agree), so
#: that ``hmmmerge --help`` lists the commands without importing them
SUMMARIES = {
    "env": "describe an environment: clones, Markov radius, aliasing",
    "run": "run the two-level memory (the paper's agent) and report its metrics",
    "evaluate": "compare world models: accuracy, surprise, states",
    "baseline": "train and score one baseline model",
    "plan": "navigate the true world with a learned map: success, path ratio, localisation",
    "demo": "the main job: a small paper comparison (sf / random / no merge / first order / EM)",
    "reproduce": "regenerate every figure of the paper (PNG + CSV) and the final-values table",
}


def build_parser(commands=COMMANDS) -> argparse.ArgumentParser:
    """The ``hmmmerge`` argument parser; the sub-commands in ``commands`` get their options.

    The others are listed by name and one-line help only, and their modules
    are not imported: :func:`main` builds only the sub-command the command
    line names (``hmmmerge run`` does not load the registry of every baseline
    that ``evaluate`` needs), and none for ``hmmmerge --help``.

    >>> args = build_parser().parse_args(["env", "--grid", "4x4", "--colours", "3"])
    >>> args.command, args.grid, args.colours, args.k
    ('env', (4, 4), 3, 3)
    >>> build_parser(["run"]).parse_args(["run", "--episodes", "5"]).episodes
    5
    """
    parser = _Parser(prog="hmmmerge", description="Learn cognitive maps from experience.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        if name not in commands:
            sub.add_parser(name, help=SUMMARIES[name])
            continue
        importlib.import_module(f"hmmmerge.commands.{name}").add_parser(sub)
        sub.choices[name].add_argument(
            "--no-limits", action="store_true",
            help="lift the size limits (memory estimates, stated bounds of counts); see hmmmerge._limits")
    return parser


def print_json(obj) -> None:
    """Print one strict JSON object on stdout: numpy values converted, NaN and infinities as ``null``.

    >>> import numpy as np
    >>> print_json({"n": np.int64(2), "curve": np.array([0.5, 1.0]), "mean": np.float32(0.25)})
    {"curve": [0.5, 1.0], "mean": 0.25, "n": 2}
    >>> print_json({"purity": float("nan"), "surprise": float("inf")})
    {"purity": null, "surprise": null}
    """
    text = json.dumps(obj, default=_json_default, sort_keys=True)
    print(json.dumps(_finite(json.loads(text)), sort_keys=True, allow_nan=False))


def _finite(x):
    """Replace non-finite floats by None, recursively."""
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _json_default(x):
    import numpy as np

    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def main(argv=None) -> int:
    """Run ``hmmmerge`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    >>> main(["env", "--world", "aliased-loop", "--json"])  # doctest: +ELLIPSIS
    {"aliasing_depth": {...}, ..., "n_states": 12, ...}
    0
    >>> main(["env", "--colours", "0"])   # bad input: one line on stderr, exit code 2
    2
    """
    argv_given = argv is not None
    if not argv_given:  # the program itself (console script, python -m hmmmerge), not a caller in-process
        _program_collector()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser([argv[0]] if argv and argv[0] in COMMANDS else [])
    args = parser.parse_args(argv)
    for dest in PATH_OPTIONS:
        if getattr(args, dest, None) == "":
            parser.error(f"argument --{dest.replace('_', '-')}: needs a path, got an empty one")
    if not argv_given and args.command in LAZY_NUMBA_COMMANDS:
        from ._numba_cache import load_cached_kernels_lazily

        load_cached_kernels_lazily()
    from ._limits import no_limits

    try:
        with no_limits(args.no_limits):
            code = int(args.run(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # the reader closed stdout (e.g. `| head`): not an error
        _silence_stdout()
        return 0
    except MemoryError:
        return _error(args.command, "out of memory; ask for less (smaller world, fewer episodes) or more memory")
    except KeyboardInterrupt:
        return _error(args.command, "interrupted", code=130)
    except Exception as e:
        if isinstance(e, (ValueError, OSError)) or _is_sweep_error(e):  # bad input, missing file, a failed sweep
            return _error(args.command, e)
        raise


def _program_collector() -> None:
    """Tune Python's cycle collector for one run of the program; results do not depend on it.

    Imports (numba's above all) create some 120,000 long-lived objects, and the
    default collector rescans them many times while they are created, then once
    more at shutdown: together 0.3-0.8 s of the paper run on this machine.  So
    the program (a) collects the youngest generation every 100,000 allocations
    instead of every 700 (cycles are still collected, less often) and (b) freezes
    every object at exit (``gc.freeze``), so the shutdown skips its collections;
    frozen objects are never collected, which at exit only means their memory
    goes back to the system with the process.  Output is flushed and the other
    atexit handlers run as usual (this one runs last).  A caller of
    :func:`main` in-process keeps its own collector settings.
    """
    import atexit
    import gc

    gc.set_threshold(100_000, 10, 10)
    atexit.register(gc.freeze)


def _is_sweep_error(e: BaseException) -> bool:
    """Whether ``e`` is a :class:`hmmmerge.sweep.SweepError` (only a command that loaded the sweep raises one)."""
    sweep = sys.modules.get("hmmmerge.sweep")
    return sweep is not None and isinstance(e, sweep.SweepError)


def _error(command: str, e, code: int = 2) -> int:
    """Print ``e`` as one line on stderr and return ``code``."""
    text = " ".join(str(e).split()) or type(e).__name__
    try:
        print(f"hmmmerge {command}: error: {text}", file=sys.stderr)
    except OSError:
        pass
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

if __name__ == "__main__":
    sys.exit(main())
