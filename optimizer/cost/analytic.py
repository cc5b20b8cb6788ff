"""The deterministic `analytic` cost model: FLOPs and bytes against a roofline.

One node costs

    launch + max(flops / peak, bytes / bandwidth)        (milliseconds)

with the stated peak numbers below (a mid-range GPU). Contractions (conv,
matmul, gemm) run below peak when small: their compute term is at least
`saturation_flops / peak`, the work that fills the device, which is what makes
merging small parallel contractions pay, as it does on real hardware. Each
operator says its FLOPs and the elements it moves (`Op.flops`, `Op.moved`,
`Op.contraction`); a view moves none; graph sources cost nothing. The numbers
are for ranking graphs in tests and benchmarks, not for predicting latency.
"""

from __future__ import annotations

from typing import Any

from taso.ops import OPS, ShapeError

from . import SOURCE_OPS, CostModel, Shape, register_cost_model


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
        o = OPS[op] if op not in SOURCE_OPS else None
        if o is None or o.weight_only:
            return 0.0
        try:  # (an opaque node's are its attributes)
            outs = o.out_shapes(o.resolve(dict(attrs), shapes), shapes)
        except ShapeError:
            return float("inf")
        flops = o.flops(attrs, shapes, outs)
        if o.contraction:
            flops = max(flops, self.saturation)
        moved = o.moved(attrs, shapes, outs) * self.itemsize
        return (self.launch + max(flops / self.peak, moved / self.bandwidth)) * 1e3
