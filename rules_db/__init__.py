"""Rule sets: the schema (load, save, query), TASO's `.pb` reader, and the
shipped, verified rule sets (the JSON files beside this module)."""

from pathlib import Path

from .coverage import coverage
from .rule import PNode, Rule, RuleSet, instantiate, load, save
from .taso_pb import read_taso_pb

SHIPPED = Path(__file__).parent
# TASO's published rule file, kept as data (see reference/README.md).
TASO_REFERENCE = SHIPPED / "reference" / "graph_subst.pb"

__all__ = ["SHIPPED", "TASO_REFERENCE", "PNode", "Rule", "RuleSet", "instantiate", "load",
           "read_taso_pb", "save", "coverage"]
