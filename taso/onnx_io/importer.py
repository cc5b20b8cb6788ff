"""What an operator's ONNX importer sees of one node (`ImportContext`), and
the importers of the nodes whose value is known at load time (Constant, Shape,
Size), which become weights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..ir import Graph, Tensor
from ..ops.base import Shape


class ImportContext:
    """What an importer sees of one ONNX node (see `taso.ops.base.onnx_importer`)."""

    def __init__(self, loader: Any, node: onnx.NodeProto):
        self._loader = loader
        self.g: Graph = loader.g
        self.node = node
        self.opset: int = loader.opset(node.domain)
        self.inputs: list[Tensor | None] = [loader.tensors[n] if n else None
                                            for n in strip(node.input)]
        self._attrs = {a.name: a for a in node.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute as a plain Python value (or numpy array for a tensor)."""
        a = self._attrs.get(name)
        return default if a is None else attr_value(a)

    def const(self, i: int) -> np.ndarray | None:
        """Input i's value if it is known before run time, else None."""
        t = self.inputs[i] if i < len(self.inputs) else None
        return None if t is None else self._loader.value(t)

    def opaque(self) -> list[Tensor]:
        """An opaque node for this ONNX node: the fallback of every importer."""
        return self._loader.opaque(self)

    def weight(self, data: np.ndarray, name: str | None = None) -> Tensor:
        """A weight holding `data` (named after the node's first output by default)."""
        return self._loader.weight(np.asarray(data), name or self.node.output[0])

    def out_shape(self, i: int = 0) -> Shape | None:
        """Output i's static shape as ONNX infers it, if known."""
        return self._loader.types.get(self.node.output[i], (None, None))[0]


def attr_value(a: AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if a.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(v)
    if a.type == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in v]
    if a.type == AttributeProto.STRING:
        return _decode(v)
    if a.type == AttributeProto.STRINGS:
        return [_decode(s) for s in v]
    if a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(v)
    return v


def _decode(b: bytes) -> str | bytes:
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b


def strip(names: Sequence[str]) -> list[str]:
    """Drop trailing empty names (omitted optional inputs or outputs)."""
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


# ---- nodes whose value is known at load time: they become weights -------------------
def _import_constant(ctx: ImportContext) -> list[Tensor] | None:
    kinds = {"value": None, "value_float": np.float32, "value_floats": np.float32,
             "value_int": np.int64, "value_ints": np.int64, "value_string": object,
             "value_strings": object}
    for k, dtype in kinds.items():
        v = ctx.attr(k)
        if v is not None:
            return [ctx.weight(np.asarray(v, dtype=dtype))]
    return None  # sparse_value: opaque


def _import_shape(ctx: ImportContext) -> list[Tensor]:
    shape = ctx.inputs[0].shape
    r = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", r)
    start, end = (min(max(k + r if k < 0 else k, 0), r) for k in (start, end))
    return [ctx.weight(np.array(shape[start:end], np.int64))]


def _import_size(ctx: ImportContext) -> list[Tensor]:
    return [ctx.weight(np.array(int(np.prod(ctx.inputs[0].shape)), np.int64))]


SOURCE_IMPORTERS = {"Constant": _import_constant, "Shape": _import_shape, "Size": _import_size}
