"""ONNX import and export: models from the onnx package's backend test data round-trip
through the IR (load, export, onnxruntime gives the original's outputs), opaque
operators keep their meaning, pads are exact, and broken models are ModelErrors."""

from __future__ import annotations

import importlib
import os
import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import (
    LIGHT,
    LIGHT_MODELS,
    LIGHT_SMALL,
    assert_same,
    light_model,
    model_of,
    random_feeds,
    round_trip,
    run,
    session,
    vi,
    with_random_weights,
)

import taso
from taso.ir import run_node


# ---- the light models ------------------------------------------------------------
@pytest.mark.parametrize("name", LIGHT_SMALL)
def test_light_model_round_trips_with_random_weights(name):
    model = with_random_weights(light_model(name))
    feeds = random_feeds(model)
    g = round_trip(model, feeds)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    assert sum(n.op == "conv2d" for n in g.nodes.values()) == convs


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_round_trips(name):
    model = light_model(name)
    g = round_trip(model, random_feeds(model))
    assert sum(n.op == "conv2d" for n in g.nodes.values()) == \
        sum(n.op_type == "Conv" for n in model.graph.node)


def _backend_models() -> list[str]:
    data = os.path.dirname(LIGHT)
    return sorted(os.path.join(data, kind, case, "model.onnx")
                  for kind in ("simple", "pytorch-operator", "pytorch-converted")
                  for case in os.listdir(os.path.join(data, kind))
                  if os.path.exists(os.path.join(data, kind, case, "model.onnx")))


@pytest.mark.slow
def test_onnx_backend_models_optimize_or_are_refused_by_name():
    # onnx's own small test models, as a user might hand them over: each one
    # onnxruntime runs on random inputs is optimized and checked, or refused with
    # a ModelError; nothing else may escape.
    from taso.optimizer.check import EquivalenceError, compare_outputs, run_onnx
    from taso.optimizer.search import resolve_rules, run_search
    rules = resolve_rules(None)
    checked, refused = [], []
    for path in _backend_models():
        model = onnx.load(path)
        try:
            g = taso.load_onnx(model)
        except taso.ModelError:
            refused.append(path)
            continue
        feeds = g.random_inputs(0)
        try:
            expected = run_onnx(model, feeds)
        except Exception:
            continue  # an old opset, a locale, a shape fed as data: not ours to run
        out = taso.export_onnx(run_search(g, budget=20, rules=rules, cost_model="analytic").graph)
        try:
            compare_outputs(expected, run_onnx(out, feeds))
        except EquivalenceError as e:
            raise AssertionError(f"{path}: {e}") from None
        checked.append(path)
    assert len(checked) > 60 and len(refused) < 10, (len(checked), refused)


def test_light_folder_holds_models():
    assert len(LIGHT_MODELS) >= 8 and set(LIGHT_SMALL) <= set(LIGHT_MODELS)


# ---- the onnx package's node tests ------------------------------------------------
# Modules of onnx.backend.test.case.node: ours and many we do not know (opaque).
NODE_MODULES = [
    "conv", "averagepool", "maxpool", "add", "sub", "mul", "div", "relu", "sigmoid", "tanh",
    "matmul", "concat", "split", "transpose", "reshape", "gemm", "softmax", "flatten",
    "squeeze", "unsqueeze", "identity", "abs", "gather", "where", "cast", "lrn", "topk",
    "argmax", "cumsum", "expand", "tile", "if_", "loop", "einsum", "nonzero",
    "constantofshape", "rangeop", "leakyrelu", "lstm", "shape", "size", "hardmax",
]


def _node_cases(modules: list[str] | None):
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if modules is None:
            return list(node_cases.collect_testcases(None))
        node_cases._TargetOpType = None
        for m in modules:  # importing a module records its cases
            importlib.import_module(f"onnx.backend.test.case.node.{m}")
        return list(node_cases._NodeTestCases)


def _case_feeds(case) -> dict[str, np.ndarray]:
    inits = {t.name for t in case.model.graph.initializer}
    names = [v.name for v in case.model.graph.input if v.name not in inits]
    return dict(zip(names, case.data_sets[0][0]))


