"""The graph IR and builder: shapes, errors, canonical hashing, evaluation."""

import numpy as np
import pytest
from cost_graphs import fan_out

import taso


def _two_branch(order: int) -> taso.Graph:
    g = taso.new_graph(seed=3)
    x = g.new_input(dims=(1, 4, 8, 8), name="x")
    w1 = g.new_weight(dims=(4, 4, 3, 3), name="w1")
    w2 = g.new_weight(dims=(4, 4, 1, 1), name="w2")
    if order == 0:
        a = g.conv2d(input=x, weight=w1, padding="SAME", activation="RELU")
        b = g.conv2d(input=x, weight=w2)
    else:
        b = g.conv2d(input=x, weight=w2)
        a = g.conv2d(input=x, weight=w1, padding="SAME", activation="RELU")
    g.mark_output(g.add(a, b))
    return g


def test_hash_is_independent_of_node_order():
    assert _two_branch(0).hash() == _two_branch(1).hash()


def test_hash_depends_on_attributes_and_outputs():
    g = _two_branch(0)
    h = taso.new_graph()
    x = h.new_input(dims=(1, 4, 8, 8), name="x")
    h.mark_output(h.relu(x))
    k = taso.new_graph()
    x = k.new_input(dims=(1, 4, 8, 8), name="x")
    k.mark_output(k.sigmoid(x))
    assert len({g.hash(), h.hash(), k.hash()}) == 3


def test_builder_shapes_and_same_padding():
    g = taso.new_graph()
    x = g.new_input(dims=(2, 3, 9, 9))
    w = g.new_weight(dims=(6, 3, 3, 3))
    y = g.conv2d(input=x, weight=w, strides=(2, 2), padding="SAME")
    assert y.shape == (2, 6, 5, 5)
    assert g.nodes[y.node].a["pads"] == (1, 1, 1, 1)
    p = g.maxpool2d(y, kernel=(2, 2), strides=(2, 2), padding="VALID")
    assert p.shape == (2, 6, 2, 2)
    parts = g.split(p, axis=1, sizes=[2, 4])
    assert [t.shape for t in parts] == [(2, 2, 2, 2), (2, 4, 2, 2)]
    assert g.concat(1, parts).shape == p.shape
    assert g.transpose(p, perm=(0, 2, 3, 1)).shape == (2, 2, 2, 6)


def test_shape_errors_name_the_op_and_shapes():
    g = taso.new_graph()
    a = g.new_input(dims=(3, 4))
    b = g.new_input(dims=(5, 6))
    with pytest.raises(taso.ShapeError, match=r"matmul\(3x4, 5x6\).*inner"):
        g.matmul(a, b)
    with pytest.raises(taso.ShapeError, match=r"ewadd\(3x4, 5x6\)"):
        g.ewadd(a, b)


def test_evaluate_matches_numpy():
    g = taso.new_graph()
    a = g.new_input(dims=(3, 4), name="a")
    b = g.new_weight(dims=(4, 2), name="b")
    g.mark_output(g.matmul(a, b, activation="relu"))
    av = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (out,) = g.evaluate({"a": av})
    np.testing.assert_allclose(out, np.maximum(av @ g.weights[0].data, 0), rtol=1e-6)


def test_pruned_drops_dead_nodes():
    g = taso.new_graph()
    x = g.new_input(dims=(2, 2))
    g.relu(x)  # dead
    g.mark_output(g.tanh(x))
    p = g.pruned()
    assert p.num_ops() == 1 and p.hash() == g.hash()


def test_values_evaluates_what_is_asked_and_what_it_reads_once():
    g = taso.new_graph()
    x = g.new_input(dims=(2, 2), name="x")
    t = g.tanh(x)
    r = g.relu(t)
    g.mark_output(g.sigmoid(t))
    seen = []

    def apply(n, xs):
        seen.append(n.op)
        return taso.ir.run_node(n, xs)

    xv = np.arange(4, dtype=np.float32).reshape(2, 2)
    memo = {}
    vals = g.values([r.node], {"x": xv}, apply, memo=memo)
    assert seen == ["tanh", "relu"] and vals is memo
    np.testing.assert_array_equal(vals[r.node][0], np.maximum(np.tanh(xv), 0))
    g.values([r.node, t.node], {"x": xv}, apply, memo=memo)
    assert seen == ["tanh", "relu"]  # known values are not computed again
    with pytest.raises(KeyError, match="no value fed for input 'x'"):
        g.run({})


