"""Random valid ONNX models, grown one node at a time (see `taso.fuzz`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Chooser(Protocol):
    def int(self, lo: int, hi: int) -> int: ...
    def pick(self, seq: list) -> Any: ...


class NumpyChooser:
    """Choices from a seeded numpy generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq: list) -> Any:
        return seq[int(self.rng.integers(0, len(seq)))]


@dataclass
class _Model:
    choose: Any
    batch: int
    symbolic: bool
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    overridable: list = field(default_factory=list)
    pool: list = field(default_factory=list)  # (name, shape)
    count: int = 0
    rng: np.random.Generator = None  # weight values

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def weight(self, shape, hint="w", positive=False, overridable=False) -> str:
        data = self.rng.uniform(0.5, 1.5, shape) if positive else \
            self.rng.standard_normal(shape) * (1.0 / max(np.sqrt(np.prod(shape[1:] or (1,))), 1))
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.float32), name))
        if overridable:
            self.overridable.append((name, tuple(shape)))
        return name

    def const(self, array, hint="c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, ins, shape, n_out=1, **attrs) -> str:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def add(self, name, shape) -> None:
        self.pool.append((name, tuple(shape)))


def _rank(m: _Model, r: int) -> list:
    return [t for t in m.pool if len(t[1]) == r]


def _conv(m: _Model, x, s) -> None:
    c = m.choose
    n, ci, h, w = s
    groups = c.pick([g for g in (1, 2, ci) if ci % g == 0])
    co = groups * c.int(1, 3)
    k = c.pick([1, 3])
    stride, dil = c.pick([1, 2]), c.pick([1, 1, 2])
    pad = c.int(0, k // 2 + 1) if k > 1 else c.int(0, 1)
    span = dil * (k - 1) + 1
    if h + 2 * pad < span or w + 2 * pad < span:
        pad, dil, k, span = 0, 1, 1, 1
    wt = m.weight((co, ci // groups, k, k), overridable=c.int(0, 9) == 0)
    ins = [x, wt] + ([m.weight((co,), "b")] if c.int(0, 1) else [])
    out = ((h + 2 * pad - span) // stride + 1, (w + 2 * pad - span) // stride + 1)
    y = m.node("Conv", ins, None, kernel_shape=[k, k], strides=[stride] * 2,
               pads=[pad] * 4, dilations=[dil] * 2, group=groups)
    m.add(y, (n, co, *out))


def _parallel_convs(m: _Model, x, s) -> None:
    """Two or three convs of one input, added: what merge rules rewrite."""
    c = m.choose
    n, ci, h, w = s
    co, outs = c.int(1, 4), []
    for _ in range(c.int(2, 3)):
        k = c.pick([1, 3])
        outs.append(m.node("Conv", [x, m.weight((co, ci, k, k))], None, kernel_shape=[k, k],
                           pads=[k // 2] * 4))
        if c.int(0, 1):
            outs[-1] = m.node("Relu", [outs[-1]], None)
    y = outs[0]
    for o in outs[1:]:
        y = m.node("Add", [y, o], None)
    m.add(y, (n, co, h, w))


def _bn(m: _Model, x, s) -> None:
    ch = s[1]
    ps = [m.weight((ch,), "bn", positive=True) for _ in range(4)]
    m.add(m.node("BatchNormalization", [x, *ps], None, epsilon=1e-5), s)


def _pool(m: _Model, x, s) -> None:
    c = m.choose
    n, ch, h, w = s
    k = c.int(1, min(3, h, w))
    st = c.pick([1, 2])
    p = c.int(0, (k - 1) // 2)
    op = c.pick(["MaxPool", "AveragePool"])
    y = m.node(op, [x], None, kernel_shape=[k, k], strides=[st] * 2, pads=[p] * 4)
    m.add(y, (n, ch, (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1))


def _unary(m: _Model, x, s) -> None:
    op = m.choose.pick(["Relu", "Sigmoid", "Tanh", "Clip"])
    if op == "Clip":
        y = m.node("Clip", [x, m.const(np.array(0.0, np.float32)),
                            m.const(np.array(6.0, np.float32))], None)
    else:
        y = m.node(op, [x], None)
    m.add(y, s)


def _binary(m: _Model, x, s) -> None:
    c = m.choose
    op = c.pick(["Add", "Mul", "Sub", "Add"])
    same = [t for t in m.pool if t[1] == s and t[0] != x]
    kind = c.int(0, 3)
    if kind == 0 and same:
        other = c.pick(same)[0]
    elif kind == 1 and len(s) >= 2:  # a per-channel or per-feature constant
        shape = (s[1],) + (1,) * (len(s) - 2) if len(s) == 4 else (s[-1],)
        other = m.weight(shape, "k", positive=op == "Mul")
    elif kind == 2:
        other = m.const(np.array(c.pick([0.5, 2.0, -1.0]), np.float32))
    else:
        other = m.weight(s[1:] if len(s) > 1 and c.int(0, 1) else s, "k")
    ins = [x, other] if c.int(0, 3) else [other, x]
    m.add(m.node(op, ins, None), s)


def _concat(m: _Model, x, s) -> None:
    c = m.choose
    axis = c.int(1, len(s) - 1) if len(s) > 1 else 0
    same = [t for t in m.pool if len(t[1]) == len(s) and t[0] != x and
            all(a == b for i, (a, b) in enumerate(zip(t[1], s)) if i != axis)]
    if same and c.int(0, 1):
        other, os_ = c.pick(same)
    else:
        os_ = list(s)
        os_[axis] = c.int(1, 4)
        if m.symbolic:  # a constant cannot follow a batch of any size
            return
        other = m.weight(tuple(os_), "cat")
    out = list(s)
    out[axis] += os_[axis]
    neg = c.int(0, 1)
    y = m.node("Concat", [x, other] if c.int(0, 1) else [other, x], None,
               axis=axis - len(s) if neg else axis)
    if out[axis] != s[axis] + os_[axis]:
        return
    m.add(y, out)


def _split(m: _Model, x, s) -> None:
    c = m.choose
    axes = [a for a in range(1, len(s)) if s[a] >= 2]
    if not axes:
        return
    axis = c.pick(axes)
    first = c.int(1, s[axis] - 1)
    sizes = [first, s[axis] - first]
    ys = m.node("Split", [x, m.const(np.array(sizes, np.int64))], None, n_out=2,
                axis=axis - len(s) if c.int(0, 1) else axis)
    for y, z in zip(ys, sizes):
        out = list(s)
        out[axis] = z
        m.add(y, out)


def _transpose(m: _Model, x, s) -> None:
    if len(s) < 2:
        return
    rest = list(range(1, len(s)))
    perm = [0] + [rest[i] for i in np.random.default_rng(m.choose.int(0, 99)).permutation(
        len(rest))]
    m.add(m.node("Transpose", [x], None, perm=perm), [s[p] for p in perm])


def _reshape(m: _Model, x, s) -> None:
    if len(s) < 2:
        return
    c = m.choose
    rest = int(np.prod(s[1:]))
    form = c.int(0, 2)
    if form == 0:  # flatten to rows, written with a 0 that copies the batch dim
        target, out = [0, -1], (s[0], rest)
    elif form == 1 and m.symbolic is False:
        target, out = [s[0], rest], (s[0], rest)
    else:
        f = c.pick([d for d in (1, 2, 4) if rest % d == 0])
        target, out = [0, f, -1], (s[0], f, rest // f)
    m.add(m.node("Reshape", [x, m.const(np.array(target, np.int64))], None), out)


def _dense(m: _Model, x, s) -> None:
    c = m.choose
    if len(s) == 2 and c.int(0, 1):
        o = c.int(1, 8)
        tb = c.int(0, 1)
        wt = m.weight((o, s[1]) if tb else (s[1], o), overridable=c.int(0, 9) == 0)
        ins = [x, wt] + ([m.weight((o,), "b")] if c.int(0, 1) else [])
        y = m.node("Gemm", ins, None, transB=tb, alpha=c.pick([1.0, 0.5]),
                   beta=c.pick([1.0, 2.0]))
        m.add(y, (s[0], o))
    elif len(s) in (2, 3):
        o = c.int(1, 8)
        m.add(m.node("MatMul", [x, m.weight((s[-1], o))], None), (*s[:-1], o))


def _rows(m: _Model, x, s) -> None:
    """One weight multiplying several rows, as a recurrent layer's steps do."""
    if len(s) != 2:
        return
    c = m.choose
    h = c.int(2, 8)
    wt = m.weight((s[1], h))
    prev = None
    for _ in range(c.int(2, 4)):
        y = m.node("MatMul", [x, wt], None)
        if prev is not None:
            y = m.node("Add", [y, prev], None)
        prev = m.node("Tanh", [y], None)
        x = m.node("Add", [x, m.weight(s, "step")], None)
    m.add(prev, (s[0], h))


def _norm(m: _Model, x, s) -> None:
    c = m.choose
    if c.int(0, 1) and len(s) >= 2:
        y = m.node("LayerNormalization", [x, m.weight((s[-1],), "g", positive=True),
                                          m.weight((s[-1],), "be")], None, axis=-1)
    else:
        y = m.node("Softmax", [x], None, axis=c.int(1, len(s) - 1) if len(s) > 1 else -1)
    m.add(y, s)


def _opaque(m: _Model, x, s) -> None:
    """Operators the loader keeps opaque, with typed constant inputs."""
    c = m.choose
    kind = c.int(0, 4)
    if kind == 0 and len(s) >= 2:  # Gather on a non-batch axis
        axis = c.int(1, len(s) - 1)
        idx = np.array([c.int(0, s[axis] - 1) for _ in range(c.int(1, 3))], np.int64)
        y = m.node("Gather", [x, m.const(idx)], None, axis=axis)
        out = list(s)
        out[axis] = len(idx)
        m.add(y, out)
    elif kind == 1:
        cond = m.rng.integers(0, 2, s[1:]).astype(bool)
        y = m.node("Where", [m.const(cond), x, m.const(np.array(0.0, np.float32))], None)
        m.add(y, s)
    elif kind == 2 and len(s) == 4:
        mode = c.pick(["constant", "reflect", "edge"])
        p = c.int(1, max(1, min(2, s[2] - 1, s[3] - 1)))
        pads = np.array([0, 0, p, p, 0, 0, p, p], np.int64)
        m.add(m.node("Pad", [x, m.const(pads)], None, mode=mode),
              (s[0], s[1], s[2] + 2 * p, s[3] + 2 * p))
    elif kind == 3 and len(s) == 4:
        scales = np.array([1, 1, 2, 2], np.float32)
        m.add(m.node("Resize", [x, "", m.const(scales)], None, mode="nearest"),
              (s[0], s[1], 2 * s[2], 2 * s[3]))
    elif len(s) >= 2:  # Slice a non-batch axis
        axis = c.int(1, len(s) - 1)
        if s[axis] < 2:
            return
        start = c.int(0, s[axis] - 2)
        end = c.int(start + 1, s[axis])
        y = m.node("Slice", [x, m.const(np.array([start], np.int64)),
                             m.const(np.array([end], np.int64)),
                             m.const(np.array([axis], np.int64))], None)
        out = list(s)
        out[axis] = end - start
        m.add(y, out)


def _global_pool(m: _Model, x, s) -> None:
    m.add(m.node("GlobalAveragePool", [x], None), (s[0], s[1], 1, 1))


STEPS_4D = [_conv, _conv, _parallel_convs, _bn, _pool, _global_pool, _reshape]
STEPS_ANY = [_unary, _binary, _binary, _concat, _split, _transpose, _dense, _rows, _norm,
             _opaque]


def build_model(choose: Chooser) -> onnx.ModelProto:
    """A random valid model; see the module's docstring."""
    c = choose
    symbolic = c.int(0, 2) == 0
    m = _Model(choose=c, batch=1 if symbolic else c.int(1, 3), symbolic=symbolic,
               rng=np.random.default_rng(c.int(0, 2**16)))
    n = m.batch
    for k in range(c.int(1, 2)):
        rank = c.pick([4, 4, 2, 3])
        if rank == 4:
            shape = (n, c.pick([1, 2, 3, 4, 8]), c.int(3, 9), c.int(3, 9))
        elif rank == 3:
            shape = (n, c.int(1, 6), c.int(1, 8))
        else:
            shape = (n, c.int(1, 16))
        name = f"x{k}"
        dims = ["N", *shape[1:]] if symbolic else list(shape)
        m.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
        m.add(name, shape)
    for _ in range(c.int(1, 10)):
        x, s = c.pick(m.pool[-4:])
        steps = STEPS_4D + STEPS_ANY if len(s) == 4 else STEPS_ANY
        c.pick(steps)(m, x, s)
    # The last tensor, and every other that no node reads (up to three in all):
    # what is computed counts.
    read = {i for nd in m.nodes for i in nd.input}
    names = {i.name for i in m.inputs}
    outs = [m.pool[-1]] + [t for t in m.pool[:-1][::-1]
                           if t[0] not in read and t[0] not in names][:2]
    outputs = [helper.make_tensor_value_info(
        name, TensorProto.FLOAT, ["N", *shape[1:]] if symbolic else list(shape))
        for name, shape in outs]
    inputs = list(m.inputs) + [helper.make_tensor_value_info(nm, TensorProto.FLOAT, list(sh))
                               for nm, sh in m.overridable]
    graph = helper.make_graph(m.nodes, "fuzz", inputs, outputs, m.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def models():
    """A hypothesis strategy of random valid models (hypothesis is a dev
    dependency: imported here, not at module import)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        class Draw:
            def int(self, lo, hi):
                return draw(st.integers(lo, hi))

            def pick(self, seq):
                return seq[draw(st.integers(0, len(seq) - 1))]

        return build_model(Draw())

    return strategy()
