"""The graph IR and builder: shapes, errors, canonical hashing, evaluation."""

import numpy as np
import pytest

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
