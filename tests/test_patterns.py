"""One meaning of a rule pattern (taso.rules_db.pattern): malformed rules are
refused by every reader with one line naming the rule, and a negative axis
means the same thing to the matcher, the refuter and the proof."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
from taso.optimizer.search import resolve_rules
from taso.rules_db import SHIPPED, Rule, RuleError, checked, load, parse_rule
from taso.verifier.prove import prove
from taso.verifier.record import axioms_digest, is_current, record_digest
from taso.verifier.refute import refute, replay
from taso.verifier.run import verify_rule

import taso


def node(op, inputs, **attrs):
    return {"op": op, "inputs": [list(i) if isinstance(i, tuple) else i for i in inputs],
            "attrs": attrs}


GOOD = {"id": "relu-of-concat", "vars": {"x": {"rank": 2}, "y": {"rank": 2}},
        "src": [node("concat", ["x", "y"], axis=1), node("relu", [(0, 0)])],
        "dst": [node("relu", ["x"]), node("relu", ["y"]),
                node("concat", [(0, 0), (1, 0)], axis=1)],
        "outputs": [[[1, 0], [2, 0]]]}


def mutated(edit):
    d = copy.deepcopy(GOOD)
    edit(d)
    return d


def _set(path, value):
    def edit(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return edit


MALFORMED = [
    ("no outputs", _set(["outputs"], []), "no output is mapped"),
    ("empty source", _set(["src"], []), "source side is empty"),
    ("undeclared variable", _set(["dst", 0, "inputs"], ["q"]), "reads variable 'q'"),
    ("missing output node", _set(["outputs"], [[[1, 0], [7, 0]]]),
     "names no output of the target"),
    ("missing output index", _set(["outputs"], [[[1, 3], [2, 0]]]),
     "names no output of the source"),
    ("source output a variable", _set(["outputs"], [["x", [2, 0]]]), "is a variable"),
    ("unknown operator", _set(["dst", 0, "op"], "frobnicate"), "unknown operator 'frobnicate'"),
    ("source node", _set(["src", 0, "op"], "input"), "cannot be a pattern node"),
    ("wrong arity", _set(["dst", 0, "inputs"], ["x", "y"]), "takes 1 input(s), got 2"),
    ("forward reference", _set(["dst", 0, "inputs"], [[2, 0]]), "names no earlier node"),
    ("missing output of a node", _set(["dst", 2, "inputs"], [[0, 1], [1, 0]]), "has no output 1"),
    ("attribute variable only on the target", _set(["dst", 2, "attrs"], {"axis": "?b"}),
     "does not bind"),
    ("unknown attribute", _set(["dst", 0, "attrs"], {"alpha": 1}), "has no attribute(s)"),
    ("required attribute missing", _set(["dst", 2, "attrs"], {}), "needs attribute(s) ['axis']"),
    ("constraint on a non-variable", _set(["vars", "zz"], {"rank": 2}), "'zz'"),
    ("unknown constraint", _set(["vars", "x"], {"rank": 2, "shape": 3}), "unknown constraint"),
    ("bad rank", _set(["vars", "x"], {"rank": "two"}), "rank of 'x'"),
    ("negative axis, unknown rank", lambda d: (d["vars"].pop("x"),
                                               d["src"][0]["attrs"].update(axis=-1)),
     "counts from the end"),
    ("negative same_dim axis, unknown rank",
     _set(["vars"], {"x": {"same_dim": [[-1, "y", 0]]}, "y": {}}), "counts from the end"),
    ("same_dim axis out of range", _set(["vars", "x"], {"rank": 2, "same_dim": [[5, "y", 0]]}),
     "out of range"),
    ("split sizes a variable", _set(["dst"], [node("split", ["x"], axis=0, sizes="?s")]),
     "how many outputs"),
    ("bad size reference", _set(["dst", 2, "attrs"], {"axis": {"dim": ["x"]}}), '{"dim"'),
    ("not an object", lambda d: d.clear() or d.update(id="r", src=3), "field 'src'"),
    ("bad reference", _set(["dst", 0, "inputs"], [[0]]), "neither a variable name"),
]


@pytest.mark.parametrize("name,edit,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_rule_is_refused_naming_the_problem(name, edit, words):
    with pytest.raises(RuleError, match=r"rule \S+: ") as e:
        parse_rule(mutated(edit))
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_the_well_formed_rule_parses():
    r = parse_rule(GOOD)
    assert r.id == "relu-of-concat" and checked(r) is r


def _ruleset_file(tmp_path, rules):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "taso-rules", "version": 1, "name": "bad",
                                "rules": rules}))
    return path


def test_loading_a_malformed_file_names_file_rule_and_problem(tmp_path):
    path = _ruleset_file(tmp_path, [GOOD, mutated(_set(["outputs"], []))])
    with pytest.raises(ValueError, match=r"bad\.json: rule relu-of-concat: no output"):
        load(path)
    path = _ruleset_file(tmp_path, [GOOD, GOOD])
    with pytest.raises(ValueError, match="used twice"):
        load(path)


@pytest.mark.parametrize("name,edit,words", MALFORMED[:11], ids=[m[0] for m in MALFORMED[:11]])
def test_no_program_crashes_on_a_malformed_rule_file(tmp_path, name, edit, words):
    """taso-opt and taso-verify: one line naming the problem, exit status 2; the
    API: a RuleError, never a crash of the compiled core."""
    d = mutated(edit)
    path = _ruleset_file(tmp_path, [d])
    g = taso.new_graph()
    g.mark_output(g.relu(g.new_input((2, 3))))
    model = tmp_path / "m.onnx"
    taso.export_onnx(g, model)
    for cmd in (["taso-verify", str(path)],
                ["taso-opt", str(model), "-o", str(tmp_path / "o.onnx"), "--rules", str(path),
                 "--cost-model", "analytic", "-q"]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (cmd, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "bad.json" in lines[0], p.stderr
    assert not (tmp_path / "o.onnx").exists()
    try:
        rule = Rule.from_json(d)
    except Exception:  # not even the shape of a rule: nothing to hand over
        return
    with pytest.raises(RuleError):
        taso.optimize(g, rules=[rule], cost_model="analytic", unverified=True)
    with pytest.raises(RuleError):
        verify_rule(rule, timeout=2)


def test_the_core_refuses_what_python_would_have(tmp_path):
    """The compiled core checks its inputs too: a rule reaching it unchecked
    (through the raw binding) raises, it does not crash."""
    code = """
