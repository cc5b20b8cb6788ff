"""Opaque nodes: the operator for ONNX nodes the library does not know, and
running one as a one-node model in onnxruntime.

The operator is registered when `taso.onnx_io` is imported, which is the only
way a graph comes to hold one (`load_onnx`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from .. import runtime
from ..ops.base import Op, Shape, register
from .common import DEFAULT_OPSET, array_dtype, elem_type, make_model

# Opaque operators whose value is not a function of their inputs: never
# evaluated before the model runs.
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Bernoulli", "Multinomial"}


@register
class Opaque(Op):
    """An ONNX operator the library does not know: kept with its attributes and
    output shapes, evaluated by onnxruntime, matched by no rule.

    attrs: onnx_type, domain, onnx_attrs (the serialized AttributeProtos, as
    bytes), out_shapes and out_dtypes (dtype "" marks an omitted optional output),
    opset (of its domain at import: an operator's meaning depends on it), absent
    (ONNX input positions left empty) and outer (names its subgraphs read from the
    enclosing scope, fed by the last len(outer) inputs)."""

    name = "opaque"
    kind = "opaque"
    gen_attrs = ()
    inputs = ("*xs",)
    attrs = {"onnx_type": None, "domain": "", "onnx_attrs": (), "out_shapes": None,
             "out_dtypes": None, "opset": 0, "absent": (), "outer": ()}

    def check_arity(self, n):
        pass  # any number of inputs, including none

    def num_outputs(self, a):
        return len(a["out_shapes"])

    def shape(self, a, *xs):
        return list(a["out_shapes"])

    def ref(self, a, *xs):
        # Exported by taso.onnx_io.export.emit_opaque, which also needs the input dtypes.
        return run_attrs(a, xs)

    @staticmethod
    def pure(a: Mapping[str, Any]) -> bool:
        """Whether the node's value is a function of its inputs (it draws no
        random values), so that it may be evaluated before the model runs."""
        return a["onnx_type"] not in RANDOM_OPS


# One session per distinct node and input types, the oldest dropped first.
_SESSIONS: dict[tuple, Any] = {}
_MAX_SESSIONS = 512


def node_model(a: Mapping[str, Any], in_types: Sequence[tuple[Shape, str]]) -> onnx.ModelProto:
    """A model of the one ONNX node an opaque node stands for, inputs i0.., outputs o0.."""
    n_outer = len(a["outer"])
    n_explicit = len(in_types) - n_outer
    names = [f"__taso_i{k}" for k in range(n_explicit)] + list(a["outer"])
    explicit = iter(names[:n_explicit])
    ins = ["" if k in a["absent"] else next(explicit)
           for k in range(n_explicit + len(a["absent"]))]
    outs = ["" if dt == "" else f"__taso_o{k}" for k, dt in enumerate(a["out_dtypes"])]
    node = helper.make_node(a["onnx_type"], ins, outs, domain=a["domain"] or None)
    node.attribute.extend(AttributeProto.FromString(b) for b in a["onnx_attrs"])
    vi = [helper.make_tensor_value_info(n, elem_type(d), s) for n, (s, d) in zip(names, in_types)]
    # No output shapes: a data-dependent one may differ from the recorded one.
    vo = [helper.make_tensor_value_info(n, elem_type(d), None)
          for n, d in zip(outs, a["out_dtypes"]) if n]
    graph = helper.make_graph([node], "opaque", vi, vo)
    return make_model(graph, {a["domain"]: a["opset"] or DEFAULT_OPSET})


def run_attrs(a: Mapping[str, Any], xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the ONNX node described by opaque attributes `a` in onnxruntime."""
    xs = [np.asarray(x) for x in xs]
    in_types = [(tuple(x.shape), array_dtype(x)) for x in xs]
    key = (tuple(sorted(a.items())), tuple(in_types))
    try:
        sess = _SESSIONS.get(key)
        if sess is None:
            sess = runtime.session(node_model(a, in_types))
            if len(_SESSIONS) >= _MAX_SESSIONS:
                _SESSIONS.pop(next(iter(_SESSIONS)))
            _SESSIONS[key] = sess
        vals = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
    except Exception:
        # Some nodes (a Scan whose body's shapes follow from its inputs' values)
        # run only with their inputs as constants.
        m = node_model(a, in_types)
        m.graph.initializer.extend(numpy_helper.from_array(x, v.name)
                                   for x, v in zip(xs, m.graph.input))
        del m.graph.input[:]
        vals = runtime.session(m).run(None, {})
    it = iter(vals)
    return [np.zeros((), np.float32) if dt == "" else np.asarray(next(it))
            for dt in a["out_dtypes"]]
