"""Atomic file writing: a result is either whole on disk or absent.

Rules of :func:`atomic_write_bytes`, the one writer every save goes through:

* the data goes to a temporary file in the destination's folder, is flushed
  to disk, then renamed over the destination (``os.replace``);
* only a regular file or a new path is replaced: a directory, a device, a
  FIFO or a socket at the path is refused with ``ValueError``;
* a symbolic link is written *through*: its final target (which must be a
  regular file or not exist yet) is replaced and the link stays a link;
* the temporary file is removed on every failure path that Python sees
  (exceptions, ``KeyboardInterrupt``); one left by a process that was killed
  outright (``SIGKILL``, power loss) is removed by the next write of the same
  file once that process is gone.
"""

from __future__ import annotations

import io
import os
import stat
import tempfile

import numpy as np

_TMP = ".tmp-"


def _target(path: str) -> str:
    """The path to replace: ``path`` itself, or the final target of a symbolic link; checked."""
    real = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    except NotADirectoryError:
        raise ValueError(f"{path}: a parent of this path is not a folder") from None
    if not stat.S_ISREG(mode):
        kind = ("folder" if stat.S_ISDIR(mode) else "device" if stat.S_ISBLK(mode) or stat.S_ISCHR(mode)
                else "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "special file")
        via = f" (the target of the link {path})" if real != path else ""
        raise ValueError(f"{real}{via} is a {kind}: only regular files or new paths are written")
    return real


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Remove ``.tmp-PID-*-name`` files of the same destination left by processes that no longer run."""
    suffix = "-" + name
    try:
        entries = [e.name for e in os.scandir(directory) if e.name.startswith(_TMP) and e.name.endswith(suffix)]
    except OSError:
        return
    for entry in entries:
        pid = entry[len(_TMP):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still running (or another process reuses the id): leave it
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue
        try:
            os.unlink(os.path.join(directory, entry))
        except OSError:
            pass


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring for the rules).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     target = os.path.join(d, "target.txt"); link = os.path.join(d, "link.txt")
    ...     os.symlink(target, link)
    ...     atomic_write_bytes(link, b"through")          # the link stays, its target is written
    ...     os.path.islink(link), open(target, "rb").read(), sorted(os.listdir(d))
    (True, b'through', ['link.txt', 'target.txt'])
    >>> atomic_write_bytes("/dev/null", b"x")
    Traceback (most recent call last):
    ...
    ValueError: /dev/null is a device: only regular files or new paths are written
    """
    path = os.fspath(path)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    target = _target(path)
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(target)
    _remove_stale_temporaries(directory, name[-100:])
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{_TMP}{os.getpid()}-", suffix="-" + name[-100:])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        _target(path)  # refuse if something other than a regular file appeared meanwhile
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_savez(path, **arrays) -> None:
    """``numpy.savez_compressed`` to ``path`` atomically (no pickled objects)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())
