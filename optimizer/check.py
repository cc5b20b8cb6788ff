"""The equivalence check: the original and the optimized model, exported to
ONNX, run in onnxruntime on the same random inputs.

Stated tolerance: every output element must satisfy
|optimized - original| <= ATOL + RTOL * |original| (float32 reassociation and
folded batch norms change rounding, nothing more).
"""

from __future__ import annotations

import numpy as np
import onnx

from taso.ir import Graph

ATOL = 1e-3
RTOL = 1e-3


class EquivalenceError(RuntimeError):
    """The optimized model computes something else than the original."""


def run_onnx(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    # Run the graph as written: onnxruntime's own rewrites are not under test.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def check_equivalence(original: Graph | onnx.ModelProto, optimized: Graph | onnx.ModelProto,
                      feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                      atol: float = ATOL, rtol: float = RTOL) -> float:
    """The largest absolute difference over all outputs; raises
    EquivalenceError when an element is outside the tolerance."""
    from taso.onnx_io import export_onnx

    if feeds is None:
        if not isinstance(original, Graph):
            raise ValueError("feeds are required when the original is an ONNX model")
        feeds = original.random_inputs(seed)
    a = run_onnx(original if isinstance(original, onnx.ModelProto) else export_onnx(original),
                 feeds)
    b = run_onnx(optimized if isinstance(optimized, onnx.ModelProto)
                 else export_onnx(optimized), feeds)
    return compare_outputs(a, b, atol, rtol)


def compare_outputs(a: list[np.ndarray], b: list[np.ndarray],
                    atol: float = ATOL, rtol: float = RTOL) -> float:
    """The largest absolute difference between outputs `a` (the original's)
    and `b`; raises EquivalenceError when an element is outside the tolerance."""
    if len(a) != len(b):
        raise EquivalenceError(f"{len(a)} outputs before, {len(b)} after")
    worst = 0.0
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            raise EquivalenceError(f"output {k}: shape {x.shape} became {y.shape}")
        if x.dtype.kind in "fc":
            wide = np.result_type(x.dtype, y.dtype, np.float64)  # complex stays complex
            xf, yf = x.astype(wide), y.astype(wide)
            # Equal infinities and NaN on both sides agree: random inputs give
            # Sqrt or Log a NaN that a faithful rewrite keeps.
            with np.errstate(invalid="ignore"):
                same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
                diff = np.where(same, 0.0, np.abs(yf - xf))
            bad = ~(same | (np.isfinite(xf) & (diff <= atol + rtol * np.abs(xf))))
            err = float(diff.max()) if diff.size else 0.0
        else:
            bad = x != y
            err = float(bad.any())
        worst = max(worst, err)
        if bad.any():
            raise EquivalenceError(
                f"output {k}: max error {err:.3g} beyond tolerance "
                f"(atol {atol:g}, rtol {rtol:g}) at {int(bad.sum())} element(s)")
    return worst
