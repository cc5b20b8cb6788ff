"""Ctrl-C and SIGTERM as one line and an exit status, never a traceback.

The programs' entry points (`taso._entry`) import their modules inside the
guard, so an interrupt during the imports is caught too; this module imports
nothing heavy for that reason."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
TERMINATED = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that cleanups run as for Ctrl-C."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


class _Outcome:
    """The exit status the guarded block reports (`done(code)`)."""

    code = 0

    def __call__(self, code: int) -> None:
        self.code = code


@contextmanager
def interrupts_as_exit(prog: str, what: str = "nothing written") -> Iterator[_Outcome]:
    """Run the block with SIGTERM raised as `Terminated`; an interrupt ends it
    with one line on stderr and status 130 (Ctrl-C) or 143 (SIGTERM). Outputs
    are written atomically, so an interrupted run leaves what was there."""
    done = _Outcome()
    try:
        old = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        old = None
    try:
        yield done
    except KeyboardInterrupt as e:
        term = isinstance(e, Terminated)
        print(f"\n{prog}: {'terminated' if term else 'interrupted'}; {what}", file=sys.stderr)
        done.code = TERMINATED if term else INTERRUPTED
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
