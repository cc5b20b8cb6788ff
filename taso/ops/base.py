"""The operator definition: one object per operator carries every part that reads it.

An `Op` holds, side by side, an operator's signature (inputs, attributes and the
values the generator enumerates), its shape rule, its float32 numpy reference
(and a GPU lowering against an array namespace), its fingerprint semantics
(exact integers modulo `P`), its ONNX export, its cost key, FLOPs and fusion
traits, its generator hints, how TASO's rule file spells it, and an example
instance. Operators register themselves in `OPS` by name; the generator,
verifier (whose generic laws read the traits: `pointwise`), cost models, rule
readers and ONNX exporter read only the registry, so adding an operator touches
its own module (and its tests). tests/test_op_traits.py runs every trait of
every registered operator on its example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

Shape = tuple[int, ...]
Attrs = tuple[tuple[str, Any], ...]

# Fingerprint modulus: a prime below 2**21, so a product of two residues is
# below 2**42 and a sum of up to 2**21 such products still fits in int64.
P = 2097143

OPS: dict[str, Op] = {}
ONNX_IMPORTERS: dict[str, Callable[..., Any]] = {}

# The activations conv2d and matmul can fuse (their `activation` attribute):
# each one names a registered pointwise operator (tests/test_op_traits.py).
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")

# What an operator is, for reports and benchmarks that group costs (`Op.kind`).
KINDS = ("source", "conv", "matmul", "pool", "norm", "movement", "elementwise", "constant",
         "opaque")

# Inputs that are a layer's parameters in every model we know of: constants
# when a cost model is not told (`Op.default_consts`).
PARAMETER_INPUTS = ("w", "b", "scale", "bias", "mean", "var")


class ShapeError(ValueError):
    """An operator was applied to shapes or attributes it does not accept."""


def freeze(value: Any) -> Any:
    """Turn lists (recursively) into tuples and numpy scalars into Python ones, so
    attribute values hash and compare by value."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def register(cls: type[Op]) -> type[Op]:
    """Class decorator: instantiate the operator and add it to the registry."""
    op = cls()
    if op.name in OPS:
        raise ValueError(f"operator {op.name!r} is defined twice")
    OPS[op.name] = op
    return cls


def onnx_importer(*op_types: str) -> Callable:
    """Decorator: register a function that turns ONNX nodes of these types into IR nodes.
    It receives an import context (see taso.onnx_io.load.ImportContext) and returns the
    node's output tensors."""

    def deco(fn: Callable) -> Callable:
        for t in op_types:
            ONNX_IMPORTERS[t] = fn
        return fn

    return deco


def get_op(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}") from None


