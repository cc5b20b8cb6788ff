"""The adversarial corpus (tests/data/false_rules.json, built by
bench/false_rules.py): deliberately false rules across every operator the
verifier knows. None may be proved; each must be refuted with a counterexample
that the numpy reference confirms."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from taso.rules_db import SHIPPED, load
from taso.verifier.axioms import AXIOMS
from taso.verifier.refute import refute, replay
from taso.verifier.run import verify_rules

CORPUS = Path(__file__).parent / "data" / "false_rules.json"
KINDS = {"axis", "perm", "stride", "pad", "activation", "operand-order", "split-size",
         "broadcast", "op", "variable", "output"}


@pytest.fixture(scope="module")
def corpus():
    return load(CORPUS)


def test_the_corpus_spans_every_kind_of_perturbation_and_operator(corpus):
    assert len(corpus) >= 100
    kinds = Counter(r.provenance["kind"] for r in corpus)
    assert KINDS <= set(kinds), kinds
    ops = {n.op for r in corpus for n in r.src + r.dst}
    # every operator of the shipped sets' rules is perturbed somewhere
    shipped = {n.op for name in ("taso.json", "fusion.json", "generated.json")
               for r in load(SHIPPED / name) for n in r.src + r.dst}
    assert shipped <= ops, shipped - ops
    assert ops <= {op for ax in AXIOMS for op in ax.ops()}


@pytest.mark.slow
def test_no_false_rule_is_proved_and_every_one_is_refuted(corpus):
    records = verify_rules(corpus.rules, timeout=20, workers=2)
    proved = [r.id for r, rec in zip(corpus, records) if rec["status"] == "proved"]
    assert not proved, f"false rules proved: {proved}"
    # The refuter stops at a wall-clock limit, which a loaded machine reaches
    # early: a rule left unknown gets the refuter's full seeds, with no clock.
    cexs = {r.id: rec.get("counterexample") or refute(r, time_limit=math.inf)
            for r, rec in zip(corpus, records)}
    unknown = [rid for rid, c in cexs.items() if c is None]
    assert not unknown, f"no counterexample in all the refuter's seeds: {unknown}"
    for r in corpus:
        assert replay(r, cexs[r.id]) is not None, r.id
