"""The `cupy` cost model: the same cost keys timed on a CUDA GPU with CUDA events.

Each node runs through its operator's GPU lowering (`Op.lower`), written
against an array module `xp` (cupy here; numpy in the tests that check every
lowering against the operator's reference): matrix products through cuBLAS
(`xp.matmul`), convolutions through cuDNN when cupy has it and otherwise as
im2col plus one batched GEMM, pooling over strided windows. Operators without
a lowering of their own run their numpy reference on cupy arrays, which numpy's
array protocols dispatch to cupy. cupy is an optional extra (`pip install taso[gpu]`):
without it, or without a GPU, this module imports and the model refuses to
start with a message saying why.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from taso.ir import Graph
from taso.ops import get_op

from . import CostModelUnavailable, register_cost_model
from .cache import CostCache
from .measured import Link, MeasuredCostModel, const_value, link_source

try:
    import cupy
except ImportError:  # the optional extra is not installed
    cupy = None

Shape = tuple[int, ...]


def gpu_available() -> bool:
    """Whether cupy imports and sees at least one CUDA device."""
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device: cupy raises its own runtime errors
        return False


def cudnn_module() -> Any | None:
    """cupyx.cudnn when cupy was built with (and finds) cuDNN, else None."""
    if cupy is None:
        return None
    try:
        from cupyx import cudnn

        cudnn.get_handle()
        return cudnn
    except Exception:
        return None


# ---- running nodes through their lowerings (`Op.lower`) ------------------------------------
def run_node(xp, op: str, a: dict[str, Any], xs: Sequence[Any], cudnn=None) -> list[Any]:
    """Outputs of one node on arrays of module `xp`: the operator's lowering
    (by default its numpy reference, which numpy's array protocols dispatch to
    `xp`)."""
    if op == "opaque":
        raise NotImplementedError(f"no GPU lowering for the ONNX operator {a['onnx_type']}")
    return get_op(op).lower(xp, a, xs, cudnn)


def run_graph(xp, graph: Graph, feeds: dict[str, Any], weights: dict[int, Any],
              cudnn=None) -> list[Any]:
    """Evaluate the live nodes of `graph` through the lowerings; `weights` maps
    weight node ids to arrays already on the device."""
    return graph.run(feeds, lambda n, xs: run_node(xp, n.op, n.a, xs, cudnn),
                     lambda n: weights[n.id])


def chain_program(xp, links: Sequence[Link], cudnn=None) -> Callable[[], Any]:
    """A function running the chain `links` once on arrays of module `xp`, its
    inputs from outside the chain drawn once (one-element constants at their
    value); it returns the last link's output."""
    rng = np.random.default_rng(0)
    sources = [[link_source(kind, k) for kind, _, _ in ins]
               for k, (_, _, ins) in enumerate(links)]
    args = [[None if j is not None else
             xp.full(s, const_value(kind), d) if const_value(kind) is not None else
             xp.asarray(rng.standard_normal(s).astype(d))
             for j, (kind, s, d) in zip(js, ins)] for js, (_, _, ins) in zip(sources, links)]

    def run():
        made = []  # each link's output
        for (op, a, _), js, xs in zip(links, sources, args):
            made.append(run_node(xp, op, a, [made[j] if j is not None else x
                                             for j, x in zip(js, xs)], cudnn)[0])
        return made[-1]

    return run


# ---- timing --------------------------------------------------------------------------
def time_gpu(fn: Callable[[], Any], warmup: int = 3, repeats: int = 20) -> list[float]:
    """Milliseconds of each timed call, between two CUDA events on the current stream."""
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return times


@register_cost_model("cupy")
class CupyCostModel(MeasuredCostModel):
    """Costs in milliseconds, measured on the current CUDA device through cupy.

    warmup, repeats: timing of one key (median of `repeats` event-timed runs).
    cache: as for the ort model. use_cudnn: False forces im2col plus GEMM."""

    name = "cupy"

    def __init__(self, warmup: int = 3, repeats: int = 20, use_cudnn: bool = True,
                 cache: CostCache | str | os.PathLike | bool | None = None):
        if not gpu_available():
            raise CostModelUnavailable("the cupy cost model needs cupy and a CUDA GPU "
                                       "(pip install 'taso[gpu]' on a machine with one)")
        super().__init__(cache)
        self.warmup, self.repeats = warmup, repeats
        self.cudnn = cudnn_module() if use_cudnn else None
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        conv = f"cuDNN {self.cudnn.get_build_version()}" if self.cudnn else "im2col+GEMM"
        self.device = f"{name}; cupy {cupy.__version__}; conv by {conv}"

    def time_chain(self, links) -> float:
        if any(op == "opaque" for op, _, _ in links):
            return self.overhead_ms  # no lowering: counted as free, the same in every graph
        run = chain_program(cupy, links, self.cudnn)
        return statistics.median(time_gpu(run, self.warmup, self.repeats))

    def time_overhead(self) -> float:
        return statistics.median(time_gpu(lambda: None, self.warmup, self.repeats))

    def time_graph(self, graph: Graph) -> float:
        """Median milliseconds of one run of the whole graph through the lowerings."""
        return statistics.median(time_gpu(self._graph_run(graph), self.warmup, self.repeats))

    def time_models(self, graphs: Sequence[Graph], rounds: int = 11) -> list[float]:
        """Milliseconds of one run of each whole graph, the graphs timed in turn
        round by round (the first one rotating), so that a drift of the GPU's
        clocks hits each alike: the search's whole-model check."""
        runs = [self._graph_run(g) for g in graphs]
        for fn in runs:
            time_gpu(fn, self.warmup, 0)
        samples: list[list[float]] = [[] for _ in graphs]
        for r in range(rounds):
            for k in (*range(r % len(runs), len(runs)), *range(r % len(runs))):
                samples[k] += time_gpu(runs[k], 0, max(1, self.repeats // 4))
        return [statistics.median(s) for s in samples]

    def _graph_run(self, graph: Graph) -> Callable[[], Any]:
        """A call running the whole graph on the device, its inputs and weights
        copied there once."""
        feeds = {k: cupy.asarray(v) for k, v in graph.random_inputs(seed=0).items()}
        weights = {n.id: cupy.asarray(n.data) for n in graph.weights}
        return lambda: run_graph(cupy, graph, feeds, weights, self.cudnn)
