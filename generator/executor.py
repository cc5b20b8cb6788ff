"""Where the generator's work runs: an executor is anything with an ordered `map`.

The default is a local process pool (fork, so workers inherit the parent's
operator registry and hash seed); a cluster engine (e.g. Ray) can take its place
by providing the same two methods.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol


class Executor(Protocol):
    workers: int

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """Apply `fn` to each item; results in item order."""
        ...

    def close(self) -> None: ...


class SerialExecutor:
    """Runs everything in this process (tests, debugging, one core)."""

    workers = 1

    def __init__(self, initializer: Callable[..., None] | None = None, initargs: tuple = ()):
        if initializer is not None:
            initializer(*initargs)

    def map(self, fn, items):
        return map(fn, items)

    def close(self) -> None:
        pass


class LocalExecutor:
    """A process pool on this machine."""

    def __init__(self, workers: int | None = None,
                 initializer: Callable[..., None] | None = None, initargs: tuple = ()):
        self.workers = workers or os.cpu_count() or 1
        self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("fork"),
                                         initializer=initializer, initargs=initargs)

    def map(self, fn, items):
        return self._pool.map(fn, items)

    def close(self) -> None:
        self._pool.shutdown()


def make_executor(workers: int | None, initializer: Callable[..., None] | None = None,
                  initargs: tuple = ()) -> Executor:
    """A serial executor for one worker, else a local process pool."""
    if workers == 1:
        return SerialExecutor(initializer, initargs)
    return LocalExecutor(workers, initializer, initargs)