from taso.optimizer import _search
core = _search.Core([0, 0], lambda *a: None, lambda *a: None, lambda *a: True, [False, False])
bad = [
    (1, [(0, [(-1, 0)])], [(1, [(-2, 0)])], [((0, 0), (0, 0))]),   # unbound variable
    (1, [(0, [(-1, 0)])], [(1, [(-1, 0)])], []),                   # no output
    (1, [(0, [(-1, 0)])], [(1, [(-1, 0)])], [((0, 0), (5, 0))]),   # missing target node
    (1, [(0, [(-1, 0)])], [(1, [(-1, 0)])], [((0, -1), (0, 0))]),  # bad output index
]
for args in bad:
    try:
        core.add_rule(*args)
    except ValueError:
        continue
    raise SystemExit("accepted: %r" % (args,))
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


# ---- one meaning of a negative axis ---------------------------------------------------
def test_negative_axes_are_normalised_where_the_rank_is_declared():
    d = mutated(lambda d: (d["src"][0]["attrs"].update(axis=-1),
                           d["vars"]["x"].update(same_dim=[[-2, "y", -2]])))
    r = parse_rule(d)
    assert r.src[0].attrs["axis"] == 1
    assert r.same_dims() == [("x", 0, "y", 0)]
    # the target's concat reads relu outputs: ranks the rule does not declare
    d["dst"][2]["attrs"]["axis"] = -1
    with pytest.raises(RuleError, match="node 0's output 0, whose rank"):
        parse_rule(d)


def test_graphs_hold_axes_non_negative():
    g = taso.new_graph()
    a, b = g.new_input((2, 3)), g.new_input((2, 4))
    c = g.concat(-1, [a, b])
    assert dict(g.nodes[c.node].attrs)["axis"] == 1
    assert dict(g.nodes[g.softmax(c).node].attrs)["axis"] == 1
    f = g.flatten(g.new_input((2, 3, 4)), axis=-1)
    assert dict(g.nodes[f.node].attrs)["axis"] == 2 and f.shape == (6, 4)
    with pytest.raises(taso.ShapeError, match="out of range"):
        g.concat(2, [a, b])


def _same_dim_rule(axis):
    # two matrices side by side then split back: true when the rows agree, which
    # the constraint says with a negative axis (the first of two)
    return parse_rule({
        "id": "split-concat", "vars": {"x": {"rank": 2, "same_dim": [[axis, "y", axis]]},
                                       "y": {"rank": 2}},
        "src": [node("relu", ["x"]), node("relu", ["y"])],
        "dst": [node("concat", ["x", "y"], axis=1), node("relu", [(0, 0)]),
                node("split", [(1, 0)], axis=1, sizes=[{"dim": ["x", -1]}, {"dim": ["y", -1]}])],
        "outputs": [[[0, 0], [2, 0]], [[1, 0], [2, 1]]]})


def test_a_negative_same_dim_means_one_thing_everywhere():
    r = _same_dim_rule(-2)
    assert r.same_dims() == [("x", 0, "y", 0)]
    assert prove(r, timeout=10)["proved"]
    assert refute(r, seeds=8) is None  # the refuter draws x and y with equal rows
    g = taso.new_graph()
    x, y = g.new_input((3, 2)), g.new_input((3, 4))
    g.mark_output(g.relu(x))
    g.mark_output(g.relu(y))
    out = taso.optimize(g, rules=[r], cost_model=lambda op, a, s: 1.0 if op == "relu" else 0.1,
                        unverified=True, partition=False, min_gain=0.0)
    assert [n.op for n in out.topo_order() if n.op not in ("input", "weight")] == \
        ["concat", "relu", "split"]


