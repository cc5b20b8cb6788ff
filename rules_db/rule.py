"""Rewrite rules and rule sets: plain data, saved as versioned JSON.

A rule has a source and a target pattern over shared variables. A pattern is a
list of nodes; a node's inputs are references: a variable name ("x1") or an
earlier node of the same side ([node index, output index]). `outputs` maps
source tensors to the target tensors that replace them.

What a pattern means (validation, axes, constraints, attribute resolution,
instantiation) is defined in `pattern.py`; this module is the data and its
JSON form, read as it is (`parse.parse_rule` checks untrusted input).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import numpy as np

from taso.files import atomic_path

FORMAT = "taso-rules"
VERSION = 1

Ref = Union[str, tuple[int, int]]  # noqa: UP007 (a runtime alias)  # variable name, or (node index, output index)


@dataclass
class PNode:
    op: str
    inputs: list[Ref]
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"op": self.op, "inputs": [_ref_json(r) for r in self.inputs],
                "attrs": _attrs_json(self.attrs)}

    @staticmethod
    def from_json(d: dict) -> PNode:
        return PNode(d["op"], [_ref(r) for r in d["inputs"]], _attrs_load(d.get("attrs", {})))


@dataclass
class Rule:
    id: str
    src: list[PNode]
    dst: list[PNode]
    outputs: list[tuple[Ref, Ref]]
    vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    # What the search does with the rule beyond searching with it (`pattern.TAGS`);
    # no part of what a proof covers.
    tags: list[str] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        return self.verification.get("status")

    def variables(self) -> list[str]:
        """Variables in order of first use (source side first)."""
        seen: list[str] = []
        for n in self.src + self.dst:
            for r in n.inputs:
                if isinstance(r, str) and r not in seen:
                    seen.append(r)
        return seen

    def same_dims(self) -> list[tuple[str, int, str, int]]:
        """The "same_dim" constraints as (variable, axis, other variable, other axis)."""
        return [(v, a, u, b) for v, c in self.vars.items() for a, u, b in c.get("same_dim", ())]

    def reversed(self) -> Rule:
        return Rule(self.id + "-rev", self.dst, self.src, [(d, s) for s, d in self.outputs],
                    self.vars, self.provenance, {})  # tags name roles of this direction

    def to_json(self) -> dict:
        return {"id": self.id,
                **({"tags": list(self.tags)} if self.tags else {}),
                "vars": {v: self.vars.get(v, {}) for v in self.variables()},
                "src": [n.to_json() for n in self.src],
                "dst": [n.to_json() for n in self.dst],
                "outputs": [[_ref_json(s), _ref_json(d)] for s, d in self.outputs],
                "provenance": self.provenance,
                "verification": self.verification}

    @staticmethod
    def from_json(d: dict) -> Rule:
        """Trusted input only; `parse.parse_rule` checks a file's content."""
        return Rule(d["id"], [PNode.from_json(n) for n in d["src"]],
                    [PNode.from_json(n) for n in d["dst"]],
                    [(_ref(s), _ref(t)) for s, t in d["outputs"]],
                    {k: dict(v) for k, v in d.get("vars", {}).items()},
                    dict(d.get("provenance", {})), dict(d.get("verification", {})),
                    list(d.get("tags", [])))

    def __str__(self) -> str:
        return f"{self.id}: {side_str(self.src)}  =>  {side_str(self.dst)}"


@dataclass
class RuleSet:
    rules: list[Rule]
    name: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self):
        return iter(self.rules)

    def by_id(self, rid: str) -> Rule:
        for r in self.rules:
            if r.id == rid:
                return r
        raise KeyError(rid)

    def proved(self) -> RuleSet:
        return RuleSet([r for r in self.rules if r.status == "proved"], self.name,
                       self.provenance)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "name": self.name,
                "provenance": self.provenance, "rules": [r.to_json() for r in self.rules]}

    def save(self, path: str | Path) -> None:
        """Write deterministic JSON, atomically: a rule set verified in place is
        never left half written. A name ending in ".gz" is written compact and
        gzip-compressed (large generated sets: indented, 185k rules took two
        minutes, as only compact JSON has the C encoder); others human-readable,
        one rule per block."""
        packed = str(path).endswith(".gz")
        text = json.dumps(self.to_json(), indent=None if packed else 1,
                          separators=(",", ":") if packed else None) + "\n"
        with atomic_path(path) as tmp:
            if packed:  # mtime 0: the same bytes every time
                Path(tmp).write_bytes(gzip.compress(text.encode(), compresslevel=6, mtime=0))
            else:
                Path(tmp).write_text(text)

    @staticmethod
    def from_json(d: dict) -> RuleSet:
        """Trusted input only; `parse.parse_ruleset` checks a file's content."""
        return RuleSet([Rule.from_json(r) for r in d["rules"]], d.get("name", ""),
                       d.get("provenance", {}))


# ---- JSON helpers ------------------------------------------------------------------
def _ref(r: Any) -> Ref:
    return r if isinstance(r, str) else (int(r[0]), int(r[1]))


def _ref_json(r: Ref) -> Any:
    return r if isinstance(r, str) else [r[0], r[1]]


def _attrs_json(a: dict) -> dict:
    def conv(v):
        if isinstance(v, dict) and "dim" in v:
            return {"dim": [_ref_json(_ref(v["dim"][0])), v["dim"][1]]}
        if isinstance(v, (list, tuple)):
            return [conv(u) for u in v]
        if isinstance(v, np.generic):
            return v.item()
        return v
    return {k: conv(v) for k, v in a.items()}


def _attrs_load(a: dict) -> dict:
    def conv(v):
        if isinstance(v, dict) and "dim" in v:
            return {"dim": (_ref(v["dim"][0]), int(v["dim"][1]))}
        if isinstance(v, list):
            return tuple(conv(u) for u in v)
        return v
    return {k: conv(v) for k, v in a.items()}


def side_str(nodes: list[PNode]) -> str:
    def r(x):
        return x if isinstance(x, str) else f"t{x[0]}" + (f".{x[1]}" if x[1] else "")
    parts = []
    for i, n in enumerate(nodes):
        attrs = ",".join(f"{k}={v}" for k, v in n.attrs.items())
        parts.append(f"t{i}={n.op}({', '.join(map(r, n.inputs))}{'; ' + attrs if attrs else ''})")
    return "; ".join(parts)
