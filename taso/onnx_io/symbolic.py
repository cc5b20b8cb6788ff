"""Symbolic dims: a model whose inputs have named (or unknown) dims loads with
no flag. Its graph is built at one representative binding (the caller's
`input_shapes`, else 1 for a batch-like dim and 32 for any other, with a
note), and kept valid for every binding: the model is loaded at a second one
too, and every node whose import depends on the bound value (a Shape folded
into a constant, a Reshape whose 0 or -1 was resolved, a Squeeze of the
dims that happen to be 1) is kept opaque instead, so that it exports as the
model wrote it. The graph remembers the names (`Graph.dim_params`), which
`export_onnx` writes back; the optimizer checks its result at both
bindings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from ..errors import ModelError

BATCH_DEFAULT = 1
OTHER_DEFAULT = 32


def symbolic_axes(model: onnx.ModelProto) -> dict[str, list[tuple[int, str]]]:
    """Per graph input (initializers excluded): its axes without a value, each
    with its dim_param, or a made-up name "<input>_dim<k>" where it has none."""
    inits = {t.name for t in model.graph.initializer}
    out: dict[str, list[tuple[int, str]]] = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        axes = [(k, d.dim_param or f"{vi.name}_dim{k}") for k, d in enumerate(tt.shape.dim)
                if not d.HasField("dim_value")]
        if axes:
            out[vi.name] = axes
    return out


def representative(param: str, axis: int) -> int:
    """The value a symbolic dim is searched at when the caller binds none."""
    return BATCH_DEFAULT if axis == 0 or "batch" in param.lower() else OTHER_DEFAULT


def bindings(model: onnx.ModelProto, axes: dict[str, list[tuple[int, str]]],
             given: Mapping[str, Sequence[int]]) -> tuple[dict[str, int], list[str]]:
    """The representative value of each symbolic dim, by name (from `given`
    where it binds one), and the notes that say which were chosen here."""
    values: dict[str, int] = {}
    chosen: dict[str, int] = {}
    by: dict[str, str] = {}
    for name, shape in given.items():
        for k, p in axes.get(name, ()):
            if k < len(shape):
                if p in values and values[p] != int(shape[k]):
                    raise ModelError(f"dimension {p!r} is {values[p]} in input {by[p]!r} but "
                                     f"{shape[k]} in input {name!r} (input_shapes)")
                values.setdefault(p, int(shape[k]))
                by.setdefault(p, name)
    notes = []
    for name, ax in axes.items():
        for k, p in ax:
            if p not in values:
                values[p] = chosen[p] = representative(p, k)
                notes.append(f"input {name!r} dim {k} ({p!r}) is symbolic: searched at "
                             f"{p}={chosen[p]} (--input-shape {name}=... chooses), and kept "
                             f"symbolic in the output (--static writes it at that value)")
    return values, notes


def input_shapes_at(model: onnx.ModelProto, axes: dict[str, list[tuple[int, str]]],
                    given: Mapping[str, Sequence[int]], values: Mapping[str, int]
                    ) -> dict[str, list[int]]:
    """Full shapes of every input with symbolic dims, at the binding `values`
    (inputs the caller bound keep their given shapes off the symbolic axes)."""
    out = {k: list(v) for k, v in given.items()}
    dims = {vi.name: vi.type.tensor_type.shape.dim for vi in model.graph.input}
    for name, ax in axes.items():
        shape = [d.dim_value if d.HasField("dim_value") else 0 for d in dims[name]]
        if name in out and len(out[name]) == len(shape):
            shape = list(out[name])
        for k, p in ax:
            shape[k] = values[p]
        out[name] = shape
    return out
