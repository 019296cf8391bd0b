"""Sweeps: grids of run configurations, one result file per finished run, resumable.

A :class:`Sweep` is a function and a list of configurations (JSON-like dicts
of numbers, strings, booleans and lists of them).  Running it calls the
function once per configuration on a :class:`concurrent.futures.Executor`
(local processes by default, or a Dask cluster) and writes each result, as
soon as it arrives, to its own ``.npz`` file named by a stable hash of the
function and the configuration.  Hence:

* re-running a sweep skips every finished run: an interrupted sweep loses at
  most the runs that were in flight;
* files are written atomically (:mod:`hmmmerge._io`); a file that is partial
  or corrupt anyway (truncated, edited, a checksum or configuration that does
  not match, a key missing) is detected by :func:`read_result` and the run is
  redone -- it is never averaged in;
* a run's randomness must derive from its configuration only, so the same
  configurations give identical results on any executor.

The function returns a dict ``name -> array-like`` (numbers, strings, or
numeric arrays; no objects).  It must be importable by name (a module-level
function) so that worker processes and Dask workers can run it.  Results are
written by the calling process, so a Dask cluster needs no shared disk.

Executors (:func:`make_executor`): ``"local"`` (a process pool on all
cores), ``"local:N"``, ``"threads"`` / ``"threads:N"``, ``"serial"`` (in the
calling thread), ``"dask://HOST:PORT"`` or ``"tcp://HOST:PORT"`` (a running
``distributed`` scheduler), or any ``concurrent.futures.Executor``.

Example
-------
>>> import tempfile
>>> from hmmmerge.sweep import Sweep, grid
>>> configs = grid(x=[1, 2], y=[10])
>>> configs
[{'x': 1, 'y': 10}, {'x': 2, 'y': 10}]
>>> with tempfile.TemporaryDirectory() as d:
...     sweep = Sweep(d, example_run, configs)
...     first = sweep.run(executor="serial", progress=False)
...     again = sweep.run(executor="serial", progress=False)   # nothing left to do
...     [float(r["total"]) for r in first], sweep.last_report["skipped"]
([11.0, 12.0], 2)
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import hashlib
import importlib
import itertools
import json
import os
import re
import sys
import time
from numbers import Integral, Real

import numpy as np

from ._io import atomic_savez, open_regular

__all__ = [
    "Sweep",
    "code_fingerprint",
    "SweepError",
    "CorruptResult",
    "grid",
    "make_executor",
    "check_executor",
    "max_local_workers",
    "read_result",
    "run_sweeps",
    "config_key",
    "example_run",
]

FORMAT = 1
_META = "__meta__"


class SweepError(RuntimeError):
    """A run of a sweep raised; finished runs are on disk, the rest can be resumed."""


class CorruptResult(ValueError):
    """A result file that cannot be trusted (partial, edited, or for another configuration)."""


# --------------------------------------------------------------------------- configurations
def grid(**axes) -> list[dict]:
    """All combinations of the given axes, the last axis varying fastest.

    >>> grid(seed=[0, 1], merge=["sf"])
    [{'seed': 0, 'merge': 'sf'}, {'seed': 1, 'merge': 'sf'}]
    """
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"grid axis {name!r} must be a list of values, got {values!r}")
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(axes[n]) for n in names))]


def _check_value(path: str, v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, Integral):
        return int(v)
    if isinstance(v, Real):
        f = float(v)
        if not np.isfinite(f):
            raise ValueError(f"config field {path!r} must be finite, got {v!r}")
        return f
    if isinstance(v, (list, tuple)):
        return [_check_value(f"{path}[{i}]", x) for i, x in enumerate(v)]
    if isinstance(v, dict):
        return _check_config(v, path + ".")
    raise TypeError(f"config field {path!r} must be a number, string, bool or list, got {type(v).__name__}")


def _check_config(config, prefix: str = "") -> dict:
    if not isinstance(config, dict):
        raise TypeError(f"a configuration must be a dict, got {type(config).__name__}")
    out = {}
    for k, v in config.items():
        if not isinstance(k, str):
            raise TypeError(f"config keys must be strings, got {k!r}")
        out[k] = _check_value(prefix + k, v)
    return out


def _function_name(fn) -> str:
    name = f"{fn.__module__}:{fn.__qualname__}"
    if "<" in fn.__qualname__:
        raise TypeError(f"the run function must be a module-level function (importable), got {name}")
    return name


def config_key(function_name: str, config: dict, version: str | None = None) -> str:
    """Stable hash (hex, 16 characters) of a function name, a configuration and a code version.

    >>> config_key("m:f", {"b": 1, "a": 2}) == config_key("m:f", {"a": 2, "b": 1})
    True
    >>> config_key("m:f", {"a": 1}, "v1") == config_key("m:f", {"a": 1}, "v2")
    False
    """
    key = {"function": function_name, "config": config}
    if version is not None:
        key["version"] = version
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# files of a package that cannot change what a run computes (drawing, command line, the sweep itself)
FINGERPRINT_EXCLUDE = ("commands/", "plotting.py", "sweep.py", "reproduce/figures.py", "reproduce/paper.py",
                       "reproduce/__init__.py")


@functools.lru_cache(maxsize=None)
def code_fingerprint(package: str = "hmmmerge", exclude: tuple = FINGERPRINT_EXCLUDE) -> str:
    """Hash (hex, 16 characters) of the source of ``package`` (its ``.py`` files, minus ``exclude``).

    A sweep with ``version="auto"`` keys its result files by it, so a change of
    the code that computes the runs never reuses stale results; workers check
    that they run the same code as the caller.  Cached per process.

    >>> len(code_fingerprint()) == 16
    True
    """
    root = os.path.dirname(importlib.import_module(package).__file__)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in exclude):
                continue
            h.update(rel.encode() + b"\0")
            with open(os.path.join(dirpath, name), "rb") as f:
                h.update(f.read() + b"\0")
    return h.hexdigest()[:16]


def _slug(config: dict) -> str:
    parts = []
    for k, v in config.items():
        if isinstance(v, (list, dict)):
            continue
        parts.append(f"{k}={v}")
    s = re.sub(r"[^A-Za-z0-9=._-]+", "-", "_".join(parts))
    return s[:80]


# --------------------------------------------------------------------------- files
def _checksum(arrays: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(k.encode())
        h.update(a.dtype.str.encode())
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _as_arrays(result, where: str) -> dict:
    if not isinstance(result, dict):
        raise TypeError(f"{where}: the run function must return a dict of arrays, got {type(result).__name__}")
    out = {}
    for k, v in result.items():
        if not isinstance(k, str) or k == _META or not k.isidentifier():
            raise ValueError(f"{where}: result key {k!r} must be an identifier other than {_META}")
        a = np.asarray(v)
        if a.dtype.kind not in "biufcU":
            raise TypeError(f"{where}: result {k!r} has dtype {a.dtype}; only numbers and strings are stored")
        out[k] = a
    return out


def write_result(path, function_name: str, config: dict, result: dict, wall_s: float = float("nan"),
                 version: str | None = None) -> None:
    """Write one run's result atomically, with its configuration, code version and a checksum."""
    arrays = _as_arrays(result, os.path.basename(str(path)))
    meta = {"format": FORMAT, "function": function_name, "config": config, "version": version, "keys": sorted(arrays),
            "checksum": _checksum(arrays), "wall_s": float(wall_s), "written": time.time()}
    atomic_savez(path, **arrays, **{_META: np.array(json.dumps(meta, sort_keys=True))})


