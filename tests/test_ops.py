"""Every exportable operator against onnxruntime, and the fingerprint semantics of
the exact (linear) operators against their float reference.

EXAMPLES holds, per operator, a generator of random valid inputs and attributes;
an operator without an entry is tried on its own example (`Op.example`) with
random values, and one with neither fails `test_every_operator_has_examples`,
so no operator goes untested.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import taso
from taso import runtime
from taso.ops import OPS, Op, P

Case = tuple[list[np.ndarray], dict]
SOURCES = {"input", "weight", "opaque"}
EXPORTABLE = sorted(n for n, op in OPS.items()
                    if n not in SOURCES and type(op).onnx is not Op.onnx)


def rnd(r: np.random.Generator, *shape: int) -> np.ndarray:
    return np.asarray(r.standard_normal(shape), np.float32)  # 0-d too


def positive(r: np.random.Generator, *shape: int) -> np.ndarray:
    return np.asarray(0.5 + r.random(shape), np.float32)


def dims(r: np.random.Generator, rank: int, lo: int = 1, hi: int = 4) -> list[int]:
    return [int(d) for d in r.integers(lo, hi + 1, rank)]


def broadcast_pair(r: np.random.Generator) -> tuple[list[int], list[int]]:
    """Two shapes that broadcast: the second drops leading axes and sets some to 1."""
    x = dims(r, int(r.integers(0, 5)))
    y = [1 if r.random() < 0.4 else d for d in x[int(r.integers(0, len(x) + 1)):]]
    return (x, y) if r.random() < 0.5 else (y, x)


def _binary(r, same: bool, divisor: bool = False) -> Case:
    x, y = (dims(r, 3),) * 2 if same else broadcast_pair(r)
    b = np.asarray(positive(r, *y) * np.where(r.random(y) < 0.5, -1, 1), np.float32) \
        if divisor else rnd(r, *y)
    return [rnd(r, *x), b], {}


def _unary(r) -> Case:
    return [rnd(r, *dims(r, int(r.integers(0, 5))))], {}


def _window(r, dilate: bool):
    k = dims(r, 2, 1, 3)
    s = dims(r, 2, 1, 2)
    d = dims(r, 2, 1, 2) if dilate else [1, 1]
    pads = [int(r.integers(0, k[i % 2])) for i in range(4)]
    hw = [(k[i] - 1) * d[i] + 1 + int(r.integers(0, 4)) for i in range(2)]
    return k, s, d, pads, hw


def _conv(r, bias: bool) -> Case:
    k, s, d, pads, hw = _window(r, dilate=True)
    groups = int(r.integers(1, 3))
    cg, og = int(r.integers(1, 3)), int(r.integers(1, 3))
    x = rnd(r, int(r.integers(1, 3)), groups * cg, *hw)
    w = rnd(r, groups * og, cg, *k)
    attrs = dict(strides=tuple(s), pads=tuple(pads), dilations=tuple(d), groups=groups,
                 activation=str(r.choice(["none", "relu", "sigmoid", "tanh"])))
    return ([x, w, rnd(r, groups * og)] if bias else [x, w]), attrs


def _pool(r, avg: bool) -> Case:
    k, s, _, pads, hw = _window(r, dilate=False)
    attrs = dict(kernel=tuple(k), strides=tuple(s), pads=tuple(pads))
    if avg:
        attrs["count_include_pad"] = int(r.integers(0, 2))
    return [rnd(r, 2, 3, *hw)], attrs


def _matmul(r) -> Case:
    m, k, n = dims(r, 3)
    batch = dims(r, int(r.integers(0, 3)))
    bb = [1 if r.random() < 0.3 else d for d in batch][int(r.integers(0, len(batch) + 1)):]
    return [rnd(r, *batch, m, k), rnd(r, *bb, k, n)], \
        {"activation": str(r.choice(["none", "relu"]))}


def _concat(r) -> Case:
    shape = dims(r, int(r.integers(1, 4)))
    axis = int(r.integers(-len(shape), len(shape)))
    xs = []
    for _ in range(int(r.integers(1, 4))):
        s = list(shape)
        s[axis] = int(r.integers(1, 4))
        xs.append(rnd(r, *s))
    return xs, {"axis": axis}


def _split(r) -> Case:
    shape = dims(r, int(r.integers(1, 4)), 2, 5)
    axis = int(r.integers(0, len(shape)))
    cuts = sorted(set(r.integers(1, shape[axis], int(r.integers(0, 3))).tolist()))
    sizes = np.diff([0, *cuts, shape[axis]]).tolist()
    return [rnd(r, *shape)], {"axis": axis, "sizes": tuple(sizes)}


def _reshape(r) -> Case:
    shape = dims(r, 3)
    k = int(r.integers(1, 3))
    target = [int(np.prod(shape[:k])), *shape[k:]][::-1]
    return [rnd(r, *shape)], {"shape": tuple(target)}


def _iconv(r) -> Case:
    c, k = int(r.integers(1, 4)), int(r.choice([1, 3, 5]))
    return [], {"shape": (c, c, k, k)}


def _bn_params(r, c: int) -> list[np.ndarray]:
    return [rnd(r, c), rnd(r, c), rnd(r, c), positive(r, c)]


def _batchnorm(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(2, 5))))
    return [x, *_bn_params(r, x.shape[1])], {"epsilon": 1e-3}


def _bn_kernel(r) -> Case:
    w = rnd(r, *dims(r, 4))
    return [w, rnd(r, w.shape[0]), positive(r, w.shape[0])], {"epsilon": 1e-3}


def _clip(r) -> Case:
    lo = float(np.float32(r.uniform(-1, 0)))
    hi = float(np.float32(r.uniform(0, 1)))
    attrs = {"min": lo, "max": hi} if r.random() < 0.7 else {"min": lo}
    return _unary(r)[0], attrs


def _flatten(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(1, 5))))
    return [x], {"axis": int(r.integers(-x.ndim, x.ndim + 1))}


def _gemm(r) -> Case:
    m, k, n = dims(r, 3)
    ta, tb = int(r.integers(0, 2)), int(r.integers(0, 2))
    a = rnd(r, *((k, m) if ta else (m, k)))
    b = rnd(r, *((n, k) if tb else (k, n)))
    cs = [[], [n], [1, n], [m, 1], [m, n]][int(r.integers(0, 5))]
    ins = [a, b] if not cs and r.random() < 0.5 else [a, b, rnd(r, *cs)]
    return ins, {"alpha": float(np.float32(r.uniform(-2, 2))),
                 "beta": float(np.float32(r.uniform(-2, 2))), "trans_a": ta, "trans_b": tb}


def _layernorm(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(2, 4)), 2, 5))
    axis = int(r.integers(-x.ndim, x.ndim))
    norm = x.shape[axis % x.ndim:]
    return [x, rnd(r, *norm), rnd(r, *norm)], {"axis": axis, "epsilon": 1e-3}


def _pad(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(1, 5))))
    return [x], {"pads": tuple(int(p) for p in r.integers(0, 3, 2 * x.ndim)),
                 "value": float(np.float32(r.normal()))}


def _reduce_mean(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(1, 5))))
    axes = sorted(r.choice(x.ndim, int(r.integers(1, x.ndim + 1)), replace=False).tolist())
    return [x], {"axes": tuple(axes), "keepdims": int(r.integers(0, 2))}


def _slice(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(1, 4)), 1, 6))
    axes = r.choice(x.ndim, int(r.integers(1, x.ndim + 1)), replace=False).tolist()
    starts, ends, steps = [], [], []
    for ax in axes:
        n = x.shape[ax]
        step = int(r.choice([-2, -1, 1, 2]))
        s, e = int(r.integers(-n, n)), int(r.integers(-n - 1, n + 1))
        if step > 0 and e <= s % n or step < 0 and e >= s % n:
            s, e = e, s  # keep the slice non-empty most of the time
        starts.append(s)
        ends.append(e)
        steps.append(step)
    return [x], {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(axes),
                 "steps": tuple(steps)}


def _squeeze(r) -> Case:
    shape = [1 if r.random() < 0.5 else d for d in dims(r, int(r.integers(1, 5)), 2, 4)]
    if 1 not in shape:
        shape[0] = 1
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = sorted(r.choice(ones, int(r.integers(1, len(ones) + 1)), replace=False).tolist())
    return [rnd(r, *shape)], {"axes": tuple(axes)}


def _unsqueeze(r) -> Case:
    x = rnd(r, *dims(r, int(r.integers(0, 4))))
    out_rank = x.ndim + int(r.integers(1, 3))
    axes = sorted(r.choice(out_rank, out_rank - x.ndim, replace=False).tolist())
    return [x], {"axes": tuple(axes)}


# Operator name -> random valid (inputs, attributes).
EXAMPLES: dict[str, Callable[[np.random.Generator], Case]] = {
    "add": lambda r: _binary(r, same=False),
    "sub": lambda r: _binary(r, same=False),
    "mul": lambda r: _binary(r, same=False),
    "div": lambda r: _binary(r, same=False, divisor=True),
    "ewadd": lambda r: _binary(r, same=True),
    "ewmul": lambda r: _binary(r, same=True),
    "relu": _unary,
    "sigmoid": _unary,
    "tanh": _unary,
    "erf": _unary,
    "gelu": _unary,
    "identity": _unary,
    "scalar_mul": lambda r: ([_unary(r)[0][0], rnd(r)], {}),
    "conv2d": lambda r: _conv(r, bias=False),
    "conv2d_bias": lambda r: _conv(r, bias=True),
    "maxpool2d": lambda r: _pool(r, avg=False),
    "avgpool2d": lambda r: _pool(r, avg=True),
    "global_avgpool": lambda r: ([rnd(r, *dims(r, int(r.integers(3, 5))))], {}),
    "enlarge": lambda r: ([rnd(r, *dims(r, 2), 1, 3)], {"kernel": (3, 5)}),
    "const_iconv": _iconv,
    "const_pool": lambda r: ([], {"shape": (int(r.integers(1, 4)), 1, *dims(r, 2))}),
    "const_imm": lambda r: ([], {"shape": (int(r.integers(1, 5)),) * 2}),
    "const_one": lambda r: ([], {"shape": tuple(dims(r, int(r.integers(1, 4))))}),
    "matmul": _matmul,
    "gemm": _gemm,
    "concat": _concat,
    "split": _split,
    "transpose": lambda r: ((x := _unary(r)[0])[:1],
                            {"perm": tuple(r.permutation(x[0].ndim).tolist())}),
    "reshape": _reshape,
    "flatten": _flatten,
    "squeeze": _squeeze,
    "unsqueeze": _unsqueeze,
    "slice": _slice,
    "pad": _pad,
    "clip": _clip,
    "softmax": lambda r: ((x := [rnd(r, *dims(r, int(r.integers(1, 5))))]),
                          {"axis": int(r.integers(-x[0].ndim, x[0].ndim))}),
    "reduce_mean": _reduce_mean,
    "batchnorm": _batchnorm,
    "layernorm": _layernorm,
    "bn_kernel": _bn_kernel,
    "bn_bias": lambda r: (_bn_params(r, int(r.integers(1, 5))), {"epsilon": 1e-3}),
}


def one_node_graph(op: str, xs: list[np.ndarray], attrs: dict) -> taso.Graph:
    g = taso.new_graph()
    ins = [g.new_input(x.shape, f"x{i}", str(x.dtype)) for i, x in enumerate(xs)]
    for k, t in enumerate(g.add_node(op, ins, **attrs)):
        g.mark_output(t, f"y{k}")
    return g


def run_ort(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return runtime.session(model).run(None, feeds)


def own_example(op: str) -> Callable[[np.random.Generator], Case] | None:
    """Random values for the operator's own example (positive where it asks)."""
    o = OPS[op]
    if o.example is None:
        return None
    attrs, shapes = o.example
    return lambda r: ([positive(r, *s) if i < len(o.inputs) and o.inputs[i] in o.positive
                       else rnd(r, *s) for i, s in enumerate(shapes)], dict(attrs))


