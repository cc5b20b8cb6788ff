"""Graph sources: activations fed at run time, weights carried as data, and
opaque nodes for ONNX operators the library does not know."""

from __future__ import annotations

from .base import Op, register


class _Source(Op):
    inputs = ()
    attrs = {"shape": None, "dtype": "float32"}

    def shape(self, a):
        return a["shape"]


@register
class Input(_Source):
    """An activation: its value is fed when the graph runs."""

    name = "input"


@register
class Weight(_Source):
    """A constant tensor whose data the node carries (`Node.data`)."""

    name = "weight"


@register
class Opaque(Op):
    """An ONNX operator the library does not know: kept with its attributes and
    output shapes, evaluated by onnxruntime, matched by no rule.

    attrs: onnx_type, domain, onnx_attrs (the serialized AttributeProtos, as
    bytes), out_shapes and out_dtypes (dtype "" marks an omitted optional output),
    opset (of its domain at import: an operator's meaning depends on it), absent
    (ONNX input positions left empty) and outer (names its subgraphs read from the
    enclosing scope, fed by the last len(outer) inputs)."""

    name = "opaque"
    inputs = ("*xs",)
    attrs = {"onnx_type": None, "domain": "", "onnx_attrs": (), "out_shapes": None,
             "out_dtypes": None, "opset": 0, "absent": (), "outer": ()}

    def check_arity(self, n):
        pass  # any number of inputs, including none

    def num_outputs(self, a):
        return len(a["out_shapes"])

    def shape(self, a, *xs):
        return list(a["out_shapes"])

    def ref(self, a, *xs):
        # Exported by taso.onnx_io.export.emit_opaque, which also needs the input dtypes.
        from ..onnx_io import run_attrs

        return run_attrs(a, xs)

