"""taso: a tensor-algebra superoptimizer for deep-learning models.

Every name is imported on first use, so that `import taso` (and the programs'
entry points, `taso._entry`) start at once and an early Ctrl-C is theirs to
handle."""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_API = {
    "CheckError": "taso.errors", "ModelError": "taso.errors", "ShapeError": "taso.errors",
    "Graph": "taso.ir", "Node": "taso.ir", "Tensor": "taso.ir", "new_graph": "taso.ir",
    "export_onnx": "taso.onnx_io", "load_onnx": "taso.onnx_io", "OPS": "taso.ops",
    # the optimizer's public API (it imports the compiled core)
    "optimize": "taso.optimizer.search", "set_search_budget": "taso.optimizer.search",
    "set_cost_threshold": "taso.optimizer.search", "set_cost_model": "taso.optimizer.search",
    "enable_debug_logging": "taso.optimizer.search",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'taso' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
