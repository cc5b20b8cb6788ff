"""Files a user names on the command line: refuse a bad output path before any
work, and write outputs atomically so a failed or interrupted write leaves
whatever was there before."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# What a temporary name adds to the output's name: ".", mkstemp's 8 characters
# and ".tmp".
_TMP_EXTRA = 1 + 8 + 4


def output_path_problem(path: str | os.PathLike, flag: str = "--output") -> str | None:
    """Why `path` cannot be written as an output file, or None if it can. A
    regular file (new or replaced), a character device (/dev/null) or a FIFO
    (written through) can; a folder, a socket or a block device cannot."""
    out = Path(path)
    if str(path) == "":  # "" names the working folder
        return f"{flag} '' is not a file path"
    try:
        limit = name_max(out.absolute().parent if out.absolute().parent.is_dir() else "/")
        if len(os.fsencode(out.name)) > limit:
            return (f"{flag}: the file name is longer than this file system allows "
                    f"({limit} bytes)")
        return _path_problem(out, path, flag)
    except OSError as e:  # a path the system refuses to look at
        return f"{flag} {str(path)!r}: {e.strerror or e}"


def _path_problem(out: Path, path: str | os.PathLike, flag: str) -> str | None:
    if out.is_dir():
        return f"{flag} {str(path)!r} is not a file path"
    if out.exists() and not (out.is_file() or write_through(out)):
        return f"{flag} {str(path)!r} is not a regular file, a character device or a FIFO"
    folder = out.absolute().parent
    if not folder.is_dir():
        for above in out.absolute().parents:
            if above.exists():
                if not above.is_dir():
                    return f"{flag}: {str(above)!r} is a file, not a folder"
                break
        return f"{flag}: no such folder {str(folder)!r}"
    if write_through(out):
        return None if os.access(out, os.W_OK) else f"{flag}: cannot write {str(path)!r}"
    if not os.access(folder, os.W_OK):
        return f"{flag}: cannot write in {str(folder)!r}"
    return None


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name, in bytes, that `folder`'s file system takes."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def write_through(path: str | os.PathLike) -> bool:
    """Whether `path` is something an output is written into rather than
    replaced: a character device (/dev/null, a terminal) or a FIFO."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A fresh temporary path beside `path` to write to; synced and moved onto
    `path` (through a link, onto what it names) when the block ends normally,
    removed when it raises. The file gets the mode of the one it replaces, or
    the usual one for a new file."""
    target = os.path.realpath(os.fspath(path))
    if write_through(target):
        # A device or a FIFO is written into, never replaced by a file.
        yield target
        return
    folder, name = os.path.split(target)
    # A name near the file system's limit still leaves room for the temporary one.
    room = max(name_max(folder) - _TMP_EXTRA, 1)
    stem = os.fsencode(name)[:room].decode(errors="ignore") or "out"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{stem}", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, os.stat(target).st_mode & 0o7777 if os.path.exists(target)
                 else _new_file_mode())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _new_file_mode() -> int:
    """What open() would give a new file under the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
