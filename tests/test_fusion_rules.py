"""The hand-written rules (optimizer/fusion_rules.py, shipped as
rules_db/fusion.json): each fires on its own source side and is sound, the
shipped file matches its source and carries current proofs, and the rules
do what real models need."""

from __future__ import annotations

import numpy as np
import pytest
from search_helpers import assert_same, engine, ops
from taso.optimizer.check import check_equivalence
from taso.optimizer.fusion_rules import fusion_rules, stacked_rows_rules
from taso.optimizer.search import run_search
from taso.rules_db import SHIPPED, Rule, instantiate, load
from taso.verifier.record import is_current, record_digest

import taso

FUSION = load(SHIPPED / "fusion.json")  # with its proof records


def test_two_convs_sharing_an_input_become_one():
    g = taso.new_graph()
    x = g.new_input((1, 16, 8, 8), name="x")
    a = g.conv2d(x, g.new_weight((16, 16, 3, 3)), padding="same")
    b = g.conv2d(x, g.new_weight((16, 16, 3, 3)), padding="same")
    g.mark_output(a)
    g.mark_output(b)
    r = run_search(g, budget=20, rules=FUSION, cost_model="analytic")
    assert ops(r.graph)["conv2d"] == 1
    assert r.rules_applied == {"fusion-merge-conv2d": 1}
    assert r.cost_after < r.cost_before
    assert_same(g, r.graph)
    assert check_equivalence(g, r.graph) < 1e-4


def test_convs_of_different_kernels_merge_through_enlarge():
    g = taso.new_graph()
    x = g.new_input((1, 8, 8, 8), name="x")
    a = g.conv2d(x, g.new_weight((8, 8, 1, 1)), padding="same")
    b = g.conv2d(x, g.new_weight((8, 8, 3, 3)), padding="same")
    g.mark_output(g.concat(1, [a, b]))
    r = run_search(g, budget=20, rules=FUSION, cost_model="analytic")
    assert ops(r.graph).get("conv2d") == 1
    assert "fusion-merge-conv2d-enlarge" in r.rules_applied
    assert_same(g, r.graph)


# Shapes and attribute values that make each fusion rule's source side valid.
def _rule_inputs(rule: Rule) -> tuple[dict, dict]:
    rid = rule.id
    shapes: dict[str, tuple[int, ...]] = {}
    for v in rule.variables():
        if rid.startswith("rows-"):  # a 3-D dense layer with a residual add
            shapes[v] = {"x": (2, 3, 5), "w": (5, 4), "b": (4,), "r": (2, 3, 4)}[v]
        elif "-stack-" in rid or rid.endswith("-rows"):  # products by one weight
            shapes[v] = {"w": (5, 4), "y": (1, 5), "b": (4,)}.get(v, (2, 5))
        elif "matmul" in rid:
            rank = 3 if rid.endswith("rank3") else 2
            shapes[v] = {"x": (3, 5) if rank == 2 else (2, 3, 5), "b1": (4,), "b2": (4,)}.get(
                v, (5, 4))
        elif "gconv" in rid:
            groups = int(rid.rsplit("-", 1)[1])
            shapes[v] = {"x": (1, 2 * groups, 4, 4), "w": (2 * groups, 2, 3, 3)}.get(
                v, (2 * groups,))
        else:
            shapes[v] = {"x": (1, 4, 6, 6), "w": (4, 4, 3, 3), "w2": (4, 4, 3, 3),
                         "w1": (4, 4, 1, 1) if "enlarge" in rid else (4, 4, 3, 3)
                         }.get(v, (4,))
    attrs = {"s": (1, 1), "p": (1, 1, 1, 1), "d": (1, 1), "g": 1, "a": "relu", "e": 1e-3,
             "al": 0.5, "be": 2.0, "tb": 0}
    if "gconv" in rid:
        attrs["p"] = (1, 1, 1, 1)
    return shapes, attrs


