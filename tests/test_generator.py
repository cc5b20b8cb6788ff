"""taso-gen: fingerprints, RepGen enumeration, pruning stages, emitted rules."""

import json

import pytest
from taso.generator.cli import main
from taso.generator.enumerate import Member, analyze, init_worker, sinks_of
from taso.generator.family import GenConfig, Var
from taso.generator.fingerprint import Fingerprints
from taso.generator.generate import generate
from taso.generator.prune import _info, common_subgraph, family_digests, implied
from taso.rules_db import PNode, Rule
from taso.rules_db.canonical import canonical_key

M = [Var(f"m{i}", (3, 3)) for i in range(3)]
T = [Var(f"t{i}", (2, 2, 3, 3)) for i in range(3)]
S = [Var("s0", ())]


def _gen(ops, family, n=2, workers=1, seed=0):
    cfg = GenConfig(max_ops=n, ops=tuple(ops), family=tuple(family), seed=seed)
    return generate(cfg, workers=workers)


def _keys(rules):
    return {canonical_key(r) for r in rules}


def _rule(src, dst, outputs):
    return Rule("r", [PNode(*n) for n in src], [PNode(*n) for n in dst], outputs)


CONV = {"strides": (1, 1), "pads": "same", "activation": "none"}


# ---- fingerprints ------------------------------------------------------------------
def _member(ev, graph, n_in):
    tt = analyze(graph, ev)
    sinks = sinks_of(graph, tt, n_in)
    return Member(graph, sinks, tuple(tt.vals[t] for t in sinks), tuple(tt.vals[n_in:]))


def test_fingerprint_independent_of_node_order_and_exact():
    ev = Fingerprints(tuple(M))
    mm = ("matmul", (("activation", "none"),))
    a = ((*mm, (0, 1)), (*mm, (1, 2)), ("ewadd", (), (3, 4)))
    b = ((*mm, (1, 2)), (*mm, (0, 1)), ("ewadd", (), (4, 3)))
    assert _member(ev, a, 3).sink_vals == _member(ev, b, 3).sink_vals
    # (m0 m1) m2 == m0 (m1 m2) exactly; m0 m1 != m1 m0.
    assoc1 = ((*mm, (0, 1)), (*mm, (3, 2)))
    assoc2 = ((*mm, (1, 2)), (*mm, (0, 3)))
    assert _member(ev, assoc1, 3).sink_vals == _member(ev, assoc2, 3).sink_vals
    assert _member(ev, ((*mm, (0, 1)),), 3).sink_vals != \
        _member(ev, ((*mm, (1, 0)),), 3).sink_vals


def test_rules_invariant_to_renaming_the_family():
    a, _ = _gen(["ewadd", "matmul"], M)
    b, _ = _gen(["ewadd", "matmul"], M[::-1])
    assert len(a) > 0 and _keys(a) == _keys(b)


# ---- known identities and non-identities ----------------------------------------------
def test_matmul_associativity_found_commutativity_not():
    rules, _ = _gen(["matmul"], M)
    mm = {"activation": "none"}
    assoc = _rule([("matmul", ["a", "b"], mm), ("matmul", [(0, 0), "c"], mm)],
                  [("matmul", ["b", "c"], mm), ("matmul", ["a", (0, 0)], mm)],
                  [((1, 0), (1, 0))])
    comm = _rule([("matmul", ["a", "b"], mm)], [("matmul", ["b", "a"], mm)],
                 [((0, 0), (0, 0))])
    assert canonical_key(assoc) in _keys(rules)
    assert canonical_key(comm) not in _keys(rules)


def test_ewadd_commutativity_found():
    rules, _ = _gen(["ewadd"], M, n=1)
    comm = _rule([("ewadd", ["a", "b"], {})], [("ewadd", ["b", "a"], {})], [((0, 0), (0, 0))])
    assert canonical_key(comm) in _keys(rules)
    assert all(r.vars[v]["rank"] == 2 for r in rules for v in r.vars)


