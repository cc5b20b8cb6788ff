"""Ctrl-C and SIGTERM: raised as one exception where the program is, so that
cleanups run (workers killed, spill files removed, nothing half written), then
reported as one line and an exit status (`taso.cli.program`), never a traceback.

Within `signals_as_interrupts()` the first SIGINT or SIGTERM raises
`Interrupted` in the main thread; later ones are only noted, so that the
cleanup is not cut short. `signals_deferred()` holds the first one while
workers start, until they are on record and can be taken down whole.
This module imports nothing heavy: the programs install it before their
imports, so an interruption during the imports is caught too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (raised by the handlers of
    `signals_as_interrupts`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interruption(e: KeyboardInterrupt) -> tuple[str, int]:
    """(signal name, exit status: 128 + its number) for an interruption. Read from
    the signals received, not from the exception: Ray's `get` turns any
    KeyboardInterrupt raised in it into a plain one. SIGTERM if it came at all (a
    request to terminate outranks an interrupt), else SIGINT (also for a plain
    KeyboardInterrupt with no signal seen)."""
    if signal.SIGTERM in _received:
        signum = signal.SIGTERM
    elif isinstance(e, Interrupted):
        signum = e.signum
    else:
        signum = signal.SIGINT
    return signal.Signals(signum).name, 128 + signum


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # signals seen within signals_as_interrupts, in order
_deferring = False


def _on_signal(signum: int, frame: Any) -> None:
    # Raise once: from then on the caller cleans up (kills workers, removes spill
    # files) and must not be cut short by a second signal, which is only noted.
    # Within `signals_deferred` (a worker or a Ray instance starting) the first
    # one waits until what starts is on record, so that it can be taken down
    # whole; a second one does not wait.
    seen = len(_received)
    _received.append(signum)
    if seen == 0 and not _deferring or seen == 1 and _deferring:
        raise Interrupted(signum)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold a first SIGINT or SIGTERM (under `signals_as_interrupts`) until the
    block ends, then raise it."""
    global _deferring
    _deferring = True
    try:
        yield
    finally:
        _deferring = False
    if len(_received) == 1:
        raise Interrupted(_received[0])


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in _SIGNALS}
    _received.clear()
    for s in _SIGNALS:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
