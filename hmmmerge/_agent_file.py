"""Agent files (``TwoLevelMemory.save`` / ``load``): format, checksum, and validation of every array.

An agent file is an ``.npz`` archive (no pickle) of arrays plus ``meta``, a
JSON text.  :func:`write_agent_file` adds to ``meta`` the format name, its
version and a SHA-256 checksum of every other array (their names, dtypes,
shapes and bytes, as in sweep files).  :func:`read_agent_file` refuses, with
one ``ValueError`` line naming the file and the problem, anything that
:meth:`~hmmmerge.agent.TwoLevelMemory.load` could not trust -- before any
numba kernel sees it:

* a file that does not open as ``.npz`` (truncated, empty, bit-flipped, a JSON
  or PNG file), a ``meta`` that is not JSON, another format, an unknown version,
  a checksum that does not match;
* any array of the wrong dtype, shape or range, with NaN or infinities where
  numbers must be finite, or inconsistent with another array (level 1 vs.
  clusters vs. level-2 transitions vs. first-order counts vs. history).

Files written before the format had a version (no ``format`` in ``meta``)
are still read, without checksum, and validated the same way.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ._io import atomic_savez, open_regular

FORMAT = "hmmmerge.TwoLevelMemory"
VERSION = 1

_INT = "iu"
_COUNTERS = ("steps", "episodes", "sleeps")


class AgentFileError(ValueError):
    """An agent file that cannot be trusted."""


def _checksum(arrays: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(k.encode() + b"\0" + a.dtype.str.encode() + b"\0" + repr(a.shape).encode() + b"\0")
        h.update(a.tobytes())
    return h.hexdigest()


def write_agent_file(path, meta, **arrays) -> None:
    """Write ``arrays`` and the JSON ``meta`` (a dict, or its JSON text) with format, version and checksum, atomically.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "a.npz"); write_agent_file(p, {"x": 1}, w=np.arange(3))
    ...     m = json.loads(str(np.load(p)["meta"]))
    >>> m["format"], m["version"], len(m["checksum"])
    ('hmmmerge.TwoLevelMemory', 1, 64)
    """
    meta = dict(json.loads(meta) if isinstance(meta, str) else meta)
    meta.update(format=FORMAT, version=VERSION, checksum=_checksum(arrays))
    atomic_savez(path, meta=np.array(json.dumps(meta)), **arrays)


def read_agent_file(path, history_keys=(), check_params=None) -> tuple[dict, dict]:
    """Open, check and validate an agent file; returns ``(arrays, meta)`` (see the module docstring).

    ``history_keys``: the curves a saved history must hold; ``check_params(params, n_obs, n_actions)``:
    raises ValueError / TypeError on saved parameters the agent does not accept (``None``: not checked).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = os.path.join(d, "bad.npz"); _ = open(p, "wb").write(b"not a zip")
    ...     read_agent_file(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hmmmerge._agent_file.AgentFileError: .../bad.npz: not an agent file (not an .npz archive)
    """
    src = os.fspath(path)
    if os.path.isdir(src):
        raise AgentFileError(f"{src}: is a folder, not an agent file")
    with open_regular(src, "rb", what="agent file") as raw:
        magic = raw.read(4)
        if magic[:2] != b"PK":  # numpy would take any other file for a pickle and advise allow_pickle
            raise AgentFileError(f"{src}: not an agent file (not an .npz archive)")
        raw.seek(0)
        try:
            with np.load(raw, allow_pickle=False) as f:
                data = {k: f[k] for k in f.files}
        except Exception as e:  # zip, CRC, zlib, header and pickle errors of a damaged or foreign file
            raise AgentFileError(f"{src}: not an agent file (unreadable .npz: {type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or "meta" not in data:
        raise AgentFileError(f"{src}: not an agent file (no 'meta')")
    try:
        meta = json.loads(str(data.pop("meta")))
    except (ValueError, TypeError) as e:
        raise AgentFileError(f"{src}: not an agent file (meta is not JSON: {e})") from None
    if not isinstance(meta, dict):
        raise AgentFileError(f"{src}: not an agent file (meta is not a JSON object)")
    if "format" in meta or "version" in meta or "checksum" in meta:
        if meta.get("format") != FORMAT:
            raise AgentFileError(f"{src}: format {meta.get('format')!r}, expected {FORMAT!r}")
        if meta.get("version") != VERSION:
            raise AgentFileError(f"{src}: format version {meta.get('version')!r} is not one this code reads "
                                 f"({VERSION})")
        if meta.get("checksum") != _checksum(data):
            raise AgentFileError(f"{src}: checksum mismatch: the file was changed or damaged")
    try:
        validate_agent_arrays(data, meta, history_keys, check_params)
    except AgentFileError as e:
        raise AgentFileError(f"{src}: {e}") from None
    return data, meta


# --------------------------------------------------------------------------- validation
def _array(data: dict, key: str, kinds: str, ndim: int) -> np.ndarray:
    if key not in data:
        raise AgentFileError(f"missing array {key!r}")
    a = data[key]
    if a.dtype.kind not in kinds:
        raise AgentFileError(f"{key} has dtype {a.dtype}, expected {'integers' if kinds == _INT else 'numbers'}")
    if a.ndim != ndim:
        raise AgentFileError(f"{key} has shape {a.shape}, expected {ndim} dimension(s)")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise AgentFileError(f"{key} holds NaN or infinity")
    return a


def _in_range(key: str, a: np.ndarray, low, high) -> None:
    """Every entry of ``a`` in ``low..high - 1``."""
    if a.size and (a.min() < low or a.max() >= high):
        raise AgentFileError(f"{key} holds {int(a.min()) if a.min() < low else int(a.max())}, outside {low}..{high - 1}")


def _int_field(meta: dict, key: str, low: int, high=None) -> int:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v >= high):
        raise AgentFileError(f"meta {key!r} is {v!r}, expected an integer >= {low}"
                             + (f" and < {high}" if high is not None else ""))
    return v


def validate_agent_arrays(data: dict, meta: dict, history_keys=(), check_params=None) -> None:
    """Raise :class:`AgentFileError` unless ``data`` and ``meta`` describe a consistent agent.

    >>> validate_agent_arrays({}, {"params": {}})
    Traceback (most recent call last):
    ...
    hmmmerge._agent_file.AgentFileError: missing array 'l1_n_obs'
    """
    from ._limits import check_memory

    # sizes
    sizes = {}
    for key in ("l1_n_obs", "l1_n_actions"):
        a = _array(data, key, _INT, 0)
        if not 1 <= int(a) < 2**31:
            raise AgentFileError(f"{key} is {int(a)}, expected a positive integer")
        sizes[key] = int(a)
    O, A = sizes["l1_n_obs"], sizes["l1_n_actions"]
    try:
        check_memory(f"an agent of {O} observations x {A} actions (first-order counts)", 8 * O * O * A)
    except ValueError as e:
        raise AgentFileError(str(e)) from None
    # level 1
    em = _array(data, "l1_emission", _INT, 1)
    n = em.shape[0]
    _in_range("l1_emission", em, 0, O)
    ns = _array(data, "l1_next_state", _INT, 2)
    if ns.shape != (A, n):
        raise AgentFileError(f"l1_next_state has shape {ns.shape}, expected ({A}, {n}) for {n} level-1 states")
    _in_range("l1_next_state", ns, -1, n)
    lab = _array(data, "l1_labels", _INT, 1)
    if lab.shape != (n,):
        raise AgentFileError(f"l1_labels has shape {lab.shape}, expected ({n},)")
    _in_range("l1_labels", lab, -1, 2**62)
    scal = _array(data, "l1_scalars", _INT, 1)
    if scal.shape != (3,) or int(scal[0]) != n:
        raise AgentFileError(f"l1_scalars {scal.tolist()} does not match {n} level-1 states")
    _in_range("l1_scalars (current and first state)", scal[1:], -1, n)
    # clusters
    asg = _array(data, "assignment", _INT, 1)
    if asg.shape != (n,):
        raise AgentFileError(f"assignment has shape {asg.shape}, expected ({n},)")
    _in_range("assignment", asg, -1, max(n, 1))
    k = len(np.unique(asg[asg >= 0]))
    # level-2 transitions: stacked CSR, row a * k + c
    ptr = _array(data, "t2_indptr", _INT, 1)
    idx = _array(data, "t2_indices", _INT, 1)
    val = _array(data, "t2_data", "iuf", 1)
    if ptr.shape != (A * k + 1,):
        raise AgentFileError(f"t2_indptr has {ptr.shape[0]} entries, expected {A * k + 1} for {k} clusters")
    if int(ptr[0]) != 0 or (np.diff(ptr) < 0).any() or int(ptr[-1]) != idx.shape[0] or val.shape != idx.shape:
        raise AgentFileError("level-2 transitions (t2_indptr, t2_indices, t2_data) are not a valid CSR matrix")
    _in_range("t2_indices", idx, 0, max(k, 1))
    if val.size and (val.min() < 0 or val.max() > 1 + 1e-9):
        raise AgentFileError("t2_data holds a probability outside [0, 1]")
    # first-order counts and the previous observation
    fo = _array(data, "fo_counts", _INT, 3)
    if fo.shape != (O, A, O):
        raise AgentFileError(f"fo_counts has shape {fo.shape}, expected ({O}, {A}, {O})")
    if fo.size and fo.min() < 0:
        raise AgentFileError("fo_counts holds a negative count")
    _int_field(meta, "fo_prev", 0, O)
    # counters and state
    for key in _COUNTERS + (("popped",) if "popped" in meta else ()):
        _int_field(meta, key, 0)
    if "popped" in meta:  # episodes whose history was handed out (streamed to a file); older files lack it
        _int_field(meta, "popped", 0, meta["episodes"] + 1)
    if not isinstance(meta.get("sleep_pending"), bool):
        raise AgentFileError(f"meta 'sleep_pending' is {meta.get('sleep_pending')!r}, expected true or false")
    purity = meta.get("purity")
    if not (isinstance(purity, list) and len(purity) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in purity)):
        raise AgentFileError(f"meta 'purity' is {purity!r}, expected two numbers")
    _check_rng(meta.get("rng"))
    _check_params(meta, O, A, check_params)
    # history: every curve as long as the episode numbers
    hist = {k[len("history_"):]: v for k, v in data.items() if k.startswith("history_")}
    if hist:
        missing = sorted(set(history_keys) - set(hist))
        if missing:
            raise AgentFileError(f"history is incomplete: no {', '.join('history_' + m for m in missing)}")
        lengths = {v.shape for v in hist.values()}
        if len(lengths) != 1 or len(next(iter(lengths))) != 1:
            raise AgentFileError(f"history arrays have different shapes {sorted(lengths)}")
        for key, v in hist.items():
            if v.dtype.kind not in "iuf":
                raise AgentFileError(f"history_{key} has dtype {v.dtype}, expected numbers")
        ep = hist.get("episode")
        if ep is not None and ep.size and (ep.dtype.kind not in _INT or (np.diff(ep) != 1).any() or ep[0] < 0):
            raise AgentFileError("history_episode is not a run of consecutive episode numbers")


def _check_rng(state) -> None:
    """The saved bit-generator state must be one numpy can restore."""
    if not isinstance(state, dict) or not isinstance(state.get("bit_generator"), str):
        raise AgentFileError("meta 'rng' is not a random-generator state")
    try:
        bitgen = getattr(np.random, state["bit_generator"])
        if not (isinstance(bitgen, type) and issubclass(bitgen, np.random.BitGenerator)):
            raise TypeError(state["bit_generator"])
        bitgen().state = state
    except (AttributeError, TypeError, ValueError, KeyError, OverflowError) as e:
        raise AgentFileError(f"meta 'rng' is not a valid random-generator state ({type(e).__name__})") from None


def _check_params(meta: dict, n_obs: int, n_actions: int, check) -> None:
    """The saved parameters must be ones the agent accepts (``check`` raises on others)."""
    params = meta.get("params", meta.get("settings"))
    if not isinstance(params, dict):
        raise AgentFileError("meta has no 'params' object")
    if check is None:
        return
    try:
        check(params, n_obs, n_actions)
    except (ValueError, TypeError) as e:
        if str(e).startswith("unknown parameter"):
            raise AgentFileError(str(e)) from None
        raise AgentFileError(f"invalid parameters in meta: {' '.join(str(e).split())}") from None