def test_relu_does_not_distribute_over_add():
    rules, _ = _gen(["relu", "ewadd"], M[:2], n=3)
    bad = _rule([("ewadd", ["a", "b"], {}), ("relu", [(0, 0)], {})],
                [("relu", ["a"], {}), ("relu", ["b"], {}), ("ewadd", [(0, 0), (1, 0)], {})],
                [((1, 0), (2, 0))])
    assert canonical_key(bad) not in _keys(rules)
    assert len(rules) > 0


def test_conv_linear_in_the_weight():
    rules, _ = _gen(["conv2d", "scalar_mul"], T[:2] + S)
    lin = _rule([("scalar_mul", ["w", "s"], {}), ("conv2d", ["x", (0, 0)], CONV)],
                [("conv2d", ["x", "w"], CONV), ("scalar_mul", [(0, 0), "s"], {})],
                [((1, 0), (1, 0))])
    assert canonical_key(lin) in _keys(rules)


@pytest.mark.slow
def test_conv_additive_in_the_weight_and_concat_of_convs():
    rules, _ = _gen(["conv2d", "ewadd", "concat"], T, n=3)
    add = _rule([("ewadd", ["w1", "w2"], {}), ("conv2d", ["x", (0, 0)], CONV)],
                [("conv2d", ["x", "w1"], CONV), ("conv2d", ["x", "w2"], CONV),
                 ("ewadd", [(0, 0), (1, 0)], {})], [((1, 0), (2, 0))])
    cat = _rule([("conv2d", ["x", "w1"], CONV), ("conv2d", ["x", "w2"], CONV),
                 ("concat", [(0, 0), (1, 0)], {"axis": 1})],
                [("concat", ["w1", "w2"], {"axis": 0}), ("conv2d", ["x", (0, 0)], CONV)],
                [((2, 0), (1, 0))])
    keys = _keys(rules)
    assert canonical_key(add) in keys and canonical_key(cat) in keys


def test_concat_of_convs_sharing_input_small():
    fam = T
    rules, _ = _gen(["conv2d", "concat"], fam, n=3)
    cat = _rule([("conv2d", ["x", "w1"], CONV), ("conv2d", ["x", "w2"], CONV),
                 ("concat", [(0, 0), (1, 0)], {"axis": 1})],
                [("concat", ["w1", "w2"], {"axis": 0}), ("conv2d", ["x", (0, 0)], CONV)],
                [((2, 0), (1, 0))])
    assert canonical_key(cat) in _keys(rules)


def test_split_of_concat_is_the_parts():
    rules, _ = _gen(["concat", "split"], M[:2])
    sizes = ({"dim": ("a", 0)}, {"dim": ("b", 0)})
    r = _rule([("concat", ["a", "b"], {"axis": 0}), ("split", [(0, 0)],
                                                     {"axis": 0, "sizes": sizes})],
              [], [((1, 0), "a"), ((1, 1), "b")])
    assert canonical_key(r) in _keys(rules)


def test_emitted_rules_hold_on_other_shapes():
    """A rule over square matrices that is general must hold on other square sizes."""
    import numpy as np
    from taso.rules_db import instantiate
    rules, _ = _gen(["matmul", "ewadd", "transpose"], M[:3])
    for r in rules:
        shapes = {v: (5, 5) for v in r.variables()}
        src, _ = instantiate(r, "src", shapes)
        dst, _ = instantiate(r, "dst", shapes) if r.dst else (None, None)
        feeds = src.random_inputs(1)
        outs = src.evaluate(feeds)
        want = dst.evaluate({k: v for k, v in feeds.items()
                             if k in {n.name for n in dst.inputs}}) if dst else []
        for k, (_s, d) in enumerate(r.outputs):
            got = want[k] if not isinstance(d, str) else feeds[d]
            np.testing.assert_allclose(outs[k], got, rtol=1e-4, atol=1e-4)


