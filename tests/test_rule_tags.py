"""Rule tags: a rule's roles in the search, as data on the rule (`pattern.TAGS`),
checked at load, kept through verification and no part of what a proof covers."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from taso.rules_db import SHIPPED, TAGS, RuleError, checked, load, parse_rule
from taso.verifier.cli import main as verify_main
from taso.verifier.run import verify_rule

FUSION = load(SHIPPED / "fusion.json")
ROWS = FUSION.by_id("fusion-merge-matmul-rows")  # tagged across_pieces


def test_tags_round_trip_and_are_written_only_where_given():
    d = ROWS.to_json()
    assert d["tags"] == ["across_pieces"] and parse_rule(d).tags == ["across_pieces"]
    plain = replace(ROWS, tags=[]).to_json()
    assert "tags" not in plain and parse_rule(plain).tags == []
    assert set(TAGS) == {"across_pieces", "fused_gain"}


@pytest.mark.parametrize("tags, words", [
    (["across-pieces"], "unknown tag 'across-pieces' (known: across_pieces, fused_gain)"),
    ([3], "unknown tag 3"),
    (["fused_gain", "fused_gain"], "a tag is given twice"),
])
def test_a_bad_tag_is_refused_naming_the_rule(tags, words):
    with pytest.raises(RuleError, match=f"rule fusion-merge-matmul-rows: {re.escape(words)}"):
        checked(replace(ROWS, tags=tags))
    d = {**ROWS.to_json(), "tags": tags}
    with pytest.raises(RuleError, match="fusion-merge-matmul-rows"):
        parse_rule(d)


def test_a_rule_file_with_a_bad_tag_is_refused_at_load(tmp_path):
    d = json.loads((SHIPPED / "fusion.json").read_text())
    d["rules"][0]["tags"] = "across_pieces"  # a string, not a list
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"bad.json: rule fusion-conv-bias: field 'tags' must"):
        load(path)


def test_a_reversed_rule_has_no_roles():
    assert ROWS.reversed().tags == []


def test_tags_are_no_part_of_a_proof(tmp_path):
    untagged = verify_rule(replace(ROWS, tags=[], verification={}), timeout=10)
    tagged = verify_rule(replace(ROWS, verification={}), timeout=10)
    assert tagged["status"] == untagged["status"] == "proved"
    assert tagged["axioms"] == untagged["axioms"]
    assert tagged["axioms_hash"] == untagged["axioms_hash"]
    # taso-verify writes the records back beside the tags
    src = tmp_path / "rows.json"
    src.write_text(json.dumps({"format": "taso-rules", "version": 1, "name": "rows",
                               "rules": [replace(ROWS, verification={}).to_json()]}))
    assert verify_main([str(src), "--output", str(src), "--workers", "1", "--json"]) == 0
    (back,) = load(src)
    assert back.tags == ["across_pieces"] and back.status == "proved"
