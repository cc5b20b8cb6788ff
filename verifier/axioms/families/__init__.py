"""One module per family of axioms (the module's name is the family's)."""
