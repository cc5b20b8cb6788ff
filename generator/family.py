"""The generator's fixed input family and the operator instances it enumerates.

The family is small and shaped so that TASO's rules are expressible: several
square matrices (so that e.g. ``matmul(x1, x4) + x1`` type-checks), several 4-D
tensors of one shape that is valid both as an NCHW activation and as an OIHW
kernel (so that ``conv2d(t, t)`` exists), a 1x1 and a 1x3 kernel for the other
conv sizes, and a 0-d scalar for ``scalar_mul``.

Named sets (`NAMED_SETS`, `taso-gen --ops transformer`) bring their own
operators and family; each operator says what it is enumerated with there
(`Op.gen_sets`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from taso.ops import OPS, ShapeError
from taso.ops.base import Op

Shape = tuple[int, ...]


def default_ops() -> tuple[str, ...]:
    """TASO's generator operator set (issue 3): the operators that say so, in
    the order they say (`Op.gen_default`), which is the enumeration's."""
    return tuple(sorted((n for n, op in OPS.items() if op.gen_default is not None),
                        key=lambda n: OPS[n].gen_default))


DEFAULT_OPS: tuple[str, ...] = default_ops()


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


def transformer_family(b: int = 2, s: int = 3, h: int = 4) -> tuple[Var, ...]:
    """2 (batch, seq, hidden) activations, 2 hidden-by-hidden weights, 2 hidden
    vectors (a layer norm's scale and shift), one scalar. seq != hidden, so that
    q k^T (seq by seq) and x w (seq by hidden) are told apart, and their
    alternative sizes keep that."""
    fam = [Var(f"x{i}", (b, s, h), (b + 1, s + 1, h + 1)) for i in range(2)]
    fam += [Var(f"w{i}", (h, h), (h + 1, h + 1)) for i in range(2)]
    fam += [Var(f"g{i}", (h,), (h + 1,)) for i in range(2)]
    return (*fam, Var("s0", (), ()))


# Operator sets by name, each with its family: `--ops NAME`.
NAMED_SETS: dict[str, tuple[tuple[str, ...], Callable[[], tuple[Var, ...]]]] = {
    "transformer": (("matmul", "transpose", "reshape", "scalar_mul", "div", "ewadd", "ewmul",
                     "softmax", "layernorm", "gelu", "reduce_mean", "concat", "split"),
                    transformer_family),
}


@dataclass(frozen=True)
class Instance:
    """An operator with the attribute values the generator applies it with.

    `rank` restricts the ranks of its operands (the operator's `gen_rank`, e.g.
    matmul only on matrices as in TASO); the operator has the last word on
    the attributes for given operands (`Op.gen_concrete`: conv2d infers
    `groups` from the channel counts as TASO does)."""

    op: str
    attrs: tuple[tuple[str, Any], ...]
    arity: int
    rank: int | None = None
    scalar_first: bool = True  # may a 0-d tensor be the first operand

    def concrete(self, shapes: tuple[Shape, ...]) -> dict[str, Any] | None:
        """The attributes for these operand shapes, or None when they do not apply."""
        if self.rank is not None and any(len(s) != self.rank for s in shapes):
            return None
        if not self.scalar_first and shapes and shapes[0] == ():
            return None
        op = OPS[self.op]
        # A windowed input at least as large as the largest window, so that no
        # rule holds only because a window covers the whole input.
        if op.gen_min_spatial and min(shapes[0][2:], default=0) < op.gen_min_spatial:
            return None
        try:  # an axis counted from the end, made non-negative as graphs hold it
            a = op.normalize(dict(self.attrs), shapes)
        except ShapeError:
            return None
        return op.gen_concrete(a, shapes)


def _attr_sets(op: Op, opset: str) -> tuple[tuple[dict[str, Any], ...], int | None]:
    """What `op` is enumerated with in the named set `opset` ("" for TASO's),
    and the operand rank it is limited to."""
    if opset in op.gen_sets:
        return op.gen_sets[opset], None
    return op.gen_attrs, op.gen_rank


def generatable_ops(opset: str = "") -> tuple[str, ...]:
    """The operators the generator can enumerate (in the named set `opset`):
    those with fingerprint semantics and attributes to try (split has none: it
    only undoes a concat)."""
    return tuple(sorted(n for n, op in OPS.items() if type(op).fp is not Op.fp
                        and (_attr_sets(op, opset)[0] or op.undoes)))


@dataclass(frozen=True)
class GenConfig:
    max_ops: int = 3
    ops: tuple[str, ...] = DEFAULT_OPS
    family: tuple[Var, ...] = field(default_factory=default_family)
    seed: int = 0
    max_outputs: int = 2  # TASO's rules map at most two outputs
    opset: str = ""  # a named set's attributes (`Op.gen_sets`); "": TASO's

    @classmethod
    def named(cls, name: str, **kw: Any) -> GenConfig:
        """The configuration of a named operator set (`NAMED_SETS`): its
        operators, its family and its attributes."""
        if name not in NAMED_SETS:
            raise ValueError(f"no operator set named {name!r}; there are: "
                             f"{', '.join(NAMED_SETS)}")
        ops, family = NAMED_SETS[name]
        return cls(ops=ops, family=family(), opset=name, **kw)

    def __post_init__(self) -> None:
        if self.max_ops < 1:
            raise ValueError(f"max_ops must be at least 1, got {self.max_ops}")
        if not self.ops:
            raise ValueError("no operators to enumerate")
        if self.opset and self.opset not in NAMED_SETS:
            raise ValueError(f"no operator set named {self.opset!r}")
        can = generatable_ops(self.opset)
        unknown = [o for o in self.ops if o not in can]
        if unknown:
            raise ValueError(f"the generator cannot enumerate {', '.join(unknown)}; "
                             f"it can: {', '.join(can)}")
        for o in self.ops:
            if OPS[o].undoes and OPS[o].undoes not in self.ops:
                raise ValueError(f"{o} needs {OPS[o].undoes} among the operators (it only "
                                 "undoes one)")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    def to_json(self) -> dict[str, Any]:
        out = {"max_ops": self.max_ops, "ops": list(self.ops), "seed": self.seed,
               "max_outputs": self.max_outputs,
               "family": {v.name: list(v.shape) for v in self.family}}
        if self.opset:  # (absent for TASO's set: its rule files stay as they were)
            out["opset"] = self.opset
        return out


def operator_instances(cfg: GenConfig) -> list[Instance]:
    """Every (operator, attributes) pair the generator applies, in a fixed order.
    Split is absent: it is applied only to undo a concat (see enumerate.py)."""
    out: list[Instance] = []
    shapes = sorted({v.shape for v in cfg.family}, key=lambda s: (len(s), s))
    for name in cfg.ops:
        op = OPS[name]
        if op.undoes:
            continue
        if op.weight_only:
            for s in op.gen_const_shapes(shapes):
                try:
                    op.out_shapes({"shape": s}, [])
                except ShapeError:
                    continue
                out.append(Instance(name, (("shape", s),), 0))
            continue
        arity = 2 if op.variadic else len(op.inputs)
        gen_attrs, rank = _attr_sets(op, cfg.opset)
        for ga in gen_attrs:
            attrs = tuple((k, ga.get(k, d)) for k, d in op.attrs.items() if k != "groups")
            # A named set's scalar is only ever what scales (scalar_mul's and
            # div's second operand): no s·s, s + s or gelu(s), whose
            # cancellations would be most of its rules and none a model's.
            out.append(Instance(name, attrs, arity, rank, scalar_first=not cfg.opset))
    return out