# ---- pruning stages on hand-made pairs ---------------------------------------------------
def test_pruning_criteria_on_hand_made_pairs():
    cfg = GenConfig(max_ops=3, ops=("relu", "ewadd", "transpose"), family=tuple(M[:2]))
    init_worker(cfg)
    ev = Fingerprints(cfg.family)
    inputs = [ev.inputs[0], ev.inputs[1]]

    def info(g):
        return _info(_member(ev, g, 2), 2)
    tr = ("transpose", (("perm", (1, 0)),))
    # relu(m0) + m1 vs m1 + relu(m0): both hold relu(m0): common subgraph.
    a = info((("relu", (), (0,)), ("ewadd", (), (2, 1))))
    b = info((("relu", (), (0,)), ("ewadd", (), (1, 2))))
    assert common_subgraph(a, b)
    # relu(t(t(m0))) vs relu(m0): same last operator on equal inputs: implied.
    c = info(((*tr, (0,)), (*tr, (2,)), ("relu", (), (3,))))
    d = info((("relu", (), (0,)),))
    assert not common_subgraph(c, d) and implied(c, d, inputs)
    # t(m0 + m1) vs t(m0) + t(m1): neither.
    e = info((("ewadd", (), (0, 1)), (*tr, (2,))))
    f = info(((*tr, (0,)), (*tr, (1,)), ("ewadd", (), (2, 3))))
    assert not common_subgraph(e, f) and not implied(e, f, inputs)
    assert family_digests  # used by prune()


def test_stage_counts_shrink_and_renaming_dedups():
    rules, rep = _gen(["ewadd", "relu"], M[:3])
    rows = [n for _, n in rep.stages.rows()]
    assert rows == sorted(rows, reverse=True) and rows[-1] == len(rules) > 0
    # Commutativity over 3 matrices appears for 3 pairs of inputs: one rule.
    comm = _rule([("ewadd", ["a", "b"], {})], [("ewadd", ["b", "a"], {})], [((0, 0), (0, 0))])
    assert sum(canonical_key(r) == canonical_key(comm) for r in rules) == 1


# ---- determinism and the CLI ----------------------------------------------------------------
def test_deterministic_across_runs_and_workers(tmp_path):
    a, _ = _gen(["ewadd", "matmul", "concat", "split"], M[:3], workers=1)
    b, _ = _gen(["ewadd", "matmul", "concat", "split"], M[:3], workers=2)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())


def test_cli_writes_a_rule_set(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--max-ops", "2", "--ops", "ewadd,relu", "--output", str(out), "--workers",
                 "1", "--quiet"]) == 0
    d = json.loads(out.read_text())
    assert d["format"] == "taso-rules" and d["rules"]
    assert all(r["verification"] == {} for r in d["rules"])
    assert "pruning stage" in capsys.readouterr().out


