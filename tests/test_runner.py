"""The search runner: its limits and why it stopped, the one objective its passes
are judged by, the joined-graph pass, and the tags that choose that pass's rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from search_helpers import assert_same, ops
from taso.optimizer.cost import get_cost_model
from taso.optimizer.cost.measured import MeasuredCostModel
from taso.optimizer.report import summary_text
from taso.optimizer.runner import Limits, Objective, Runner
from taso.optimizer.search import run_search
from taso.rules_db import SHIPPED, PNode, Rule, load
from taso.verifier.run import verify_rule

import taso

FUSION = load(SHIPPED / "fusion.json")  # with its proof records and tags
ROWS = FUSION.by_id("rows-dense-residual")  # tagged fused_gain


def proved(rule: Rule) -> Rule:
    rec = verify_rule(rule, timeout=10)
    assert rec["status"] == "proved", rec
    return replace(rule, verification=rec)


# (A B) C  =>  A (B C)
REASSOC = proved(Rule(
    "reassoc", [PNode("matmul", ["a", "b"], {"activation": "none"}),
                PNode("matmul", [(0, 0), "c"], {"activation": "none"})],
    [PNode("matmul", ["b", "c"], {"activation": "none"}),
     PNode("matmul", ["a", (0, 0)], {"activation": "none"})],
    [((1, 0), (1, 0))]))


def _chains(n: int) -> taso.Graph:
    """n matmul chains whose reassociation pays, each a piece of its own
    (with the pieces' sizes set to 2)."""
    g = taso.new_graph()
    for i in range(n):
        a, b, c = (g.new_input(s, name=f"{v}{i}")
                   for s, v in zip([(512, 512), (512, 512), (512, 1)], "abc"))
        g.mark_output(g.matmul(g.matmul(a, b), c))
    return g


# ---- the stop reason and the pass reports ------------------------------------------
def test_the_report_says_why_the_search_stopped():
    g = _chains(1)
    r = run_search(g, budget=100, rules=[REASSOC], cost_model="analytic")
    assert r.stop_reason == "saturated" and r.rules_applied == {"reassoc": 1}
    assert [p["name"] for p in r.pass_reports] == ["search", "joined", "fold"]
    search = r.pass_reports[0]
    assert search["stop_reason"] == "saturated" and search["detail"]["stops"] == {"saturated": 1}
    assert search["cost_after"] < search["cost_before"] and search["applied"] == {"reassoc": 1}
    d = r.to_json()
    assert d["stop_reason"] == "saturated" and d["pass_reports"] == r.pass_reports
    assert "search stopped   saturated (every graph the rules reach" in summary_text(r)
    # The limits, each named: a time limit is not a spent budget.
    assert run_search(g, budget=1, rules=[REASSOC], cost_model="analytic",
                      check=False).stop_reason == "budget"
    assert run_search(g, budget=100, time_limit=1e-9, rules=[REASSOC], cost_model="analytic",
                      check=False).stop_reason == "time_limit"


def test_the_most_limited_piece_names_the_stop(monkeypatch):
    import taso.optimizer.runner as runner

    monkeypatch.setattr(runner, "PIECE_MIN_OPS", 2)
    monkeypatch.setattr(runner, "PIECE_MAX_OPS", 2)
    g = _chains(3)
    y = g.new_input((4, 4), name="y")
    g.mark_output(g.relu(g.tanh(y)))  # a piece no rule rewrites
    r = run_search(g, budget=100, rules=[REASSOC], cost_model="analytic", check=False)
    assert (r.pieces, r.distinct_pieces) == (4, 2)  # the chains alike: searched once
    assert r.stop_reason == "saturated" and r.rules_applied == {"reassoc": 3}
    r = run_search(g, budget=1, rules=[REASSOC], cost_model="analytic", check=False)
    assert r.pass_reports[0]["detail"]["stops"] == {"budget": 1, "saturated": 1}
    assert r.stop_reason == "budget"
    assert r.rules_applied == {"reassoc": 3}  # the best child of the one graph expanded


def test_the_op_cap_is_a_limit_of_the_runner():
    # Two relus over the rows of x and y -> one relu over their concatenation,
    # split after: 3 operators where there were 2, cheaper where a relu costs.
    relu_pair = Rule("relu-pair", [PNode("relu", ["x"]), PNode("relu", ["y"])],
                     [PNode("concat", ["x", "y"], {"axis": 0}), PNode("relu", [(0, 0)]),
                      PNode("split", [(1, 0)], {"axis": 0, "sizes": [{"dim": ["x", 0]},
                                                                    {"dim": ["y", 0]}]})],
                     [((0, 0), (2, 0)), ((1, 0), (2, 1))])
    g = taso.new_graph()
    x, y = g.new_input((2, 4), name="x"), g.new_input((3, 4), name="y")
    g.mark_output(g.relu(x))
    g.mark_output(g.relu(y))
    model = get_cost_model(lambda op, attrs, shapes: 1.0 if op == "relu" else 0.0)
    wide = Runner([relu_pair], model, Limits(max_ops_factor=2.0)).run(g.pruned())
    assert wide.applied == {"relu-pair": 1} and wide.cost_after < wide.cost_before
    capped = Runner([relu_pair], model, Limits(max_ops_factor=1.0)).run(g.pruned())
    assert capped.applied == {} and capped.stop_reason == "saturated"


def test_timed_winners_run_the_passes_again():
    from taso.optimizer.cost.analytic import AnalyticCost

    class Confirming(AnalyticCost):  # a model whose winners' timings moved, `moves` times
        def __init__(self, moves: int):
            super().__init__()
            self.moves = moves
            self.said: list[str] = []

        def begin_search(self, graph):
            self.said.append("begin")

        def confirm(self, graph) -> bool:
            self.said.append("confirm")
            self.moves -= 1
            return self.moves >= 0

        def end_search(self, graph):
            self.said.append("end" if graph is not None else "end-none")

    g = _chains(1)
    for moves, rounds in ((0, 1), (1, 2), (9, 4)):  # at most SETTLE_ROUNDS more
        model = Confirming(moves)
        r = Runner([REASSOC], model).run(g.pruned())
        assert model.said == ["begin", *["confirm"] * min(rounds, 3), "end", "end-none"]
        assert r.rounds == rounds and r.applied == {"reassoc": 1}
        assert [(p.name, p.round) for p in r.passes] == [
            *[(name, k) for k in range(1, rounds + 1) for name in ("search", "joined")],
            ("fold", rounds)]
        assert r.explored == 2 * rounds  # counted over the rounds


# ---- the objective ------------------------------------------------------------------
class SkipLayerNormDevice(MeasuredCostModel):
    """A fusing device on which a layer normalization fused after a residual add
    is slow, as onnxruntime's SkipLayerNormalization is on a CPU."""

    name, device, fuses = "skipln", "formula", True

    def time_chain(self, links):
        ops = [op for op, _, _ in links]
        return 1.0 + len(ops) + (10.0 if ops[-1] == "layernorm" and len(ops) > 1 else 0.0)

    def time_overhead(self):
        return 1.0


def _dense_residual_layernorm() -> taso.Graph:
    g = taso.new_graph()
    x = g.new_input((2, 3, 8), name="x")
    h = g.add(g.matmul(x, g.new_weight((8, 8))), g.new_weight((8,)))
    g.mark_output(g.layernorm(g.add(x, h), g.new_weight((8,)), g.new_weight((8,))))
    return g


def test_the_objective_is_fusion_aware_where_the_device_fuses():
    g = _dense_residual_layernorm()
    fused = Objective.starting_at(SkipLayerNormDevice(False), g)
    assert fused.start == SkipLayerNormDevice(False).graph_cost(g)  # chains, not nodes
    plain = Objective.starting_at(get_cost_model("analytic"), g)
    assert plain.start == pytest.approx(get_cost_model("analytic").graph_cost(g))
    assert plain.keeps(0.5 * plain.start, 0.4) and not plain.keeps(0.7 * plain.start, 0.4)


def test_fusion_aware_rewrite_applies_where_only_fused_costs_see_the_gain():
    g = _dense_residual_layernorm()
    r = run_search(g, budget=20, rules=[ROWS], cost_model=SkipLayerNormDevice(False))
    assert r.rules_applied == {"rows-dense-residual": 1}
    assert {"flatten", "reshape"} <= {n.op for n in r.graph.nodes.values()}
    assert_same(g, r.graph, tol=1e-4)
    # a sum of node costs sees only the added reshapes
    plain = run_search(g, budget=20, rules=[ROWS], cost_model="analytic")
    assert plain.rules_applied == {}


# ---- the joined pass and the tags that choose its rules -----------------------------
def test_the_joined_pass_is_judged_from_where_the_search_began():
    g, m = _dense_residual_layernorm(), SkipLayerNormDevice(False)
    start = Objective.starting_at(m, g)
    out, applied, report = Runner([ROWS], m).joined_pass(g, start)
    assert applied == {"rows-dense-residual": 1} and report.kept
    assert report.stop_reason == "saturated" and report.cost_before == start.start
    fall = 1 - report.cost_after / start.start
    assert fall > 0 and m.graph_cost(out) < m.graph_cost(g)
    # a fall under the margin, alone, is not kept ...
    margin = fall + 0.05
    strict = Runner([ROWS], m, Limits(min_gain=margin))
    out, applied, report = strict.joined_pass(g, start)
    assert out is g and applied == {} and not report.kept
    # ... but it is where the pieces' rewrites had halved the cost before it
    earlier = replace(start, start=2 * start.start)
    kept, applied, report = strict.joined_pass(g, earlier)
    assert applied == {"rows-dense-residual": 1} and report.kept
    assert m.graph_cost(kept) < m.graph_cost(g)


def test_the_joined_pass_stops_at_its_step_limit():
    g, m = _dense_residual_layernorm(), SkipLayerNormDevice(False)
    g2 = _dense_residual_layernorm()  # two layers, each one rewrite
    graph = taso.new_graph()
    for k, h in enumerate((g, g2)):
        x = graph.new_input((2, 3, 8), name=f"x{k}")
        w = [graph.new_weight(n.shapes[0]) for n in h.weights]
        y = graph.add(graph.matmul(x, w[0]), w[1])
        graph.mark_output(graph.layernorm(graph.add(x, y), w[2], w[3]))
    start = Objective.starting_at(m, graph)
    _, applied, report = Runner([ROWS], m, Limits(joined_steps=1)).joined_pass(graph, start)
    assert applied == {"rows-dense-residual": 1} and report.stop_reason == "steps"
    _, applied, report = Runner([ROWS], m).joined_pass(graph, start)
    assert applied == {"rows-dense-residual": 2} and report.stop_reason == "saturated"


def test_tags_choose_the_rules_of_the_joined_pass():
    analytic = get_cost_model("analytic")
    rules = list(FUSION)
    across = {r.id for r in rules if "across_pieces" in r.tags}
    assert across and {r.id for r in Runner(rules, analytic).joined_rules} == across
    fusing = {r.id for r in Runner(rules, SkipLayerNormDevice(False)).joined_rules}
    assert fusing == across | {"rows-dense-residual"}  # fused_gain: where the device fuses
    # A rule's roles are read from the rule: untagged, it is searched but not joined.
    assert Runner([replace(ROWS, tags=[])], SkipLayerNormDevice(False)).joined_rules == []


def _recurrent(steps: int = 4) -> taso.Graph:
    # A recurrent loop: the input weight w is shared by all steps, which the
    # partition puts in different pieces; merging the recurrent products by u
    # would make a cycle.
    g = taso.new_graph()
    w, u = g.new_weight((8, 8)), g.new_weight((8, 8))
    h = g.new_input((1, 8), name="h")
    for i in range(steps):
        x = g.new_input((1, 8), name=f"x{i}")
        h = g.tanh(g.ewadd(g.matmul(x, w), g.matmul(h, u)))
    g.mark_output(h)
    return g


def weight_bound(op, attrs, shapes):  # a product costs its weight's read
    return 10.0 if op == "matmul" else 1.0


def test_products_by_one_weight_merge_across_pieces(monkeypatch):
    import taso.optimizer.runner as runner

    monkeypatch.setattr(runner, "PIECE_MIN_OPS", 2)
    monkeypatch.setattr(runner, "PIECE_MAX_OPS", 6)
    g = _recurrent()
    calls = []
    r = run_search(g, budget=50, rules=FUSION, cost_model=weight_bound,
                   progress=lambda *a: calls.append(a))
    assert r.pieces > 1
    joined = [c for c in calls if c[0] == c[1] == r.pieces]  # the pass over the joined graph
    assert joined and [c[2] for c in joined] == list(range(1, len(joined) + 1))
    assert all(a[3] > b[3] for a, b in zip(joined, joined[1:]))  # each lowers the cost
    assert r.rules_applied.get("fusion-merge-matmul-rows", 0) >= 1
    assert ops(r.graph)["matmul"] == 4 + 1  # the four by u, one by w
    # one flat stack: the pair started it, the stack rules grew it
    assert r.rules_applied.get("fusion-stack-matmul-rows-2", 0) >= 1
    assert ops(r.graph)["concat"] == ops(r.graph)["split"] == 1
    assert_same(g, r.graph)
    report = {p["name"]: p for p in r.pass_reports}["joined"]
    assert report["kept"] and report["applied"] == {
        k: v for k, v in r.rules_applied.items() if "rows" in k}
    # Untagged, the same rules cannot reach across the pieces.
    untagged = [replace(x, tags=[]) for x in FUSION]
    r = run_search(g, budget=50, rules=untagged, cost_model=weight_bound)
    assert ops(r.graph)["matmul"] == 4 + 4