def _original_outputs(case):
    """The original model's outputs in onnxruntime, or None where it cannot run it
    or runs it nondeterministically."""
    try:
        s = session(case.model)
        feeds = _case_feeds(case)
        a, b = s.run(None, feeds), s.run(None, feeds)
    except Exception:
        return None
    if not all(isinstance(x, np.ndarray) for x in a):
        return None  # sequences and friends
    same = all(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc") for x, y in zip(a, b))
    return a if same else None


@pytest.fixture(scope="module")
def node_cases():
    return [(c, _original_outputs(c)) for c in _node_cases(NODE_MODULES)]


def test_node_models_round_trip(node_cases):
    compared, opaque_only, failures = 0, 0, []
    for case, want in node_cases:
        if want is None:
            continue
        try:
            g = taso.load_onnx(case.model)
            got = run(taso.export_onnx(g), _case_feeds(case))
            assert_same(want, got)
        except Exception as e:
            failures.append(f"{case.name}: {type(e).__name__}: {str(e)[:200]}")
            continue
        compared += 1
        opaque_only += all(n.op in ("input", "weight", "opaque") for n in g.nodes.values())
    print(f"{compared} node models round-trip, {opaque_only} of them wholly opaque")
    assert not failures, "\n".join(failures)
    assert compared >= 150 and opaque_only >= 50, (compared, opaque_only)


def test_node_models_evaluate_in_the_ir(node_cases):
    # Graph.evaluate (float references and opaque nodes in onnxruntime) gives the
    # original's outputs too.
    checked = 0
    for case, want in node_cases:
        if want is None or case.name.startswith(("test_lstm", "test_loop", "test_if")):
            continue
        g = taso.load_onnx(case.model)
        assert_same(want, g.evaluate(_case_feeds(case)))
        checked += 1
    assert checked >= 150


# Why a node-test model may fail to load: types the IR has no place for, and
# shapes only the data decides (and onnxruntime fails on random data).
ALLOWED_LOAD_FAILURES = re.compile(
    r"is a (sequence|optional|map)_type|cannot determine the shape|cannot express Scan-8")


@pytest.mark.slow
def test_all_node_models_round_trip():
    ok = refused = 0
    failures = []
    for case in _node_cases(None):
        want = _original_outputs(case)
        if want is None:
            continue
        try:
            g = taso.load_onnx(case.model)
            got = run(taso.export_onnx(g), _case_feeds(case))
        except taso.ModelError as e:
            if ALLOWED_LOAD_FAILURES.search(str(e)):
                refused += 1
                continue
            failures.append(f"{case.name}: {e}")
            continue
        try:
            assert_same(want, got, rtol=1e-5, atol=1e-6)
            ok += 1
        except AssertionError as e:
            failures.append(f"{case.name}: {str(e)[:200]}")
    print(f"node models: {ok} round-trip, {refused} refused with a ModelError")
    assert not failures, "\n".join(failures)
    assert ok >= 1400


# ---- opaque operators ----------------------------------------------------------------
def test_unknown_ops_keep_domain_attributes_and_shapes():
    sub = helper.make_graph([helper.make_node("Neg", ["a"], ["b"])], "body",
                            [vi("a", [2])], [vi("b", [2])])
    attrs = dict(i=3, f=0.5, s="mode", ints=[1, 2], floats=[0.25], strings=["p", "q"],
                 t=numpy_helper.from_array(np.arange(3, dtype=np.int64)), g=sub)
    nodes = [helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Mystery", ["r"], ["y"], domain="com.example", **attrs),
             helper.make_node("NoSuchOp", ["r", "x"], ["z"], k=7)]  # default domain
    model = model_of(nodes, [vi("x", [2, 3])], [vi("y", [6]), vi("z", [2, 3])],
                     value_info=[vi("y", [6]), vi("z", [2, 3])],
                     extra=[helper.make_opsetid("com.example", 2)])
    g = taso.load_onnx(model)
    ops = sorted(n.a.get("onnx_type", n.op) for n in g.nodes.values())
    assert ops == ["Abs", "Mystery", "NoSuchOp", "input", "relu"]
    out = taso.export_onnx(g)
    by_type = {n.op_type: n for n in out.graph.node}
    for orig in nodes[2:]:
        n = by_type[orig.op_type]
        assert n.domain == orig.domain
        assert sorted(a.SerializeToString() for a in n.attribute) == \
            sorted(a.SerializeToString() for a in orig.attribute)
    assert ("com.example", 2) in [(o.domain, o.version) for o in out.opset_import]
    assert [(o.name, [d.dim_value for d in o.type.tensor_type.shape.dim])
            for o in out.graph.output] == [("y", [6]), ("z", [2, 3])]


def test_opaque_nodes_run_in_onnxruntime():
    # TopK (two outputs), Gather (int64 input), LSTM with its first output omitted,
    # Slice with an omitted optional input, and shape arithmetic folded to weights.
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1, 8, 3))
                                .astype(np.float32), "W")
    rw = numpy_helper.from_array(np.random.default_rng(1).standard_normal((1, 8, 2))
                                 .astype(np.float32), "R")
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["vals", "idx"], axis=1),
        helper.make_node("Gather", ["x", "ids"], ["gathered"], axis=1),
        helper.make_node("LSTM", ["seq", "W", "R"], ["", "h"], hidden_size=2),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "zero"], ["n"]),  # 1-D: [x.shape[0]]
        helper.make_node("Slice", ["x", "start", "n", "", "step"], ["sl"]),
    ]
    inits = [numpy_helper.from_array(np.array([2], np.int64), "k"), w, rw,
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "step")]
    model = model_of(nodes, [vi("x", [3, 4]), vi("ids", [2], TensorProto.INT64),
                             vi("seq", [5, 1, 3]), vi("start", [1], TensorProto.INT64)],
                     [vi("vals", None), vi("idx", None, TensorProto.INT64),
                      vi("gathered", None), vi("h", None), vi("sl", None)],
                     initializers=inits)
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32),
             "ids": np.array([3, 0], np.int64),
             "seq": np.random.default_rng(3).standard_normal((5, 1, 3)).astype(np.float32),
             "start": np.array([1], np.int64)}
    g = round_trip(model, feeds)
    assert g.nodes[[n.id for n in g.inputs if n.name == "ids"][0]].dtypes == ("int64",)
    # Shape -> Gather became a weight; Slice (a start known only at run time) stayed
    # opaque, with its hole.
    sl = [n for n in g.nodes.values() if n.a.get("onnx_type") == "Slice"][0]
    assert sl.a["absent"] == (3,)
    assert [g.nodes[p].op for p, _ in sl.inputs] == ["input", "input", "weight", "weight"]
    assert g.nodes[sl.inputs[2][0]].data.tolist() == [3]
    assert_same(run(model, feeds), g.evaluate(feeds))
    lstm = [n for n in g.nodes.values() if n.a.get("onnx_type") == "LSTM"][0]
    assert lstm.a["out_dtypes"][0] == ""
    xs = [feeds["seq"], g.nodes[lstm.inputs[1][0]].data, g.nodes[lstm.inputs[2][0]].data]
    assert_same(run(model, feeds)[3:4], run_node(lstm, xs)[1:])


