"""Canonical rule forms and coverage of a reference rule set."""

import random

from taso.rules_db import TASO_REFERENCE, PNode, Rule, RuleSet, coverage, load
from taso.rules_db.canonical import canonical_key
from taso.rules_db.coverage import coverage_report

CONV = {"strides": (1, 1), "pads": "same", "activation": "none"}
CONV_RELU = dict(CONV, activation="relu")


def _rule(rid, src, dst, outputs, ranks=None):
    r = Rule(rid, [PNode(*n) for n in src], [PNode(*n) for n in dst], outputs)
    r.vars = {v: {"rank": (ranks or {}).get(v)} for v in r.variables()}
    return r


def _scrambled(r: Rule, seed: int) -> Rule:
    """The same rule with variables renamed, each side's nodes reordered
    (topologically) and the sides swapped."""
    rng = random.Random(seed)
    names = r.variables()
    new = [f"v{i}" for i in range(len(names))]
    rng.shuffle(new)
    ren = dict(zip(names, new))

    def side(nodes):
        order = list(range(len(nodes)))
        for _ in range(20):  # random topological order
            rng.shuffle(order)
            pos = {o: i for i, o in enumerate(order)}
            if all(pos[ref[0]] < pos[j] for j in order for ref in nodes[j].inputs
                   if not isinstance(ref, str)):
                break
        else:
            order = list(range(len(nodes)))
        pos = {o: i for i, o in enumerate(order)}

        def ref(x):
            return ren[x] if isinstance(x, str) else (pos[x[0]], x[1])

        def attr(v):
            if isinstance(v, dict) and "dim" in v:
                return {"dim": (ref(v["dim"][0]), v["dim"][1])}
            return tuple(attr(u) for u in v) if isinstance(v, tuple) else v

        return [PNode(nodes[o].op, [ref(x) for x in nodes[o].inputs],
                      {k: attr(v) for k, v in nodes[o].attrs.items()}) for o in order], ref

    src, rs = side(r.src)
    dst, rd = side(r.dst)
    return Rule("s", dst, src, [(rd(d), rs(s)) for s, d in r.outputs])


def test_reader_decodes_all_133_and_covers_itself():
    ref = load(TASO_REFERENCE)
    assert len(ref) == 133
    assert coverage(ref, ref) == (133, 133, [])


def test_canonical_form_ignores_renaming_order_and_direction():
    ref = load(TASO_REFERENCE)
    keys = [canonical_key(r) for r in ref]
    for i, r in enumerate(ref):
        assert canonical_key(_scrambled(r, i)) == keys[i], r.id
    # The reference holds rules that differ only by which operand is which; their
    # forms differ.
    assert canonical_key(ref.by_id("taso-085")) != canonical_key(ref.by_id("taso-087"))


def test_scrambled_copies_are_found_directly():
    ref = load(TASO_REFERENCE)
    cands = RuleSet([_scrambled(r, 7 * i) for i, r in enumerate(ref)])
    rep = coverage_report(cands, ref)
    assert len(rep.direct) == 133 and not rep.composed and not rep.missing


def _fusion():
    return _rule("fuse", [("conv2d", ["x", "w"], CONV), ("relu", [(0, 0)], {})],
                 [("conv2d", ["x", "w"], CONV_RELU)], [((1, 0), (0, 0))], {"x": 4, "w": 4})


def test_composed_rules_are_found_and_named():
    ref = load(TASO_REFERENCE)
    # taso-063: one conv+relu fused and another unfused at once = the fusion rule
    # applied forwards at one place and backwards at the other.
    rep = coverage_report([_fusion()], [ref.by_id("taso-063"), ref.by_id("taso-064")])
    assert rep.direct == {"taso-064": "fuse"}
    assert rep.composed == {"taso-063": ["fuse", "fuse"]}
    assert rep.missing == []


def test_unrelated_rules_are_missing():
    ref = load(TASO_REFERENCE)
    comm = _rule("comm", [("ewadd", ["a", "b"], {})], [("ewadd", ["b", "a"], {})],
                 [((0, 0), (0, 0))])
    found, total, missing = coverage([comm, _fusion()], [ref.by_id("taso-000"),
                                                         ref.by_id("taso-022")])
    assert (found, total) == (0, 2) and missing == ["taso-000", "taso-022"]


def test_rank_constraints_block_a_composition():
    # relu(concat(a, b)) = concat(relu a, relu b) known only for rank-4 tensors does
    # not compose into the same fact one level up for matrices.
    rel4 = _rule("r4", [("concat", ["a", "b"], {"axis": 1}), ("relu", [(0, 0)], {})],
                 [("relu", ["a"], {}), ("relu", ["b"], {}),
                  ("concat", [(0, 0), (1, 0)], {"axis": 1})], [((1, 0), (2, 0))],
                 {"a": 4, "b": 4})
    target = _rule("t", [("ewadd", ["a", "b"], {}), ("concat", [(0, 0), "b"], {"axis": 1}),
                         ("relu", [(1, 0)], {})],
                   [("ewadd", ["a", "b"], {}), ("relu", [(0, 0)], {}), ("relu", ["b"], {}),
                    ("concat", [(1, 0), (2, 0)], {"axis": 1})], [((2, 0), (3, 0))],
                   {"a": 2, "b": 2})
    assert coverage([rel4], [target])[0] == 0
    target.vars = {"a": {"rank": 4}, "b": {"rank": 4}}
    assert coverage([rel4], [target])[0] == 1


def test_the_shipped_generated_rules_cover_tasos_set_by_proved_rules():
    # Refuted rules cover nothing: the four of TASO's rules that merge
    # convolutions into a grouped one are found by rules that taso-verify
    # --constrain gave TASO's own size constraint.
    from taso.rules_db import SHIPPED

    ref = load(TASO_REFERENCE)
    proved = [r for r in load(SHIPPED / "generated.json").rules if r.status == "proved"]
    rep = coverage_report(proved, ref)
    assert (rep.found, rep.missing) == (133, [])
    for rid in ("taso-099", "taso-100", "taso-130", "taso-131"):
        rule = next(r for r in proved if r.id == rep.direct[rid])
        assert rule.verification["constrained"] == [["x1", 0, "x2", 0]]