def test_every_operator_has_examples():
    missing = sorted(op for op in EXPORTABLE if op not in EXAMPLES and not own_example(op))
    assert not missing, f"operators with an ONNX export but no example: {missing}"
    assert not set(EXAMPLES) - set(OPS), "EXAMPLES names operators that do not exist"


@pytest.mark.parametrize("op", EXPORTABLE)
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_export_matches_reference(op: str, seed: int):
    case = EXAMPLES.get(op) or own_example(op)
    if case is None:
        pytest.fail(f"{op} has no example")
    xs, attrs = case(np.random.default_rng(seed))
    g = one_node_graph(op, xs, attrs)
    feeds = {f"x{i}": x for i, x in enumerate(xs)}
    want = g.evaluate(feeds)
    got = run_ort(taso.export_onnx(g), feeds)
    assert len(got) == len(want)
    for w, o in zip(want, got):
        assert o.shape == w.shape and o.dtype == w.dtype
        np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-5)


# ---- fingerprints ------------------------------------------------------------------
# Operators whose fingerprint is their float semantics on integers, modulo P;
# the value overrides keep non-integer attributes out.
FP_EXACT = {
    "matmul": {"activation": "none"}, "conv2d": {"activation": "none"},
    "conv2d_bias": {"activation": "none"}, "ewadd": {}, "ewmul": {}, "add": {}, "sub": {},
    "mul": {}, "scalar_mul": {}, "concat": {}, "split": {}, "transpose": {}, "reshape": {},
    "enlarge": {}, "const_imm": {}, "const_one": {}, "const_iconv": {}, "identity": {},
    "flatten": {}, "squeeze": {}, "unsqueeze": {}, "slice": {}, "pad": {"value": 2.0},
    "gemm": {"alpha": 2.0, "beta": -3.0}, "maxpool2d": None,
}
FP_EXACT.pop("maxpool2d")  # not linear: its fingerprint is a polynomial stand-in


