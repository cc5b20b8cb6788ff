"""taso.verifier: known rules are proved, false rules refuted with a
counterexample, undecidable ones come back unknown in time, records and the CLI."""

import json
import time
from pathlib import Path

import pytest
from taso.rules_db import SHIPPED, Rule, RuleSet, load
from taso.verifier.cli import main
from taso.verifier.prove import prove
from taso.verifier.refute import refute, replay
from taso.verifier.run import verify_rule, verify_rules

TASO_PB = SHIPPED / "reference" / "graph_subst.pb"


@pytest.fixture(scope="module")
def taso_rules():
    return load(TASO_PB)


def rule(rid, src, dst, outputs=None, **ranks):
    """A rule from compact node lists: nodes are (op, inputs, attrs); the default
    maps the last source node to the last target node."""
    def nodes(ns):
        return [{"op": op, "inputs": [list(i) if isinstance(i, tuple) else i for i in ins],
                 "attrs": attrs} for op, ins, attrs in ns]
    outs = outputs or [[[len(src) - 1, 0], [len(dst) - 1, 0]]]
    return Rule.from_json({"id": rid, "src": nodes(src), "dst": nodes(dst), "outputs": outs,
                           "vars": {k: {"rank": r} for k, r in ranks.items()}})


FALSE_RULES = [
    # relu(a + b) = relu(a) + relu(b)
    rule("relu-additive", [("ewadd", ["a", "b"], {}), ("relu", [(0, 0)], {})],
         [("relu", ["a"], {}), ("relu", ["b"], {}), ("ewadd", [(0, 0), (1, 0)], {})]),
    # a b = b a
    rule("matmul-comm", [("matmul", ["a", "b"], {})], [("matmul", ["b", "a"], {})], a=2, b=2),
    # concat on the wrong axis: concat_1(relu a, relu b) = relu(concat_0(a, b))
    rule("concat-wrong-axis", [("relu", ["a"], {}), ("relu", ["b"], {}),
                               ("concat", [(0, 0), (1, 0)], {"axis": 1})],
         [("concat", ["a", "b"], {"axis": 0}), ("relu", [(0, 0)], {})], a=2, b=2),
    # conv with a transposed kernel
    rule("conv-transposed-kernel", [("conv2d", ["x", "w"], {"pads": "same"})],
         [("transpose", ["w"], {"perm": [1, 0, 2, 3]}),
          ("conv2d", ["x", (0, 0)], {"pads": "same"})], x=4, w=4),
]


@pytest.mark.parametrize("idx", [0, 22, 24, 36, 59, 64, 77, 84, 99, 103, 116])
def test_taso_rules_proved(taso_rules, idx):
    r = taso_rules.rules[idx]
    res = prove(r, timeout=10)
    assert res["proved"], (str(r), res)
    assert res["axioms"] and res["seconds"] < 10


def test_hand_written_rule_proved_with_its_axioms():
    # conv(x, w1 + w2) with a fused relu = relu(conv(x, w1) + conv(x, w2))
    r = rule("conv-linear-relu",
             [("ewadd", ["w1", "w2"], {}),
              ("conv2d", ["x", (0, 0)], {"pads": "same", "activation": "relu"})],
             [("conv2d", ["x", "w1"], {"pads": "same"}), ("conv2d", ["x", "w2"], {"pads": "same"}),
              ("ewadd", [(0, 0), (1, 0)], {}), ("relu", [(2, 0)], {})], x=4, w1=4, w2=4)
    res = prove(r, timeout=10)
    assert res["proved"]
    assert {"conv-kernel-ewadd", "conv-relu-fusion"} <= set(res["axioms"])


def test_vacuous_proof_is_flagged():
    # conv needs a 4-D input, the rule says x is 2-D: no instance, proved vacuously
    r = rule("vacuous", [("conv2d", ["x", "w"], {"pads": "same"})], [("relu", ["x"], {})],
             x=2, w=4)
    res = prove(r, timeout=5)
    assert res["proved"] and res["vacuous"]
    assert "vacuous" not in prove(load(TASO_PB).rules[0], timeout=5)


