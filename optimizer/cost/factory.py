"""One call that turns command-line cost options into a cost model.

taso-opt maps its flags onto `make_cost_model`:
    --cost-model NAME      name ("analytic", "ort", "cupy")
    --cost-cache PATH      cache_path (measured models only; default: the user's cache)
    --memory-weight W      memory_weight (ms per MiB of peak memory; 0 = time only)
    --threads N            threads (ort only)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from . import CostModel, get_cost_model
from .memory import MemoryWeighted

MEASURED = ("ort", "cupy")


def make_cost_model(name: str | CostModel | Callable = "analytic",
                    cache_path: str | os.PathLike | None = None,
                    memory_weight: float = 0.0, threads: int | None = None,
                    **options: Any) -> CostModel:
    """A cost model by name (or an instance or a function, as `get_cost_model`
    takes), with its cache file, thread count and memory weight applied."""
    if isinstance(name, str) and name in MEASURED:
        if cache_path is not None:
            options["cache"] = cache_path
        if threads is not None and name == "ort":
            options["threads"] = threads
    model = get_cost_model(name, **options)
    return MemoryWeighted(model, memory_weight) if memory_weight else model
