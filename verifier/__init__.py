"""taso.verifier: Z3 proofs of rewrite rules from tested operator axioms.

    terms.py    the term language of rule sides and axioms, and its meaning (the ⊥
                model: an ill-shaped application is ⊥) computed with numpy
    shapes.py   a shape solver: variable shapes under which terms are well-shaped
    axioms/     the axioms, each with a readable statement (dsl.py, one module per
                family in families/), and their numeric check (check.py)
    encode.py   Z3 sorts, one function symbol per operator output, axioms as
                quantified formulas with triggers, rules as proof obligations
    prove.py    one proof (unsat core = axioms used); axiom implication
    refute.py   counterexamples on random float inputs
    run.py      verification records, in parallel worker processes with deadlines
    record.py   what a record vouches for: the digest of its proof's axioms
    report.py   axioms no proof used, axioms the others imply
    cli.py      taso-verify
"""

from .axioms import AXIOMS, Axiom, check_axiom
from .prove import prove
from .refute import refute
from .run import verify_rule, verify_rules

__all__ = ["AXIOMS", "Axiom", "check_axiom", "prove", "refute", "verify_rule", "verify_rules"]