def test_sizes_counted_from_the_end():
    # split(concat_1(x, y), sizes of x and y along axis -1) gives x and y back
    sizes = [{"dim": ["x", -1]}, {"dim": ["y", -1]}]
    r = rule("split-last", [("relu", ["x"], {}), ("relu", ["y"], {})],
             [("concat", ["x", "y"], {"axis": 1}), ("relu", [(0, 0)], {}),
              ("split", [(1, 0)], {"axis": 1, "sizes": sizes})],
             outputs=[[[0, 0], [2, 0]], [[1, 0], [2, 1]]], x=2, y=2)
    assert prove(r, timeout=10)["proved"]
    wrong = [{"dim": ["x", -2]}, {"dim": ["y", -2]}]  # the other axis: not a proof
    r.dst[2].attrs["sizes"] = tuple({"dim": (d["dim"][0], d["dim"][1])} for d in wrong)
    assert not prove(r, timeout=5)["proved"]


FUSION = ["fusion-conv-bias", "fusion-conv-batchnorm", "fusion-conv-bias-batchnorm",
          "fusion-conv2d-relu", "fusion-merge-conv2d", "fusion-merge-conv2d-enlarge",
          "fusion-merge-conv2d_bias", "fusion-merge-gconv-conv2d-4", "fusion-merge-matmul-rank3"]


@pytest.mark.parametrize("rid", FUSION)
def test_hand_written_fusion_rules_proved(rid):
    res = prove(load(SHIPPED / "fusion.json").by_id(rid), timeout=10)
    assert res["proved"], res


@pytest.mark.parametrize("r", FALSE_RULES, ids=[r.id for r in FALSE_RULES])
def test_false_rules_refuted(r):
    assert not prove(r, timeout=3)["proved"]
    rec = verify_rule(r, timeout=3)
    assert rec["status"] == "refuted", rec
    cex = rec["counterexample"]
    assert set(cex["shapes"]) == set(r.variables())
    assert "max_diff" in cex or cex["src_shape"] != cex["dst_shape"]
    again = replay(Rule.from_json(json.loads(json.dumps(r.to_json()))),
                   json.loads(json.dumps(cex)))  # through JSON, as stored
    assert again is not None and again["output"] == cex["output"]


def test_true_rule_is_not_refuted(taso_rules):
    assert refute(taso_rules.rules[99]) is None  # holds (only on empty channels)
    assert refute(taso_rules.rules[22]) is None


def test_undecidable_rule_is_unknown_in_time():
    # relu(relu(x) * relu(x)) = relu(x) * relu(x) holds (a square is >= 0) but no
    # axiom says so: not provable, not refutable.
    r = rule("relu-of-square", [("relu", ["x"], {}), ("ewmul", [(0, 0), (0, 0)], {}),
                                ("relu", [(1, 0)], {})],
             [("relu", ["x"], {}), ("ewmul", [(0, 0), (0, 0)], {})])
    start = time.perf_counter()
    [rec] = verify_rules([r], timeout=1.0, workers=1)
    assert rec["status"] == "unknown"
    assert time.perf_counter() - start < 2 * 1.0 + 10  # the worker's deadline, with start-up


def sum_of_squares(n=10):
    """relu(x1 x1 + ... + xn xn) = the sum added in the other order: true, but no
    axiom says a sum of squares is >= 0, and the orders of n terms keep Z3 busy to
    its time limit (a rule that needs the whole timeout, on any machine)."""
    def squares(names):
        nodes = [("ewmul", [v, v], {}) for v in names]
        acc = (0, 0)
        for i in range(1, len(names)):
            nodes.append(("ewadd", [acc, (i, 0)], {}))
            acc = (len(nodes) - 1, 0)
        return nodes
    names = [f"x{i}" for i in range(n)]
    src = squares(names)
    return rule("sum-of-squares", src + [("relu", [(len(src) - 1, 0)], {})], squares(names[::-1]))