def test_subgraphs_read_outer_tensors_after_export():
    then_g = helper.make_graph([helper.make_node("Add", ["r", "r"], ["t"])], "then", [],
                               [vi("t", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                               [vi("e", [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = model_of(nodes, [vi("x", [2, 3]), vi("c", [], TensorProto.BOOL)],
                     [vi("y", [2, 3])])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for c in (True, False):
        g = round_trip(model, {"x": x, "c": np.array(c)})
    assert "relu" in [n.op for n in g.nodes.values()]
    assert [n.a["outer"] for n in g.nodes.values() if n.op == "opaque"] == [("r",)]


# ---- exact attributes ----------------------------------------------------------------
@pytest.mark.parametrize("auto_pad,pads", [("SAME_UPPER", (0, 0, 1, 1)),
                                           ("SAME_LOWER", (1, 1, 0, 0)),
                                           ("VALID", (0, 0, 0, 0))])
def test_conv_auto_pad_becomes_exact_pads(auto_pad, pads):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 2, 2, 2))
                                .astype(np.float32), "w")
    b = numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], auto_pad=auto_pad, strides=[2, 2])
    model = model_of([node], [vi("x", [1, 2, 7, 7])], [vi("y", None)], initializers=[w, b])
    g = round_trip(model, random_feeds(model))
    conv = [n for n in g.nodes.values() if n.op == "conv2d"][0]
    assert conv.a["pads"] == pads and conv.a["activation"] == "none"
    assert sorted(n.op for n in g.nodes.values()) == \
        ["add", "conv2d", "input", "reshape", "weight", "weight"]


@pytest.mark.parametrize("op,kw", [("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
                                   ("AveragePool", {"count_include_pad": 1})])
def test_pool_auto_pad_becomes_exact_pads(op, kw):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                            auto_pad="SAME_UPPER", **kw)
    model = model_of([node], [vi("x", [1, 3, 7, 5])], [vi("y", None)])
    g = round_trip(model, random_feeds(model))
    pool = [n for n in g.nodes.values() if n.op.endswith("pool2d")][0]
    assert pool.a["pads"] == (1, 0, 1, 1)


def test_ceil_mode_and_dilated_pools_stay_opaque():
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["b"], kernel_shape=[2, 2], dilations=[2, 2])]
    model = model_of(nodes, [vi("x", [1, 1, 5, 5])], [vi("a", None), vi("b", None)], opset=13)
    g = round_trip(model, random_feeds(model))
    assert [n.op for n in g.nodes.values()] == ["input", "opaque", "opaque"]


