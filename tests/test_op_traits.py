"""Every registered operator provides every trait: the operator is the only
place that knows it, so a missing trait would otherwise fail silently in
whichever consumer reads it (a cost model, the generator, the verifier, a
rule reader, ONNX I/O). Each trait is exercised on the operator's own example
(`Op.example`)."""

from __future__ import annotations

import numpy as np
import pytest
from taso.generator.family import DEFAULT_OPS, generatable_ops
from taso.optimizer.cost import get_cost_model
from taso.optimizer.cost.cupy_backend import run_node
from taso.verifier.axioms import by_name
from taso.verifier.axioms.dsl import POINTWISE
from taso.verifier.prove import encoding

import taso
from taso import runtime
from taso.onnx_io import export_onnx, load_onnx
from taso.ops import ACTIVATIONS, OPS, Op
from taso.ops.base import KINDS

SOURCES = {"input", "weight", "opaque"}  # data, or what the library does not know
COMPUTED = sorted(n for n in OPS if n not in SOURCES)


def example(name: str) -> tuple[dict, list[np.ndarray], list[tuple[int, ...]]]:
    """The operator's example: normalized attributes, random inputs (positive
    where it asks), output shapes."""
    op = OPS[name]
    assert op.example is not None, f"{name} has no example"
    kw, shapes = op.example
    a = op.normalize(dict(op.make_attrs(**kw)), shapes)
    a = op.resolve(a, shapes)
    rng = np.random.default_rng(0)
    xs = [np.abs(rng.standard_normal(s)).astype(np.float32) + np.float32(0.5)
          if i < len(op.inputs) and op.inputs[i] in op.positive
          else np.asarray(rng.standard_normal(s), np.float32) for i, s in enumerate(shapes)]
    return a, xs, op.out_shapes(a, shapes)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_operator_says_what_it_is(name):
    op = OPS[name]
    assert op.name == name and op.kind in KINDS, f"{name}: kind {op.kind!r} not in {KINDS}"
    assert op.taso_type is None or [o.taso_type for o in OPS.values()].count(op.taso_type) == 1
    assert op.gen_default is None or [o.gen_default for o in OPS.values()].count(
        op.gen_default) == 1


@pytest.mark.parametrize("name", COMPUTED)
def test_semantics_lowering_and_cost_on_the_example(name):
    op = OPS[name]
    a, xs, outs = example(name)
    want = op.run_ref(a, xs)
    assert [tuple(w.shape) for w in want] == outs
    # the GPU lowering, on numpy
    for got, w in zip(run_node(np, name, a, xs), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    # fingerprint semantics: integers modulo P of the output shapes
    if type(op).fp is not Op.fp:
        ints = [np.asarray(np.rint(np.abs(x) * 7), np.int64) for x in xs]
        assert [tuple(f.shape) for f in op.run_fp(a, ints)] == outs
    # cost traits, read by every cost model
    shapes = [x.shape for x in xs]
    assert op.flops(a, shapes, outs) >= 0 and op.moved(a, shapes, outs) >= 0
    assert len(op.default_consts(shapes)) == len(shapes)
    hash(op.cost_key(a, shapes))
    cost = get_cost_model("analytic").op_cost(name, a, shapes)
    assert 0 <= cost < float("inf")
    if op.contraction:
        assert cost > get_cost_model("analytic").op_cost("relu", {}, [outs[0]])


@pytest.mark.parametrize("name", COMPUTED)
def test_onnx_export_and_import_keep_the_value(name):
    op = OPS[name]
    assert type(op).onnx is not Op.onnx, f"{name} has no ONNX export"
    a, xs, _ = example(name)
    g = taso.new_graph()
    ins = [g.new_input(x.shape, f"x{i}") for i, x in enumerate(xs)]
    for k, t in enumerate(g.add_node(name, ins, **a)):
        g.mark_output(t, f"y{k}")
    feeds = {f"x{i}": x for i, x in enumerate(xs)}
    want = g.evaluate(feeds)
    model = export_onnx(g)
    got = runtime.session(model).run(None, feeds)
    back = load_onnx(model).evaluate(feeds)
    for w, o, b in zip(want, got, back):
        np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", COMPUTED)
def test_generator_and_verifier_traits(name):
    op = OPS[name]
    generatable = type(op).fp is not Op.fp and bool(op.gen_attrs or op.undoes)
    assert generatable == (name in generatable_ops())
    assert op.gen_default is None or name in DEFAULT_OPS and generatable
    assert op.gen_rank is None or op.gen_rank >= 0
    assert not op.undoes or op.undoes in OPS
    # a Z3 function symbol per output, from the registry
    a, xs, outs = example(name)
    for k in range(len(outs)):
        encoding().fn(name, len(xs), k)
    # the pointwise laws for every pointwise operator without attributes
    if op.pointwise and not op.attrs:
        assert name in POINTWISE
        for law in ("concat", "transpose", "dim", "rank", "strict-x"):
            assert f"{name}-{law}" in by_name(), f"{name}-{law}"


def test_the_fused_activations_are_pointwise_operators():
    assert ACTIVATIONS[0] == "none"
    assert all(OPS[a].pointwise and OPS[a].epilogue for a in ACTIVATIONS[1:])
