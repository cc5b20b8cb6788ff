"""What the ONNX tests share: running a model in onnxruntime, random feeds,
comparing outputs, a load-export round trip, and small models written inline."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import taso
from taso import runtime


def session(model: onnx.ModelProto):
    # quiet: models onnxruntime cannot run are skipped, not logged
    return runtime.session(model)


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return session(model).run(None, feeds)


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            tt = vi.type.tensor_type
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
            feeds[vi.name] = rng.standard_normal([d.dim_value for d in tt.shape.dim]) \
                .astype(dtype)
    return feeds


def assert_same(want: list[np.ndarray], got: list[np.ndarray], rtol=1e-4, atol=1e-5):
    assert len(want) == len(got)
    for w, o in zip(want, got):
        w, o = np.asarray(w), np.asarray(o)
        assert w.shape == o.shape and w.dtype == o.dtype, (w.shape, o.shape, w.dtype, o.dtype)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(o, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(o, w)


def round_trip(model: onnx.ModelProto, feeds: dict, **kw) -> taso.Graph:
    """load -> export gives a model with the original's outputs (and names)."""
    g = taso.load_onnx(model, **kw)
    out = taso.export_onnx(g)
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
    assert_same(run(model, feeds), run(out, feeds))
    return g


def model_of(nodes, inputs, outputs, opset=17, initializers=(), value_info=(), extra=()):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(initializers),
                          value_info=list(value_info))
    ops = [helper.make_opsetid("", opset), *extra]
    return helper.make_model(g, opset_imports=ops, ir_version=8)


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


# ---- the onnx package's light models ---------------------------------------------
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(f for f in os.listdir(LIGHT) if f.endswith(".onnx"))
# Small enough to run with real (random) weights in the default test run.
LIGHT_SMALL = ["light_densenet121.onnx", "light_inception_v1.onnx", "light_shufflenet.onnx",
               "light_squeezenet.onnx"]


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The model with each ConstantOfShape weight (constant, so the outputs are all
    alike) replaced by random data."""
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    keep = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = inits[n.input[0]].tolist()
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            data = (rng.standard_normal(shape) * (1.0 / fan_in) ** 0.5).astype(np.float32)
            if len(shape) == 1:  # batch-norm variances and friends: keep positive
                data = np.abs(data) + 0.5
            m.graph.initializer.append(numpy_helper.from_array(data, n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m


def light_model(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(LIGHT, name))
