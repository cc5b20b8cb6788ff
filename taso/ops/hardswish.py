"""HardSwish (ONNX HardSwish, opset 14): x * max(0, min(1, x / 6 + 1/2)).

Everything taso knows about it is here: being pointwise, the verifier states
its laws (it commutes with concat and transpose, keeps sizes, is strict); the
generator can enumerate it (`--ops hardswish,...`); the cost models read the
default traits; ONNX import and export are below.
"""

from __future__ import annotations

import numpy as np

from .activation import Pointwise
from .base import onnx_importer, poly, register


@register
class HardSwish(Pointwise):
    name = "hardswish"
    onnx_type = "HardSwish"
    gen_attrs = ({},)  # generated over when asked for (not in TASO's set)
    fp_poly = poly([5, 2, 9, 1])  # its own non-linear stand-in

    def ref(self, a, x):
        x = x.astype(np.float32)
        return x * np.minimum(np.maximum(x / np.float32(6) + np.float32(0.5), 0), 1)

    def fp(self, a, x):
        return HardSwish.fp_poly(x)

    def onnx(self, a, em, ins, outs, shapes):
        if getattr(em, "opset", 14) >= 14:
            em.node("HardSwish", ins, outs)
            return
        # Opset 13: the same as x * HardSigmoid(x) with alpha 1/6, beta 1/2.
        h = em.tmp("hardsigmoid")
        em.node("HardSigmoid", ins, [h], alpha=1.0 / 6.0, beta=0.5)
        em.node("Mul", [ins[0], h], outs)


@onnx_importer("HardSwish")
def _import_hardswish(ctx):
    return [ctx.g.hardswish(ctx.inputs[0])]