@pytest.mark.parametrize("flags, words", [
    (["--max-ops", "0"], "max_ops must be at least 1"),
    (["--ops", "bogus,input"], "cannot enumerate bogus, input; it can: add,"),
    (["--ops", "reshape"], "cannot enumerate reshape"),  # none to choose in TASO's family
    (["--ops", "pad"], "cannot enumerate pad"),
    (["--ops", ","], "no operators"),
    (["--ops", "split,relu"], "split needs concat"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--seed", "-1"], "seed must be >= 0"),
])
def test_cli_refuses_bad_flags_before_any_work(tmp_path, capsys, flags, words):
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(["--output", str(out), "--quiet", *flags])
    assert e.value.code == 2 and words in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_an_output_or_spill_folder_it_cannot_use(tmp_path, capsys):
    for flags, words in [(["--output", str(tmp_path / "no" / "r.json")], "no such folder"),
                         (["--output", str(tmp_path)], "is not a file path"),
                         (["--output", str(tmp_path / "r.json"), "--spill-dir",
                           str(tmp_path / "r.json")], None)]:
        if words is None:  # a spill "folder" that is a file
            (tmp_path / "r.json").write_text("{}")
            words = "is not a folder"
        with pytest.raises(SystemExit):
            main(["--max-ops", "1", "--quiet", *flags])
        assert words in capsys.readouterr().err


def test_instances_of_general_rules_are_dropped():
    from taso.generator.executor import SerialExecutor
    from taso.generator.prune import special_cases
    from taso.rules_db.canonical import canonical

    def assoc(a, b, c):
        r = _rule([("ewadd", [a, b], {}), ("ewadd", [(0, 0), c], {})],
                  [("ewadd", [b, c], {}), ("ewadd", [a, (0, 0)], {})], [((1, 0), (1, 0))])
        r.vars = {v: {"rank": 2} for v in r.variables()}
        return r
    rules = [assoc("a", "b", "c"), assoc("a", "a", "c"), assoc("x", "y", "y")]
    keys = [canonical(r)[0] for r in rules]
    assert special_cases(rules, keys, SerialExecutor()) == {1, 2}
    rules[0].vars["a"]["rank"] = 4  # a matrix-only instance of a 4-D rule is not one
    assert 1 not in special_cases(rules[:2], keys[:2], SerialExecutor())


def test_second_seed_splits_a_stream0_collision():
    from taso.generator.prune import second_seed
    ev1 = Fingerprints(tuple(M), 0, streams=(1,))
    tr = ("transpose", (("perm", (1, 0)),))
    a = Member((("relu", (), (0,)),), (3,), (123,))
    b = Member((("relu", (), (1,)),), (3,), (123,))  # pretend stream 0 collided
    c = Member(((*tr, (0,)), (*tr, (3,)), ("relu", (), (4,))), (5,), (123,))
    assert second_seed([a, b], ev1, 3) == []
    assert second_seed([a, b, c], ev1, 3) == [[a, c]]


def test_a_forgetful_memo_gives_the_same_rules(monkeypatch):
    # Workers forget their memo past a limit (round 4 would fill the memory);
    # digests are of contents, so the rules cannot change.
    from taso.generator import fingerprint
    a, ra = _gen(["ewadd", "matmul", "relu"], M[:3], n=3)
    monkeypatch.setattr(fingerprint, "MEMO_LIMIT", 3)
    b, rb = _gen(["ewadd", "matmul", "relu"], M[:3], n=3)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert [vars(r) | {"seconds": 0} for r in ra.rounds] == \
        [vars(r) | {"seconds": 0} for r in rb.rounds]


def test_spilled_classes_give_the_same_rules(tmp_path):
    cfg = GenConfig(max_ops=2, ops=("ewadd", "matmul", "relu"), family=tuple(M[:3]))
    mem, _ = generate(cfg, workers=1)
    disk, _ = generate(cfg, workers=1, spill_dir=str(tmp_path))
    assert _keys(mem) == _keys(disk) and len(mem) == len(disk)
    assert list(tmp_path.iterdir()) == []  # bucket files removed


@pytest.mark.slow
def test_the_shipped_generated_set_is_what_taso_gen_writes():
    # Regenerated on both cores (about two minutes): the pruning's merge of
    # candidates across tasks must keep exactly the rules, order and ids shipped.
    from taso.rules_db import SHIPPED, load
    rules, rep = generate(GenConfig(max_ops=3), workers=2)
    shipped = load(SHIPPED / "generated.json")

    def bare(r):
        # as generated: without its record, nor the size constraints that
        # taso-verify --constrain added (the record names them)
        d = r.to_json()
        for v, a, u, b in (d.pop("verification", None) or {}).get("constrained", ()):
            d["vars"][v]["same_dim"].remove([a, u, b])
            if not d["vars"][v]["same_dim"]:
                del d["vars"][v]["same_dim"]
        return json.dumps(d, sort_keys=True)

    assert [bare(r) for r in rules.rules] == [bare(r) for r in shipped.rules]
    assert sum("constrained" in r.verification for r in shipped.rules) == 7
    assert rep.stages.general == len(shipped.rules) == 4403


@pytest.mark.slow
def test_the_shipped_four_operator_set_is_verified_and_opt_in():
    from taso.rules_db import DEFAULT_SETS, SHIPPED, load
    from taso.verifier.record import is_current, is_settled

    path = SHIPPED / "generated4.json.gz"
    assert path.stat().st_size < 50 * 2**20  # what a wheel should carry
    rs = load(path)  # parses and checks every rule
    assert len(rs) > 4403 and rs.provenance["settings"]["max_ops"] == 4
    by = {s: [r for r in rs if r.status == s] for s in ("proved", "refuted", "unknown")}
    assert sum(map(len, by.values())) == len(rs)
    assert all(is_current(r.verification) for r in by["proved"])  # from today's axioms
    assert all(is_settled(r.verification) and r.verification.get("counterexample")
               for r in by["refuted"])
    assert path.name not in DEFAULT_SETS


def test_a_kept_spill_folder_prunes_to_the_same_rules(tmp_path):
    # A 4-operator run cut short while pruning leaves its bucket files (linked
    # away); pruning them again gives the rules the whole run gives.
    from taso.generator.enumerate import enumerate_graphs
    from taso.generator.generate import prune_spilled
    from taso.generator.store import ClassStore, SpillError
    cfg = GenConfig(max_ops=2, ops=("ewadd", "matmul", "relu"), family=tuple(M[:3]))
    whole, _ = generate(cfg, workers=1, spill_dir=str(tmp_path / "whole"))
    store = ClassStore(tmp_path)
    enumerate_graphs(cfg, None, None, store)
    folder = store.bucket_files()[0].path.rsplit("/", 1)[0]
    heard: list[tuple[str, int, int]] = []
    again, rep = prune_spilled(cfg, folder, workers=1,
                               progress=lambda *told: heard.append(told))
    assert json.dumps(again.to_json()) == json.dumps(whole.to_json())
    # each stage's tasks, told one by one from none done to all done
    stages = list(dict.fromkeys(stage for stage, _, _ in heard))
    assert stages == ["classes", "general rules", "checks"]
    for stage in stages:
        told = [(done, total) for s, done, total in heard if s == stage]
        total = told[0][1]
        assert told == [(k, total) for k in range(total + 1)]
    assert heard[0] == ("classes", 0, len(store.bucket_files()))
    assert rep.stages.general == len(whole) > 0
    # kept per bucket as it is pruned; a run cut short goes on from what is kept
    kept = tmp_path / "kept"
    first, _ = prune_spilled(cfg, folder, workers=1, checkpoint=str(kept))
    done = sorted(kept.glob("bucket-*.json.gz"))
    assert len(done) == len(store.bucket_files()) > 1
    done[0].unlink()  # as if cut short before the first bucket was kept
    heard.clear()
    again, _ = prune_spilled(cfg, folder, workers=1, checkpoint=str(kept),
                             progress=lambda *told: heard.append(told))
    for got in (first, again):
        assert json.dumps(got.to_json()) == json.dumps(whole.to_json())
    # what is kept reads back as the task gave it: forms, orders, rules, graphs
    from taso.generator.checkpoint import PruneCheckpoint
    from taso.generator.enumerate import TaskContext
    from taso.generator.prune import _pairs_of_classes

    def plain(result):
        counts, out = result
        return counts, [(rank, key, tuple(order), rule.to_json(), a, b, vectors)
                        for rank, (key, order, rule, a, b), vectors in out]
    bucket = store.bucket_files()[-1]
    fresh = _pairs_of_classes(TaskContext.of(cfg), bucket)
    assert fresh[1] and plain(PruneCheckpoint(kept, cfg).get(bucket.path)) == plain(fresh)
    with pytest.raises(ValueError, match="pruning of another enumeration"):
        prune_spilled(GenConfig(max_ops=2, ops=("ewadd", "relu"), family=tuple(M[:3])),
                      folder, workers=1, checkpoint=str(kept))
    files = sorted(p.name for p in store.spill_folder.iterdir())
    assert "nodes.json" in files and len(files) > 2  # read, never removed
    store.close()
    with pytest.raises(SpillError, match="not a taso-gen spill folder"):
        prune_spilled(cfg, str(tmp_path), workers=1)
