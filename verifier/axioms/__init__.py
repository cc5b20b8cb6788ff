"""The operator axioms: each one a statement, a readable sentence, and a test.

`dsl` is the language they are written in (terms, the registry, the values the
numeric check draws), `check` the numeric check, and each module of `families`
one family of axioms. The families are stated in `FAMILIES` order (the solver
sees axioms in that order), then any other module of `families`, by name: a new
family is a new module, named nowhere else.
"""

import importlib
import pkgutil

from . import families
from .check import Outcome, check_axiom, check_seeds
from .dsl import (  # the language, for tests and tools
    ACTIVATIONS,
    AXIOMS,
    DOMAINS,
    EDGES,
    Axiom,
    app,
    b,
    b2,
    by_name,
    check_domains,
    concat,
    conv,
    dim,
    ewadd,
    ge,
    iv,
    matmul,
    ok,
    relu,
    split,
    transpose,
    u,
    w,
    x,
    y,
    z,
)

FAMILIES = ("elementwise", "scalar", "activation", "fusion", "transpose", "concat", "matmul",
            "rows", "conv", "constant", "fold", "pool", "broadcast", "gemm", "shape", "strict")

for _m in (*FAMILIES, *sorted({m.name for m in pkgutil.iter_modules(families.__path__)}
                              - set(FAMILIES))):
    importlib.import_module(f"{families.__name__}.{_m}")

__all__ = ["ACTIVATIONS", "AXIOMS", "DOMAINS", "EDGES", "FAMILIES", "Axiom", "Outcome", "app",
           "b", "b2", "by_name", "check_axiom", "check_seeds", "check_domains", "concat", "conv",
           "dim", "ewadd", "ge", "iv", "matmul", "ok", "relu", "split", "transpose", "u", "w", "x",
           "y", "z"]
