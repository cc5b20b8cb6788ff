"""Rule sets: the data (rule.py), what a pattern means (pattern.py), reading and
writing (parse.py checks untrusted JSON, files.py, TASO's `.pb` in taso_pb.py), and
the shipped, verified rule sets (the JSON files beside this module)."""

from pathlib import Path

from .coverage import coverage
from .files import load, save
from .parse import parse_rule
from .pattern import TAGS, RuleError, checked, instantiate
from .rule import PNode, Rule, RuleSet
from .taso_pb import read_taso_pb

SHIPPED = Path(__file__).parent
# The sets the optimizer searches with by default, named: a stray JSON beside
# them (say, a verifier's output) must not join the defaults unnoticed.
DEFAULT_SETS = ("taso.json", "fusion.json", "generated.json")
# TASO's published rule file, kept as data (see reference/README.md).
TASO_REFERENCE = SHIPPED / "reference" / "graph_subst.pb"

__all__ = ["DEFAULT_SETS", "SHIPPED", "TAGS", "TASO_REFERENCE", "PNode", "Rule", "RuleError",
           "RuleSet", "checked", "coverage", "default_rule_files", "instantiate", "load",
           "parse_rule", "read_taso_pb", "save"]


def default_rule_files() -> list[Path]:
    """The shipped rule sets the optimizer loads unless told otherwise."""
    return [SHIPPED / name for name in DEFAULT_SETS]
