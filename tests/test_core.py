"""The compiled search core on small hand-made graphs: matching, the outside-use
and cycle checks, canonical hashing, the one match -> filter -> apply loop
(expand, hash_checks, the search) and the way back to taso graphs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import assert_same, chain, engine
from taso.optimizer import _search
from taso.rules_db import SHIPPED, PNode, Rule, load

import taso
from taso.models import ALL

FUSION = load(SHIPPED / "fusion.json")

# (A B) C  =>  A (B C)  (the core takes rules as given: proofs are the search's to ask for)
REASSOC = Rule(
    "reassoc", [PNode("matmul", ["a", "b"], {"activation": "none"}),
                PNode("matmul", [(0, 0), "c"], {"activation": "none"})],
    [PNode("matmul", ["b", "c"], {"activation": "none"}),
     PNode("matmul", ["a", (0, 0)], {"activation": "none"})],
    [((1, 0), (1, 0))])


def test_core_is_compiled():
    assert _search.version() >= 2
    assert "Core" in dir(_search)


def test_match_with_an_outside_use_of_an_internal_output_is_rejected():
    g = chain([(4, 4), (4, 4), (4, 4)])
    e = engine([REASSOC])
    assert len(e.core.matches(e.to_core(g), 0)) == 1
    inner = g.nodes[g.outputs[0][0]].inputs[0]  # a @ b, internal to the match
    g.mark_output(g.tensor(inner))
    assert e.core.matches(e.to_core(g), 0) == []


def test_rewrites_that_would_create_a_cycle_are_dropped():
    # The second matmul's right operand depends on the first matmul's output:
    # merging the two would feed the merged product into its own operand.
    g = taso.new_graph()
    x = g.new_input((4, 4), name="x")
    t0 = g.matmul(x, g.new_input((4, 4), name="w1"))
    t1 = g.matmul(x, g.relu(t0))
    g.mark_output(t1)
    merge = FUSION.by_id("fusion-merge-matmul-rank2")
    e = engine([merge])
    cg = e.to_core(g)
    assert len(e.core.matches(cg, 0)) == 2  # both role assignments match structurally
    assert e.core.expand(cg) == []


def test_common_nodes_are_merged_and_dead_nodes_dropped():
    g = taso.new_graph()
    x = g.new_input((2, 3), name="x")
    g.relu(x)  # dead
    g.mark_output(g.ewadd(g.tanh(x), g.tanh(x)))
    cg = engine([]).to_core(g)
    assert cg.num_ops == 2


def test_graph_hash_ignores_node_order():
    def build(order):
        g = taso.new_graph()
        x = g.new_input((2, 3), name="x")
        outs = {}
        for op in order:
            outs[op] = getattr(g, op)(x)
        g.mark_output(g.ewadd(outs["relu"], outs["tanh"]))
        return g

    e = engine([])
    assert e.to_core(build(["relu", "tanh"])).hash == e.to_core(build(["tanh", "relu"])).hash


def test_weight_constraint_and_symbolic_pads():
    rule = FUSION.by_id("fusion-conv-batchnorm")

    def graph(weights: bool, pads):
        g = taso.new_graph()
        x = g.new_input((1, 4, 6, 6), name="x")
        mk = g.new_weight if weights else (lambda s: g.new_input(s))
        y = g.conv2d(x, mk((4, 4, 3, 3)), padding=pads)
        params = [mk((4,)) for _ in range(4)]
        g.mark_output(g.batchnorm(y, *params))
        return g

    e = engine([rule])
    assert len(e.core.expand(e.to_core(graph(True, "same")))) == 1
    assert e.core.expand(e.to_core(graph(False, "same"))) == []  # parameters not weights
    same = FUSION.by_id("fusion-merge-conv2d-enlarge")
    g = taso.new_graph()
    x = g.new_input((1, 4, 6, 6), name="x")
    a = g.conv2d(x, g.new_weight((4, 4, 1, 1)), padding=(0, 0, 0, 0))  # "same" for 1x1
    b = g.conv2d(x, g.new_weight((4, 4, 3, 3)), padding=(0, 0, 0, 0))  # not "same" for 3x3
    g.mark_output(g.ewadd(a, g.conv2d(x, g.new_weight((4, 4, 3, 3)), padding=(1, 1, 1, 1))))
    g.mark_output(b)
    e = engine([same])
    found = e.core.expand(e.to_core(g))
    assert len(found) == 1  # the 1x1 with the padded 3x3 only


def test_from_core_keeps_the_operand_order_of_nodes_it_left_alone():
    # No total order puts every pair's first operand first: the core swaps
    # some, and an add is priced with its first operand's chain.
    g = taso.new_graph()
    a, b, c = (g.new_input((1, 8), name=n) for n in "abc")
    for p, q in ((a, b), (b, c), (c, a)):
        g.mark_output(g.ewadd(p, q))
    e = engine([REASSOC])
    back = e.from_core(e.to_core(g), g)

    def operands(h):
        return [tuple(h.nodes[p].name for p, _ in n.inputs) for n in h.topo_order()
                if n.op == "ewadd"]
    assert sorted(operands(back)) == sorted(operands(g)) == [("a", "b"), ("b", "c"), ("c", "a")]


def test_expand_pages_through_the_rewrites():
    g = taso.new_graph()
    w = g.new_weight((8, 8))
    for i in range(4):
        g.mark_output(g.matmul(g.new_input((1, 8), name=f"x{i}"), w))
    e = engine([FUSION.by_id("fusion-merge-matmul-rows")])
    cg = e.to_core(g)
    every = [c.hash for _, _, c in e.core.expand(cg)]
    assert len(every) == 6  # one per pair of the four products
    paged = [c.hash for k in range(0, 6, 4) for _, _, c in e.core.expand(cg, k, 4)]
    assert paged == every
    assert e.core.expand(cg, 0, 0) == [] and len(e.core.expand(cg, 5)) == 1
    # a match passed over by its key is left out; a rewrite of other nodes keeps
    # the key: after merging the first pair, the one pair of the other two
    # products is the only match of the six left, with the key it had
    keys = [k for _, k, _ in e.core.expand(cg)]
    assert len(set(keys)) == 6
    assert [k for _, k, _ in e.core.expand(cg, passed={keys[0]})] == keys[1:]
    merged = e.core.expand(cg)[0][2]
    kept = {k for _, k, _ in e.core.expand(merged)} & set(keys)
    assert len(kept) == 1 and keys[0] not in kept


def test_from_core_rebuilds_what_add_node_infers():
    g = ALL["bert_base"](small=True)
    e = engine([FUSION.by_id("rows-dense-residual")])
    cg = e.to_core(g)
    first = e.from_core(cg, g)  # inferred node by node
    again = e.from_core(cg, g)  # from what the first rebuild inferred
    other = engine([FUSION.by_id("rows-dense-residual")])
    fresh = other.from_core(other.to_core(g), g)  # another engine, nothing kept yet

    def nodes(h):
        return [(n.op, n.attrs, n.inputs, n.shapes, n.dtypes) for n in h.topo_order()]
    assert e._inferred and nodes(again) == nodes(first) == nodes(fresh)
    assert_same(g, again)


# ---- random graphs: the core's shortcuts agree with building, rewrites are sound ----
RELU_PAIR = Rule("relu-pair", [PNode("relu", ["x"]), PNode("relu", ["y"])],
                 [PNode("concat", ["x", "y"], {"axis": 0}), PNode("relu", [(0, 0)]),
                  PNode("split", [(1, 0)], {"axis": 0, "sizes": [{"dim": ["x", 0]},
                                                                {"dim": ["y", 0]}]})],
                 [((0, 0), (2, 0)), ((1, 0), (2, 1))])


COMMUTE = Rule("commute", [PNode("ewadd", ["x", "y"])], [PNode("ewadd", ["y", "x"])],
               [((0, 0), (0, 0))])


RANDOM_RULES = [REASSOC, RELU_PAIR, COMMUTE, FUSION.by_id("fusion-merge-matmul-rank2"),
                FUSION.by_id("fusion-matmul-relu")]


@st.composite
def random_graphs(draw):
    g = taso.new_graph(seed=draw(st.integers(0, 3)))
    ts = [g.new_input((4, 4), name=f"x{i}") for i in range(2)]
    ts += [g.new_weight((4, 4), scale=0.5) for _ in range(2)]
    for _ in range(draw(st.integers(2, 9))):
        op = draw(st.sampled_from(["matmul", "relu", "tanh", "ewadd"]))
        a = ts[draw(st.integers(0, len(ts) - 1))]
        b = ts[draw(st.integers(0, len(ts) - 1))]
        ts.append(g.matmul(a, b) if op == "matmul" else g.ewadd(a, b) if op == "ewadd"
                  else getattr(g, op)(a))
    g.mark_output(ts[-1])
    if draw(st.booleans()):
        g.mark_output(ts[draw(st.integers(4, len(ts) - 1))])
    return g


@settings(max_examples=40, deadline=None)
@given(random_graphs())
def test_random_graphs_rewrite_soundly_and_hashes_agree(g):
    e = engine(RANDOM_RULES)
    cg = e.to_core(g)
    for _, predicted, cycle, built in e.core.hash_checks(cg):
        if cycle:
            assert built is None
        if predicted is not None and built is not None:
            assert predicted == built
    for _, _, ng in e.core.expand(cg):
        assert_same(g, e.from_core(ng, g), tol=1e-3)
    r = e.core.search(cg, budget=8)
    assert_same(g, e.from_core(r["best"], g), tol=1e-3)


def test_mirror_image_matches_are_used_once():
    g = taso.new_graph()
    x = g.new_input((2, 3, 8), name="x")
    for _ in range(2):
        g.mark_output(g.add(g.matmul(x, g.new_weight((8, 8))), g.new_weight((8,))))
    e = engine([FUSION.by_id("fusion-merge-matmul-bias-rank3")])
    cg = e.to_core(g)
    assert len(e.core.matches(cg, 0)) == 2  # the match and its mirror image
    (rule, _, merged), = e.core.expand(cg)
    assert_same(g, e.from_core(merged, g))


def test_merge_of_dense_layers_refuses_broadcast_biases():
    # Concatenating two length-1 biases does not give the merged layer's bias.
    g = taso.new_graph()
    x = g.new_input((3, 8), name="x")
    for n in (1, 8):
        g.mark_output(g.add(g.matmul(x, g.new_weight((8, 8))), g.new_weight((n,))))
    e = engine([FUSION.by_id("fusion-merge-matmul-bias-rank2")])
    assert e.core.expand(e.to_core(g)) == []
    g2 = taso.new_graph()
    x = g2.new_input((3, 8), name="x")
    for _ in range(2):
        g2.mark_output(g2.add(g2.matmul(x, g2.new_weight((8, 8))), g2.new_weight((8,))))
    assert len(e.core.expand(e.to_core(g2))) == 1


def test_commutative_operands_hash_alike_and_match_either_way():
    def build(swap):
        g = taso.new_graph()
        x, y = g.new_input((4, 4), name="x"), g.new_input((4, 4), name="y")
        w = g.new_weight((4, 4))
        p = g.matmul(x, w)
        g.mark_output(g.ewadd(y, p) if swap else g.ewadd(p, y))
        return g

    # A pattern with the product on the left matches a graph with it on the right.
    fold_add = Rule("matmul-then-add", [PNode("matmul", ["a", "b"], {"activation": "none"}),
                                        PNode("ewadd", [(0, 0), "c"])],
                    [PNode("relu", ["c"])], [((1, 0), (0, 0))])  # structure only
    e = engine([fold_add, COMMUTE])
    left, right = e.to_core(build(False)), e.to_core(build(True))
    assert left.hash == right.hash
    assert len(e.core.matches(right, 0)) == 1
    # Commuting an ewadd gives back the same graph: the search has nothing new.
    commuted = [ng for ri, _, ng in e.core.expand(left) if ri == 1]
    assert commuted and all(ng.hash == left.hash for ng in commuted)


def test_rewrites_of_weights_alone_are_not_expanded():
    # Reassociating a concat of kernels changes nothing the model runs.
    reassoc = Rule("concat-reassoc", [PNode("concat", ["a", "b"], {"axis": 1}),
                                      PNode("concat", [(0, 0), "c"], {"axis": 1})],
                   [PNode("concat", ["b", "c"], {"axis": 1}),
                    PNode("concat", ["a", (0, 0)], {"axis": 1})], [((1, 0), (1, 0))])
    g = taso.new_graph()
    x = g.new_input((2, 4), name="x")
    w = g.concat(1, [g.concat(1, [g.new_weight((4, 3)), g.new_weight((4, 3))]),
                     g.new_weight((4, 3))])
    g.mark_output(g.matmul(x, w))
    e = engine([reassoc])
    cg = e.to_core(g)
    assert len(e.core.matches(cg, 0)) == 1
    assert e.core.expand(cg) == []
    g2 = taso.new_graph()  # the same rewrite over a run-time input applies
    x2, y2 = g2.new_input((2, 4), name="x"), g2.new_input((4, 3), name="y")
    g2.mark_output(g2.matmul(x2, g2.concat(1, [g2.concat(1, [y2, g2.new_weight((4, 3))]),
                                               g2.new_weight((4, 3))])))
    assert len(e.core.expand(e.to_core(g2))) == 1


# ---- why the search stopped ---------------------------------------------------------
def _stop(g: taso.Graph, rules, **limits) -> dict:
    e = engine(rules)
    return e.core.search(e.to_core(g), **limits)


def test_the_search_says_why_it_stopped():
    cheaper = chain([(512, 512), (512, 512), (512, 1)])  # reassociating pays
    dearer = chain([(1, 512), (512, 512), (512, 512)])  # it costs far more
    # Every graph the rule reaches was expanded: the chain and its rewrite.
    res = _stop(cheaper, [REASSOC], budget=100)
    assert (res["stop_reason"], res["expanded"]) == ("saturated", 2)
    assert _stop(cheaper, [], budget=100)["stop_reason"] == "saturated"  # nothing to rewrite
    # The rewrite costs more than alpha x the best: set aside, the queue runs dry.
    res = _stop(dearer, [REASSOC], budget=100, alpha=1.05)
    assert (res["stop_reason"], res["expanded"]) == ("exhausted", 1)
    res = _stop(dearer, [REASSOC], budget=100, alpha=1e6)  # within alpha: expanded
    assert (res["stop_reason"], res["expanded"]) == ("saturated", 2)
    # The limits, with the rewrite still queued.
    res = _stop(cheaper, [REASSOC], budget=1)
    assert (res["stop_reason"], res["expanded"]) == ("budget", 1)
    res = _stop(cheaper, [REASSOC], budget=100, time_limit=1e-9)
    assert (res["stop_reason"], res["expanded"]) == ("time_limit", 1)  # not "budget"


def test_the_op_cap_drops_larger_graphs():
    g = taso.new_graph()
    x, y = g.new_input((2, 4), name="x"), g.new_input((3, 4), name="y")
    g.mark_output(g.relu(x))
    g.mark_output(g.relu(y))
    # two relus -> concat, relu, split: 3 operators where there were 2
    wide = _stop(g, [RELU_PAIR], budget=10, alpha=1e6, max_ops_factor=2.0)
    assert (wide["stop_reason"], wide["expanded"]) == ("saturated", 2)
    capped = _stop(g, [RELU_PAIR], budget=10, alpha=1e6, max_ops_factor=1.0)
    assert (capped["stop_reason"], capped["expanded"]) == ("saturated", 1)
