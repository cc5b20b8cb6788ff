"""HardSwish end to end: an operator added by its module alone
(taso/ops/hardswish.py) is loaded from ONNX, evaluated, costed, exported,
searched around, generated over and proved."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from taso.generator.family import GenConfig, Var
from taso.generator.generate import generate
from taso.optimizer.cost import get_cost_model
from taso.optimizer.search import run_search
from taso.rules_db import PNode, Rule
from taso.verifier.axioms import by_name, check_axiom
from taso.verifier.run import verify_rule

import taso
from taso import runtime


def model() -> onnx.ModelProto:
    """Two 1x1 convolutions of one input, each followed by HardSwish, then their
    channel concat (TASO merges such convolutions), and a third HardSwish."""
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32),
                                      n) for n in ("w1", "w2"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Conv", ["x", "w2"], ["c2"]),
             helper.make_node("HardSwish", ["c1"], ["h1"]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Concat", ["h1", "h2"], ["cat"], axis=1),
             helper.make_node("HardSwish", ["cat"], ["y"])]
    graph = helper.make_graph(
        nodes, "hardswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FEEDS = {"x": (3 * np.random.default_rng(1).standard_normal((1, 4, 6, 6))).astype(np.float32)}


def test_loaded_from_onnx_and_evaluated_as_onnxruntime_does():
    g = taso.load_onnx(model())
    assert sum(n.op == "hardswish" for n in g.nodes.values()) == 3
    assert not any(n.op == "opaque" for n in g.nodes.values())
    want = runtime.session(model()).run(None, FEEDS)[0]
    np.testing.assert_allclose(g.evaluate(FEEDS)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [13, 17])
def test_exported_at_every_opset(opset):
    g = taso.load_onnx(model())
    got = runtime.session(taso.export_onnx(g, opset=opset)).run(None, FEEDS)[0]
    np.testing.assert_allclose(got, g.evaluate(FEEDS)[0], rtol=1e-5, atol=1e-6)


def test_costed_by_the_analytic_and_ort_models():
    shape = [(1, 8, 6, 6)]
    analytic = get_cost_model("analytic")
    assert analytic.op_cost("hardswish", {}, shape) == analytic.op_cost("relu", {}, shape)
    ort = get_cost_model("ort", cache=False, threads=1, repeats=3, min_seconds=0.0)
    assert 0 <= ort.op_cost("hardswish", {}, shape) < 1.0  # milliseconds
    assert ort.graph_cost(taso.load_onnx(model())) > 0


def test_searched_around_and_checked():
    g = taso.load_onnx(model())
    report = run_search(g, cost_model="analytic", budget=200)  # checked in onnxruntime
    assert report.rules_applied, "TASO's conv merge should fire beside HardSwish"
    assert sum(n.op == "hardswish" for n in report.graph.nodes.values()) >= 1
    np.testing.assert_allclose(report.graph.evaluate(FEEDS)[0], g.evaluate(FEEDS)[0],
                               rtol=1e-4, atol=1e-5)


def test_its_axioms_hold_on_the_reference():
    for law in ("concat", "transpose", "dim", "rank", "strict-x"):
        ax = by_name()[f"hardswish-{law}"]
        outcomes = {check_axiom(ax, seed).status for seed in range(8)}
        assert "violated" not in outcomes and "held" in outcomes, law


def test_a_rule_about_it_is_proved_and_a_false_one_refuted():
    law = Rule("hs-concat",
               [PNode("concat", ["x", "y"], {"axis": 1}), PNode("hardswish", [(0, 0)])],
               [PNode("hardswish", ["x"]), PNode("hardswish", ["y"]),
                PNode("concat", [(0, 0), (1, 0)], {"axis": 1})], [[(1, 0), (2, 0)]])
    rec = verify_rule(law, timeout=10)
    assert rec["status"] == "proved" and "hardswish-concat" in rec["axioms"], rec
    false = Rule("hs-relu", [PNode("hardswish", ["x"])], [PNode("relu", ["x"])],
                 [[(0, 0), (0, 0)]])
    assert verify_rule(false, timeout=5)["status"] == "refuted"


def test_generated_over_and_every_rule_proved():
    fam = tuple(Var(f"m{i}", (3, 3), (5, 5)) for i in range(3))
    rules, _ = generate(GenConfig(max_ops=2, ops=("hardswish", "concat", "transpose"),
                                 family=fam), workers=1)
    mine = [r for r in rules if any(n.op == "hardswish" for n in r.src + r.dst)]
    assert mine, "no rule about hardswish was generated"
    for r in mine:
        assert verify_rule(r, timeout=10)["status"] == "proved", r.to_json()
