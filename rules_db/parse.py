"""Reading a rule from untrusted JSON: every field has the JSON type it should,
every reference and size the shape it should; then `pattern.checked` says
whether the rule is well-formed (what it means is defined there)."""

from __future__ import annotations

from typing import Any

from .pattern import RuleError, checked
from .rule import FORMAT, VERSION, Rule, RuleSet


def parse_rule(d: Any, where: str = "") -> Rule:
    """A well-formed, normalised rule from its JSON form (`Rule.to_json`)."""
    if not isinstance(d, dict):
        raise RuleError(f"#{where}" if where else "?", f"is a JSON {type(d).__name__}, "
                        "not an object")
    rid = d.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleError(f"#{where}" if where else "?", "has no string id")

    def need(key: str, kind: type, default: Any = None) -> Any:
        v = d.get(key, default)
        if not isinstance(v, kind):
            raise RuleError(rid, f"field {key!r} must be a JSON {kind.__name__}")
        return v

    for key in ("src", "dst", "outputs"):
        need(key, list)
    need("vars", dict, {})
    need("provenance", dict, {})
    need("verification", dict, {})
    need("tags", list, [])
    for side in ("src", "dst"):
        for i, n in enumerate(d[side]):
            if not isinstance(n, dict) or not isinstance(n.get("op"), str) or \
                    not isinstance(n.get("inputs"), list) or \
                    not isinstance(n.get("attrs", {}), dict):
                raise RuleError(rid, f"{side} node {i} is not an object with an 'op' string, "
                                "an 'inputs' list and an 'attrs' object")
            for r in n["inputs"]:
                _ref_shape(rid, r)
            for k, v in n.get("attrs", {}).items():
                _attr_shape(rid, f"{side} node {i}", k, v)
    for o in d["outputs"]:
        if not isinstance(o, list) or len(o) != 2:
            raise RuleError(rid, f"output {o!r} is not a [source, target] pair")
        for r in o:
            _ref_shape(rid, r)
    for v, c in d.get("vars", {}).items():
        if not isinstance(c, dict):
            raise RuleError(rid, f"constraints of variable {v!r} are not an object")
    try:
        rule = Rule.from_json(d)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise RuleError(rid, f"cannot be read: {e}") from None
    return checked(rule)


def parse_ruleset(d: Any) -> RuleSet:
    """A rule set from its JSON form; every rule well-formed, ids unique."""
    if not isinstance(d, dict):
        raise ValueError(f"it holds a JSON {type(d).__name__}, not an object")
    if d.get("format") != FORMAT:
        raise ValueError(f"its format is {d.get('format')!r}, not {FORMAT!r}")
    version = d.get("version", 0)
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(f"rule set version {version!r} is newer than {VERSION}")
    if not isinstance(d.get("rules"), list):
        raise ValueError("its 'rules' field is not a list")
    rules = [parse_rule(r, str(i)) for i, r in enumerate(d["rules"])]
    return checked_set(RuleSet(rules, str(d.get("name", "")), dict(d.get("provenance") or {})))


def checked_set(rs: RuleSet) -> RuleSet:
    """`rs` with every rule checked; a repeated id is an error."""
    seen: set[str] = set()
    out = []
    for r in rs.rules:
        if r.id in seen:
            raise RuleError(r.id, "the id is used twice in the rule set")
        seen.add(r.id)
        out.append(checked(r))
    return RuleSet(out, rs.name, rs.provenance)


def _attr_shape(rid: str, where: str, key: str, v: Any) -> None:
    if isinstance(v, dict):
        d = v.get("dim")
        if set(v) != {"dim"} or not isinstance(d, list) or len(d) != 2:
            raise RuleError(rid, f"{where}: attribute {key} {v!r} is not "
                            '{"dim": [reference, axis]}')
        _ref_shape(rid, d[0])
    elif isinstance(v, list):
        for u in v:
            _attr_shape(rid, where, key, u)


def _ref_shape(rid: str, r: Any) -> None:
    if isinstance(r, str):
        if not r or r.startswith("?"):
            raise RuleError(rid, f"{r!r} is not a variable name")
        return
    if not (isinstance(r, list) and len(r) == 2 and
            all(isinstance(x, int) and not isinstance(x, bool) for x in r)):
        raise RuleError(rid, f"{r!r} is neither a variable name nor a [node, output] pair")
