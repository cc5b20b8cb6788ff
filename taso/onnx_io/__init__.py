"""ONNX import and export.

`load_onnx` (`load`) turns a model into a `Graph`; nodes no operator imports
become `opaque` nodes, which `opaque` runs in onnxruntime; `export_onnx`
(`export`) writes a Graph back through each operator's `onnx` method.
"""

from .common import DEFAULT_OPSET, MIN_OPSET
from .export import Emitter, emit_opaque, export_onnx, save_model
from .load import ImportContext, load_onnx, read_model
from .opaque import run_attrs, run_opaque

__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "Emitter", "ImportContext", "emit_opaque",
           "export_onnx", "load_onnx", "read_model", "run_attrs", "run_opaque",
           "save_model"]
