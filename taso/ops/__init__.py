"""The operator library: importing it registers every operator in `OPS`.

Every module of this package is imported (in name order), so an operator's
module is all it takes to add one; nothing here names them.
"""

import importlib
import pkgutil

from .base import ACTIVATIONS, ONNX_IMPORTERS, OPS, Op, P, ShapeError, get_op

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")

__all__ = ["ACTIVATIONS", "ONNX_IMPORTERS", "OPS", "P", "Op", "ShapeError", "get_op"]