# ---- the false proofs ---------------------------------------------------------
def _rule(rid, src, dst, outputs=None, **ranks):
    return parse_rule({"id": rid, "src": src, "dst": dst,
                       "outputs": outputs or [[[len(src) - 1, 0], [len(dst) - 1, 0]]],
                       "vars": {k: {"rank": r} for k, r in ranks.items()}})


FALSE_ON_NEGATIVE_AXES = [
    _rule("concat-reordered", [node("concat", ["x", "x", "v"], axis=-1)],
          [node("concat", ["x", "v", "x"], axis=-1)], x=1, v=1),
    _rule("ewadd-concat-mismatched",
          [node("concat", ["x", "z"], axis="?a"), node("concat", ["y", "u"], axis="?a"),
           node("ewadd", [(0, 0), (1, 0)])],
          [node("ewadd", ["x", "y"]), node("ewadd", ["z", "u"]),
           node("concat", [(0, 0), (1, 0)], axis="?a"), node("relu", [(2, 0)])]),
    _rule("relu-is-times-one", [node("relu", ["y"])],
          [node("const_one", [], shape=[]), node("scalar_mul", ["y", (0, 0)])]),
]


@pytest.mark.parametrize("r", FALSE_ON_NEGATIVE_AXES, ids=[r.id for r in FALSE_ON_NEGATIVE_AXES])
def test_false_rules_are_not_proved(r):
    rec = verify_rule(r, timeout=5)
    assert rec["status"] == "refuted", rec
    assert replay(r, rec["counterexample"]) is not None


def test_the_ewadd_concat_axiom_is_guarded_and_its_check_sees_negative_axes():
    from taso.verifier.axioms import Axiom, by_name, check_axiom, ge
    ax = by_name()["ewadd-concat"]
    assert ge("?a", 0) in ax.when
    unguarded = Axiom("ewadd-concat-unguarded", "", ax.lhs, ax.rhs,
                      tuple(c for c in ax.when if c != ge("?a", 0)))
    assert any(check_axiom(unguarded, seed).status == "violated" for seed in range(30))


# ---- proof records ------------------------------------------------------------------
def test_every_way_of_giving_rules_keeps_only_current_proofs():
    rs = load(SHIPPED / "generated.json")
    proved = sum(r.status == "proved" for r in rs)
    assert proved < len(rs)
    for given in (rs, list(rs), [rs], str(SHIPPED / "generated.json")):
        assert len(resolve_rules(given)) == proved
    assert len(resolve_rules(rs, unverified=True)) == len(rs)


def test_a_stale_proof_is_proved_again_and_a_forged_one_dropped(caplog):
    true = load(SHIPPED / "taso.json").rules[0]
    assert is_current(true.verification)
    stale = Rule.from_json({**true.to_json(), "id": "stale",
                            "verification": {**true.verification, "axioms_hash": "old"}})
    forged = Rule.from_json({**FALSE_ON_NEGATIVE_AXES[0].to_json(), "id": "forged",
                             "verification": {"status": "proved", "axioms": []}})
    kept = resolve_rules([stale, forged])
    assert [r.id for r in kept] == ["stale"]
    assert "proving them again" in caplog.text


def test_records_name_z3_the_axioms_used_and_the_axiom_set():
    rec = verify_rule(load(SHIPPED / "taso.json").rules[0], timeout=5)
    assert rec["status"] == "proved" and rec["axioms"] and rec["z3"]
    assert rec["axioms_hash"] == axioms_digest(rec["axioms"])  # of the axioms it used


def test_shipped_sets_carry_current_records():
    for name in ("taso.json", "fusion.json", "generated.json"):
        for r in load(SHIPPED / name):
            assert r.status in ("proved", "refuted"), (name, r.id)
            assert r.verification.get("axioms_hash") == record_digest(r.verification), \
                (name, r.id)


# ---- the refuter ----------------------------------------------------------------------
def test_split_sizes_given_as_variables_are_drawn():
    # split sizes swapped: false wherever the parts differ
    r = _rule("split-swapped",
              [node("concat", ["x", "y"], axis=0), node("split", [(0, 0)], axis=0,
                                                          sizes=["?s1", "?s2"])],
              [node("concat", ["x", "y"], axis=0), node("split", [(0, 0)], axis=0,
                                                          sizes=["?s2", "?s1"])],
              outputs=[[[1, 0], [1, 0]]], x=2, y=2)
    cex = refute(r)
    assert cex is not None and replay(r, cex) is not None


def test_batchnorm_folds_are_refuted_inside_the_variance_domain():
    fold = load(SHIPPED / "fusion.json").by_id("fusion-conv-batchnorm").to_json()
    fold["id"] = "wrong-epsilon"
    fold["dst"][0]["attrs"]["epsilon"] = 0.5  # the kernel scaled with another epsilon
    r = parse_rule(fold)
    rec = verify_rule(r, timeout=20)  # shapes for a grouped conv take the solver a while
    assert rec["status"] == "refuted", rec
    shapes = rec["counterexample"]["shapes"]
    assert replay(r, rec["counterexample"])["max_diff"] > 0
    assert all(np.prod(s) > 0 for s in shapes.values())
