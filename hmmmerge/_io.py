"""File access: only regular files are read or written; a result is either whole on disk or absent.

Every file the toolkit reads or appends to is opened by :func:`open_regular`,
which refuses -- with one ``ValueError`` line, without blocking and without
opening them -- a folder, a FIFO, a device or a socket (a symbolic link to a
regular file is followed, as ``open`` does); every file it writes whole goes
through :func:`atomic_write_bytes`.

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


def file_kind(mode: int) -> str:
    """The kind of file of an ``st_mode``: ``"regular file"``, ``"folder"``, ``"FIFO"``, ``"device"``, ...

    >>> file_kind(os.stat(".").st_mode)
    'folder'
    """
    return ("regular file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode)
            else "device" if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) else "FIFO" if stat.S_ISFIFO(mode)
            else "socket" if stat.S_ISSOCK(mode) else "special file")


def check_regular_file(path, what: str = "file") -> str:
    """``path`` (as text) if it names an existing regular file (through symbolic links), else an error.

    A missing path raises ``FileNotFoundError``; a folder, FIFO, device or
    socket a ``ValueError`` naming the path and its kind.  Nothing is opened.

    >>> check_regular_file("/dev/null", "world file")
    Traceback (most recent call last):
    ...
    ValueError: /dev/null is a device, not a regular file: cannot read it as a world file
    """
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except NotADirectoryError:
        raise ValueError(f"{path}: a parent of this path is not a folder") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path} is a {file_kind(mode)}, not a regular file: cannot read it as a {what}")
    return path


def open_regular(path, mode: str = "rb", what: str = "file", **kw):
    """``open(path, mode)`` for a regular file only (see :func:`check_regular_file`); never blocks.

    ``mode`` is a read mode (``"r"``, ``"rb"``) or an append mode (``"a"``,
    ``"ab"``: a missing file is created).  The path is checked before it is
    opened, and the opened file again (non-blocking), so that a FIFO or device
    put in its place meanwhile is refused too.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     fifo = os.path.join(d, "fifo"); os.mkfifo(fifo)
    ...     open_regular(fifo, what="world file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../fifo is a FIFO, not a regular file: cannot read it as a world file
    """
    path = os.fspath(path)
    if mode.strip("bt") not in ("r", "a"):
        raise ValueError(f"open_regular reads or appends, mode {mode!r} is neither")
    append = mode.startswith("a")
    verb = "append to" if append else "read"
    try:
        check_regular_file(path, what)
    except FileNotFoundError:
        if not append:
            raise
    except ValueError as e:
        raise ValueError(str(e).replace("cannot read it", f"cannot {verb} it")) from None
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT if append else os.O_RDONLY) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise ValueError(f"{path} is a {file_kind(st_mode)}, not a regular file: cannot {verb} it as a {what}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kw)
    except BaseException:
        os.close(fd)
        raise


def make_folder(path, what: str = "output folder") -> str:
    """Create the folder ``path`` if needed (as ``os.makedirs``); a file, FIFO or device there is refused.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     make_folder(f.name, "--out")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... is a regular file, not a folder: cannot use it as the --out
    """
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
        return path
    except NotADirectoryError:
        raise ValueError(f"{path}: a parent of this path is not a folder") from None
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{path} is a {file_kind(mode)}, not a folder: cannot use it as the {what}")
    return path


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
        via = f" (the target of the link {path})" if real != path else ""
        raise ValueError(f"{real}{via} is a {file_kind(mode)}: only regular files or new paths are written")
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
