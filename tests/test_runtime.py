"""onnxruntime in one place (taso.runtime) and every closeness test in one place
(taso.tolerance)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import taso
from taso import runtime
from taso.tolerance import (
    AXIOM_RTOL,
    MODEL_ATOL,
    MODEL_RTOL,
    elementwise_errors,
    relative_error,
    scaled_mismatch,
)


def _relu(default: np.ndarray | None = None):
    """y = relu(x) (+ b, an overridable initializer, when `default` is given)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    inits = []
    if default is None:
        nodes[0].output[0] = "y"
    else:
        nodes.append(helper.make_node("Add", ["r", "b"], ["y"]))
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3]))
        inits.append(numpy_helper.from_array(default, "b"))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sessions_take_a_model_its_bytes_or_a_path(tmp_path):
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    model = _relu()
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    for src in (model, model.SerializeToString(), tmp_path / "m.onnx", str(tmp_path / "m.onnx")):
        assert np.array_equal(runtime.session(src).run(None, {"x": x})[0], np.maximum(x, 0))


def test_settings_say_threads_optimization_and_logging():
    so = runtime.session_options()
    assert so.intra_op_num_threads == 1 and so.log_severity_level == 4
    assert so.graph_optimization_level.name == "ORT_ENABLE_ALL"
    assert runtime.session_options(optimize=False).graph_optimization_level.name == \
        "ORT_DISABLE_ALL"
    assert runtime.session_options(None).intra_op_num_threads == 0  # onnxruntime's default
    bench = runtime.benchmark_options(3)
    assert (bench.intra_op_num_threads, bench.log_severity_level) == (3, 3)
    assert bench.execution_mode.name == "ORT_SEQUENTIAL"


def test_a_run_feeds_what_the_session_takes_overridable_initializers_too():
    x = np.ones((2, 3), np.float32)
    model = _relu(default=np.full((2, 3), 5, np.float32))
    assert np.array_equal(runtime.run(model, {"x": x, "unrelated": x})[0], x + 5)
    assert np.array_equal(runtime.run(model, {"x": x, "b": x})[0], 2 * x)  # overridden
    sess = runtime.session(model)
    assert runtime.accepted(sess, {"x": 1, "b": 2, "c": 3}) == {"x": 1, "b": 2}


def test_onnxruntimes_optimized_graph_is_read_back():
    c = numpy_helper.from_array(np.ones((2, 3), np.float32), "c")
    nodes = [helper.make_node("Add", ["c", "c"], ["c2"]),
             helper.make_node("Add", ["x", "c2"], ["y"])]
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "xy")
    graph = helper.make_graph(nodes, "g", [x], [y], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = runtime.session_options()
    folded = runtime.optimized_model(model, so)
    assert [n.op_type for n in folded.graph.node] == ["Add"]  # c + c folded into a constant
    assert so.optimized_model_filepath == ""  # named in the options only meanwhile


def test_runner_times_a_one_node_model():
    run = runtime.Runner(runtime.session(_relu(), runtime.benchmark_options(1)),
                         {"x": -np.ones((2, 3), np.float32)})
    assert len(runtime.time_runs(run, warmup=1, repeats=4)) == 4
    assert runtime.median_ms(run, warmup=0, repeats=3) > 0
    ms = runtime.time_interleaved({"a": run, "b": run}, rounds=2, round_ms=1.0, threads=1)
    assert set(ms) == {"a", "b"} and min(ms.values()) > 0
    assert runtime.balanced_order("abc", 0) == list("abc")
    assert runtime.balanced_order("abc", 1) == list("cba")
    # One session against itself: never "faster"; the time limit counts from
    # the rounds an interval needs (8 at 99%).
    v = runtime.compare_interleaved([run], [run], max_seconds=0.0, round_ms=0.5)
    assert v.verdict in ("not faster", "undecided") and v.rounds >= 8
    assert v.low <= v.ratio <= v.high and v.a_ms > 0 and v.b_ms > 0
    with pytest.raises(ValueError):
        runtime.compare_interleaved([run], [run], min_rounds=0)



# ---- deciding an A/B comparison ---------------------------------------------------------
def test_the_median_interval_is_the_sign_tests():
    # n = 20 at 95%: the 6th smallest and the 6th largest (the sign test's table).
    values = [float(v) for v in np.random.default_rng(0).permutation(np.arange(1, 21))]
    assert runtime.median_interval(values, 0.95) == (6.0, 15.0)
    # The smallest n with an interval: 6 at 95% (2 / 2**6 <= 5%), 8 at 99%.
    assert runtime.median_interval([1.0] * 5, 0.95) is None
    assert runtime.median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0], 0.95) == (1.0, 6.0)
    assert runtime.median_interval(list(range(7)), 0.99) is None
    assert runtime.median_interval([2, 8, 1, 7, 3, 6, 4, 5], 0.99) == (1, 8)
    # More rounds narrow it; it always holds the sample median.
    wide = runtime.median_interval(values, 0.99)
    assert wide[0] < 6 and wide[1] > 15 and wide[0] <= 10.5 <= wide[1]
    assert runtime.median_interval([], 0.99) is None