class Op:
    """Base class of an operator. Subclasses override what differs.

    Conventions: `shape` and `ref`/`fp` receive the attribute dict first and then
    one argument per input; they return one value (single-output operators) or a
    list (one per output). Shapes are tuples of ints, NCHW for images, conv
    kernels OIHW, pads in ONNX order (top, left, bottom, right).
    """

    name: str = ""
    inputs: tuple[str, ...] = ()  # input names; a single "*name" means variadic
    attrs: dict[str, Any] = {}  # attribute name -> default (None: required)
    gen_attrs: tuple[dict[str, Any], ...] = ({},)  # what the generator enumerates
    weight_only: bool = False  # a constant generator: no inputs, data from attrs
    commutative: bool = False  # two inputs whose order does not matter
    positive: tuple[str, ...] = ()  # inputs defined only for positive values (a variance)
    input_ranks: dict[str, int] = {}  # inputs of one rank only (a conv's NCHW input: 4)
    # Attributes that name axes, by what they count: "in" an axis of the first
    # input (-r .. r-1), "in+1" a cut between its axes (-r .. r, Flatten), "out"
    # an axis of the output (Unsqueeze). A negative value counts from the end;
    # graphs and rule patterns hold them non-negative (`normalize`), so that a
    # rule's axis variable means one thing to the matcher and to the proof.
    axes: dict[str, str] = {}

    # ---- traits (each consumer asks the operator; defaults suit most) ---------
    kind: str = ""  # one of KINDS: required, so a new operator says what it is
    # y[i] = f(x[i]) for one input and no attributes: the verifier states the
    # pointwise laws for it (commutes with concat and transpose, keeps sizes).
    pointwise: bool = False
    # A contraction (conv, matmul, gemm): the analytic model runs it below peak
    # when small, and onnxruntime fuses the elementwise chain after it.
    contraction: bool = False
    epilogue: bool = False  # onnxruntime fuses it into a contraction's chain
    arithmetic: bool = False  # one-element constant operands keep their value when timed
    view: bool = False  # the output is the input reinterpreted: no work, no allocation
    blocked_layout: bool = False  # onnxruntime runs it in its NCHWc layout on a CPU
    # Generator hints: the operand rank it is applied to (None: any), the
    # least spatial size of a windowed input (no rule true only because a window
    # covers the input), its place (1, 2, ...) in TASO's operator set, the
    # `--ops` default, whose order is the enumeration's (None: not in it), and
    # the operator whose output it only ever takes apart (split: concat).
    gen_rank: int | None = None
    gen_min_spatial: int = 0
    gen_default: int | None = None
    undoes: str = ""
    # Named generator sets beyond TASO's (`taso-gen --ops transformer`; the
    # generator's NAMED_SETS list their operators): set -> the attribute values
    # enumerated there, on operands of any rank. An operator of the set not
    # named here is enumerated there as in TASO's (`gen_attrs`, `gen_rank`).
    gen_sets: dict[str, tuple[dict[str, Any], ...]] = {}
    # The input a partial operator divides by (div: 1): undefined where it is
    # zero, so a generated rule over it must also hold, both sides undefined
    # together, with that input's sources at zero (x·s / s = x does not).
    divisor: int | None = None
    taso_type: int | None = None  # its number in TASO's OpType (graph_subst.pb)
    # An instance for tests/test_op_traits.py: attributes and input shapes.
    example: tuple[dict[str, Any], tuple[Shape, ...]] | None = None

    # ---- signature -----------------------------------------------------------
    @property
    def variadic(self) -> bool:
        return len(self.inputs) == 1 and self.inputs[0].startswith("*")

    def make_attrs(self, **kw: Any) -> Attrs:
        """Normalize keyword attributes into the canonical hashable tuple, in
        declaration order with defaults filled in."""
        unknown = set(kw) - set(self.attrs)
        if unknown:
            raise ShapeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}")
        out = []
        for k, default in self.attrs.items():
            v = kw.get(k, default)
            if v is None and default is None and k not in kw:
                raise ShapeError(f"{self.name}: attribute {k!r} is required")
            out.append((k, freeze(v)))
        return tuple(out)

    def num_outputs(self, a: dict[str, Any]) -> int:
        return 1

    def check_arity(self, n: int) -> None:
        if self.variadic:
            if n < 1:
                raise ShapeError(f"{self.name}: needs at least one input")
        elif n != len(self.inputs):
            raise ShapeError(f"{self.name}: takes {len(self.inputs)} input(s), got {n}")

    # ---- semantics -----------------------------------------------------------
    def shape(self, a: dict[str, Any], *shapes: Shape) -> Shape | list[Shape]:
        raise NotImplementedError

    def ref(self, a: dict[str, Any], *xs: np.ndarray) -> np.ndarray | list[np.ndarray]:
        raise NotImplementedError

    def fp(self, a: dict[str, Any], *xs: np.ndarray) -> np.ndarray | list[np.ndarray]:
        """Fingerprint semantics over int64 residues modulo P."""
        raise NotImplementedError(f"{self.name} has no fingerprint semantics")

    def out_shapes(self, a: dict[str, Any], shapes: Sequence[Shape]) -> list[Shape]:
        """Output shapes, or ShapeError naming the operator and the input shapes."""
        self.check_arity(len(shapes))
        try:
            out = self.shape(a, *shapes)
        except ShapeError as e:
            raise ShapeError(f"{self.name}{_fmt_shapes(shapes)}: {e}") from None
        out = [out] if _is_shape(out) else list(out)
        return [tuple(int(d) for d in s) for s in out]

    def run_ref(self, a: dict[str, Any], xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return _outputs(self.ref(a, *xs))

    def run_fp(self, a: dict[str, Any], xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return _outputs(self.fp(a, *xs))

    def axis_range(self, kind: str, a: dict[str, Any], rank: int) -> tuple[int, int]:
        """(n, hi) for an axis attribute of this kind when the first input has rank
        `rank`: the values are -n .. hi-1, a negative one meaning itself plus n."""
        if kind == "in+1":
            return rank, rank + 1
        if kind == "out":
            n = rank + len(a.get("axes") or ())
            return n, n
        return rank, rank

    def normalize(self, a: dict[str, Any], shapes: Sequence[Shape]) -> dict[str, Any]:
        """`a` with every axis attribute made non-negative for these input shapes;
        a ShapeError names one out of range."""
        if not self.axes or not shapes:
            return a
        out = dict(a)
        for k, kind in self.axes.items():
            v = out.get(k)
            if v is None or isinstance(v, str):
                continue
            n, hi = self.axis_range(kind, out, len(shapes[0]))
            vals = v if isinstance(v, (list, tuple)) else (v,)
            fixed = []
            for ax in vals:
                if not isinstance(ax, (int, np.integer)) or isinstance(ax, bool):
                    raise ShapeError(f"{self.name}: {k} must be an integer, got {ax!r}")
                check(-n <= ax < hi, f"{self.name}: {k} {ax} out of range for rank "
                      f"{len(shapes[0])}")
                fixed.append(int(ax) + n if ax < 0 else int(ax))
            out[k] = tuple(fixed) if isinstance(v, (list, tuple)) else fixed[0]
        return out

    def resolve(self, a: dict[str, Any], shapes: Sequence[Shape]) -> dict[str, Any]:
        """Turn symbolic attribute values (e.g. conv pads "same") into concrete ones."""
        return a

    # ---- lowering ------------------------------------------------------------
    def onnx(self, a: dict[str, Any], em: Any, ins: list[str], outs: list[str],
             shapes: list[Shape]) -> None:
        """Emit ONNX nodes computing `outs` from `ins` through the emitter `em`
        (em.node(op_type, inputs, outputs, **attrs), em.const(array, hint) -> name,
        em.tmp(hint) -> name)."""
        raise NotImplementedError(f"{self.name} has no ONNX export")

    def lower(self, xp: Any, a: dict[str, Any], xs: Sequence[Any], cudnn: Any = None) -> list:
        """Outputs on arrays of the array module `xp` (the GPU cost model's
        cupy): by default the numpy reference, which numpy's array protocols
        dispatch to `xp`; an operator overrides it where the reference would
        leave the device or compute in float64."""
        return self.run_ref(a, xs)

    # ---- cost ----------------------------------------------------------------
    def cost_key(self, a: dict[str, Any], shapes: Sequence[Shape]) -> tuple:
        """What identifies one measurable instance of the operator."""
        return (self.name, tuple(sorted(a.items())), tuple(tuple(s) for s in shapes))

    def flops(self, a: dict[str, Any], shapes: Sequence[Shape], outs: Sequence[Shape]) -> int:
        """Arithmetic operations of one run (the analytic model): one per output
        element unless the operator says otherwise (none for a view)."""
        return 0 if self.view else sum(size(s) for s in outs)

    def moved(self, a: dict[str, Any], shapes: Sequence[Shape], outs: Sequence[Shape]) -> int:
        """Elements read and written by one run: every input and output (none
        for a view)."""
        return 0 if self.view else sum(size(s) for s in shapes) + sum(size(s) for s in outs)

    def default_consts(self, shapes: Sequence[Shape]) -> tuple[bool, ...]:
        """Which inputs are constants when a cost model is not told: a layer's
        parameters (`PARAMETER_INPUTS`)."""
        names = self.inputs
        return tuple(i < len(names) and names[i] in PARAMETER_INPUTS for i in range(len(shapes)))

    # ---- generator hints -----------------------------------------------------
    def gen_concrete(self, a: dict[str, Any], shapes: Sequence[Shape]) -> dict[str, Any] | None:
        """The generator's attributes for these operand shapes, or None where the
        operator should not be applied to them."""
        return a

    def gen_const_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        """The shapes a constant generator is enumerated at, from the family's."""
        return list(shapes)

    def gen_pattern_attrs(self, a: dict[str, Any], shapes: Sequence[Shape],
                          refs: Sequence[Any]) -> dict[str, Any]:
        """Attributes as a generated rule states them: a value the generator
        derived from an operand's size is named as that size ({"dim": ...})."""
        return a

    # ---- TASO's rule file ----------------------------------------------------
    def from_taso(self, p: dict[str, int]) -> tuple[dict[str, Any], int | None]:
        """Attributes from TASO's parameters, and the rank of the operands."""
        raise NotImplementedError(f"TASO operator {self.name} in a rule is not supported by "
                                  "the reader")

    def dim_source(self, a: dict[str, Any], axis: int) -> tuple[int, int] | None:
        """(input, axis) whose size output axis `axis` always has, where known."""
        return None

    # ---- builder -------------------------------------------------------------
    def build(self, g: Any, *args: Any, **kw: Any) -> Any:
        """Default builder: inputs positionally or by name, the rest attributes."""
        if self.variadic:
            name = self.inputs[0][1:]
            ins = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) \
                else list(args)
            if name in kw:
                ins = list(kw.pop(name))
        else:
            ins = list(args)
            for n in self.inputs[len(args):]:
                if n not in kw:
                    raise ShapeError(f"{self.name}: missing input {n!r}")
                ins.append(kw.pop(n))
        outs = g.add_node(self.name, ins, **kw)
        return outs[0] if len(outs) == 1 else outs



class ConstantOp(Op):
    """A weight-only generator: no inputs, its value a function of its attributes."""

    inputs = ()
    weight_only = True
    kind = "constant"
    attrs = {"shape": None}

    def value(self, a: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def ref(self, a):
        return self.value(a).astype(np.float32)

    def fp(self, a):
        return self.value(a).astype(np.int64)

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Identity", [em.const(self.ref(a), self.name)], outs)


def as_array(x: Any) -> Any:
    """`x` as an array: numpy arithmetic on 0-d arrays returns scalars (np.generic),
    which become arrays; an array of another module that numpy's dispatch
    reached (cupy, on the GPU cost model's path) stays what it is, since cupy
    refuses an implicit copy to the host."""
    if hasattr(x, "shape") and not isinstance(x, np.generic):
        return x
    return np.asarray(x)


def _outputs(out: Any) -> list[np.ndarray]:
    if isinstance(out, (list, tuple)):  # an operator of several outputs
        return [as_array(o) for o in out]
    return [as_array(out)]


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple) and all(isinstance(d, (int, np.integer)) for d in x)


def _fmt_shapes(shapes: Sequence[Shape]) -> str:
    return "(" + ", ".join("x".join(map(str, s)) if s else "scalar" for s in shapes) + ")"


def size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ---- modular arithmetic helpers ----------------------------------------------
def mod(x: np.ndarray) -> np.ndarray:
    return np.mod(x, P).astype(np.int64)


def inv(n: int) -> int:
    """The inverse of n modulo P."""
    return pow(int(n) % P, P - 2, P)


def poly(coeffs: Sequence[int]) -> Callable[[np.ndarray], np.ndarray]:
    """A fixed polynomial over residues (Horner, reducing at each step); stands in
    for a non-linear activation in fingerprints."""

    def f(x: np.ndarray) -> np.ndarray:
        acc = np.zeros_like(x, dtype=np.int64)
        for c in coeffs:
            acc = mod(acc * x + c)
        return acc

    return f


def residue(value: float) -> int:
    """A float as an exact residue: a binary fraction n / 2^k becomes n * inv(2^k)."""
    f = Fraction(value)
    return int(f.numerator) % P * inv(f.denominator) % P


def inv_array(x: np.ndarray) -> np.ndarray:
    """Elementwise inverse modulo P by Fermat's little theorem (0 maps to 0)."""
    out, base, e = np.ones_like(x, dtype=np.int64), mod(x), P - 2
    while e:
        if e & 1:
            out = mod(out * base)
        base = mod(base * base)
        e >>= 1
    return out


def f32(x: Any) -> np.ndarray:
    return as_array(x).astype(np.float32)


def f32_attr(v: float) -> float:
    """A float attribute as ONNX stores it (float32), so export and re-import
    give back the same attribute and the reference uses the exported value."""
    return float(np.float32(v))


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ShapeError(msg)
