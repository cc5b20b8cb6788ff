"""The console scripts. Each imports its program inside the guarded run
(`taso.cli.program`), so Ctrl-C at any moment, during the imports too, ends in
one line and status 130 rather than a traceback."""

from __future__ import annotations

import importlib
import sys

from .cli import program


def _run(prog: str, module: str) -> int:
    with program(prog) as run:
        main = importlib.import_module(module).main
        run(main())
    return run.code


def opt() -> int:
    return _run("taso-opt", "taso.optimizer.cli")


def gen() -> int:
    return _run("taso-gen", "taso.generator.cli")


def verify() -> int:
    return _run("taso-verify", "taso.verifier.cli")


if __name__ == "__main__":
    sys.exit({"opt": opt, "gen": gen, "verify": verify}[sys.argv.pop(1)]())