def _denominators(op: str, xs: list[np.ndarray], a: dict, out: np.ndarray) -> np.ndarray:
    """What each output of an averaging operator divides by."""
    if op == "avgpool2d":
        area = a["kernel"][0] * a["kernel"][1]
        if a["count_include_pad"]:
            return np.full(out.shape, area)
        ones = [np.ones_like(xs[0])]  # the unpadded cells of each window
        share = OPS[op].run_ref(dict(a, count_include_pad=1), ones)[0]
        return np.rint(share * area).astype(np.int64)
    if op == "global_avgpool":
        return np.full(out.shape, int(np.prod(xs[0].shape[2:])))
    if op == "reduce_mean":
        return np.full(out.shape, int(np.prod([xs[0].shape[i] for i in a["axes"]])))
    if op == "const_pool":
        return np.full(out.shape, a["shape"][2] * a["shape"][3])
    return np.ones(out.shape, np.int64)


FP_DIVIDED = ("avgpool2d", "global_avgpool", "reduce_mean", "const_pool")


@pytest.mark.parametrize("op", sorted(FP_EXACT) + list(FP_DIVIDED))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_fingerprint_agrees_with_reference_on_integers(op: str, seed: int):
    r = np.random.default_rng(seed)
    xs, attrs = EXAMPLES[op](r)
    ints = [r.integers(-3, 4, x.shape) for x in xs]
    g = one_node_graph(op, xs, dict(attrs, **FP_EXACT.get(op, {})))
    node = g.nodes[max(g.nodes)]
    o = OPS[op]
    ref = o.run_ref(node.a, [x.astype(np.float32) for x in ints])
    fp = o.run_fp(node.a, [np.mod(x, P) for x in ints])
    assert len(ref) == len(fp)
    for rv, fv in zip(ref, fp):
        den = _denominators(op, ints, node.a, rv)
        num = np.rint(rv.astype(np.float64) * den).astype(np.int64)
        assert np.array_equal(num, rv * den) or op in FP_DIVIDED  # integers stay exact
        np.testing.assert_array_equal(np.mod(num, P), np.mod(fv * den, P))


