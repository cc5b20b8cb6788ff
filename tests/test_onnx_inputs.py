"""ONNX models with symbolic dims load at a representative binding and stay
symbolic; input shapes given by the caller are checked; broken models and
unwritable paths are ModelErrors with one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import assert_same, light_model, model_of, run, vi, with_random_weights

import taso


# ---- symbolic dimensions -------------------------------------------------------------
def _symbolic_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    return model_of([helper.make_node("MatMul", ["x", "w"], ["y"])], [x],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                    initializers=[w])


def test_symbolic_dims_load_at_a_representative_binding_and_stay_symbolic():
    model = _symbolic_model()
    g = taso.load_onnx(model)  # no binding needed: a batch-like dim is searched at 1
    assert g.inputs[0].shapes == ((1, 4),) and g.dim_params == {"x": ("batch", None)}
    assert "searched at batch=1" in g.notes[0]
    exported = taso.export_onnx(g)
    assert exported.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 5):  # the export runs at any batch
        feeds = {"x": np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)}
        assert_same(run(model, feeds), run(exported, feeds))
    g = taso.load_onnx(model, input_shapes={"x": [3, 4]})  # the binding searched at
    assert g.inputs[0].shapes == ((3, 4),) and g.dim_params == {"x": ("batch", None)}
    g = taso.load_onnx(model, input_shapes={"x": [3, 4]}, static=True)
    assert g.inputs[0].shapes == ((3, 4),) and not g.dim_params
    assert taso.export_onnx(g).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    assert_same(run(model, feeds), run(taso.export_onnx(g), feeds))
    with pytest.raises(taso.ModelError, match=r"input 'x' dim 1 is 4 in the model"):
        taso.load_onnx(model, input_shapes={"x": [3, 5]})
    with pytest.raises(taso.ModelError, match=r"not graph inputs"):
        taso.load_onnx(model, input_shapes={"nope": [1]})


def test_a_node_that_reads_the_bound_value_stays_as_written():
    # view(N, -1) as torch exports it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "rest"], ["t"], axis=0),
             helper.make_node("Reshape", ["r", "t"], ["y"])]
    model = model_of(nodes, [x], [y], initializers=inits)
    g = taso.load_onnx(model)
    ops = [n.a.get("onnx_type", n.op) for n in g.topo_order() if n.op not in ("input", "weight")]
    assert ops == ["relu", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape"]
    assert g.output_dim_params == {"y": ("N", None)}
    static = taso.load_onnx(model, static=True)  # folded at N=1
    assert [n.op for n in static.topo_order() if n.op not in ("input", "weight")] == \
        ["relu", "reshape"]
    out = taso.export_onnx(g)
    for n in (1, 4):
        feeds = {"x": np.random.default_rng(n).standard_normal((n, 2, 3)).astype(np.float32)}
        assert_same(run(model, feeds), run(out, feeds))


def _two_batch_inputs() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])
    return model_of([helper.make_node("Add", ["x", "z"], ["y"])], [x, z],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])


def test_a_named_dim_binds_every_input_that_shares_it():
    g = taso.load_onnx(_two_batch_inputs(), input_shapes={"x": [3, 4]})
    assert [t.shapes for t in g.inputs] == [((3, 4),), ((3, 4),)]
    with pytest.raises(taso.ModelError,
                       match=r"dimension 'batch' is 3 in input 'x' but 5 in input 'z'"):
        taso.load_onnx(_two_batch_inputs(), input_shapes={"x": [3, 4], "z": [5, 4]})


@pytest.mark.parametrize("shapes", [{"x": "34"}, {"x": 3}, {"x": [3.5, 4]}, {"x": [True, 4]},
                                    {"x": [-1, 4]}, {"x": None}, {"x": np.array(3)},
                                    {"x": np.array([[3, 4]])}])
def test_input_shapes_values_are_checked(shapes):
    with pytest.raises(taso.ModelError, match=r"input_shapes\['x'\] must be a sequence "
                                              r"of non-negative ints"):
        taso.load_onnx(_symbolic_model(), input_shapes=shapes)


def test_input_shapes_is_a_mapping_of_input_names():
    assert taso.load_onnx(_symbolic_model(), input_shapes={"x": np.array([3, 4])}
                          ).inputs[0].shapes == ((3, 4),)
    with pytest.raises(taso.ModelError, match="input_shapes must map input names"):
        taso.load_onnx(_symbolic_model(), input_shapes=[("x", [3, 4])])
    with pytest.raises(taso.ModelError, match=r"names 'y', 0, which are not graph"):
        taso.load_onnx(_symbolic_model(), input_shapes={"x": [3, 4], "y": [1], 0: [1]})


# ---- broken models ----------------------------------------------------------------------
def _relu_model() -> onnx.ModelProto:
    return model_of([helper.make_node("Relu", ["x"], ["r"]),
                     helper.make_node("Neg", ["r"], ["y"])], [vi("x", [2])], [vi("y", [2])])


def test_truncated_file_is_a_model_error(tmp_path):
    data = with_random_weights(light_model("light_squeezenet.onnx")).SerializeToString()
    path = tmp_path / "cut.onnx"
    for cut in (len(data) // 2, len(data) - 7, 40):
        path.write_bytes(data[:cut])
        with pytest.raises(taso.ModelError, match=r"truncated|malformed|reads|not produced"):
            taso.load_onnx(str(path))
    with pytest.raises(taso.ModelError, match="no such model file"):
        taso.load_onnx(str(tmp_path / "absent.onnx"))
    with pytest.raises(taso.ModelError, match="cannot parse"):
        taso.load_onnx(b"\xff\xff\xff not a model")


def test_cycle_is_a_model_error():
    model = model_of([helper.make_node("Add", ["x", "b"], ["a"]),
                      helper.make_node("Relu", ["a"], ["b"])], [vi("x", [2])], [vi("b", [2])])
    with pytest.raises(taso.ModelError, match=r"cycle through node #0 \(Add\)"):
        taso.load_onnx(model)


def test_missing_input_and_undefined_tensor_are_model_errors():
    model = _relu_model()
    del model.graph.input[:]
    with pytest.raises(taso.ModelError, match=r"node #0 \(Relu\) reads 'x', which is not"):
        taso.load_onnx(model)
    model = _relu_model()
    model.graph.node[1].input[0] = "ghost"
    with pytest.raises(taso.ModelError, match=r"reads 'ghost'"):
        taso.load_onnx(model)
    model = _relu_model()
    model.graph.output[0].name = "nowhere"
    with pytest.raises(taso.ModelError, match=r"graph output 'nowhere' is not produced"):
        taso.load_onnx(model)


def test_wrong_arity_is_a_model_error():
    model = _relu_model()
    model.graph.node[0].input.append("x")
    with pytest.raises(taso.ModelError, match=r"has 2 inputs; Relu-\d+ takes 1 to 1"):
        taso.load_onnx(model)


def test_save_model_is_atomic_and_names_the_path(tmp_path):
    from taso.errors import ModelError
    from taso.onnx_io import save_model
    g = taso.new_graph()
    g.mark_output(g.relu(g.new_input((2, 3), name="x")), "y")
    m = taso.export_onnx(g)
    path = tmp_path / "m.onnx"
    save_model(m, path)
    assert onnx.load(path) == m
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary left behind
    with pytest.raises(ModelError, match="nofolder"):
        save_model(m, tmp_path / "nofolder" / "m.onnx")


def test_a_failed_atomic_write_keeps_what_was_there(tmp_path):
    from taso.files import atomic_path
    path = tmp_path / "rules.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        open(tmp, "w").write("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["rules.json"]
    path.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with atomic_path(link) as tmp:  # through the link, keeping the file's mode
        open(tmp, "w").write("new")
    assert path.read_text() == "new" and link.is_symlink()
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "rules.json"]


def test_read_model_names_what_it_accepts():
    from taso.errors import ModelError
    from taso.onnx_io import read_model
    with pytest.raises(ModelError, match="model path, serialized bytes or an onnx.ModelProto"):
        read_model(123)


def test_random_inputs_cover_every_input_dtype():
    g = taso.new_graph()
    g.new_input((2,), name="s", dtype="string")
    g.new_input((2,), name="i", dtype="int64")
    feeds = g.random_inputs(0)
    assert feeds["s"].tolist() == ["a", "a"] and set(feeds["i"].tolist()) <= {0, 1}
