"""Files a user names on the command line: refuse a bad output path before any
work, and write outputs atomically so a failed or interrupted write leaves
whatever was there before."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def output_path_problem(path: str | os.PathLike, flag: str = "--output") -> str | None:
    """Why `path` cannot be written as an output file, or None if it can."""
    out = Path(path)
    if str(path) == "" or out.is_dir():  # "" names the working folder
        return f"{flag} {str(path)!r} is not a file path"
    folder = out.absolute().parent
    if not folder.is_dir():
        return f"{flag}: no such folder {str(folder)!r}"
    if not os.access(folder, os.W_OK):
        return f"{flag}: cannot write in {str(folder)!r}"
    return None


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A fresh temporary path beside `path` to write to; synced and moved onto
    `path` (through a link, onto what it names) when the block ends normally,
    removed when it raises. The file gets the mode of the one it replaces, or
    the usual one for a new file."""
    target = os.path.realpath(os.fspath(path))
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
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