def test_fingerprint_separates_activations():
    # The polynomial stand-ins differ from one another and from the identity.
    x = np.arange(-5, 6) % P
    outs = [OPS[a].run_fp({}, [x])[0].tolist() for a in ("relu", "sigmoid", "tanh")]
    assert len({tuple(o) for o in outs + [x.tolist()]}) == 4


# ---- commutativity (the search core hashes and matches such operands unordered) ----
@pytest.mark.parametrize("op", ["ewadd", "ewmul", "add", "mul", "sub", "matmul"])
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_commutative_flag_is_exact(op: str, seed: int):
    o = OPS[op]
    a = dict(o.make_attrs())
    r = np.random.default_rng(seed)
    pair = [r.standard_normal((3, 3)).astype(np.float32) for _ in range(2)]
    ints = [r.integers(0, P, (3, 3)) for _ in range(2)]
    ref_same = np.array_equal(o.run_ref(a, pair)[0], o.run_ref(a, pair[::-1])[0])
    fp_same = np.array_equal(o.run_fp(a, ints)[0], o.run_fp(a, ints[::-1])[0])
    assert ref_same == fp_same == o.commutative


def test_commutative_operators_are_the_sums_and_products():
    assert sorted(n for n, o in OPS.items() if o.commutative) == ["add", "ewadd", "ewmul", "mul"]
