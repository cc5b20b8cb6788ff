"""The generator's fixed input family and the operator instances it enumerates.

The family is small and shaped so that TASO's rules are expressible: several
square matrices (so that e.g. ``matmul(x1, x4) + x1`` type-checks), several 4-D
tensors of one shape that is valid both as an NCHW activation and as an OIHW
kernel (so that ``conv2d(t, t)`` exists), a 1x1 and a 1x3 kernel for the other
conv sizes, and a 0-d scalar for ``scalar_mul``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taso.ops import OPS, ShapeError
from taso.ops.base import Op

Shape = tuple[int, ...]

# TASO's generator operator set (issue 3).
DEFAULT_OPS: tuple[str, ...] = (
    "matmul", "conv2d", "ewadd", "ewmul", "relu", "avgpool2d", "maxpool2d", "concat", "split",
    "transpose", "enlarge", "scalar_mul", "const_pool", "const_iconv", "const_imm", "const_one")


@dataclass(frozen=True)
class Var:
    """One tensor of the input family. `alt` is a second shape of the same kind
    (other sizes, same relations), on which every emitted rule is re-checked so
    that a rule true only at the family's sizes is not emitted."""

    name: str
    shape: Shape
    alt: Shape | None = None


def default_family(n: int = 3, c: int = 2) -> tuple[Var, ...]:
    """4 n-by-n matrices, 4 (c, c, 3, 3) activations/kernels, a 1x1 and a 1x3
    kernel, one scalar."""
    fam = [Var(f"m{i}", (n, n), (n + 2, n + 2)) for i in range(4)]
    fam += [Var(f"t{i}", (c, c, 3, 3), (c + 1, c + 1, 5, 5)) for i in range(4)]
    fam += [Var("k1x1", (c, c, 1, 1), (c + 1, c + 1, 1, 1)),
            Var("k1x3", (c, c, 1, 3), (c + 1, c + 1, 1, 3)), Var("s0", (), ())]
    return tuple(fam)


# Conv and pooling read activations: inputs at least this large (the largest
# window enumerated), so that no rule holds only because a window covers the
# whole input.
MIN_ACTIVATION = 3


@dataclass(frozen=True)
class Instance:
    """An operator with the attribute values the generator applies it with.

    `rank` restricts the ranks of its operands (the generator's choice, e.g.
    matmul only on matrices as in TASO); conv2d infers `groups` from the channel
    counts as TASO does."""

    op: str
    attrs: tuple[tuple[str, Any], ...]
    arity: int
    rank: int | None = None

    def concrete(self, shapes: tuple[Shape, ...]) -> dict[str, Any] | None:
        """The attributes for these operand shapes, or None when they do not apply."""
        if self.rank is not None and any(len(s) != self.rank for s in shapes):
            return None
        a = dict(self.attrs)
        if self.op == "enlarge" and tuple(shapes[0][2:]) == tuple(a["kernel"]):
            return None  # the identity there: a rule using it would hold for that size only
        if self.op in _READS_ACTIVATION and min(shapes[0][2:], default=0) < MIN_ACTIVATION:
            return None
        if self.op == "conv2d":
            x, w = shapes
            if len(x) != 4 or len(w) != 4 or w[1] == 0 or x[1] % w[1]:
                return None
            a["groups"] = x[1] // w[1]
        return a


def generatable_ops() -> tuple[str, ...]:
    """The operators the generator can enumerate: those with fingerprint
    semantics and attributes to try (split has none: it only undoes a concat)."""
    return tuple(sorted(n for n, op in OPS.items()
                        if type(op).fp is not Op.fp and (op.gen_attrs or n == "split")))


@dataclass(frozen=True)
class GenConfig:
    max_ops: int = 3
    ops: tuple[str, ...] = DEFAULT_OPS
    family: tuple[Var, ...] = field(default_factory=default_family)
    seed: int = 0
    max_outputs: int = 2  # TASO's rules map at most two outputs

    def __post_init__(self) -> None:
        if self.max_ops < 1:
            raise ValueError(f"max_ops must be at least 1, got {self.max_ops}")
        if not self.ops:
            raise ValueError("no operators to enumerate")
        can = generatable_ops()
        unknown = [o for o in self.ops if o not in can]
        if unknown:
            raise ValueError(f"the generator cannot enumerate {', '.join(unknown)}; "
                             f"it can: {', '.join(can)}")
        if "split" in self.ops and "concat" not in self.ops:
            raise ValueError("split needs concat among the operators (it only undoes one)")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    def to_json(self) -> dict[str, Any]:
        return {"max_ops": self.max_ops, "ops": list(self.ops), "seed": self.seed,
                "max_outputs": self.max_outputs,
                "family": {v.name: list(v.shape) for v in self.family}}


_OPERAND_RANK = {"matmul": 2, "transpose": 2}
_READS_ACTIVATION = {"conv2d", "avgpool2d", "maxpool2d"}


def operator_instances(cfg: GenConfig) -> list[Instance]:
    """Every (operator, attributes) pair the generator applies, in a fixed order.
    Split is absent: it is applied only to undo a concat (see enumerate.py)."""
    out: list[Instance] = []
    shapes = sorted({v.shape for v in cfg.family}, key=lambda s: (len(s), s))
    for name in cfg.ops:
        op = OPS[name]
        if name == "split":
            continue
        if op.weight_only:
            for s in (_depthwise(shapes) if name == "const_pool" else shapes):
                try:
                    op.out_shapes({"shape": s}, [])
                except ShapeError:
                    continue
                out.append(Instance(name, (("shape", s),), 0))
            continue
        arity = 2 if op.variadic else len(op.inputs)
        for ga in op.gen_attrs:
            attrs = tuple((k, ga.get(k, d)) for k, d in op.attrs.items() if k != "groups")
            out.append(Instance(name, attrs, arity, _OPERAND_RANK.get(name)))
    return out


def _depthwise(shapes: list[Shape]) -> list[Shape]:
    """Averaging-kernel shapes (C, 1, KH, KW) matching the family's 4-D tensors (a
    1x1 one is all ones: nothing to average)."""
    return sorted({(s[1], 1, s[2], s[3]) for s in shapes if len(s) == 4 and s[2] * s[3] > 1})