def read_result(path, function_name: str | None = None, config: dict | None = None, version=False) -> dict:
    """Read and verify a result file; raises :class:`CorruptResult` if it cannot be trusted.

    Checks: the file opens as ``.npz`` (no pickle), its metadata parses, the
    function, configuration and code ``version`` (unless ``False``) match those
    given, every listed key is present,
    and the checksum of the arrays matches.  Returns the arrays plus
    ``"_meta"`` (the metadata dict).
    """
    path = os.fspath(path)
    with open_regular(path, "rb", what="result file") as raw:  # a FIFO or device: ValueError, not redone
        try:
            with np.load(raw, allow_pickle=False) as f:
                data = {k: f[k] for k in f.files}
        except Exception as e:  # zip / CRC / header errors of a damaged file
            raise CorruptResult(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    try:
        meta = json.loads(str(data.pop(_META)))
        keys, checksum = meta["keys"], meta["checksum"]
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptResult(f"{path}: no valid metadata ({e})") from None
    if meta.get("format") != FORMAT:
        raise CorruptResult(f"{path}: format {meta.get('format')!r}, expected {FORMAT}")
    if function_name is not None and meta.get("function") != function_name:
        raise CorruptResult(f"{path}: written by {meta.get('function')!r}, expected {function_name!r}")
    if config is not None and meta.get("config") != config:
        raise CorruptResult(f"{path}: holds another configuration")
    if version is not False and meta.get("version") != version:
        raise CorruptResult(f"{path}: computed by code version {meta.get('version')!r}, expected {version!r}")
    if sorted(data) != sorted(keys):
        raise CorruptResult(f"{path}: keys {sorted(data)} differ from the recorded {sorted(keys)}")
    if _checksum(data) != checksum:
        raise CorruptResult(f"{path}: checksum mismatch")
    data["_meta"] = meta
    return data


# --------------------------------------------------------------------------- executors
class SerialExecutor(cf.Executor):
    """Runs each submitted call at once in the calling thread (debugging, tiny sweeps)."""

    def submit(self, fn, /, *args, **kwargs):
        fut = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(e)
        return fut


#: a local pool never has more workers than this many per CPU: more only adds memory and switching
WORKERS_PER_CPU = 4


def max_local_workers() -> int:
    """The most workers a ``local`` or ``threads`` executor may start: ``WORKERS_PER_CPU`` x CPUs.

    >>> max_local_workers() == WORKERS_PER_CPU * (os.cpu_count() or 1)
    True
    """
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: the worker exits when the process that started it dies.

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``);
    everywhere a daemon thread also polls the parent id once a second.
    """
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc prctl: the watchdog below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)

    def watchdog():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watchdog, name="hmmmerge-parent-watchdog", daemon=True).start()


def _n_workers(spec: str, requested: int | None, n_tasks: int | None) -> int:
    """Workers for a local pool: as asked (default: all CPUs), capped, and no more than the tasks."""
    cap = max_local_workers()
    if requested is not None and requested > cap:
        raise ValueError(f"executor {spec!r}: {requested} workers is more than the limit of {cap} "
                         f"({WORKERS_PER_CPU} per CPU, {os.cpu_count() or 1} CPUs); use local or local:N with N <= {cap}")
    n = requested or os.cpu_count() or 1
    if n_tasks is not None:
        n = min(n, max(int(n_tasks), 1))
    return n


def check_executor(spec, max_workers: int | None = None) -> tuple:
    """Check an executor ``spec`` of :func:`make_executor` without starting anything; returns ``(kind, workers)``.

    ``kind`` is ``"local"``, ``"threads"``, ``"serial"``, ``"dask"`` (also for
    ``tcp://`` and ``tls://`` addresses) or ``"executor"`` (an instance);
    ``workers`` the number asked for (``None``: the default).  Commands call it
    first, so that a bad spec is refused even when nothing needs computing.

    >>> check_executor("local:3"), check_executor("dask://localhost:8786")
    (('local', 3), ('dask', None))
    >>> check_executor("local:\u00b2")
    Traceback (most recent call last):
    ...
    ValueError: executor 'local:²': the number of workers must be a positive integer written in digits 0-9, got '²'
    """
    if isinstance(spec, cf.Executor):
        return "executor", None
    if not isinstance(spec, str):
        raise TypeError(f"executor must be a string or a concurrent.futures.Executor, got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    if kind in ("dask", "tcp", "tls"):
        host, _, port = arg.removeprefix("//").rpartition(":")
        if not arg.startswith("//") or not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"executor {spec!r}: a dask scheduler is written {kind}://HOST:PORT (a port 1..65535)")
        import importlib.util

        if importlib.util.find_spec("distributed") is None:
            raise ValueError(f"executor {spec!r} needs dask.distributed: pip install 'hmmmerge[dask]'")
        return "dask", None
    if kind not in ("local", "threads", "serial"):
        raise ValueError(f"executor must be local[:N], threads[:N], serial or dask://HOST:PORT, got {spec!r}")
    if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, Integral)
                                    or max_workers < 1):
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
    if arg:
        if not (arg.isascii() and arg.isdigit()) or int(arg) < 1:
            raise ValueError(f"executor {spec!r}: the number of workers must be a positive integer written in "
                             f"digits 0-9, got {arg!r}")
        max_workers = int(arg)
    if kind != "serial":
        _n_workers(spec, max_workers, None)  # over the cap: refused here too
    return kind, max_workers


@contextlib.contextmanager
def make_executor(spec="local", max_workers: int | None = None, n_tasks: int | None = None):
    """A context manager yielding a ``concurrent.futures.Executor`` for ``spec``.

    ``"local"`` / ``"local:N"``: process pool (all cores by default);
    ``"threads"`` / ``"threads:N"``; ``"serial"``; ``"dask://HOST:PORT"`` or
    ``"tcp://HOST:PORT"``: a ``distributed.Client`` connected to that
    scheduler (closed on exit); an ``Executor`` instance is used as is (not shut down).

    Local pools start at most :func:`max_local_workers` workers (more is a
    ``ValueError``) and, given ``n_tasks``, no more workers than tasks.  Local
    worker processes die with the process that started them.

    >>> with make_executor("threads:2") as ex:
    ...     list(ex.map(abs, [-1, 2]))
    [1, 2]
    >>> with make_executor("local:100000"):
    ...     pass
    Traceback (most recent call last):
    ...
    ValueError: executor 'local:100000': 100000 workers is more than the limit of ...
    """
    if isinstance(spec, cf.Executor):
        yield spec
        return
    kind, workers = check_executor(spec, max_workers)
    if kind == "dask":
        from distributed import Client  # optional extra: pip install hmmmerge[dask]

        scheme, _, rest = spec.partition(":")
        address = ("tcp:" if scheme == "dask" else scheme + ":") + rest
        try:
            client = Client(address, timeout="20s")
        except (OSError, TimeoutError) as e:
            raise OSError(f"executor {spec!r}: cannot reach the dask scheduler ({e})") from None
        except Exception as e:  # e.g. tls:// without a TLS configuration (a TypeError from distributed)
            raise ValueError(f"executor {spec!r}: cannot connect ({type(e).__name__}: {' '.join(str(e).split())})"
                             ) from None
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
        return
    max_workers = workers
    if kind == "serial":
        yield SerialExecutor()
        return
    n = _n_workers(spec, max_workers, n_tasks)
    if kind == "local":
        ex = cf.ProcessPoolExecutor(n, initializer=_die_with_parent, initargs=(os.getpid(),))
    else:
        ex = cf.ThreadPoolExecutor(n)
    try:
        yield ex
    except BaseException:  # interrupted: drop queued runs, do not wait for those in flight
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


def _window(ex, n_todo: int) -> int:
    """How many runs to keep submitted at once: enough to keep every worker busy, few enough
    that a failure or an interruption cancels the rest cleanly."""
    if isinstance(ex, SerialExecutor):
        return 1
    workers = getattr(ex, "_max_workers", None)
    return 2 * workers if workers else n_todo


def _call(function_name: str, config: dict, version: str | None = None):
    """Worker side: check the code version, import the function by name, run it, time it."""
    module, _, qual = function_name.partition(":")
    if version is not None:
        mine = code_fingerprint(module.split(".")[0])
        if mine != version:
            raise RuntimeError(f"this worker runs {module.split('.')[0]} code {mine}, the sweep expects {version}: "
                               "install the same version on every worker")
    fn = importlib.import_module(module)
    for part in qual.split("."):
        fn = getattr(fn, part)
    start = time.perf_counter()
    result = fn(config)
    return result, time.perf_counter() - start


# --------------------------------------------------------------------------- sweeps
class Sweep:
    """A function run over many configurations, with one result file per run under ``directory``.

    Parameters
    ----------
    directory : folder of the result files (created when needed).
    function : module-level function ``config -> dict of arrays``.
    configs : list of configuration dicts (JSON-like; validated here).
    validate : optional ``(config, result) -> None`` raising ``ValueError`` when a
        result is implausible (e.g. a curve of the wrong length); such files are redone.
    version : ``None`` (results keyed by function and configuration only), a
        string, or ``"auto"``: :func:`code_fingerprint` of the function's package,
        so that changed code never reuses old results, and each worker checks it
        runs the same code.
    """

    def __init__(self, directory, function, configs, validate=None, version=None):
        self.directory = os.fspath(directory)
        self.function_name = _function_name(function)
        self.configs = [_check_config(c) for c in configs]
        self.validate = validate
        auto = version == "auto"
        if auto:
            version = code_fingerprint(self.function_name.split(".")[0].split(":")[0])
        if version is not None and not isinstance(version, str):
            raise TypeError(f"version must be None, 'auto' or a string, got {type(version).__name__}")
        self.version = version
        self._worker_version = version if auto else None  # what workers must compute themselves
        keys = [config_key(self.function_name, c, version) for c in self.configs]
        if len(set(keys)) != len(keys):
            raise ValueError("configs holds the same configuration twice")
        self.paths = [os.path.join(self.directory, f"{_slug(c)}-{k}.npz") for c, k in zip(self.configs, keys)]
        self.last_report: dict = {}

    def __len__(self) -> int:
        return len(self.configs)

    def __repr__(self) -> str:
        return f"Sweep({self.function_name}, {len(self)} runs, {self.directory!r})"

    def load_one(self, i: int) -> dict:
        """Verified result of run ``i`` (raises ``FileNotFoundError`` or :class:`CorruptResult`)."""
        res = read_result(self.paths[i], self.function_name, self.configs[i], self.version)
        if self.validate is not None:
            try:
                self.validate(self.configs[i], res)
            except ValueError as e:
                raise CorruptResult(f"{self.paths[i]}: {e}") from None
        return res

    def status(self) -> dict:
        """Which runs are ``done``, ``missing`` or ``corrupt`` (lists of indices)."""
        out = {"done": [], "missing": [], "corrupt": []}
        for i in range(len(self)):
            try:
                self.load_one(i)
                out["done"].append(i)
            except FileNotFoundError:
                out["missing"].append(i)
            except CorruptResult:
                out["corrupt"].append(i)
        return out

    def results(self) -> list[dict]:
        """All results in configuration order; raises if any run is missing or corrupt."""
        return [self.load_one(i) for i in range(len(self))]

    def run(self, executor="local", progress=None, max_workers: int | None = None) -> list[dict]:
        """Run what is not finished yet, then return all results (see :func:`run_sweeps`)."""
        return run_sweeps([self], executor=executor, progress=progress, max_workers=max_workers)[0]


def run_sweeps(sweeps, executor="local", progress=None, max_workers: int | None = None,
               order=None) -> list[list[dict]]:
    """Run several sweeps on one executor; returns each sweep's results in configuration order.

    Finished runs (valid files) are skipped; corrupt ones are redone.  Each
    result is written as soon as it arrives.  If a run raises, the runs not
    yet started are cancelled, those in flight are still collected and
    written, and :class:`SweepError` is raised.  ``order``: optional
    ``(sweep_index, config) -> sort key`` to submit long runs first.
    ``progress``: ``None`` shows a bar when stderr is a terminal.
    Each sweep's ``last_report`` gets counts ``ran``, ``skipped``, ``redone``, ``wall_s``.
    """
    check_executor(executor, max_workers)  # refused even when every run is done already
    todo, skipped, redone = [], [0] * len(sweeps), [0] * len(sweeps)
    loaded: dict = {}
    for s_idx, sweep in enumerate(sweeps):
        for i in range(len(sweep)):
            try:
                loaded[s_idx, i] = sweep.load_one(i)
                skipped[s_idx] += 1
            except FileNotFoundError:
                todo.append((s_idx, i))
            except CorruptResult:
                redone[s_idx] += 1
                todo.append((s_idx, i))
    if order is not None:
        todo.sort(key=lambda t: order(t[0], sweeps[t[0]].configs[t[1]]))
    start = time.perf_counter()
    ran = [0] * len(sweeps)
    failures = []
    if todo:
        show = sys.stderr.isatty() if progress is None else bool(progress)
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="run", file=sys.stderr, disable=not show, dynamic_ncols=True,
                   desc="runs", postfix={"skipped": sum(skipped)} if sum(skipped) else None)
        try:
            with make_executor(executor, max_workers, n_tasks=len(todo)) as ex:
                window = _window(ex, len(todo))
                queue = list(todo)
                futures: dict = {}
                try:
                    while queue or futures:
                        while queue and len(futures) < window and not failures:
                            s_idx, i = queue.pop(0)
                            sw = sweeps[s_idx]
                            fut = ex.submit(_call, sw.function_name, sw.configs[i], sw._worker_version)
                            futures[fut] = (s_idx, i)
                        if not futures:
                            break
                        done, _ = cf.wait(list(futures), return_when=cf.FIRST_COMPLETED)
                        for fut in done:
                            s_idx, i = futures.pop(fut)
                            if fut.cancelled():
                                continue
                            try:
                                result, wall = fut.result()
                                sw = sweeps[s_idx]
                                write_result(sw.paths[i], sw.function_name, sw.configs[i], result, wall, sw.version)
                                ran[s_idx] += 1
                            except cf.CancelledError:
                                continue
                            except Exception as e:  # noqa: BLE001 - reported below with the config
                                failures.append((sweeps[s_idx].configs[i], e))
                                for other in futures:
                                    other.cancel()  # those not started yet; running ones finish and are kept
                            bar.update(1)
                except BaseException:
                    for other in futures:
                        other.cancel()
                    raise
        finally:
            bar.close()
    wall = time.perf_counter() - start
    for s_idx, sweep in enumerate(sweeps):
        sweep.last_report = {"runs": len(sweep), "ran": ran[s_idx], "skipped": skipped[s_idx],
                             "redone": redone[s_idx], "wall_s": wall}
    if failures:
        config, err = failures[0]
        raise SweepError(f"{len(failures)} run(s) failed; first: {config}: {type(err).__name__}: {err}") from err
    return [[loaded[s_idx, i] if (s_idx, i) in loaded else sweep.load_one(i) for i in range(len(sweep))]
            for s_idx, sweep in enumerate(sweeps)]


def example_run(config: dict) -> dict:
    """A tiny run function for examples and tests: ``total = x + y`` and a seeded draw.

    Optional keys, for testing the sweep machinery: ``sleep`` (seconds to
    wait), ``log`` (a file that gets one line ``x`` per call), ``fail_flag``
    (if that file exists and ``x == fail_at``, raise ``RuntimeError``).

    >>> float(example_run({"x": 1, "y": 2})["total"])
    3.0
    """
    if config.get("log"):
        with open(config["log"], "a") as f:
            f.write(f"{config['x']}\n")
    if config.get("sleep"):
        time.sleep(float(config["sleep"]))
    if config.get("fail_flag") and os.path.exists(config["fail_flag"]) and config["x"] == config.get("fail_at"):
        raise RuntimeError(f"injected failure at x={config['x']}")
    rng = np.random.default_rng([int(config.get("seed", 0)), int(config["x"])])
    return {"total": float(config["x"]) + float(config.get("y", 0)), "draw": rng.random(3)}
