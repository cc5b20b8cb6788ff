"""The console scripts. Each imports its program inside the guarded run
(`taso.cli.program`), so Ctrl-C at any moment, during the imports too, ends in
one line and status 130 rather than a traceback."""

from __future__ import annotations

import importlib
import os
import sys
import threading

from .cli import debugging, program
from .interrupt import signals_deferred

EXIT_GRACE = 10.0  # seconds an interrupted program may take to exit


def _exit_guard(code: int) -> None:
    """After an interruption our cleanup is done (workers killed, spill files
    gone, the one line printed), but the interpreter's exit still joins the
    process pool's threads, which have waited for ever on a killed worker's
    pipe (LocalExecutor.abort now prevents the case seen). Exit regardless once
    the grace period is over."""
    sys.stdout.flush()
    sys.stderr.flush()

    def force() -> None:
        if debugging():  # TASO_DEBUG: say where it hung
            import faulthandler
            faulthandler.dump_traceback(sys.stderr, all_threads=True)
        os._exit(code)

    timer = threading.Timer(EXIT_GRACE, force)
    timer.daemon = True
    timer.start()


def _run(prog: str, module: str) -> int:
    with program(prog) as run:
        # A first signal during the imports waits for them to finish: raised
        # inside an extension module's initialisation (numpy, onnxruntime) it
        # can leave that module half made, to crash the interpreter's exit.
        with signals_deferred():
            main = importlib.import_module(module).main
        run(main())
    if run.code in (130, 143):  # SIGINT, SIGTERM
        _exit_guard(run.code)
    return run.code


def opt() -> int:
    return _run("taso-opt", "taso.optimizer.cli")


def gen() -> int:
    return _run("taso-gen", "taso.generator.cli")


def verify() -> int:
    return _run("taso-verify", "taso.verifier.cli")


if __name__ == "__main__":
    sys.exit({"opt": opt, "gen": gen, "verify": verify}[sys.argv.pop(1)]())
