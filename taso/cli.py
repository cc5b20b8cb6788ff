"""What the three programs (taso-gen, taso-verify, taso-opt) share: a guarded
run that ends, whatever happens, in one line on stderr and an exit status; a
parser whose errors are one line; the flag checks they have in common; and one
progress line.

Exit statuses: 0 done; 1 a result refused (taso-opt's check); 2 a problem with
the input or the flags, named in one line; 3 an error nobody foresaw, in one
line (TASO_DEBUG=1 raises it with its traceback); 130 SIGINT; 143 SIGTERM.
Outputs are written atomically, so a run that stops leaves what was there.

Imports nothing heavy: the console scripts (`taso._entry`) enter `program`
before importing the program itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from .files import output_path_problem
from .interrupt import interruption, signals_as_interrupts

INTERNAL_ERROR = 3


# ---- a guarded run ---------------------------------------------------------------------
class Run:
    """What a guarded run reports: its exit status (`run(code)`), what stopping
    now would leave (`what`, for the message), and the progress line to end
    before any message (`line`)."""

    def __init__(self, prog: str):
        self.prog = prog
        self.code = 0
        self.what = "nothing written"
        self.line: StatusLine | None = None

    def __call__(self, code: int) -> None:
        self.code = code

    def fail(self, message: str, status: int = 2) -> int:
        """Say `message` as the program's one line on stderr; returns `status`."""
        say(self.prog, message, self.line)
        return status


def say(prog: str, message: str, line: StatusLine | None = None) -> None:
    """`prog: message` on stderr, on a line of its own."""
    if line is not None:
        line.end()
    print(f"{prog}: {message}", file=sys.stderr, flush=True)


def debugging() -> bool:
    return os.environ.get("TASO_DEBUG", "") not in ("", "0")


def first_line(e: BaseException) -> str:
    """An exception's message as one line (its first), or its type's name."""
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


@contextmanager
def program(prog: str) -> Iterator[Run]:
    """Run a program's body: SIGINT and SIGTERM raise where it is (see
    `taso.interrupt`) and end it with one line and 130 or 143; running out of
    memory ends it with one line and 2; any other exception with one line and
    3, unless TASO_DEBUG is set. The block sets the status by `run(code)`."""
    run = Run(prog)
    try:
        with signals_as_interrupts():
            yield run
    except KeyboardInterrupt as e:
        name, run.code = interruption(e)
        say(prog, f"interrupted by {name}; {run.what}", run.line)
    except MemoryError:
        run.code = run.fail(f"out of memory (the work does not fit in this machine's "
                            f"memory); {run.what}")
    except Exception as e:
        if debugging():
            raise
        run.code = run.fail(f"internal error, {run.what} ({type(e).__name__}: "
                            f"{first_line(e)}); TASO_DEBUG=1 shows where", INTERNAL_ERROR)


# ---- flags ----------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag said in one line (and the status 2 it has)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def check_workers(parser: argparse.ArgumentParser, workers: int | None) -> None:
    if workers is not None and workers < 1:
        parser.error(f"--workers must be at least 1, got {workers}")


def check_executor(parser: argparse.ArgumentParser, executor: str, address: str | None) -> None:
    """--address only with --executor ray, and Ray only where it is installed."""
    if address is not None and executor != "ray":
        parser.error("--address needs --executor ray")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        parser.error("--executor ray needs Ray: pip install 'taso[cluster]'")


def check_number(parser: argparse.ArgumentParser, flag: str, value: float,
                 positive: bool = True) -> None:
    """A finite number, > 0 (`positive`) or >= 0."""
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        parser.error(f"{flag} must be a finite number {'> 0' if positive else '>= 0'}, "
                     f"got {value}")


def check_output(parser: argparse.ArgumentParser, path: str | os.PathLike,
                 flag: str = "--output") -> None:
    """A path an output file can be written to (`taso.files.output_path_problem`)."""
    problem = output_path_problem(path, flag)
    if problem:
        parser.error(problem)


# ---- progress -------------------------------------------------------------------------------
def bar(done: int, total: int, width: int = 24) -> str:
    fill = width * done // max(total, 1)
    return f"[{'#' * fill}{'.' * (width - fill)}]"


class StatusLine:
    """One progress line on stderr: on a terminal redrawn in place, at most every
    `interval` seconds; elsewhere (a log file, a pipe) a line of its own, at
    most every `plain_interval` seconds. A last update always shows."""

    def __init__(self, stream: IO[str] | None = None, interval: float = 0.2,
                 plain_interval: float = 2.0):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval if self.tty else plain_interval
        self.open = False  # a line is drawn in place and not yet ended
        self._shown = -math.inf
        self._width = 0

    def show(self, text: str, last: bool = False) -> None:
        now = time.monotonic()
        if not last and now - self._shown < self.interval:
            return
        self._shown = now
        if self.tty:
            self.stream.write("\r" + text.ljust(self._width) + ("\n" if last else ""))
            self.open, self._width = not last, 0 if last else len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        """End a line drawn in place, so that what follows starts a line."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open, self._width = False, 0