def test_an_interval_decides_only_when_it_clears_the_bar():
    assert runtime.decide((0.90, 0.98), margin=0.01) == "faster"
    assert runtime.decide((0.992, 1.05), margin=0.01) == "not faster"
    assert runtime.decide((0.97, 1.01), margin=0.01) is None  # straddles 0.99
    assert runtime.decide((0.97, 0.995), margin=0.01) is None
    assert runtime.decide(None, margin=0.01) is None
    assert runtime.Verdict("unchanged").to_json()["verdict"] == "unchanged"


def _package_files() -> list[Path]:
    root = Path(taso.__file__).parent
    return [Path(d) / f for d, _, fs in os.walk(root, followlinks=True) for f in fs
            if f.endswith(".py")]


def test_only_the_runtime_module_creates_sessions():
    makers = set()
    for f in _package_files():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "InferenceSession" or \
                    isinstance(node, ast.Name) and node.id == "InferenceSession":
                makers.add(f.name if f.parent.name == "taso" else f"{f.parent.name}/{f.name}")
    assert makers == {"runtime.py"}


# ---- tolerances ------------------------------------------------------------------------------
def test_elementwise_tolerance_is_the_stated_one():
    a = np.array([0.0, 1.0, 100.0, np.inf, np.nan], np.float32)
    edge = MODEL_ATOL + MODEL_RTOL * np.abs(a[:3])
    bad, err = elementwise_errors(a, np.concatenate([a[:3] + 0.9 * edge, a[3:]]))
    assert not bad.any() and err == pytest.approx(0.9 * edge.max(), rel=1e-3)
    bad, _ = elementwise_errors(a, np.concatenate([a[:3] + 1.1 * edge, a[3:]]))
    assert bad[:3].all() and not bad[3:].any()  # equal infinities and NaN agree
    bad, _ = elementwise_errors(a, np.array([0, 1, 100, 1, 0], np.float32))
    assert bad.tolist() == [False, False, False, True, True]
    assert elementwise_errors(np.arange(3), np.array([0, 1, 3]))[0].tolist() == [0, 0, 1]


def test_scaled_mismatch_is_relative_to_the_reference_and_at_least_1():
    u = np.array([10.0, -20.0, 0.5])
    assert scaled_mismatch(u, u + 1e-5, AXIOM_RTOL) is None
    assert scaled_mismatch(u, u + [0, 0, 3e-3], AXIOM_RTOL) == pytest.approx(3e-3)
    small = np.array([1e-3, 0.0])
    assert scaled_mismatch(small, small + 9e-5, AXIOM_RTOL) is None  # scale at least 1
    assert scaled_mismatch(u, u[:2], AXIOM_RTOL) == np.inf
    nan = np.array([np.nan, 1.0])
    assert scaled_mismatch(nan, nan, AXIOM_RTOL) is None
    assert scaled_mismatch(nan, nan, AXIOM_RTOL, nan_agrees=False) == np.inf
    assert scaled_mismatch(nan, np.array([0.0, 1.0]), AXIOM_RTOL) == np.inf
    assert relative_error(u, u + [0, 0, 4e-2]) == pytest.approx(2e-3)
