"""taso-gen's transformer set (`--ops transformer`): its operators, family and
attributes, the checks that keep stand-in and cancelling rules out, and the
shipped, proved rules_db/transformer.json."""

import json

import numpy as np
import pytest
from taso.generator.cli import main
from taso.generator.enumerate import Member, analyze, init_worker, sinks_of
from taso.generator.family import (
    DEFAULT_OPS,
    NAMED_SETS,
    GenConfig,
    Var,
    operator_instances,
)
from taso.generator.fingerprint import Fingerprints
from taso.generator.generate import generate
from taso.generator.rules import confirmed, divisor_sources, float_inputs
from taso.rules_db import DEFAULT_SETS, SHIPPED, PNode, Rule, load
from taso.rules_db.canonical import canonical_key
from taso.verifier.record import is_current

from taso.ops import OPS
from taso.ops.activation import Gelu
from taso.ops.base import poly

MM = {"activation": "none"}
X = [Var(f"x{i}", (2, 3, 4)) for i in range(2)]
W = [Var("w0", (4, 4))]
S = [Var("s0", ())]


def _rule(src, dst, outputs):
    return Rule("r", [PNode(*n) for n in src], [PNode(*n) for n in dst], outputs)


def _keys(rules):
    return {canonical_key(r) for r in rules}


def _member(ev, graph, n_in):
    tt = analyze(graph, ev)
    sinks = sinks_of(graph, tt, n_in)
    return Member(graph, sinks, tuple(tt.vals[t] for t in sinks), tuple(tt.vals[n_in:]))


@pytest.fixture(scope="module")
def n2():
    return generate(GenConfig.named("transformer", max_ops=2), workers=1)


def test_named_set_brings_its_family_and_attributes():
    cfg = GenConfig.named("transformer")
    assert cfg.ops == NAMED_SETS["transformer"][0] and cfg.opset == "transformer"
    assert {v.name for v in cfg.family} >= {"x0", "w0", "g0", "s0"}
    assert all(v.alt is not None for v in cfg.family)
    js = cfg.to_json()
    assert js["opset"] == "transformer" and js["family"]["x0"] == [2, 3, 4]
    inst = {(i.op, i.attrs, i.rank) for i in operator_instances(cfg)}
    assert ("matmul", (("activation", "none"),), None) in inst  # any rank: dense layers
    assert ("transpose", (("perm", (0, 2, 1)),), None) in inst  # k^T
    # TASO's set is as it was: no opset recorded, matmul on matrices only
    assert "opset" not in GenConfig().to_json()
    assert {i.rank for i in operator_instances(GenConfig()) if i.op == "matmul"} == {2}
    assert all(OPS[o].gen_default is not None for o in DEFAULT_OPS)
    assert not any(OPS[o].gen_default for o in ("softmax", "layernorm", "div", "reshape",
                                                "gelu", "reduce_mean"))


def test_transformer_set_yields_attention_and_norm_rules(n2):
    rules, rep = n2
    assert len(rules) > 50 and rep.stages.general == len(rules)
    assert rules.provenance["settings"]["opset"] == "transformer"
    keys = _keys(rules)
    scale = _rule([("div", ["x", "s"], {}), ("matmul", [(0, 0), "w"], MM)],
                  [("matmul", ["x", "w"], MM), ("div", [(0, 0), "s"], {})], [((1, 0), (1, 0))])
    sm = _rule([("concat", ["x", "x"], {"axis": 0}), ("softmax", [(0, 0)], {"axis": 2})],
               [("softmax", ["x"], {"axis": 2}), ("concat", [(0, 0), (0, 0)], {"axis": 0})],
               [((1, 0), (1, 0))])
    assert canonical_key(scale) in keys and canonical_key(sm) in keys
    # softmax over the last axis does not commute with k^T
    bad = _rule([("transpose", ["x"], {"perm": (0, 2, 1)}), ("softmax", [(0, 0)], {"axis": 2})],
                [("softmax", ["x"], {"axis": 2}), ("transpose", [(0, 0)], {"perm": (0, 2, 1)})],
                [((1, 0), (1, 0))])
    assert canonical_key(bad) not in keys
    for r in rules:  # the scalar only ever scales: no s·s, s + s or gelu(s)
        for n in [*r.src, *r.dst]:
            first = n.inputs[0]
            assert not (isinstance(first, str) and r.vars[first].get("rank") == 0), r.id


