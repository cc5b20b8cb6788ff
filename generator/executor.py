"""The generator's executors: see `taso.executor` (shared with the verifier)."""

from taso.executor import (
    EXECUTORS,
    Executor,
    ExecutorError,
    LocalExecutor,
    RayExecutor,
    SerialExecutor,
    make_executor,
)

__all__ = ["EXECUTORS", "Executor", "ExecutorError", "LocalExecutor", "RayExecutor",
           "SerialExecutor", "make_executor"]
