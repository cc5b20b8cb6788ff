"""The layout changes onnxruntime puts into a whole model, and their cost.

On this CPU onnxruntime runs convolutions in a blocked channel layout (NCHWc)
and keeps consecutive ones in it; where a blocked tensor meets an operator that
cannot take it (NasNet-A's Concat of 44-channel tensors, an average pool that
does not count padding, ResNeXt-50's grouped convolutions of 4 channels a
group), it inserts a ReorderOutput, and a ReorderInput where an unblocked one
enters a convolution. The `ort` model times a lone convolution without the two
reorders it would pay (`OrtCostModel.layout_share`), so a whole model's are
added back here: the ones onnxruntime's own optimizer inserts into it, each
timed as a one-node program.
"""

from __future__ import annotations

import logging
from functools import cache

import numpy as np
import onnx
from onnx import helper

from taso.runtime import benchmark_options, optimized_model, run

NCHWC = "com.microsoft.nchwc"
REORDERS = ("ReorderInput", "ReorderOutput")
Shape = tuple[int, ...]
log = logging.getLogger("taso.optimizer")


def tensor_shapes(model: onnx.ModelProto) -> dict[str, Shape]:
    """Static shapes of the model's tensors by name (onnx's shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    out = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[v.name] = tuple(d.dim_value for d in dims)
    return out


def layout_changes(model: onnx.ModelProto, threads: int) -> list[tuple[str, Shape]]:
    """(op type, NCHW shape) of each reorder in the graph onnxruntime optimizes
    `model` into under the benchmark's settings with `threads` threads (its
    ReorderInput's input or its ReorderOutput's output, both tensors of
    `model`). A reorder of a channels-last tensor, or of one whose shape is not
    static, is left out (and counted in the log)."""
    shapes = tensor_shapes(model)
    optimized = optimized_model(model, benchmark_options(threads))
    found, left_out = [], 0
    for n in optimized.graph.node:
        if n.domain != NCHWC or n.op_type not in REORDERS:
            continue
        name = n.input[0] if n.op_type == "ReorderInput" else n.output[0]
        channels_last = any(a.name == "channels_last" and a.i for a in n.attribute)
        if name in shapes and not channels_last:
            found.append((n.op_type, shapes[name]))
        else:
            left_out += 1
    if left_out:
        log.debug("%d of %d layout changes left out (channels-last or no static shape)",
                  left_out, len(found) + left_out)
    return found


@cache
def block_size() -> int:
    """Channels a block of onnxruntime's NCHWc layout holds on this CPU (what a
    ReorderInput pads 4 channels to); 1 where the CPU has no blocked layout."""
    try:
        padded = _run(_one_node("ReorderInput", [1, 4, 1, 1]),
                      np.zeros((1, 4, 1, 1), np.float32)).shape[1]
    except Exception:  # onnxruntime refuses the kernel: no NCHWc on this CPU
        return 1
    return padded if padded > 4 else 1  # blocks are 8 (AVX2) or 16 (AVX-512) wide


def reorder_program(op_type: str, shape: Shape) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model of the reorder `op_type` of an NCHW tensor of `shape`,
    with its input. A ReorderOutput's input is the blocked tensor: channels
    padded to whole blocks."""
    rng = np.random.default_rng(0)
    if op_type == "ReorderInput":
        return _one_node(op_type, list(shape)), {"x": rng.standard_normal(shape, np.float32)}
    block = block_size()
    blocked = (shape[0], -(-shape[1] // block) * block, *shape[2:])
    return (_one_node(op_type, list(blocked), channels=shape[1]),
            {"x": rng.standard_normal(blocked, np.float32)})


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return run(model, {"x": x})[0]


def _one_node(op_type: str, in_shape: list[int], **attrs: int) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], domain=NCHWC, **attrs)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(NCHWC, 1)])
