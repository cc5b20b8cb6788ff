"""The equivalence check: the original and the optimized model, exported to
ONNX, run in onnxruntime on the same random inputs (the numpy reference where
a graph does not export). `taso.optimize` runs it on every result
(`check_result`) and raises `taso.CheckError` rather than return a graph that
computes something else; taso-opt runs the same function against the model
file it read.

Which inputs: seeded random activations with every overridable initializer at
its default, then (where there are float ones) with those drawn at random too;
for a graph with symbolic dims, all of that at a second binding as well.

Stated tolerance (`taso.tolerance`): every output element must satisfy
|optimized - original| <= MODEL_ATOL + MODEL_RTOL * |original| (float32 reassociation and
folded batch norms change rounding, nothing more).
"""

from __future__ import annotations

import numpy as np
import onnx

from taso import runtime
from taso.cli import first_line
from taso.errors import CheckError, ModelError
from taso.ir import Graph, random_array
from taso.tolerance import MODEL_ATOL, MODEL_RTOL, elementwise_errors

# The optimized model computes something else than the original (the name the
# tests and older callers use).
EquivalenceError = CheckError


def run_onnx(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`model`'s outputs in onnxruntime, the graph run as written: onnxruntime's
    own rewrites are not under test."""
    return runtime.run(model, feeds, runtime.session_options(optimize=False))


def check_equivalence(original: Graph | onnx.ModelProto, optimized: Graph | onnx.ModelProto,
                      feeds: dict[str, np.ndarray] | None = None, seed: int = 0,
                      atol: float = MODEL_ATOL, rtol: float = MODEL_RTOL) -> float:
    """The largest absolute difference over all outputs; raises
    EquivalenceError when an element is outside the tolerance."""
    from taso.onnx_io import export_onnx

    if feeds is None:
        if not isinstance(original, Graph):
            raise ValueError("feeds are required when the original is an ONNX model")
        feeds = original.random_inputs(seed)
    a = run_onnx(original if isinstance(original, onnx.ModelProto) else export_onnx(original),
                 feeds)
    b = run_onnx(optimized if isinstance(optimized, onnx.ModelProto)
                 else export_onnx(optimized), feeds)
    return compare_outputs(a, b, atol, rtol)


def compare_outputs(a: list[np.ndarray], b: list[np.ndarray],
                    atol: float = MODEL_ATOL, rtol: float = MODEL_RTOL,
                    names: list[str] | None = None) -> float:
    """The largest absolute difference between outputs `a` (the original's)
    and `b`; raises EquivalenceError (CheckError) when an element is outside
    the tolerance, naming the output."""
    if len(a) != len(b):
        raise EquivalenceError(f"{len(a)} outputs before, {len(b)} after")
    worst = 0.0
    for k, (x, y) in enumerate(zip(a, b)):
        label = f"output {k}" + (f" ({names[k]!r})" if names and k < len(names) else "")
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            raise EquivalenceError(f"{label}: shape {x.shape} became {y.shape}")
        bad, err = elementwise_errors(x, y, atol, rtol)
        worst = max(worst, err)
        if bad.any():
            raise CheckError(
                f"{label}: max error {err:.3g} beyond tolerance "
                f"(atol {atol:g}, rtol {rtol:g}) at {int(bad.sum())} element(s)")
    return worst


def second_binding(graph: Graph) -> dict[str, int]:
    """Another value for each symbolic dim of `graph` than the one its shapes
    were bound at (2b + 1: odd, so neither 1 nor a power of two), by name."""
    bound: dict[str, int] = {}
    for n in graph.inputs:
        for d, p in zip(n.shapes[0], graph.dim_params.get(n.name, ())):
            if p:
                bound.setdefault(p, 2 * d + 1)
    return bound


def bound_inputs(graph: Graph, binding: dict[str, int], seed: int = 0,
                 overridable: bool = False) -> dict[str, np.ndarray]:
    """Random inputs as `Graph.random_inputs` draws them, with each symbolic
    dim at its value in `binding`."""
    if not binding:
        return graph.random_inputs(seed, overridable)
    rng = np.random.default_rng(seed)
    out = {}
    for n in graph.inputs:
        params = graph.dim_params.get(n.name, (None,) * len(n.shapes[0]))
        shape = tuple(binding.get(p, d) if p else d for d, p in zip(n.shapes[0], params))
        x = random_array(shape, n.dtypes[0], rng)
        if n.data is not None and not (overridable and n.dtypes[0].startswith("float")):
            x = n.data
        out[n.name] = x
    return out


class BindingError(CheckError):
    """The result holds at the binding its symbolic dims were searched at, not
    at another."""


def feed_sets(graph: Graph, seed: int = 0, symbolic: bool = True
              ) -> list[tuple[str, dict[str, np.ndarray], bool]]:
    """The inputs a result is checked on, each with a label for messages and
    whether it binds the symbolic dims to other values than the graph's."""
    sets = [("random inputs", graph.random_inputs(seed), False)]
    if any(n.dtypes[0].startswith("float") for n in graph.overridable):
        sets.append(("random overridable initializers", graph.random_inputs(seed + 1, True),
                     False))
    binding = second_binding(graph) if symbolic else {}
    if binding:
        at = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
        sets.append((f"inputs at {at}", bound_inputs(graph, binding, seed + 2), True))
        if len(sets) == 3:
            sets.append((f"random overridable initializers at {at}",
                         bound_inputs(graph, binding, seed + 3, True), True))
    return sets


def check_result(original: Graph, optimized: Graph, rules: dict[str, int] | None = None,
                 seed: int = 0, reference: onnx.ModelProto | None = None,
                 atol: float = MODEL_ATOL, rtol: float = MODEL_RTOL) -> float:
    """The largest difference between `optimized` and `original` (or the model
    `reference` it was loaded from) over every input set of `feed_sets`; raises
    CheckError naming the rules applied and the worst output when an element
    lies outside the tolerance, or when the optimized graph cannot run where
    the original runs."""
    applied = dict(rules or {})
    named = ", ".join(f"{k} x{v}" for k, v in sorted(applied.items())) or "none"
    symbolic = bool(original.dim_params) and bool(optimized.dim_params)
    try:
        before = reference if reference is not None else _export(original)
        after = _export(optimized)
    except (ModelError, NotImplementedError) as e:
        # An operator without an ONNX form: the numpy reference decides.
        before = after = None
        symbolic = False
        why = first_line(e)
    worst = 0.0
    for label, feeds, other in feed_sets(original, seed, symbolic):
        error = BindingError if other else CheckError
        if before is None:
            try:
                expected = original.evaluate(feeds)
            except Exception as e:
                raise CheckError(f"cannot check the result: the original graph neither exports "
                                 f"({why}) nor evaluates ({first_line(e)})", applied) from None
            run_after = lambda f: optimized.evaluate(f)  # noqa: E731
        else:
            try:
                expected = run_onnx(before, feeds)
            except Exception as e:
                raise error(f"cannot check the result: onnxruntime cannot run the original "
                            f"on {label}: {first_line(e)}", applied) from None
            run_after = lambda f: run_onnx(after, f)  # noqa: E731
        try:
            got = run_after(feeds)
        except Exception as e:
            raise error(f"the optimized graph cannot run on {label} (rules applied: "
                        f"{named}): {first_line(e)}", applied) from None
        try:
            worst = max(worst, compare_outputs(expected, got, atol, rtol,
                                               names=original.output_names))
        except CheckError as e:
            raise error(f"the optimized graph differs from the original on {label}: {e} "
                        f"(rules applied: {named})", applied) from None
    return worst


def _export(g: Graph) -> onnx.ModelProto:
    from taso.onnx_io import export_onnx

    return export_onnx(g)
