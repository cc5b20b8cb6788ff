"""Refuted generated rules that hold under size constraints, and coverage that
trusts neither refuted rules nor stricter constraints."""


import pytest
from taso.rules_db import TASO_REFERENCE, Rule, RuleSet, load
from taso.rules_db.coverage import coverage_report
from taso.verifier.cli import main
from taso.verifier.constrain import candidate_equalities, constrain_refuted, with_equalities
from taso.verifier.run import verify_rule, verify_rules

FAMILY = {"x1": "t1", "x2": "t3", "x3": "t0", "x4": "t2"}


def _unconstrained(ref_id: str, src_swap: dict[str, str] | None = None) -> Rule:
    """TASO's rule as the generator writes it: its variables renamed x1..x4,
    no same_dim, a family in its provenance (and `src_swap` renaming
    variables of the source side only, to make it false)."""
    r = load(TASO_REFERENCE).by_id(ref_id)
    names = dict(zip(r.variables(), ("x3", "x1", "x4", "x2")))  # x7 x10 x8 x11

    def side(nodes, swap):
        return [{"op": n.op, "attrs": dict(n.attrs),
                 "inputs": [swap.get(names[x], names[x]) if isinstance(x, str) else list(x)
                            for x in n.inputs]} for n in nodes]
    return Rule.from_json({"id": "gen-test", "src": side(r.src, src_swap or {}),
                           "dst": side(r.dst, {}),
                           "outputs": [[list(s), list(d)] for s, d in r.outputs],
                           "vars": {v: {"rank": 4} for v in names.values()},
                           "provenance": {"generator": "taso-gen", "family": FAMILY}})


def test_only_equalities_the_family_keeps_on_both_its_shapes():
    r = _unconstrained("taso-130")
    eqs = candidate_equalities(r)
    assert ("x1", 0, "x2", 0) in eqs and eqs[0][1] == eqs[0][3]  # same axis first
    # a t-tensor is (2, 2, 3, 3), and (3, 3, 5, 5) on the second shape: axes 0 and 1
    # always agree, 1 and 2 never
    assert ("x1", 0, "x1", 1) in eqs and ("x1", 1, "x1", 2) not in eqs
    r.provenance = {}
    assert candidate_equalities(r) == []


def test_a_rule_false_at_every_size_stays_refuted():
    # The source swaps the two kernels: no sizes make that the same.
    bad = _unconstrained("taso-130", src_swap={"x1": "x2", "x2": "x1"})
    bad.verification = verify_rule(bad, timeout=10)
    assert bad.verification["status"] == "refuted"
    assert constrain_refuted([bad], lambda rs: verify_rules(rs, 5.0, 2)) == {}


def test_coverage_counts_neither_refuted_rules_nor_stricter_ones():
    ref = load(TASO_REFERENCE)
    target = [ref.by_id("taso-130")]
    r = _unconstrained("taso-130")
    assert coverage_report([r], target).direct == {"taso-130": "gen-test"}  # unverified
    r.verification = {"status": "refuted"}
    assert coverage_report([r], target).found == 0
    fixed = with_equalities(r, [("x1", 0, "x2", 0)])
    fixed.verification = {"status": "proved"}
    assert coverage_report([fixed], target).direct == {"taso-130": "gen-test"}
    stricter = with_equalities(fixed, [("x3", 1, "x4", 1)])
    assert coverage_report([stricter], target).direct == {}


@pytest.mark.slow
def test_merged_grouped_convolutions_get_tasos_constraint(tmp_path, capsys):
    # TASO's taso-130 merges two convolutions into one with two groups: true
    # only for kernels with as many output channels. Without that, refuted;
    # --constrain finds that one equality and keeps the constrained rule.
    src = tmp_path / "gen.json"
    RuleSet([_unconstrained("taso-130")], name="gen").save(src)
    out = tmp_path / "out.json"
    assert main([str(src), "--output", str(out), "--constrain", "--json", "--timeout", "5"]) == 0
    assert "constrained 1 refuted rules" in capsys.readouterr().err
    (rule,) = load(out).rules
    assert rule.same_dims() == [("x1", 0, "x2", 0)]  # the kernels' output channels
    rec = rule.verification
    assert rec["status"] == "proved" and rec["constrained"] == [["x1", 0, "x2", 0]]
    assert rec["as_generated"]["status"] == "refuted" and "counterexample" in rec["as_generated"]
    with pytest.raises(SystemExit):
        main([str(src), "--output", str(out), "--constrain", "--resume"])
    assert "--constrain changes rules" in capsys.readouterr().err


@pytest.mark.slow
def test_only_the_rules_named_are_proved_and_constrained(tmp_path, capsys):
    # a large set's few refuted rules repaired without proving it all again
    other = Rule.from_json({**_unconstrained("taso-131").to_json(), "id": "gen-other",
                            "verification": {"status": "unknown", "reason": "left alone"}})
    src = tmp_path / "gen.json"
    RuleSet([_unconstrained("taso-130"), other], name="gen").save(src)
    out = tmp_path / "out.json"
    assert main([str(src), "--output", str(out), "--constrain", "--only", "gen-test",
                 "--timeout", "5"]) == 0
    assert "constrained 1 refuted rules" in capsys.readouterr().err
    done, kept = load(out).rules
    assert done.status == "proved" and done.same_dims() == [("x1", 0, "x2", 0)]
    assert kept.verification == {"status": "unknown", "reason": "left alone"}
    assert main([str(src), "--output", str(out), "--only", "gen-test,nosuch"]) == 2
    assert "--only: no rule nosuch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(src), "--output", str(out), "--only", "gen-test", "--resume"])