@pytest.mark.parametrize("rule", list(FUSION), ids=lambda r: r.id)
def test_fusion_rule_fires_and_is_sound(rule):
    shapes, attrs = _rule_inputs(rule)
    g = taso.new_graph()
    sources = {}
    for v in rule.variables():
        if rule.vars.get(v, {}).get("weight") or v.startswith(("w", "b", "scale", "mean",
                                                              "var")):
            data = g._rng.uniform(0.5, 1.5, shapes[v]).astype(np.float32)
            sources[v] = g.new_weight(shapes[v], data=data, name=v)
        else:
            sources[v] = g.new_input(shapes[v], name=v)
    instantiate(rule, "src", shapes, attrs, graph=g, sources=sources)
    e = engine([rule])
    found = e.core.expand(e.to_core(g))
    assert found, f"{rule.id} does not fire on its own source side"
    for _, _, cg in found:
        assert_same(g, e.from_core(cg, g), tol=1e-3)


def test_an_onnx_rnn_of_gemms_stacks_its_input_products():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    # An unrolled cell as PyTorch exports nn.Linear on 2-D inputs: Gemm with
    # transB=1 and a bias, the input weight shared by the steps.
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), n)
             for n in ("W", "U")] + [
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes, h = [], "h0"
    for i in range(3):
        nodes += [helper.make_node("Gemm", [f"x{i}", "W", "b"], [f"p{i}"], transB=1),
                  helper.make_node("Gemm", [h, "U"], [f"q{i}"], transB=1),
                  helper.make_node("Add", [f"p{i}", f"q{i}"], [f"s{i}"]),
                  helper.make_node("Tanh", [f"s{i}"], [f"h{i + 1}"])]
        h = f"h{i + 1}"
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (1, 8))
           for n in ("h0", "x0", "x1", "x2")]
    model = helper.make_model(
        helper.make_graph(nodes, "rnn", ins,
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, (1, 8))], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    g = taso.load_onnx(model)

    def weight_bound(op, attrs, shapes):  # a product costs its weight's read
        return 10.0 if op == "gemm" else 1.0

    r = run_search(g, budget=50, rules=FUSION, cost_model=weight_bound)
    assert r.rules_applied == {"fusion-merge-gemm-bias-rows": 1,
                               "fusion-stack-gemm-bias-rows-2": 1}
    assert ops(r.graph)["gemm"] == 3 + 1  # the three by U, one by W
    assert ops(r.graph)["concat"] == ops(r.graph)["split"] == 1
    check_equivalence(model, taso.export_onnx(r.graph), feeds=g.random_inputs(0))


def test_fusion_json_matches_its_source():
    shipped = {r.id: r.to_json() for r in FUSION}
    assert sorted(shipped) == sorted(r.id for r in fusion_rules())
    for r in fusion_rules():
        want = r.to_json()
        assert all(shipped[r.id].get(k) == want.get(k)
                   for k in ("src", "dst", "outputs", "vars", "tags")), r.id


def test_fusion_json_is_proved_from_todays_axioms():
    # A changed rule file is verified again (taso-verify --output): tags are no
    # part of what a proof covers, so tagging left every proof as it was.
    assert all(is_current(r.verification) for r in FUSION)
    assert all(r.verification["axioms_hash"] == record_digest(r.verification) for r in FUSION)


def test_the_roles_of_hand_written_rules_are_tags():
    tagged = {r.id: r.tags for r in FUSION if r.tags}
    rows = {r.id for r in stacked_rows_rules()}
    assert {rid for rid, t in tagged.items() if t == ["across_pieces"]} == rows
    assert {rid for rid, t in tagged.items() if t == ["fused_gain"]} == {"rows-dense-residual"}
    assert len(tagged) == len(rows) + 1


def test_batchnorm_folds_into_the_conv_and_relu_fuses():
    g = taso.new_graph()
    x = g.new_input((1, 3, 8, 8), name="x")
    y = g.conv2d(x, g.new_weight((8, 3, 3, 3)), padding="same")
    c = 8
    r = np.random.default_rng(0)
    y = g.batchnorm(y, *(g.new_weight((c,), data=r.uniform(0.5, 1.5, c).astype(np.float32))
                         for _ in range(4)))
    g.mark_output(g.relu(y))
    rep = run_search(g, budget=20, rules=FUSION, cost_model="analytic")
    assert ops(rep.graph) == {"conv2d_bias": 1}
    assert rep.graph.nodes[rep.graph.outputs[0][0]].a["activation"] == "relu"
    assert check_equivalence(g, rep.graph) < 1e-3