def test_constant_nodes_are_known_before_the_model_runs():
    g = taso.new_graph()
    x = g.new_input(dims=(4, 4))
    w1, w2 = g.new_weight(dims=(4, 4)), g.new_weight(dims=(4, 4))
    k = g.concat(1, [w1, w2])  # computed from weights alone
    y = g.matmul(x, k)  # reads an activation
    one = g.add_node("const_one", [], shape=(4, 8))[0]  # a constant generator
    g.mark_output(g.ewadd(y, one))
    const = g.constant_nodes()
    assert const == {w1.node, w2.node, k.node, one.node}
    assert all(taso.ir.is_constant(g.nodes[i], const) == (i in const) for i in g.nodes)


def test_opaque_nodes_are_constant_only_for_the_loader_and_never_random():
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    reps = numpy_helper.from_array(np.array([2, 1], np.int64), "reps")
    nodes = [helper.make_node("Tile", ["c", "reps"], ["big"]),  # opaque, on weights, grows
             helper.make_node("RandomNormalLike", ["big"], ["noise"]),  # opaque, random
             helper.make_node("Add", ["x", "big"], ["s"]),
             helper.make_node("Add", ["s", "noise"], ["y"])]
    xy = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 3]) for n in "xy"]
    graph = helper.make_graph(nodes, "g", xy[:1], xy[1:], [c, reps])
    g = taso.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    opaque = {g.nodes[i].a["onnx_type"]: i for i in g.nodes if g.nodes[i].op == "opaque"}
    assert set(opaque) == {"Tile", "RandomNormalLike"}  # a growing Tile is not folded at load
    assert opaque["Tile"] in g.constant_nodes(opaque=True)
    assert opaque["Tile"] not in g.constant_nodes()  # never folded after the search
    assert opaque["RandomNormalLike"] not in g.constant_nodes(opaque=True)


def test_hash_is_the_same_in_every_process():
    import os
    import subprocess
    import sys

    import taso.models as M

    code = "import taso.models as M; print(M.ALL['squeezenet'](small=True).hash())"
    here = M.ALL["squeezenet"](small=True).hash()
    for seed in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed},
                             check=True).stdout.strip()
        assert out == here


def test_deduplicated_computes_identical_nodes_once():
    g = fan_out(3)
    d = g.deduplicated()
    relus = [n for n in d.nodes.values() if n.op == "relu"]
    assert [n.op for n in g.nodes.values()].count("relu") == 3 and len(relus) == 1
    # every consumer now reads the first relu; ids are the original graph's
    readers = [n for n in d.nodes.values() if n.op == "conv2d" and n.inputs[0][0] != 0]
    assert len(readers) == 3 and all(n.inputs[0] == (relus[0].id, 0) for n in readers)
    assert set(d.nodes) <= set(g.nodes) and d.outputs == g.outputs
    assert d.num_ops() == g.num_ops() - 2
    feeds = g.random_inputs(seed=0)
    for a, b in zip(g.evaluate(feeds), d.evaluate(feeds)):
        np.testing.assert_array_equal(a, b)


def test_deduplicated_keeps_outputs_weights_and_different_attributes_apart():
    g = taso.new_graph()
    x = g.new_input((2, 8))
    w1, w2 = g.new_weight((8, 8)), g.new_weight((8, 8))  # distinct weights, same shape
    a, b = g.matmul(x, w1), g.matmul(x, w2)
    g.mark_output(g.relu(a))
    g.mark_output(g.relu(a))  # two outputs: each stays a node of its own
    g.mark_output(g.matmul(x, w1, activation="relu"))  # other attributes
    g.mark_output(b)
    d = g.deduplicated()
    assert d.num_ops() == g.num_ops()
