"""ONNX import and export.

`load_onnx` (`load`) turns a model into a `Graph`: `read` reads and checks the
file, `types` finds every value's shape and dtype, and each node goes to its
operator's importer (`importer.ImportContext`); nodes no operator imports
become `opaque` nodes (`opaque`: the operator, run in onnxruntime).
`export_onnx` (`export`) writes a Graph back through each operator's `onnx`
method.
"""

from .common import DEFAULT_OPSET, MIN_OPSET
from .export import Emitter, emit_opaque, export_onnx, save_model
from .importer import ImportContext
from .load import load_onnx
from .opaque import run_attrs
from .read import read_model

__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "Emitter", "ImportContext", "emit_opaque",
           "export_onnx", "load_onnx", "read_model", "run_attrs", "save_model"]
