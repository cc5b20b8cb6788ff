"""Data movement beyond TASO's (shape.py): constant padding, static slices,
squeeze and unsqueeze, flatten. Not enumerated by the generator; their
fingerprint is the reference itself (they only move residues)."""

from __future__ import annotations

import numpy as np

from .base import Op, check, f32_attr, onnx_importer, register, residue
from .shape import _axis, norm_axes

# ---- data movement -----------------------------------------------------------------------


@register
class Pad(Op):
    """Constant padding; `pads` in ONNX order: every axis's begin, then every end."""

    name = "pad"
    inputs = ("x",)
    attrs = {"pads": None, "value": 0.0}
    gen_attrs = ()
    kind = "movement"
    example = ({"pads": (0, 1, 2, 0, 0, 1), "value": -1.5}, ((2, 3, 4),))

    def shape(self, a, x):
        p = a["pads"]
        check(len(p) == 2 * len(x), f"pads needs {2 * len(x)} entries for rank {len(x)}, "
                                    f"got {len(p)}")
        check(min(p, default=0) >= 0, f"pads must be non-negative, got {p}")
        r = len(x)
        return tuple(d + p[i] + p[i + r] for i, d in enumerate(x))

    def _widths(self, a, rank):
        p = a["pads"]
        return [(p[i], p[i + rank]) for i in range(rank)]

    def ref(self, a, x):
        return np.pad(x, self._widths(a, x.ndim), constant_values=np.float32(a["value"]))

    def fp(self, a, x):
        return np.pad(x, self._widths(a, x.ndim), constant_values=residue(a["value"]))

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Pad", [ins[0], em.const(np.array(a["pads"], np.int64), "pads"),
                        em.const(np.array(a["value"], np.float32), "pad_value")], outs,
                mode="constant")

    def build(self, g, x, pads, value=0.0):
        return g.add_node(self.name, [x], pads=tuple(int(p) for p in pads),
                          value=f32_attr(value))[0]


