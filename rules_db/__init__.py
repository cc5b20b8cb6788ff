"""Rule sets: the schema (load, save, query), TASO's `.pb` reader, and the
shipped, verified rule sets (the JSON files beside this module)."""

from pathlib import Path

from .coverage import coverage
from .rule import PNode, Rule, RuleSet, instantiate, load, save
from .taso_pb import read_taso_pb

SHIPPED = Path(__file__).parent
# The sets the optimizer searches with by default, named: a stray JSON beside
# them (say, a verifier's output) must not join the defaults unnoticed.
DEFAULT_SETS = ("taso.json", "fusion.json", "generated.json")
# TASO's published rule file, kept as data (see reference/README.md).
TASO_REFERENCE = SHIPPED / "reference" / "graph_subst.pb"

__all__ = ["DEFAULT_SETS", "SHIPPED", "TASO_REFERENCE", "PNode", "Rule", "RuleSet", "coverage",
           "default_rule_files", "instantiate", "load", "read_taso_pb", "save"]


def default_rule_files() -> list[Path]:
    """The shipped rule sets the optimizer loads unless told otherwise."""
    return [SHIPPED / name for name in DEFAULT_SETS]