# ---- opsets ------------------------------------------------------------------------
def _shape_model(opset: int) -> onnx.ModelProto:
    x = vi("x", [2, 6, 4])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    if opset < 13:
        nodes = [helper.make_node("Split", ["x"], ["s0", "s1"], axis=1, split=[2, 4]),
                 helper.make_node("Unsqueeze", ["s0"], ["u"], axes=[0]),
                 helper.make_node("Squeeze", ["u"], ["q"], axes=[0])]
        inits = []
    else:
        sizes = numpy_helper.from_array(np.array([2, 4], np.int64), "sizes")
        zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
        nodes = [helper.make_node("Split", ["x", "sizes"], ["s0", "s1"], axis=1),
                 helper.make_node("Unsqueeze", ["s0", "zero"], ["u"]),
                 helper.make_node("Squeeze", ["u", "zero"], ["q"])]
        inits = [sizes, zero]
    if opset >= 18:
        nodes.append(helper.make_node("ReduceMean", ["s1", "axes"], ["m"], keepdims=1))
        inits.append(axes)
    else:
        nodes.append(helper.make_node("ReduceMean", ["s1"], ["m"], axes=[1], keepdims=1))
    nodes.append(helper.make_node("Reshape", ["q", "shape"], ["r"]))
    inits.append(numpy_helper.from_array(np.array([0, -1], np.int64), "shape"))
    return model_of(nodes, [x], [vi("r", None), vi("m", None)], opset=opset,
                    initializers=inits)


@pytest.mark.parametrize("opset", [11, 13, 17, 18, 21])
def test_attribute_and_input_forms_across_opsets(opset):
    model = _shape_model(opset)
    g = round_trip(model, random_feeds(model))
    assert sorted(n.op for n in g.nodes.values() if n.op not in ("input", "weight")) == \
        ["reduce_mean", "reshape", "split", "squeeze", "unsqueeze"]
    reshape = [n for n in g.nodes.values() if n.op == "reshape"][0]
    assert reshape.a["shape"] == (2, 8)
    for target in (13, 18):
        assert_same(run(model, random_feeds(model)),
                    run(taso.export_onnx(g, opset=target), random_feeds(model)))


def test_equal_split_and_split_into_parts():
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3)]
    model = model_of(nodes, [vi("x", [2, 7])], [vi(n, None) for n in "abc"], opset=18)
    g = round_trip(model, random_feeds(model))
    split = [n for n in g.nodes.values() if n.op == "split"][0]
    assert split.a["sizes"] == (3, 3, 1) and split.a["axis"] == 1