@onnx_importer("Pad")
def _import_pad(ctx):
    x = ctx.inputs[0]
    if ctx.attr("mode", "constant") != "constant":
        return ctx.opaque()
    rank = len(x.shape)
    if len(ctx.inputs) > 1:  # opset >= 11: pads, constant_value and axes are inputs
        pads = ctx.const(1)
        value = ctx.const(2) if len(ctx.inputs) > 2 and ctx.inputs[2] is not None \
            else np.zeros(())
        axes = ctx.const(3) if len(ctx.inputs) > 3 and ctx.inputs[3] is not None \
            else np.arange(rank)
        if pads is None or value is None or axes is None:
            return ctx.opaque()
        pads, axes = pads.tolist(), [_axis(int(i), rank) for i in axes.tolist()]
        full = [0] * (2 * rank)
        for k, ax in enumerate(axes):
            full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
        pads, value = full, float(np.asarray(value).reshape(()))
    else:
        pads, value = ctx.attr("pads", None), ctx.attr("value", 0.0)
    if min(pads, default=0) < 0:
        return ctx.opaque()  # negative pads crop: not this operator
    return [ctx.g.pad(x, pads, value=value)]


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice clamping of one axis's start and end (end may become -1, meaning
    "through index 0", for negative steps)."""
    check(step != 0, "slice step must not be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


@register
class Slice(Op):
    """Static strided slice (ONNX Slice with constant starts, ends, axes, steps)."""

    name = "slice"
    inputs = ("x",)
    attrs = {"starts": None, "ends": None, "axes": None, "steps": None}
    axes = {"axes": "in"}
    gen_attrs = ()
    kind = "movement"
    example = ({"starts": (-1, 0), "ends": (-100, 5), "axes": (2, 1), "steps": (-2, 2)},
               ((2, 5, 6),))

    def _index(self, a, x: tuple[int, ...]) -> tuple[slice, ...]:
        n = len(a["starts"])
        check(len(a["ends"]) == n and len(a["axes"]) == n and len(a["steps"]) == n,
              "starts, ends, axes and steps must have equal lengths")
        axes = [_axis(ax, len(x)) for ax in a["axes"]]
        check(len(set(axes)) == n, f"repeated axes {a['axes']}")
        index = [slice(None)] * len(x)
        for ax, s, e, st in zip(axes, a["starts"], a["ends"], a["steps"]):
            s, e = slice_bounds(x[ax], s, e, st)
            index[ax] = slice(s, None if e < 0 else e, st)
        return tuple(index)

    def shape(self, a, x):
        return tuple(len(range(*ix.indices(d))) for ix, d in zip(self._index(a, x), x))

    def ref(self, a, x):
        return np.ascontiguousarray(x[self._index(a, x.shape)])

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        consts = [em.const(np.array(a[k], np.int64), k)
                  for k in ("starts", "ends", "axes", "steps")]
        em.node("Slice", [ins[0], *consts], outs)

    def build(self, g, x, starts, ends, axes=None, steps=None):
        rank = len(x.shape)
        axes = range(len(starts)) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        return g.add_node(self.name, [x], starts=tuple(int(s) for s in starts),
                          ends=tuple(int(e) for e in ends),
                          axes=tuple(_axis(int(ax), rank) for ax in axes),
                          steps=tuple(int(s) for s in steps))[0]


@onnx_importer("Slice")
def _import_slice(ctx):
    x = ctx.inputs[0]
    if len(ctx.inputs) > 1:  # opset >= 10: starts, ends, axes, steps are inputs
        vals = [ctx.const(i) if i < len(ctx.inputs) and ctx.inputs[i] is not None else None
                for i in range(1, 5)]
        if vals[0] is None or vals[1] is None or any(
                v is None for i, v in enumerate(vals) if i + 1 < len(ctx.inputs)
                and ctx.inputs[i + 1] is not None):
            return ctx.opaque()
        starts, ends, axes, steps = (None if v is None else v.tolist() for v in vals)
    else:
        starts, ends, axes, steps = ctx.attr("starts", None), ctx.attr("ends", None), \
            ctx.attr("axes", None), None
    return [ctx.g.slice(x, starts, ends, axes=axes, steps=steps)]


@register
class Squeeze(Op):
    name = "squeeze"
    inputs = ("x",)
    attrs = {"axes": None}
    axes = {"axes": "in"}
    gen_attrs = ()
    kind = "movement"
    example = ({"axes": (1, 3)}, ((2, 1, 3, 1),))

    def shape(self, a, x):
        axes = norm_axes(a["axes"], len(x))
        check(all(x[i] == 1 for i in axes), f"cannot squeeze axes {axes} of shape {x}")
        return tuple(d for i, d in enumerate(x) if i not in axes)

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Squeeze", [ins[0], em.const(np.array(a["axes"], np.int64), "axes")], outs)

    def build(self, g, x, axes):
        return g.add_node(self.name, [x], axes=norm_axes(axes, len(x.shape)))[0]


@register
class Unsqueeze(Op):
    """Insert size-1 axes; `axes` index the output."""

    name = "unsqueeze"
    inputs = ("x",)
    attrs = {"axes": None}
    axes = {"axes": "out"}
    gen_attrs = ()
    kind = "movement"
    example = ({"axes": (0, 3)}, ((2, 3),))

    def shape(self, a, x):
        rank = len(x) + len(a["axes"])
        axes = norm_axes(a["axes"], rank)
        rest = iter(x)
        return tuple(1 if i in axes else next(rest) for i in range(rank))

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Unsqueeze", [ins[0], em.const(np.array(a["axes"], np.int64), "axes")], outs)

    def build(self, g, x, axes):
        return g.add_node(self.name, [x],
                          axes=norm_axes(axes, len(x.shape) + len(tuple(axes))))[0]


def _axes_input(ctx) -> list[int] | None:
    """Squeeze/Unsqueeze axes: input 1 from opset 13, the attribute before."""
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
        v = ctx.const(1)
        return None if v is None else v.tolist()
    return ctx.attr("axes", None)


@onnx_importer("Squeeze")
def _import_squeeze(ctx):
    x = ctx.inputs[0]
    axes = _axes_input(ctx)
    if axes is None:
        if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
            return ctx.opaque()  # axes computed at run time
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [ctx.g.squeeze(x, axes)]


@onnx_importer("Unsqueeze")
def _import_unsqueeze(ctx):
    axes = _axes_input(ctx)
    if axes is None:
        return ctx.opaque()
    return [ctx.g.unsqueeze(ctx.inputs[0], axes)]


@register
class Flatten(Op):
    """Collapse to 2-D: the axes before `axis`, and the rest (ONNX Flatten)."""

    name = "flatten"
    inputs = ("x",)
    attrs = {"axis": 1}
    axes = {"axis": "in+1"}
    gen_attrs = ()
    kind = "movement"
    example = ({"axis": 2}, ((2, 3, 4, 5),))

    def shape(self, a, x):
        ax = a["axis"]
        check(-len(x) <= ax <= len(x), f"axis {ax} out of range for rank {len(x)}")
        ax = ax % len(x) if ax < 0 else ax
        return (int(np.prod(x[:ax])), int(np.prod(x[ax:])))

    def ref(self, a, x):
        return x.reshape(self.shape(a, x.shape))

    fp = ref

    def onnx(self, a, em, ins, outs, shapes):
        em.node("Flatten", ins, outs, axis=int(a["axis"]))

    def build(self, g, x, axis=1):
        return g.add_node(self.name, [x], axis=axis)[0]


@onnx_importer("Flatten")
def _import_flatten(ctx):
    return [ctx.g.flatten(ctx.inputs[0], axis=ctx.attr("axis", 1))]
