"""The deterministic `analytic` cost model: FLOPs and bytes against a roofline.

One node costs

    launch + max(flops / peak, bytes / bandwidth)        (milliseconds)

with the stated peak numbers below (a mid-range GPU). Contractions (conv,
matmul, gemm) run below peak when small: their compute term is at least
`saturation_flops / peak`, the work that fills the device, which is what makes
merging small parallel contractions pay, as it does on real hardware. Reshape
moves no data; graph sources cost nothing. The numbers are for ranking graphs in
tests and benchmarks, not for predicting latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from taso.ops import OPS, ShapeError

from . import SOURCE_OPS, CostModel, Shape, register_cost_model

# Operators whose output is a view of the input, or free to produce.
VIEW_OPS = ("reshape",)
CONTRACTIONS = ("conv2d", "conv2d_bias", "matmul", "gemm")


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def contraction_flops(op: str, attrs: dict[str, Any], shapes: list[Shape],
                      outs: list[Shape]) -> int:
    """Multiply-adds x 2 of a contraction: each output element reduces over
    `prod(input) / (rows of output)` values of the first operand's row."""
    out = _size(outs[0])
    if op in ("conv2d", "conv2d_bias"):
        w = shapes[1]
        return 2 * out * w[1] * w[2] * w[3]
    if op == "matmul":
        return 2 * out * shapes[0][-1]
    # gemm and kin: the first operand holds rows x K in some order.
    rows = outs[0][0] if outs[0] else 1
    return 2 * out * max(_size(shapes[0]) // max(rows, 1), 1)


@register_cost_model("analytic")
class AnalyticCost(CostModel):
    name = "analytic"

    def __init__(self, peak_gflops: float = 10_000.0, bandwidth_gbs: float = 500.0,
                 launch_us: float = 5.0, saturation_mflops: float = 50.0,
                 itemsize: int = 4):
        self.peak = peak_gflops * 1e9
        self.bandwidth = bandwidth_gbs * 1e9
        self.launch = launch_us * 1e-6
        self.saturation = saturation_mflops * 1e6
        self.itemsize = itemsize
        self.device = (f"roofline:{peak_gflops:g}GF/s,{bandwidth_gbs:g}GB/s,"
                       f"{launch_us:g}us,{saturation_mflops:g}MF")

    def op_cost(self, op: str, attrs: dict[str, Any], shapes: list[Shape]) -> float:
        if op in SOURCE_OPS or (op in OPS and OPS[op].weight_only):
            return 0.0
        if op == "opaque":
            outs = [tuple(s) for s in attrs["out_shapes"]]
        else:
            o = OPS[op]
            try:
                outs = o.out_shapes(o.resolve(dict(attrs), shapes), shapes)
            except ShapeError:
                return float("inf")
        if op in VIEW_OPS:
            return self.launch * 1e3
        out_elems = sum(_size(s) for s in outs)
        moved = (sum(_size(s) for s in shapes) + out_elems) * self.itemsize
        if op in CONTRACTIONS:
            flops = contraction_flops(op, attrs, shapes, outs)
            if attrs.get("activation", "none") != "none":
                flops += out_elems
            compute = max(flops, self.saturation) / self.peak
        else:
            compute = out_elems / self.peak
        return (self.launch + max(compute, moved / self.bandwidth)) * 1e3
