"""Graph sources: activations fed at run time and weights carried as data.
(Opaque nodes, for ONNX operators the library does not know, are defined with
ONNX I/O: `taso.onnx_io.opaque`.)"""

from __future__ import annotations

from .base import Op, register


class _Source(Op):
    inputs = ()
    attrs = {"shape": None, "dtype": "float32"}
    kind = "source"
    gen_attrs = ()

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
