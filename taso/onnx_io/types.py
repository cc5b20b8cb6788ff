"""The type (static shape and dtype) of every value of a model: what ONNX
shape inference and the model's own value_info know, and, for values they
cannot pin down, what a run of the model in onnxruntime on random inputs shows."""

from __future__ import annotations

import numpy as np
import onnx

from .. import runtime
from ..ir import random_array
from ..ops.base import Shape
from .common import array_dtype, dtype_name


def value_types(model: onnx.ModelProto) -> dict[str, tuple[Shape | None, str | None]]:
    """(static shape or None, dtype or None) of every value ONNX shape inference
    (with data propagation) or the model's own value_info knows."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inferred = model
    out: dict[str, tuple[Shape | None, str | None]] = {}
    for vi in (*model.graph.value_info, *inferred.graph.value_info,
               *inferred.graph.input, *inferred.graph.output):
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            if vi.name not in out and t.WhichOneof("value"):
                out[vi.name] = (None, t.WhichOneof("value"))
            continue
        tt = t.tensor_type
        dtype = dtype_name(tt.elem_type) if tt.elem_type else None
        shape = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(d.dim_value for d in tt.shape.dim)
        old = out.get(vi.name, (None, None))
        out[vi.name] = (shape if shape is not None else old[0], dtype or old[1])
    return out


def measure_types(model: onnx.ModelProto, names: list[str],
                  inputs: dict[str, tuple[Shape, str]]) -> dict[str, tuple[Shape, str]]:
    """Shapes and dtypes of `names`, by running the model in onnxruntime on random
    inputs (for values shape inference could not pin down); {} if it cannot run."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.add().name = n
    rng = np.random.default_rng(0)
    feeds = {k: random_array(s, d, rng, int_low=1) for k, (s, d) in inputs.items()}
    try:
        vals = runtime.run(m, feeds, outputs=names)
    except Exception:
        return {}
    return {n: (tuple(v.shape), array_dtype(np.asarray(v))) for n, v in zip(names, vals)}