def test_cancelling_a_divisor_is_not_a_rule(n2):
    """x·s / s = x holds for the fingerprint (s is a random non-zero residue)
    and for random floats, not where s = 0: the check at zero drops it."""
    cfg = GenConfig(max_ops=2, ops=("scalar_mul", "div"), family=tuple(X[:1] + S))
    init_worker(cfg)
    ev = Fingerprints(cfg.family)
    cancel = _member(ev, (("scalar_mul", (), (0, 1)), ("div", (), (2, 1))), 2)
    bare = Member((), (0,), (ev.inputs[0],), ())
    assert cancel.sink_vals == bare.sink_vals  # the fingerprint cannot tell
    assert divisor_sources(cancel.graph, 2) == {1}
    xs = float_inputs(cfg.family, 0)
    assert not confirmed(cancel, bare, xs)
    # dividing after scaling by another scalar is fine: both undefined at 0
    ok = _member(ev, (("div", (), (0, 1)), ("scalar_mul", (), (2, 1))), 2)
    ok2 = _member(ev, (("scalar_mul", (), (0, 1)), ("div", (), (2, 1))), 2)
    assert confirmed(ok, ok2, xs)
    rules, _ = n2
    c = _rule([("scalar_mul", ["x", "s"], {}), ("div", [(0, 0), "s"], {})], [], [((1, 0), "x")])
    assert canonical_key(c) not in _keys(rules)


def test_a_rule_true_only_for_the_stand_in_is_dropped_and_refuted(monkeypatch):
    """With gelu's stand-in polynomial made the identity, gelu(x) = x holds for
    every fingerprint; the float confirmation drops it and the verifier refutes it."""
    from taso.verifier.run import verify_rule
    rule = _rule([("gelu", ["x"], {})], [], [((0, 0), "x")])
    rule.vars = {"x": {"rank": 3}}
    def run(seed):  # (a new seed: this process's memo of fingerprints is by configuration)
        return generate(GenConfig(max_ops=1, ops=("gelu", "ewadd"), family=tuple(X),
                                  seed=seed), workers=1)
    monkeypatch.setattr(Gelu, "fp_poly", poly([1, 0]))
    fooled, rep = run(1)
    monkeypatch.undo()
    honest, rep0 = run(2)
    assert rep.stages.special_cases > rep0.stages.special_cases  # the stand-in's rule
    assert rep.stages.float == rep0.stages.float  # ... gone at the float stage
    assert canonical_key(rule) not in _keys(fooled) | _keys(honest)
    rec = verify_rule(rule, timeout=5.0)
    assert rec["status"] == "refuted" and rec["counterexample"]


def test_cli_named_set_and_unknown_names(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["--max-ops", "1", "--ops", "transformer", "--output", str(out), "--workers",
                 "1", "--quiet"]) == 0
    d = json.loads(out.read_text())
    assert d["name"] == "taso-gen-transformer-n1" and d["rules"]
    assert d["provenance"]["settings"]["opset"] == "transformer"
    for ops, words in (("transformers", "cannot enumerate transformers"),
                       ("transformer,relu", "cannot enumerate transformer")):
        with pytest.raises(SystemExit) as e:
            main(["--output", str(tmp_path / "u.json"), "--quiet", "--ops", ops])
        assert e.value.code == 2 and words in capsys.readouterr().err


def test_shipped_transformer_set_is_proved_and_opt_in():
    path = SHIPPED / "transformer.json"
    rs = load(path)  # parses and checks every rule
    assert len(rs) > 100
    assert all(r.verification.get("status") == "proved" for r in rs)
    assert all(is_current(r.verification) for r in rs)  # from today's axioms
    assert rs.provenance["settings"]["opset"] == "transformer"
    assert "transformer.json" not in DEFAULT_SETS


@pytest.mark.slow
def test_three_operators_fuse_dense_layers_over_a_batch():
    """Two dense layers reading one (batch, seq, hidden) input are one wider layer
    and a split (q, k and v of attention)."""
    rules, _ = generate(GenConfig.named("transformer", max_ops=3), workers=2)
    sizes = ({"dim": ("w1", 1)}, {"dim": ("w2", 1)})
    fuse = _rule([("matmul", ["x", "w1"], MM), ("matmul", ["x", "w2"], MM)],
                 [("concat", ["w1", "w2"], {"axis": 1}), ("matmul", ["x", (0, 0)], MM),
                  ("split", [(1, 0)], {"axis": 2, "sizes": sizes})],
                 [((0, 0), (2, 0)), ((1, 0), (2, 1))])
    assert canonical_key(fuse) in _keys(rules)
    assert np.isfinite(len(rules))
