"""The optimize pipeline on small hand-made graphs: rules resolved and kept by
their gain, weights' bytes counted, pieces cut and joined, results checked,
defaults and arguments, and every model builder end to end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from search_helpers import assert_same, chain, ops
from taso.optimizer.check import EquivalenceError, check_equivalence
from taso.optimizer.cost import get_cost_model
from taso.optimizer.cost.memory import weight_bytes
from taso.optimizer.cost.ort import OrtCostModel
from taso.optimizer.engine import Engine
from taso.optimizer.fold_weights import fold_weights
from taso.optimizer.partition import cut_points, join, shared_weights, split_graph
from taso.optimizer.report import summary_text
from taso.optimizer.search import (
    resolve_rules,
    run_search,
    set_cost_threshold,
    set_search_budget,
)
from taso.rules_db import SHIPPED, PNode, Rule, load
from taso.verifier.run import verify_rule

import taso
from taso.models import ALL

FUSION = load(SHIPPED / "fusion.json")  # with its proof records


def proved(rule: Rule) -> Rule:
    """`rule` with its proof record, as taso-verify writes it: the optimizer
    takes only proved rules, however they are given."""
    rec = verify_rule(rule, timeout=10)
    assert rec["status"] == "proved", rec
    return replace(rule, verification=rec)


# (A B) C  =>  A (B C)
UNVERIFIED_REASSOC = Rule(
    "reassoc", [PNode("matmul", ["a", "b"], {"activation": "none"}),
                PNode("matmul", [(0, 0), "c"], {"activation": "none"})],
    [PNode("matmul", ["b", "c"], {"activation": "none"}),
     PNode("matmul", ["a", (0, 0)], {"activation": "none"})],
    [((1, 0), (1, 0))])
REASSOC = proved(UNVERIFIED_REASSOC)


def test_matmul_chain_is_reassociated_when_cheaper():
    g = chain([(512, 512), (512, 512), (512, 1)])
    r = run_search(g, budget=20, rules=[REASSOC], cost_model="analytic")
    assert r.rules_applied == {"reassoc": 1}
    assert r.cost_after < r.cost_before
    assert_same(g, r.graph, tol=1e-3)


def test_rewrites_below_the_minimum_gain_are_not_kept():
    g = chain([(512, 512), (512, 512), (512, 1)])
    r = run_search(g, budget=20, rules=[REASSOC], cost_model="analytic")
    gain = 1 - r.cost_after / r.cost_before
    assert gain > 0.1
    kept = run_search(g, budget=20, rules=[REASSOC], min_gain=gain - 0.05,
                      cost_model="analytic")
    assert kept.rules_applied == {"reassoc": 1}
    refused = run_search(g, budget=20, rules=[REASSOC], min_gain=gain + 0.05,
                         cost_model="analytic")
    assert refused.rules_applied == {} and refused.cost_after == pytest.approx(r.cost_before)


@pytest.mark.parametrize("timings,kept", [((2.0, 1.0), True), ((1.0, 1.0), False),
                                          ((1.0, 2.0), False)])
def test_a_result_that_does_not_measure_faster_is_not_kept(timings, kept):
    from taso.optimizer.cost.analytic import AnalyticCost

    class Timed(AnalyticCost):  # a user model that also times whole graphs
        min_gain = 0.03

        def time_models(self, graphs):
            assert len(graphs) == 2
            return list(timings)

    g = chain([(512, 512), (512, 512), (512, 1)])
    r = run_search(g, budget=10, rules=[REASSOC], cost_model=Timed())
    assert r.extra["timed"]["kept"] is kept
    # Two numbers and no interval: a model with `time_models` only.
    assert r.extra["timed"]["verdict"] == ("faster" if kept else "not faster")
    assert r.extra["timed"]["ratio"] == timings[1] / timings[0]
    assert r.extra["timed"]["low"] is None and r.extra["timed"]["high"] is None
    assert r.extra["timed"]["rules"] == {"reassoc": 1}  # what was timed, kept or not
    assert r.rules_applied == ({"reassoc": 1} if kept else {})
    assert (r.cost_after < r.cost_before) is kept
    timing = r.pass_reports[-1]  # the runner's last pass
    assert (timing["name"], timing["kept"]) == ("timing", kept)
    assert timing["detail"] == r.extra["timed"]
    untimed = run_search(g, budget=10, rules=[REASSOC], cost_model=Timed(), timing=False)
    assert untimed.rules_applied == {"reassoc": 1} and untimed.extra["timed"] is None
    assert [p["name"] for p in untimed.pass_reports] == ["search", "joined", "fold"]



class CountingOrt(OrtCostModel):
    """Measures on this CPU and counts the whole-model comparisons it is asked for."""

    def __init__(self):
        super().__init__(threads=1, cache=False)
        self.compared = 0

    def compare_models(self, original, optimized, **kw):
        self.compared += 1
        return super().compare_models(original, optimized, max_seconds=2.0, round_ms=10)


@pytest.mark.slow
def test_a_search_that_rewrites_nothing_is_not_timed():
    model = CountingOrt()
    g = chain([(1, 512), (512, 512), (512, 512)])  # reassociating costs more
    r = run_search(g, budget=20, rules=[REASSOC], cost_model=model)
    assert r.rules_applied == {} and model.compared == 0
    assert r.extra["timed"]["verdict"] == "unchanged" and not r.extra["timed"]["kept"]
    assert "unchanged (no rewrite applied)" in summary_text(r)
    assert [p["name"] for p in r.pass_reports][-1] == "timing"
    # The same model with a rewrite to time: one comparison, kept only when faster.
    g = chain([(512, 512), (512, 512), (512, 1)])
    r = run_search(g, budget=20, rules=[REASSOC], cost_model=model)
    v = r.extra["timed"]
    assert model.compared == 1 and v["verdict"] in ("faster", "not faster", "undecided")
    assert r.rules_applied == ({"reassoc": 1} if v["verdict"] == "faster" else {})
    assert v["rounds"] >= 8 and v["low"] <= v["ratio"] <= v["high"]
    assert v["verdict"] in summary_text(r)


def test_matmul_chain_is_kept_when_reassociation_costs_more():
    g = chain([(1, 512), (512, 512), (512, 512)])
    r = run_search(g, budget=20, rules=[REASSOC], cost_model="analytic")
    assert r.rules_applied == {}
    assert r.cost_after == pytest.approx(r.cost_before)


def weight_read(op, attrs, shapes):
    """A product costs a little plus the bytes of its weight; the rest next to nothing."""
    return 0.01 + 0.001 * 4 * int(np.prod(shapes[1])) if op == "matmul" else 0.001


def test_a_rewrite_that_copies_a_weight_others_read_pays_for_its_bytes():
    # Merging x.w1 and x.w2 saves a product's fixed cost; y.w1 still reads w1,
    # so the merged weight concat(w1, w2) would be read on top of w1.
    def products(shared: bool) -> taso.Graph:
        g = taso.new_graph()
        x, y = g.new_input((4, 8), name="x"), g.new_input((4, 8), name="y")
        w1, w2 = g.new_weight((8, 8)), g.new_weight((8, 8))
        g.mark_output(g.matmul(x, w1))
        g.mark_output(g.matmul(x, w2))
        if shared:
            g.mark_output(g.matmul(y, w1))
        return g

    rule = [FUSION.by_id("fusion-merge-matmul-rank2")]
    e = Engine(rule, get_cost_model(weight_read))
    assert e.core.byte_cost == pytest.approx(weight_read("matmul", {}, [(1, 1024), (1024, 1024)])
                                             / (4 * 1024 * 1024))
    alone = run_search(products(shared=False), budget=10, rules=rule, cost_model=weight_read)
    assert alone.rules_applied == {"fusion-merge-matmul-rank2": 1}  # w1, w2 become one weight
    copied = run_search(products(shared=True), budget=10, rules=rule, cost_model=weight_read)
    assert copied.rules_applied == {}
    cg = e.to_core(products(shared=True))
    merged = e.core.expand(cg)[0][2]
    # concat(w1, w2) replaces w2 and copies w1, which y.w1 still reads
    assert merged.const_bytes - cg.const_bytes == 4 * 8 * 8
    assert merged.cost < cg.cost  # which node costs alone do not see


def test_weights_other_pieces_read_stay_in_the_model(monkeypatch):
    import taso.optimizer.runner as runner

    # A recurrent cell whose two gates read one input by two weights shared by
    # all steps, in pieces of one step: merging a step's pair of products
    # would copy both weights, as the other pieces still read them.
    g = taso.new_graph()
    w1, w2, u = g.new_weight((8, 8)), g.new_weight((8, 8)), g.new_weight((8, 8))
    h = g.new_input((1, 8), name="h")
    for i in range(3):
        x = g.new_input((1, 8), name=f"x{i}")
        gate = g.sigmoid(g.ewadd(g.matmul(x, w1), g.matmul(h, u)))
        h = g.tanh(g.ewmul(gate, g.matmul(x, w2)))
    g.mark_output(h)
    monkeypatch.setattr(runner, "PIECE_MIN_OPS", 7)
    monkeypatch.setattr(runner, "PIECE_MAX_OPS", 7)
    pieces = split_graph(g, 7, 7)
    assert len(pieces) == 3
    shared = {w1.node, w2.node, u.node}
    for piece, pinned in zip(pieces, shared_weights(pieces)):
        assert {_original(piece, n) for n in pinned} == shared
    rule = [FUSION.by_id("fusion-merge-matmul-rank2")]
    r = run_search(g, budget=20, rules=rule, cost_model=weight_read)
    assert r.pieces == 3 and r.rules_applied == {}
    assert weight_bytes(r.graph) == weight_bytes(fold_weights(g))

    # Within a piece the weights have no other reader: pinned or not decides.
    step = pieces[1].graph
    e = Engine(rule, get_cost_model(weight_read))
    for pinned, merges in (((), 1), (shared_weights(pieces)[1], 0)):
        res = e.core.search(e.to_core(step, pinned), budget=10, alpha=1.05)
        assert len(res["applied"]) == merges


def _original(piece, node_id: int) -> int:
    from taso.optimizer.partition import _original_source
    return _original_source(piece, piece.graph.nodes[node_id])


def test_joined_pieces_share_what_they_compute_alike():
    g = taso.new_graph()
    w1, w2 = g.new_weight((8, 8)), g.new_weight((8, 8))
    for i in range(2):  # two pieces, each with its own copy of concat(w1, w2)
        x = g.new_input((1, 8), name=f"x{i}")
        y = g.matmul(x, g.concat(1, [w1, w2]))
        g.mark_output(g.relu(g.tanh(g.sigmoid(y))))
    pieces = split_graph(g, 5, 5)
    assert len(pieces) == 2
    out = join(g, pieces, [p.graph for p in pieces])
    assert ops(out)["concat"] == 1 and ops(g)["concat"] == 2
    assert_same(g, out)


def test_fold_weights_turns_weight_only_subgraphs_into_weights():
    g = taso.new_graph()
    x = g.new_input((1, 4, 5, 5), name="x")
    w = g.concat(0, [g.new_weight((2, 4, 3, 3)), g.new_weight((2, 4, 3, 3))])
    g.mark_output(g.conv2d(x, w, padding="same"))
    f = fold_weights(g)
    assert ops(f) == {"conv2d": 1}
    assert_same(g, f, tol=1e-6)


def test_check_equivalence_rejects_a_different_model():
    g = taso.new_graph()
    x = g.new_input((2, 3), name="x")
    g.mark_output(g.relu(x))
    h = taso.new_graph()
    y = h.new_input((2, 3), name="x")
    h.mark_output(h.sigmoid(y))
    with pytest.raises(EquivalenceError):
        check_equivalence(g, h)


def test_nan_and_inf_agree_where_both_sides_have_them():
    from taso.optimizer.check import compare_outputs
    nan, inf = np.float32("nan"), np.float32("inf")
    a = np.array([1.0, nan, inf, -inf], np.float32)
    assert compare_outputs([a], [a.copy()]) == 0.0  # what Sqrt of random inputs gives
    for other in ([1.0, 2.0, inf, -inf], [1.0, nan, -inf, -inf], [1.5, nan, inf, -inf]):
        with pytest.raises(EquivalenceError, match="at 1 element"):
            compare_outputs([a], [np.array(other, np.float32)])
    with pytest.raises(EquivalenceError):  # a NaN the original does not have
        compare_outputs([np.ones(2, np.float32)], [np.array([1.0, nan], np.float32)])
    c = np.array([1 + 1j, 2 - 1j], np.complex64)
    with pytest.raises(EquivalenceError):  # the imaginary part counts
        compare_outputs([c], [c.real.astype(np.complex64)])


def test_partition_cuts_at_narrow_points_and_joins_back():
    g = ALL["resnet50"](small=True)
    cuts = cut_points(g, 8, 24)
    assert cuts and all(b - a >= 8 for a, b in zip([-1] + cuts, cuts))
    pieces = split_graph(g, 8, 24)
    assert len(pieces) == len(cuts) + 1
    assert sum(p.graph.num_ops() for p in pieces) == g.num_ops()
    assert_same(g, join(g, pieces, [p.graph for p in pieces]), tol=1e-6)


def test_identical_pieces_are_searched_once():
    g = taso.new_graph()
    x = g.new_input((1, 8, 6, 6), name="x")
    for _ in range(14):  # a chain of identical 8-op blocks: pieces cut at block edges
        x = g.relu(g.conv2d(x, g.new_weight((8, 8, 3, 3)), padding="same"))
        for _ in range(6):
            x = g.tanh(x)
    g.mark_output(x)
    r = run_search(g, budget=10, rules=FUSION, cost_model="analytic")
    assert r.pieces > 2 and r.distinct_pieces <= 2
    assert r.rules_applied == {"fusion-conv2d-relu": 14}
    assert_same(g, r.graph)


def test_defaults_setters_validate():
    with pytest.raises(ValueError):
        set_search_budget(0)
    with pytest.raises(ValueError):
        set_search_budget(10**30)
    with pytest.raises(ValueError):
        set_cost_threshold(0.5)
    with pytest.raises(ValueError):
        set_cost_threshold(float("nan"))
    set_search_budget(1000)
    set_cost_threshold(1.05)


def test_the_default_cost_model_is_measured_on_this_cpu(monkeypatch):
    import taso.optimizer.search as search

    assert search.DEFAULTS["cost_model"] == "ort"
    monkeypatch.setitem(search.DEFAULTS, "cost_model", "ort")  # restored after
    with pytest.raises(ValueError, match="unknown cost model 'bogus'"):
        taso.set_cost_model("bogus")
    taso.set_cost_model("analytic")
    r = run_search(chain([(8, 8), (8, 8), (8, 1)]), budget=5, rules=[REASSOC])
    assert r.cost_model == "analytic"


def test_default_rules_are_the_proved_shipped_ones():
    from taso.rules_db import DEFAULT_SETS, default_rule_files

    assert [f.name for f in default_rule_files()] == list(DEFAULT_SETS)
    assert all(f.exists() for f in default_rule_files())
    rules = resolve_rules(None)
    assert rules and all(r.status == "proved" for r in rules)
    assert len({r.id for r in rules}) == len(rules)  # no set loaded twice
    assert len(resolve_rules(SHIPPED / "fusion.json", unverified=True)) == len(FUSION)


def test_public_api():
    g = chain([(64, 64), (64, 64), (64, 1)])
    out = taso.optimize(g, budget=10, rules=[REASSOC], cost_model="analytic")
    assert_same(g, out, tol=1e-3)
    assert callable(taso.set_search_budget) and callable(taso.enable_debug_logging)


@pytest.mark.parametrize("args, error, words", [
    ({"graph": "model.onnx"}, TypeError, "taso.load_onnx"),
    ({"budget": 0}, ValueError, "budget must be a whole number from 1"),
    ({"budget": 10**30}, ValueError, "budget must be a whole number from 1"),
    ({"budget": float("inf")}, ValueError, "budget must be a whole number"),
    ({"budget": 2.5}, ValueError, "budget must be a whole number"),
    ({"budget": "10"}, ValueError, "budget must be a whole number"),
    ({"alpha": 0.9}, ValueError, "alpha must be"),
    ({"alpha": "1.1"}, ValueError, "alpha must be"),
    ({"alpha": float("nan")}, ValueError, "alpha must be"),
    ({"time_limit": -1.0}, ValueError, "time_limit must be"),
    ({"min_gain": 1.0}, ValueError, "min_gain must be"),
])
def test_optimize_refuses_bad_arguments_by_name(args, error, words):
    args = {"graph": chain([(8, 8), (8, 8), (8, 1)]), "rules": [REASSOC], **args}
    with pytest.raises(error, match=words):
        taso.optimize(**args)


def test_an_empty_rule_list_warns_and_changes_nothing(caplog):
    g = chain([(8, 8), (8, 8), (8, 1)])
    with caplog.at_level("WARNING", logger="taso"):
        r = run_search(g, rules=[], fold=False, cost_model="analytic")
    assert "no rules to search with;" in caplog.text and "shipped" not in caplog.text
    assert r.rules_applied == {} and r.graph.num_ops() == g.pruned().num_ops()


def test_a_rule_file_without_proved_rules_says_so(tmp_path, caplog):
    from taso.rules_db import RuleSet
    assert UNVERIFIED_REASSOC.status is None  # never verified
    path = tmp_path / "new.json"
    RuleSet([UNVERIFIED_REASSOC]).save(path)
    g = chain([(8, 8), (8, 8), (8, 1)])
    with caplog.at_level("WARNING", logger="taso"):
        run_search(g, rules=path, fold=False, cost_model="analytic")
    assert "hold no proof from today's axioms" in caplog.text
    assert "unverified=True takes them" in caplog.text
    with caplog.at_level("WARNING", logger="taso"):  # the same rule handed over as an object
        run_search(g, rules=[UNVERIFIED_REASSOC], fold=False, cost_model="analytic")
    assert caplog.text.count("hold no proof") == 2
    assert run_search(g, rules=path, unverified=True, fold=False,
                      cost_model="analytic").num_rules == 1


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_model_builder_optimizes_and_passes_the_check(name):
    g = ALL[name](small=True)
    rules = list(FUSION)
    r = run_search(g, budget=10, rules=rules, cost_model="analytic")
    assert r.cost_after <= r.cost_before + 1e-9
    r.max_error = check_equivalence(g, r.graph)
    assert r.max_error < 1e-2


def test_logging_follows_the_environment(monkeypatch):
    import logging

    from taso.optimizer.search import configure_logging

    logger = logging.getLogger("taso")
    old = logger.level
    try:
        monkeypatch.setenv("TASO_LOG_LEVEL", "warning")
        monkeypatch.delenv("TASO_DEBUG", raising=False)
        configure_logging()
        assert logger.level == logging.WARNING
        monkeypatch.setenv("TASO_DEBUG", "1")
        configure_logging()
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(old)
