"""Layers the model builders share, written with the builder API only.

Weights are random but scaled so activations stay O(1) through deep models
(float32 comparisons against onnxruntime then mean something): convolution and
dense kernels use He-style scales, batch-norm scales and shifts sit near 1 and
0, and `calibrate_batchnorm` sets each batch norm's statistics from what
reaches it, so it normalizes, as a trained one would. All randomness comes from the
graph's seeded generator, so a model is a function of its arguments and seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ir import Graph, Node, Tensor, run_node


def _rng(g: Graph) -> np.random.Generator:
    return g._rng  # the graph's seeded generator, the one new_weight draws from


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def scaled(channels: int, width: float) -> int:
    """A channel count times a width multiplier, at least 1."""
    return max(1, int(round(channels * width)))


def conv(g: Graph, x: Tensor, out_channels: int, kernel: int | Sequence[int],
         stride: int | Sequence[int] = 1, padding: str | Sequence[int] | None = None,
         groups: int = 1, gain: float = 2.0) -> Tensor:
    """A bias-free convolution. `padding` None means k // 2 on each side (the
    PyTorch convention for odd kernels); "same"/"valid" or explicit ONNX pads
    also work. `gain` 2 suits inputs after a ReLU, 1 a linear input."""
    kh, kw = _pair(kernel)
    if padding is None:
        padding = (kh // 2, kw // 2, kh // 2, kw // 2)
    fan_in = x.shape[1] // groups * kh * kw
    w = g.new_weight((out_channels, x.shape[1] // groups, kh, kw),
                     scale=(gain / fan_in) ** 0.5)
    return g.conv2d(x, w, strides=_pair(stride), padding=padding, groups=groups)


def batchnorm(g: Graph, x: Tensor, gamma: float = 1.0, epsilon: float = 1e-5) -> Tensor:
    """Inference batch norm with parameters near the identity; `gamma` scales the
    learned scale (a small gamma on a residual branch keeps deep sums O(1))."""
    c, r = x.shape[1], _rng(g)

    def param(values: np.ndarray) -> Tensor:
        return g.new_weight((c,), data=values.astype(np.float32))

    return g.batchnorm(x, param(gamma * r.uniform(0.8, 1.2, c)), param(r.normal(0, 0.1, c)),
                       param(r.normal(0, 0.1, c)), param(r.uniform(0.8, 1.2, c)),
                       epsilon=epsilon)


def layernorm(g: Graph, x: Tensor, epsilon: float = 1e-5) -> Tensor:
    """Layer norm over the last axis with a scale near 1 and a shift near 0."""
    d = x.shape[-1]
    scale = g.new_weight((d,), data=_rng(g).uniform(0.8, 1.2, d).astype(np.float32))
    return g.layernorm(x, scale, g.new_weight((d,), scale=0.1), epsilon=epsilon)


def activation(g: Graph, x: Tensor, act: str | None) -> Tensor:
    if act is None:
        return x
    if act == "relu":
        return g.relu(x)
    if act == "relu6":
        return g.clip(x, 0.0, 6.0)
    raise ValueError(f"unknown activation {act!r}")


def conv_bn(g: Graph, x: Tensor, out_channels: int, kernel: int | Sequence[int],
            stride: int | Sequence[int] = 1, padding: str | Sequence[int] | None = None,
            groups: int = 1, act: str | None = "relu", gamma: float = 1.0,
            epsilon: float = 1e-5, gain: float = 2.0) -> Tensor:
    """Convolution, batch norm, then an activation ("relu", "relu6" or None)."""
    y = conv(g, x, out_channels, kernel, stride, padding, groups, gain)
    return activation(g, batchnorm(g, y, gamma, epsilon), act)


def bias(g: Graph, x: Tensor, axis: int = -1) -> Tensor:
    """Add a learned vector bias along `axis`, broadcast over the other axes. Off
    the last axis the vector is reshaped to broadcast, the form load_onnx gives a
    Conv's bias input (and the one the conv-bias fusion rule matches)."""
    rank = len(x.shape)
    b = g.new_weight((x.shape[axis],), scale=0.1)
    if axis % rank != rank - 1:
        b = g.reshape(b, [x.shape[axis] if i == axis % rank else 1 for i in range(rank)])
    return g.add(x, b)


def conv_bias(g: Graph, x: Tensor, out_channels: int, kernel: int | Sequence[int],
              stride: int | Sequence[int] = 1, padding: str | Sequence[int] | None = None,
              act: str | None = "relu") -> Tensor:
    """Convolution with a per-channel bias (as an add), then an activation."""
    return activation(g, bias(g, conv(g, x, out_channels, kernel, stride, padding), axis=1),
                      act)


def dense(g: Graph, x: Tensor, out_features: int, use_bias: bool = True,
          gain: float = 1.0) -> Tensor:
    """x @ W (+ b) over the last axis; a matmul (batched for rank > 2)."""
    w = g.new_weight((x.shape[-1], out_features), scale=(gain / x.shape[-1]) ** 0.5)
    y = g.matmul(x, w)
    return bias(g, y) if use_bias else y


def classifier(g: Graph, x: Tensor, classes: int = 1000) -> Tensor:
    """Global average pool, flatten, and a fully connected layer (Gemm with bias)."""
    x = g.flatten(g.global_avgpool(x), 1)
    w = g.new_weight((x.shape[1], classes), scale=(1.0 / x.shape[1]) ** 0.5)
    return g.gemm(x, w, g.new_weight((classes,), scale=0.1))


def calibrate_batchnorm(g: Graph, seed: int = 0) -> Graph:
    """Scale every batch norm to what reaches it: in one pass in evaluation order
    on seeded random graph inputs (each batch norm sees the calibrated ones before
    it), set its variance to the second moment of its input per channel and its
    mean to a small random fraction of that channel's RMS. Its output then has RMS
    near its scale, however deep the model. Subtracting the true channel means
    instead would cancel large values and amplify float32 rounding many times
    over a deep random network. With fewer than 16 values per channel the moment
    is pooled over the tensor; a floor keeps dead channels from amplifying."""
    rng = np.random.default_rng(seed)

    def calibrated(n: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        if n.op == "batchnorm":
            x = xs[0].astype(np.float64)
            c = x.shape[1]
            if x.size // c >= 16:
                ms = (x * x).mean(axis=(0, *range(2, x.ndim)))
            else:
                ms = np.full(c, (x * x).mean())
            ms = np.maximum(ms, 0.01 * ms.mean() + 1e-6)
            for k, v in ((3, 0.1 * rng.standard_normal(c) * np.sqrt(ms)), (4, ms)):
                src = g.nodes[n.inputs[k][0]]
                if src.op != "weight":
                    raise ValueError("batch norm statistics must be weights to calibrate")
                src.data = v.astype(np.float32)
                xs[k] = src.data
        return run_node(n, xs)

    g.values(g.nodes, g.random_inputs(seed), calibrated)
    return g
