"""Data-movement operators: concat, split, transpose, reshape."""

from __future__ import annotations

import numpy as np

from .base import Op, check, register


def _axis(axis: int, rank: int) -> int:
    check(-rank <= axis < rank, f"axis {axis} out of range for rank {rank}")
    return axis % rank


@register
class Concat(Op):
    name = "concat"
    inputs = ("*xs",)
    attrs = {"axis": None}
    gen_attrs = ({"axis": 0}, {"axis": 1})

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
    # The generator splits a tensor back into the parts a concat made of it.
    gen_attrs = ()

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

    def shape(self, a, x):
        check(sorted(a["perm"]) == list(range(len(x))), f"bad permutation {a['perm']}")
        return tuple(x[p] for p in a["perm"])

    def ref(self, a, x):
        return np.ascontiguousarray(np.transpose(x, a["perm"]))

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
