"""Differential fuzzing in CI: random valid ONNX models (taso.fuzz, hypothesis
strategies) through the API and taso-opt with the analytic and the ort cost
models, each result compared with the original in onnxruntime by the test
itself (taso.fuzz.same_outputs), apart from the library's own check.
`python bench/fuzz.py --count N` runs any number."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings

from taso.fuzz import NumpyChooser, build_model, models, run_one, same_outputs

SLOW = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _assert_clean(outcome: str, detail: str) -> None:
    assert outcome in ("optimized", "refused"), f"{outcome}: {detail}"
    if outcome == "refused":  # only what names a problem with the model
        assert "\n" not in detail.strip() and "internal error" not in detail, detail


def test_generated_models_are_valid_and_varied():
    seen = set()
    for seed in range(60):
        m = build_model(NumpyChooser(seed))
        onnx.checker.check_model(m, full_check=True)
        seen.update(n.op_type for n in m.graph.node)
        assert same_outputs(m, m) is None
    for op in ("Conv", "Gemm", "MatMul", "Concat", "Split", "Transpose", "Reshape",
               "BatchNormalization", "Gather", "Where", "Pad", "Resize", "Slice"):
        assert op in seen, op


def test_the_harness_sees_a_wrong_model():
    m = build_model(NumpyChooser(1))
    wrong = onnx.ModelProto()
    wrong.CopyFrom(m)
    for t in wrong.graph.initializer:  # every float constant moved by one
        arr = onnx.numpy_helper.to_array(t)
        if arr.dtype == np.float32:
            t.CopyFrom(onnx.numpy_helper.from_array(arr + np.float32(1), t.name))
    assert same_outputs(m, wrong) is not None


@pytest.mark.slow  # 100 models, each through the API and taso-opt: a few minutes
@settings(max_examples=100, **SLOW)
@given(models())
def test_random_models_optimize_right_or_are_refused_analytic(model):
    for via in ("api", "cli"):
        _assert_clean(*run_one(model, via, "analytic"))


@pytest.mark.slow  # measures costs on this CPU
@settings(max_examples=25, **SLOW)
@given(model=models())
def test_random_models_optimize_right_or_are_refused_ort(tmp_path_factory, model):
    cache = str(tmp_path_factory.getbasetemp() / "fuzz-costs.json")
    for via in ("api", "cli"):
        _assert_clean(*run_one(model, via, "ort", cache=cache))