def test_overrunning_worker_is_killed_and_replaced():
    # a deadline (0.05 s from when a ready worker takes the rule) shorter than the
    # rule needs (its proof runs to Z3's 1 s limit): every worker is killed, the run
    # goes on
    slow = sum_of_squares()
    recs = verify_rules([slow, slow], timeout=1.0, workers=1, grace=-1.95)
    assert [r["status"] for r in recs] == ["unknown", "unknown"]
    assert all(r["reason"].startswith("killed") for r in recs)


def test_records_in_order_with_versions(taso_rules):
    rules = [taso_rules.rules[i] for i in (0, 23, 64)] + FALSE_RULES[:1]
    recs = verify_rules(rules, timeout=5, workers=2)
    assert [r["status"] for r in recs] == ["proved", "proved", "proved", "refuted"]
    for rec in recs:
        assert rec["z3"] and rec["seconds"] >= 0 and rec["timeout"] == 5


def test_cli_writes_records_and_json(tmp_path, taso_rules, capsys):
    rs = RuleSet([taso_rules.rules[i] for i in (0, 69)] + FALSE_RULES[1:2], name="mini")
    src = tmp_path / "mini.json"
    rs.save(src)
    out = tmp_path / "out.json"
    assert main([str(src), "--json", "--output", str(out), "--timeout", "5"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["proved"], summary["refuted"], summary["unknown"]) == (2, 1, 0)
    assert summary["total_seconds"] >= 0
    saved = load(out)
    assert [r.status for r in saved] == ["proved", "proved", "refuted"]
    assert saved.rules[0].verification["axioms"]
    assert main([str(src), "--timeout", "5"]) == 0  # default: a new file beside the input
    assert (tmp_path / "mini.verified.json").exists()
    assert "proved" in capsys.readouterr().out


def test_cli_resumes_a_run_cut_short(tmp_path, taso_rules, capsys):
    rs = RuleSet([taso_rules.rules[i] for i in (0, 69)] + FALSE_RULES[1:2], name="mini")
    src, out = tmp_path / "mini.json", tmp_path / "out.json.gz"
    rs.save(src)
    assert main([str(src), "--json", "--output", str(out), "--resume"]) == 0
    first = load(out)
    assert [r.status for r in first] == ["proved", "proved", "refuted"]
    # cut short: the second rule has no record yet, the first one's is stale
    first.rules[1].verification = {}
    first.rules[0].verification["axioms_hash"] = "stale"
    first.save(out)
    capsys.readouterr()
    assert main([str(src), "--json", "--output", str(out), "--resume"]) == 0
    assert "1 rules keep their current records, 2 to prove" in capsys.readouterr().err
    again = load(out)
    assert [r.status for r in again] == ["proved", "proved", "refuted"]
    assert again.rules[0].verification["axioms_hash"] != "stale"
    assert again.rules[2].verification == first.rules[2].verification  # kept as it was
    # an output of other rules is refused, and left alone
    RuleSet(taso_rules.rules[:1], name="other").save(out)
    assert main([str(src), "--output", str(out), "--resume"]) == 2
    assert "holds other rules than RULES" in capsys.readouterr().err
    assert len(load(out).rules) == 1


def test_records_are_saved_as_they_come(tmp_path, taso_rules):
    from taso.verifier.cli import checkpoints
    rs = RuleSet([taso_rules.rules[0]] + FALSE_RULES[1:2], name="mini")
    out = tmp_path / "out.json"
    seen = []
    on_done = checkpoints(rs.rules, rs, out, lambda i, rec: seen.append(
        [r.status for r in load(out)] if out.exists() else None), every=0.0)
    verify_rules(rs.rules, timeout=5, workers=1, on_done=on_done)
    # told first, then saved: the second record sees the first one's save (a
    # later save may wait ten times the last one's duration; main saves at the end)
    assert seen == [None, ["proved", None]]


def test_a_slow_save_spaces_the_next_ones(tmp_path, taso_rules, monkeypatch):
    # Saving 185k rules takes half a minute: saves wait ten times the last
    # one's duration, so they never take more than a tenth of the driver.
    import taso.verifier.cli as cli

    rs = RuleSet(taso_rules.rules[:4], name="mini")
    saves, now = [], [0.0]

    def slow_save(path):
        saves.append(now[0])
        now[0] += 2.0  # a save takes two seconds
    monkeypatch.setattr(rs, "save", slow_save)
    monkeypatch.setattr(cli.time, "monotonic", lambda: now[0])
    on_done = cli.checkpoints(rs.rules, rs, tmp_path / "out.json", every=1.0)
    for t in range(40):
        now[0] = max(now[0], float(t))
        on_done(t % 4, {"status": "proved"})
    assert saves[:2] == [1.0, 23.0] and all(b - a >= 20.0 for a, b in zip(saves, saves[1:]))


def test_cli_names_bad_input_in_one_line(tmp_path, taso_rules, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        assert main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("taso-verify: ") and path.name in err
    src = tmp_path / "mini.json"
    RuleSet(taso_rules.rules[:1], name="mini").save(src)
    for flags, words in [(["--timeout", "0"], "--timeout must be"),
                         (["--workers", "0"], "--workers must be at least 1"),
                         (["--output", str(tmp_path / "no" / "o.json")], "no such folder"),
                         (["--output", str(tmp_path)], "is not a file path")]:
        with pytest.raises(SystemExit):
            main([str(src), *flags])
        assert words in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "mini.json"]


def test_axiom_report(taso_rules):
    from taso.verifier.report import axiom_report, format_axiom_report
    rules = [taso_rules.rules[i] for i in (0, 22)]
    for r, rec in zip(rules, verify_rules(rules, timeout=5, workers=1)):
        r.verification = rec
    seen = []
    rep = axiom_report(rules, workers=1, check=["ewadd-operands", "ewadd-comm"],
                       on_done=lambda k, n: seen.append((k, n)))
    assert seen == [(1, 2), (2, 2)]  # progress per implication check
    assert rep["uses"]["matmul-assoc"] >= 1 and "conv-iconv" in rep["unused"]
    assert rep["implied"] == ["ewadd-operands"]  # ewadd-dim says as much; commutativity is new
    assert "implied by the others" in format_axiom_report(rep)


@pytest.mark.slow
def test_all_taso_rules_proved_within_timeout():
    rules = load(TASO_PB).rules
    recs = verify_rules(rules, timeout=10, workers=2)
    assert [r["status"] for r in recs] == ["proved"] * len(rules)
    assert max(r["seconds"] for r in recs) < 10


@pytest.mark.slow
def test_proved_rules_survive_the_numeric_check():
    # a proof from a false axiom would show up here as a counterexample
    for r in load(TASO_PB).rules:
        assert refute(r, seeds=6) is None, r.id


# ---- which axioms a proof is given --------------------------------------------------
def _reachable(ops, axioms):
    """The fixed point `relevant` computes, read afresh from the axioms' terms."""
    from taso.verifier.prove import trigger_ops

    have, chosen = set(ops), []
    grew = True
    while grew:
        grew = False
        for ax in axioms:
            if ax not in chosen and any(need <= have for need in trigger_ops(ax)):
                chosen.append(ax)
                have |= ax.ops()
                grew = True
    return [a.name for a in chosen]


def test_relevant_axioms_are_the_reachable_ones_in_the_same_order():
    # The solver sees axioms in this order: the cached tables must not change it.
    from taso.verifier.axioms import AXIOMS
    from taso.verifier.prove import encoding, relevant

    enc = encoding()
    for r in load(SHIPPED / "taso.json").rules[:60]:
        ops = enc.rule(r)[2]
        assert [a.name for a in relevant(ops)] == _reachable(ops, AXIOMS), r.id
    fewer = [a for a in AXIOMS if "concat" not in a.name]  # another list, another table
    ops = {"concat", "split", "matmul"}
    assert [a.name for a in relevant(ops, fewer)] == _reachable(ops, fewer)
    assert [a.name for a in relevant(ops)] == _reachable(ops, AXIOMS)


def test_relevant_sees_an_axiom_list_that_grew():
    from taso.verifier.axioms import AXIOMS
    from taso.verifier.prove import relevant

    grown = [a for a in AXIOMS if a.name != "ewadd-operands"]
    before = [a.name for a in relevant({"ewadd"}, grown)]
    grown.append(next(a for a in AXIOMS if a.name == "ewadd-operands"))
    after = [a.name for a in relevant({"ewadd"}, grown)]
    assert "ewadd-operands" not in before and after == before + ["ewadd-operands"]


# ---- the 4-operator set: rules its first run left unknown --------------------------
# One rule of rules_db/generated4.json.gz per axiom added for them (issue 25),
# each unknown before that axiom; the proof must use it.
FORMERLY_UNKNOWN = Path(__file__).parent / "data" / "generated4_formerly_unknown.json"
NEW_AXIOM_RULES = {
    "split0-sizes": "gen4-03693", "split1-sizes": "gen4-52005", "conv-dim-same": "gen4-04162",
    "maxpool-dim-same": "gen4-22562", "avgpool-dim-same": "gen4-08339",
    "conv-grouped-channel-concat": "gen4-03778", "ewadd-conv-input": "gen4-03778",
    "conv-grouped4-concat": "gen4-06375", "conv-grouped3-concat": "gen4-64437",
    "conv-relu-kernel-defined": "gen4-14680", "conv-iconv-size": "gen4-89650",
    "iconv-input-ewmul": "gen4-04805", "iconv-input-conv": "gen4-18140",
    "iconv-input-maxpool": "gen4-04162", "iconv-input-avgpool": "gen4-04338",
    "iconv-diagonal-conv": "gen4-21138", "iconv-diagonal-conv-enlarged": "gen4-173616",
    "iconv-enlarge-mask": "gen4-25320",
    "iconv-data-mask": "gen4-76474", "conv-avgpool-iconv": "gen4-04333",
    "avgpool-conv-1x1": "gen4-21243", "relu-smul-one": "gen4-03998",
    "relu-smul-iconv": "gen4-181872", "imm-idem": "gen4-12596", "transpose-imm": "gen4-08062",
    "transpose-one": "gen4-13097", "matmul-ones-3": "gen4-24387",
}
# False neighbours: one variable of the target replaced by another, (node, input, by).
FALSE_NEIGHBOURS = {
    "gen4-03693": (0, 0, "x1"), "gen4-03778": (0, 0, "x1"), "gen4-06375": (0, 0, "x1"),
    "gen4-64437": (0, 0, "x1"), "gen4-89650": (1, 0, "x2"), "gen4-18140": (0, 0, "x1"),
    "gen4-25320": (1, 0, "x2"), "gen4-21243": (0, 0, "x1"), "gen4-24387": (0, 0, "x1"),
    "gen4-08062": (0, 0, "x2"), "gen4-52005": (0, 0, "x1"),
}


@pytest.fixture(scope="module")
def formerly_unknown():
    return load(FORMERLY_UNKNOWN)


@pytest.mark.parametrize("axiom", sorted(NEW_AXIOM_RULES))
def test_formerly_unknown_rule_proved_with_its_axiom(formerly_unknown, axiom):
    res = prove(formerly_unknown.by_id(NEW_AXIOM_RULES[axiom]), timeout=5)
    assert res["proved"], res
    assert axiom in res["axioms"]


@pytest.mark.parametrize("rid", sorted(FALSE_NEIGHBOURS))
def test_false_neighbour_of_a_formerly_unknown_rule_refuted(formerly_unknown, rid):
    node, k, by = FALSE_NEIGHBOURS[rid]
    bad = formerly_unknown.by_id(rid).to_json()
    assert bad["dst"][node]["inputs"][k] != by
    bad["dst"][node]["inputs"][k] = by
    r = Rule.from_json({**bad, "id": rid + "-false"})
    rec = verify_rule(r, timeout=3)
    assert rec["status"] == "refuted", rec
    assert replay(r, rec["counterexample"]) is not None
