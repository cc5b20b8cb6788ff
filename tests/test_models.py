"""The real-model operators (taso/ops: norm, movement, the pointwise ones, gemm)
and the model builders (taso.models), checked against onnxruntime.

Every comparison measures relative error as max|a - b| / max|b| per output (a:
onnxruntime on the exported model, b: the numpy reference `Graph.evaluate` on
the same inputs) and requires it to be at most REL_TOL = 1e-4.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import taso
import taso.models as M
from taso import runtime
from taso.ops import ACTIVATIONS, OPS, P
from taso.ops.base import inv_array, residue

REL_TOL = 1e-4


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.abs(b).max()) if b.size else 0.0
    diff = float(np.abs(a.astype(np.float64) - b).max()) if b.size else 0.0
    return diff / scale if scale > 0 else diff


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return runtime.session(model, runtime.session_options(None)).run(None, feeds)


def max_rel_err_vs_ort(g: taso.Graph, opset: int | None = None, seed: int = 1) -> float:
    """Export `g`, run it in onnxruntime and in numpy on the same seeded inputs."""
    feeds = g.random_inputs(seed)
    got = run_ort(taso.export_onnx(g, opset=opset), feeds)
    want = g.evaluate(feeds)
    assert [x.shape for x in got] == [x.shape for x in want]
    return max(rel_err(a, b) for a, b in zip(got, want))


def op_counts(g: taso.Graph) -> Counter:
    return Counter(n.op for n in g.nodes.values() if n.op not in ("input", "weight"))


# ---- operators: reference against onnxruntime -------------------------------------------
def _w(g, shape, lo=None, hi=None):
    if lo is None:
        return g.new_weight(shape, scale=1.0)
    return g.new_weight(shape, data=np.random.default_rng(7).uniform(lo, hi, shape))


OP_CASES = {
    "batchnorm": lambda g, x4, x3: [g.batchnorm(x4, _w(g, (3,)), _w(g, (3,)), _w(g, (3,)),
                                                _w(g, (3,), 0.5, 2.0), epsilon=1e-3)],
    "layernorm": lambda g, x4, x3: [g.layernorm(x3, _w(g, (8,)), _w(g, (8,))),
                                    g.layernorm(x4, _w(g, (5, 6)), _w(g, (5, 6)), axis=2)],
    "softmax": lambda g, x4, x3: [g.softmax(x3), g.softmax(x4, axis=1)],
    "erf": lambda g, x4, x3: [g.erf(g.mul(x3, _w(g, ())))],
    "gelu": lambda g, x4, x3: [g.gelu(g.mul(x3, _w(g, ())))],
    "clip": lambda g, x4, x3: [g.clip(x3, 0.0, 6.0), g.clip(x3, min=-0.5), g.clip(x3, max=0.3),
                               g.clip(x3, 0.5, -0.5)],
    "identity": lambda g, x4, x3: [g.identity(x3)],
    "global_avgpool": lambda g, x4, x3: [g.global_avgpool(x4), g.global_avgpool(x3)],
    "reduce_mean": lambda g, x4, x3: [g.reduce_mean(x4, [1, -1]),
                                      g.reduce_mean(x3, [0], keepdims=0)],
    "pad": lambda g, x4, x3: [g.pad(x4, [0, 0, 1, 2, 0, 1, 0, 3]),
                              g.pad(x3, [1, 0, 0, 0, 2, 1], value=-1.5)],
    "slice": lambda g, x4, x3: [g.slice(x4, [1, 1], [100, 4]),
                                g.slice(x4, [-1, 0], [-100, 5], axes=[3, 2], steps=[-2, 2]),
                                g.slice(x3, [6], [-9], axes=[-1], steps=[-1])],
    "squeeze": lambda g, x4, x3: [g.squeeze(g.reshape(x3, (2, 1, 3, 8, 1)), [1, -1])],
    "unsqueeze": lambda g, x4, x3: [g.unsqueeze(x3, [0, -1]), g.unsqueeze(x3, [2])],
    "flatten": lambda g, x4, x3: [g.flatten(x4), g.flatten(x4, 0), g.flatten(x4, -1),
                                  g.flatten(x3, 3)],
    "gemm": lambda g, x4, x3: [
        g.gemm(g.reshape(x3, (6, 8)), _w(g, (5, 8)), _w(g, (5,)), alpha=0.5, beta=2.0,
               trans_b=1),
        g.gemm(g.reshape(x3, (8, 6)), _w(g, (8, 5)), trans_a=1),
        g.gemm(g.reshape(x3, (6, 8)), _w(g, (8, 5)), _w(g, (6, 1)))],
}


def op_graph(name: str) -> taso.Graph:
    g = taso.new_graph(seed=5)
    x4 = g.new_input((2, 3, 5, 6), name="x4")
    x3 = g.new_input((2, 3, 8), name="x3")
    for t in OP_CASES[name](g, x4, x3):
        g.mark_output(t)
    return g


def test_every_nn_op_has_a_case():
    # the operators real models need beyond TASO's generator set: norms,
    # reductions, data movement, the pointwise ones not generated over, gemm
    from taso.ops import activation, movement, norm
    mine = {op.name for op in OPS.values() if type(op).__module__ in
            (norm.__name__, movement.__name__) or type(op).__module__ == activation.__name__
            and op.name not in ACTIVATIONS} | {"gemm"}
    assert mine == set(OP_CASES)


@pytest.mark.parametrize("opset", [13, 17, 20])
@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op_matches_onnxruntime(name, opset):
    g = op_graph(name)
    assert op_counts(g)[name] >= 1
    assert max_rel_err_vs_ort(g, opset=opset) <= REL_TOL


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_op_survives_export_and_import(name):
    # At opset 20 every operator has its own ONNX node, so the graph comes back whole.
    g = op_graph(name)
    h = taso.load_onnx(taso.export_onnx(g, opset=20))
    assert op_counts(h) == op_counts(g)
    assert h.hash() == g.hash()


def test_gelu_exports_as_erf_form_before_opset_20():
    g = op_graph("gelu")
    types = {n.op_type for n in taso.export_onnx(g, opset=17).graph.node}
    assert "Erf" in types and "Gelu" not in types
    assert "Gelu" in {n.op_type for n in taso.export_onnx(g, opset=20).graph.node}


@settings(max_examples=40, deadline=None)
@given(dim=st.integers(1, 6), start=st.integers(-9, 9), end=st.integers(-9, 9),
       step=st.sampled_from([-3, -2, -1, 1, 2, 3]))
def test_slice_clamping_matches_onnxruntime(dim, start, end, step):
    g = taso.new_graph()
    x = g.new_input((2, dim), name="x")
    g.mark_output(g.slice(x, [start], [end], axes=[1], steps=[step]))
    feeds = g.random_inputs(0)
    got = run_ort(taso.export_onnx(g), feeds)[0]
    np.testing.assert_array_equal(got, g.evaluate(feeds)[0])


def test_shape_errors():
    g = taso.new_graph()
    x = g.new_input((2, 3, 4, 4))
    with pytest.raises(taso.ShapeError, match=r"batchnorm.*\(3,\)"):
        g.batchnorm(x, *(g.new_weight((4,)) for _ in range(4)))
    with pytest.raises(taso.ShapeError, match="layernorm.*normalized shape"):
        g.layernorm(x, g.new_weight((3,)), g.new_weight((3,)))
    with pytest.raises(taso.ShapeError, match="pad.*8 entries"):
        g.pad(x, [1, 1])
    with pytest.raises(taso.ShapeError, match="squeeze"):
        g.squeeze(x, [1])
    with pytest.raises(taso.ShapeError, match="step"):
        g.slice(x, [0], [1], steps=[0])
    with pytest.raises(taso.ShapeError, match="gemm.*inner"):
        g.gemm(g.new_input((2, 3)), g.new_input((4, 5)))


# ---- operators: ONNX import of the forms other exporters write ------------------------------
def one_node_model(op_type: str, inputs: list, inits: dict, out_shape, opset: int,
                   **attrs) -> onnx.ModelProto:
    """A model of one node; `inputs` names graph inputs ("x", of shape (2, 3, 4, 4)),
    initializers (keys of `inits`) or "" for an omitted optional input."""
    node = helper.make_node(op_type, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


IMPORT_CASES = {  # id: (model, the operators it must import as; "opaque" for none)
    "pad-axes-input": (one_node_model("Pad", ["x", "p", "v", "ax"], {
        "p": np.array([1, 0, 2, 1], np.int64), "v": np.array(0.5, np.float32),
        "ax": np.array([3, 1], np.int64)}, [2, 4, 4, 7], 18), "pad"),
    "pad-reflect": (one_node_model("Pad", ["x", "p"], {
        "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}, [2, 3, 6, 6], 13, mode="reflect"),
        "opaque"),
    "clip-max-only": (one_node_model("Clip", ["x", "", "hi"], {
        "hi": np.array(0.25, np.float32)}, [2, 3, 4, 4], 13), "clip"),
    "clip-attrs": (one_node_model("Clip", ["x"], {}, [2, 3, 4, 4], 6, min=-0.5, max=0.5),
                   "clip"),
    "squeeze-all": (one_node_model("Squeeze", ["x"], {}, [2, 3, 4, 4], 13), "squeeze"),
    "reduce-mean-attr": (one_node_model("ReduceMean", ["x"], {}, [2, 1, 4, 1], 13,
                                        axes=[1, 3]), "reduce_mean"),
    "reduce-mean-all": (one_node_model("ReduceMean", ["x"], {}, [1, 1, 1, 1], 18),
                        "reduce_mean"),
    "softmax-11-last-axis": (one_node_model("Softmax", ["x"], {}, [2, 3, 4, 4], 11, axis=3),
                             "softmax"),
    # old opsets are converted on load: softmax-11 over the inner axes becomes
    # flatten -> softmax -> reshape
    "softmax-11-inner-axis": (one_node_model("Softmax", ["x"], {}, [2, 3, 4, 4], 11, axis=1),
                              "flatten softmax reshape"),
    "gelu-tanh": (one_node_model("Gelu", ["x"], {}, [2, 3, 4, 4], 20, approximate="tanh"),
                  "opaque"),
    "slice-opset-1": (one_node_model("Slice", ["x"], {}, [2, 3, 2, 4], 1, starts=[1],
                                     ends=[3], axes=[2]), "slice"),
    "unsqueeze-opset-11": (one_node_model("Unsqueeze", ["x"], {}, [2, 1, 3, 4, 4], 11,
                                          axes=[1]), "unsqueeze"),
    "layernorm-no-bias": (one_node_model("LayerNormalization", ["x", "s"], {
        "s": np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(4, 4)}, [2, 3, 4, 4], 17,
        axis=2), "layernorm"),
    "batchnorm-opset-9": (one_node_model("BatchNormalization", ["x", "c", "c", "c", "c"], {
        "c": np.linspace(0.5, 1.5, 3, dtype=np.float32)}, [2, 3, 4, 4], 9, epsilon=0.01),
        "batchnorm"),
}


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_import_matches_onnxruntime(case):
    model, op = IMPORT_CASES[case]
    g = taso.load_onnx(model)
    ops = op_counts(g)
    del ops["identity"]
    assert ops == Counter(op.split()), ops
    feeds = g.random_inputs(2)
    assert rel_err(g.evaluate(feeds)[0], run_ort(model, feeds)[0]) <= REL_TOL


# ---- operators: fingerprints ------------------------------------------------------------
def _res(rng, shape):
    return rng.integers(0, P, shape).astype(np.int64)


def test_residues_of_floats_are_exact():
    assert residue(0.5) * 2 % P == 1
    assert residue(-1.5) * 2 % P == P - 3
    x = np.random.default_rng(0).integers(1, P, 200)
    assert np.all(x * inv_array(x) % P == 1)


def test_fingerprints_keep_the_identities_that_hold():
    rng = np.random.default_rng(0)
    x = _res(rng, (2, 3, 4, 5))
    # global average pooling is an average pool over the whole image, and a reduce-mean
    gap = OPS["global_avgpool"].fp({}, x)
    ap = OPS["avgpool2d"].fp({"kernel": (4, 5), "strides": (1, 1), "pads": (0, 0, 0, 0),
                              "count_include_pad": 1}, x)
    rm = OPS["reduce_mean"].fp({"axes": (2, 3), "keepdims": 1}, x)
    np.testing.assert_array_equal(gap, ap)
    np.testing.assert_array_equal(gap, rm)
    # softmax rows sum to one
    sm = OPS["softmax"].fp({"axis": -1}, x)
    assert np.all(sm.sum(axis=-1) % P == 1)
    # layer norm ignores a constant added along the normalized axis
    s, b = _res(rng, (5,)), _res(rng, (5,))
    ln = OPS["layernorm"]
    a = {"axis": -1, "epsilon": 1e-5}
    np.testing.assert_array_equal(ln.fp(a, x, s, b), ln.fp(a, (x + 17) % P, s, b))
    # batch norm is per channel: it commutes with a channel concat of its parameters
    bn, ab = OPS["batchnorm"], {"epsilon": 1e-5}
    ps = [_res(rng, (3,)) for _ in range(4)]
    whole = bn.fp(ab, x, *ps)
    np.testing.assert_array_equal(whole[:, :1], bn.fp(ab, x[:, :1], *(p[:1] for p in ps)))
    # gemm without C and alpha 1 is the matrix product
    m1, m2 = _res(rng, (4, 6)), _res(rng, (6, 3))
    np.testing.assert_array_equal(
        OPS["gemm"].fp({"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0}, m1, m2),
        OPS["matmul"].fp({"activation": "none"}, m1, m2))
    # data movement is the same under both semantics
    for name, attrs in (("pad", {"pads": (0, 1, 0, 2, 0, 0, 1, 0), "value": 0.0}),
                        ("slice", {"starts": (1,), "ends": (4,), "axes": (3,), "steps": (2,)}),
                        ("flatten", {"axis": 2})):
        np.testing.assert_array_equal(OPS[name].fp(attrs, x), OPS[name].ref(attrs, x))


def test_fingerprints_tell_non_linear_ops_apart():
    x = _res(np.random.default_rng(1), (64,))
    outs = [OPS[n].fp({}, x) for n in ("erf", "gelu", "relu", "sigmoid", "tanh")]
    outs += [OPS["clip"].fp({"min": lo, "max": hi}, x)
             for lo, hi in ((0.0, 6.0), (0.0, math.inf), (-1.0, 1.0))]
    assert len({o.tobytes() for o in outs}) == len(outs)


# ---- models ---------------------------------------------------------------------------
def test_all_lists_the_eight_models():
    assert sorted(M.ALL) == sorted(["resnet50", "resnext50", "inception_v3", "squeezenet",
                                    "nasnet_a", "nasrnn", "bert_base", "mobilenet_v2"])


@pytest.mark.parametrize("name", sorted(M.ALL))
def test_small_model_matches_onnxruntime(name):
    g = M.ALL[name](small=True)
    assert g.outputs and op_counts(g)["opaque"] == 0
    assert max_rel_err_vs_ort(g) <= REL_TOL
    # activations stay O(1) on inputs other than the batch-norm calibration ones
    out = g.evaluate(seed=3)[0].astype(np.float64)
    assert 1e-2 < float(np.sqrt((out ** 2).mean())) < 1e2
    # export then import gives back the same graph (opset 20 keeps Gelu whole)
    assert taso.load_onnx(taso.export_onnx(g, opset=20)).hash() == g.hash()


@pytest.mark.parametrize("name", sorted(M.ALL))
def test_batch_size_is_the_leading_dimension(name):
    g1, g3 = M.ALL[name](small=True), M.ALL[name](batch_size=3, small=True)
    assert [n.shapes[0][0] for n in g3.inputs] == [3] * len(g3.inputs)
    assert [g3.nodes[i].shapes[k][0] for i, k in g3.outputs] == [3] * len(g3.outputs)
    assert op_counts(g1) == op_counts(g3)
    assert max_rel_err_vs_ort(g3) <= REL_TOL


def test_builders_are_deterministic():
    a, b = M.mobilenet_v2(small=True), M.mobilenet_v2(small=True)
    assert a.hash() == b.hash()
    assert all(np.array_equal(x.data, y.data) for x, y in zip(a.weights, b.weights))
    c = M.mobilenet_v2(small=True, seed=1)
    assert not all(np.array_equal(x.data, y.data) for x, y in zip(a.weights, c.weights))


def learned_parameters(g: taso.Graph) -> int:
    """Weight elements less batch-norm running statistics (which frameworks count
    as buffers, not parameters)."""
    stats = {n.inputs[k][0] for n in g.nodes.values() if n.op == "batchnorm" for k in (3, 4)}
    return sum(n.data.size for n in g.weights if n.id not in stats)


# Published parameter counts (torchvision's implementations; Inception-v3 without its
# auxiliary classifier; BERT-base's encoder without embeddings, plus our one 1/sqrt(d)
# scalar per layer; NasRNN's 16 512x512 matrices) and known operator counts.
FULL_SIZE = {
    "resnet50": (25_557_032, {"conv2d": 53, "batchnorm": 53, "relu": 49, "gemm": 1}),
    "resnext50": (25_028_904, {"conv2d": 53, "batchnorm": 53, "relu": 49, "gemm": 1}),
    "inception_v3": (23_834_568, {"conv2d": 94, "batchnorm": 94, "concat": 11}),
    "squeezenet": (1_235_496, {"conv2d": 26, "concat": 8, "maxpool2d": 3}),
    "mobilenet_v2": (3_504_872, {"conv2d": 52, "batchnorm": 52, "clip": 35, "ewadd": 10}),
    "bert_base": (85_054_464 + 12, {"layernorm": 24, "softmax": 12, "gelu": 12}),
    "nasrnn": (16 * 512 * 512, {"matmul": 80, "tanh": 40, "sigmoid": 25}),
    # NASNet-A mobile: 5.3M in the paper; 16 cells (12 normal, 2 + 2 reduction) and 4
    # factorized reductions, each ending in a concat
    "nasnet_a": (5_300_000, {"concat": 20, "pad": 4, "slice": 4}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(M.ALL))
def test_full_size_model(name):
    g = M.ALL[name]()
    params, counts = FULL_SIZE[name]
    if name == "nasnet_a":
        assert abs(learned_parameters(g) - params) / params < 0.01
    else:
        assert learned_parameters(g) == params
    got = op_counts(g)
    assert {k: got[k] for k in counts} == counts
    assert max_rel_err_vs_ort(g) <= REL_TOL