# ---- names and dtypes ------------------------------------------------------------------
def test_names_order_and_dtypes_are_kept():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["r", "nf"], ["sum"])]
    model = model_of(nodes, [vi("x", [3]), vi("n", [3], TensorProto.INT64)],
                     [vi("sum", None), vi("x", None), vi("r", None), vi("n", None)])
    model.graph.output.append(vi("r2", None))
    model.graph.node.append(helper.make_node("Identity", ["r"], ["r2"]))
    feeds = {"x": np.array([-1, 0, 2], np.float32), "n": np.array([4, 5, 6], np.int64)}
    g = round_trip(model, feeds)
    out = taso.export_onnx(g)
    assert [i.name for i in out.graph.input] == ["x", "n"]
    assert out.graph.input[1].type.tensor_type.elem_type == TensorProto.INT64
    names = [o for n in out.graph.node for o in n.output] + \
        [t.name for t in out.graph.initializer] + [i.name for i in out.graph.input]
    assert len(names) == len(set(names)), "every tensor name is unique"


def test_builder_graph_exports_valid_onnx():
    g = taso.new_graph(seed=1)
    x = g.new_input((1, 3, 8, 8), "x")
    w = g.new_weight((4, 3, 3, 3), name="x")  # a weight clashing with the input name
    y = g.conv2d(x, w, padding="SAME", activation="relu")
    a, b = g.split(y, axis=1, sizes=[1, 3])
    g.mark_output(g.concat(1, [b, a]), "out")
    g.mark_output(w, "kernel")
    m = taso.export_onnx(g)
    onnx.checker.check_model(m, full_check=True)
    feeds = g.random_inputs()
    assert_same(g.evaluate(feeds), run(m, feeds))
    assert_same(run(m, feeds), run(taso.export_onnx(taso.load_onnx(m)), feeds))


def test_export_writes_to_a_path_and_names_bad_arguments(tmp_path):
    g = taso.new_graph()
    g.mark_output(g.relu(g.new_input((2, 3), "x")), "y")
    path = tmp_path / "out.onnx"
    m = taso.export_onnx(g, path, opset=18)
    assert onnx.load(path) == m and m.opset_import[0].version == 18
    taso.export_onnx(g, str(tmp_path / "again.onnx"))
    assert taso.load_onnx(tmp_path / "again.onnx").hash() == g.hash()
    with pytest.raises(taso.ModelError, match=r"path must be a file path, got 17 "
                                              r"\(the opset is a keyword"):
        taso.export_onnx(g, 17)
    with pytest.raises(taso.ModelError, match="opset must be an integer, got '17'"):
        taso.export_onnx(g, opset="17")
    with pytest.raises(taso.ModelError, match="takes a taso Graph, got ModelProto"):
        taso.export_onnx(m)
    for opset in (12, onnx.defs.onnx_opset_version() + 1):
        with pytest.raises(taso.ModelError, match=rf"opset {opset} is outside what taso writes"):
            taso.export_onnx(g, opset=opset)


def test_duplicate_graph_inputs_are_refused_and_repeated_outputs_kept():
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    # Refused before any shape is read: a symbolic or a rank mismatch would mislead.
    for second in ([2], ["N"], [2, 2]):
        with pytest.raises(taso.ModelError, match="two graph inputs are named 'x'"):
            taso.load_onnx(model_of(relu, [vi("x", [2]), vi("x", second)], [vi("y", [2])]))
    # ONNX lets a graph list one output twice; onnxruntime returns it twice.
    for outs, nodes in ((["y", "y"], relu), (["x", "x"], [])):
        model = model_of(nodes, [vi("x", [2])], [vi(o, [2]) for o in outs])
        out = taso.export_onnx(taso.load_onnx(model))
        assert [o.name for o in out.graph.output] == outs
        feeds = {"x": np.array([-1, 2], np.float32)}
        assert_same(run(model, feeds), run(out, feeds))
