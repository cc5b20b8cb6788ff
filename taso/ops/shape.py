"""Data-movement operators: concat, split, transpose, reshape."""

from __future__ import annotations

import numpy as np

from .base import Op, check, onnx_importer, register


def _axis(axis: int, rank: int) -> int:
    check(-rank <= axis < rank, f"axis {axis} out of range for rank {rank}")
    return axis % rank


def norm_axes(axes, rank: int) -> tuple[int, ...]:
    """Distinct axes made non-negative, in order."""
    axes = tuple(_axis(int(a), rank) for a in axes)
    check(len(set(axes)) == len(axes), f"repeated axes {axes}")
    return tuple(sorted(axes))


@register
class Concat(Op):
    name = "concat"
    inputs = ("*xs",)
    attrs = {"axis": None}
    axes = {"axis": "in"}
    gen_attrs = ({"axis": 0}, {"axis": 1})
    # the batch axis, and the last one (a 3-D tensor's features: q, k and v side by side)
    gen_sets = {"transformer": ({"axis": 0}, {"axis": -1})}
    kind = "movement"
    gen_default = 8
    taso_type = 12
    example = ({"axis": 1}, ((2, 3), (2, 1), (2, 2)))

    def from_taso(self, p):
        return {"axis": p["axis"]}, p.get("numdim")

    def shape(self, a, *xs):
        rank = len(xs[0])
        ax = _axis(a["axis"], rank)
        for s in xs[1:]:
            check(len(s) == rank and all(d == e for i, (d, e) in enumerate(zip(s, xs[0]))
                                         if i != ax), "shapes differ off the concat axis")
        out = list(xs[0])
        out[ax] = sum(s[ax] for s in xs)
        return tuple(out)

    def ref(self, a, *xs):
        return np.concatenate(xs, axis=a["axis"])

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Concat", ins, outs, axis=a["axis"])

    def build(self, g, axis, inputs):
        return g.add_node(self.name, list(inputs), axis=axis)[0]


