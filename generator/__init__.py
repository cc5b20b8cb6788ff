"""taso.generator: enumerate small graphs, find equivalent ones by exact
fingerprints, prune, and emit candidate rewrite rules (the `taso-gen` CLI).

    from taso.generator import GenConfig, generate
    if __name__ == "__main__":  # the pool's workers start fresh (forkserver/spawn)
        rules, report = generate(GenConfig(max_ops=3), workers=2)  # or executor="ray"
        rules.save("rules.json")
"""

from .family import DEFAULT_OPS, GenConfig, Var, default_family
from .generate import Report, generate

__all__ = ["DEFAULT_OPS", "GenConfig", "Report", "Var", "default_family", "generate"]
