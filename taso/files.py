"""Files a user names on the command line: refuse a bad output path before any
work, and write outputs atomically so a failed or interrupted write leaves
whatever was there before."""

from __future__ import annotations

import os
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
    """A temporary path beside `path` to write to; moved onto `path` when the
    block ends normally, removed when it raises."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