@register
class Split(Op):
    name = "split"
    inputs = ("x",)
    attrs = {"axis": None, "sizes": None}
    axes = {"axis": "in"}
    # The generator splits a tensor back into the parts a concat made of it.
    gen_attrs = ()
    undoes = "concat"
    kind = "movement"
    gen_default = 9
    taso_type = 13
    example = ({"axis": 1, "sizes": (2, 3)}, ((3, 5, 4),))

    def from_taso(self, p):
        return {"axis": p["axis"]}, None  # its sizes: the reader traces its concat

    def num_outputs(self, a):
        return len(a["sizes"])

    def shape(self, a, x):
        ax = _axis(a["axis"], len(x))
        check(len(a["sizes"]) >= 1 and min(a["sizes"]) >= 1, "split sizes must be positive")
        check(sum(a["sizes"]) == x[ax], f"split sizes {a['sizes']} do not add up to {x[ax]}")
        return [tuple(s if i == ax else d for i, d in enumerate(x)) for s in a["sizes"]]

    def ref(self, a, x):
        return np.split(x, np.cumsum(a["sizes"])[:-1], axis=a["axis"])

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        sizes = em.const(np.array(a["sizes"], np.int64), "split")
        em.node("Split", [ins[0], sizes], outs, axis=a["axis"])

    def build(self, g, input, axis, sizes):
        if isinstance(sizes, int):  # equal parts
            n = input.shape[axis]
            check(n % sizes == 0, f"split: {n} is not divisible into {sizes} parts")
            sizes = [n // sizes] * sizes
        return g.add_node(self.name, [input], axis=axis, sizes=sizes)


@register
class Transpose(Op):
    name = "transpose"
    inputs = ("x",)
    attrs = {"perm": None}
    gen_attrs = ({"perm": (1, 0)},)
    # a matrix's, and k^T of batched attention (the last two axes of a 3-D tensor)
    gen_sets = {"transformer": ({"perm": (1, 0)}, {"perm": (0, 2, 1)})}
    kind = "movement"
    gen_rank = 2
    gen_default = 10
    taso_type = 15
    example = ({"perm": (0, 2, 1)}, ((2, 3, 4),))

    def shape(self, a, x):
        check(sorted(a["perm"]) == list(range(len(x))), f"bad permutation {a['perm']}")
        return tuple(x[p] for p in a["perm"])

    def ref(self, a, x):
        return np.transpose(x, a["perm"]).copy()  # (ascontiguousarray makes 0-d 1-d)

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Transpose", ins, outs, perm=list(a["perm"]))

    def build(self, g, input, perm):
        return g.add_node(self.name, [input], perm=perm)[0]


@register
class Reshape(Op):
    name = "reshape"
    inputs = ("x",)
    attrs = {"shape": None}
    gen_attrs = ()  # a target shape is the model's to choose; TASO's set has none
    # the transformer set's: a (batch, seq, hidden) tensor as the matrix of its rows
    gen_sets = {"transformer": ({"shape": "rows"},)}
    kind = "movement"
    view = True
    example = ({"shape": (3, 8)}, ((2, 3, 4),))

    def gen_concrete(self, a, shapes):
        if a["shape"] != "rows":
            return a
        x = shapes[0]
        return {"shape": (x[0] * x[1], x[2])} if len(x) == 3 else None

    def gen_pattern_attrs(self, a, shapes, refs):
        # the row length is the operand's; the row count stays a number (a
        # pattern has no product of sizes), so such a rule holds at that count
        rows, _ = a["shape"]
        return {"shape": (rows, {"dim": (refs[0], 2)})}

    def shape(self, a, x):
        s = tuple(a["shape"])
        check(all(d >= 1 for d in s), f"target shape {s} must be fully specified")
        check(int(np.prod(s)) == int(np.prod(x)), f"cannot reshape {x} to {s}")
        return s

    def ref(self, a, x):
        return x.reshape(a["shape"])

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Reshape", [ins[0], em.const(np.array(a["shape"], np.int64), "shape")], outs)

    def build(self, g, input, shape):
        shape = list(shape)
        if -1 in shape:  # one inferred dimension, as numpy and ONNX allow
            known = int(np.prod([d for d in shape if d != -1]))
            shape[shape.index(-1)] = int(np.prod(input.shape)) // known
        return g.add_node(self.name, [input], shape=shape)[0]


# ---- ONNX import ------------------------------------------------------------------
@onnx_importer("Concat")
def _import_concat(ctx):
    xs = ctx.inputs
    return [ctx.g.concat(_axis(ctx.attr("axis"), len(xs[0].shape)), xs)]


@onnx_importer("Split")
def _import_split(ctx):
    x = ctx.inputs[0]
    ax = _axis(ctx.attr("axis", 0), len(x.shape))
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:  # opset >= 13
        sizes = ctx.const(1)
        if sizes is None:
            return None
    elif ctx.attr("split") is not None:  # opset < 13
        sizes = ctx.attr("split")
    else:  # equal parts, the last one smaller if need be (opset 18)
        num = ctx.attr("num_outputs", len(ctx.node.output))
        chunk = -(-x.shape[ax] // num)
        sizes = [chunk] * (num - 1) + [x.shape[ax] - chunk * (num - 1)]
    return ctx.g.split(x, axis=ax, sizes=[int(s) for s in np.ravel(sizes)])


@onnx_importer("Transpose")
def _import_transpose(ctx):
    x = ctx.inputs[0]
    return [ctx.g.transpose(x, perm=ctx.attr("perm", list(range(len(x.shape)))[::-1]))]


@onnx_importer("Reshape")
def _import_reshape(ctx):
    x, target = ctx.inputs[0], ctx.const(1)
    if target is None:
        return None  # a shape computed at run time
    shape = [int(d) for d in target]
    if 0 in shape:
        if ctx.attr("allowzero", 0):
            return None  # a literal zero dimension
        check(len(shape) <= len(x.shape) or shape.index(0) < len(x.shape), "bad 0 in shape")
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    check(shape.count(-1) <= 1 and min(shape, default=1) >= -1, f"bad target shape {shape}")
    return [ctx.g.reshape(x, shape)]
