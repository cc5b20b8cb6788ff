"""The GPU cost model's lowerings (checked on numpy against each operator's
reference everywhere, on cupy where a CUDA GPU is) and the cupy cost model."""

from __future__ import annotations

import types

import numpy as np
import pytest
from cost_graphs import graph_chain
from hypothesis import given, settings
from hypothesis import strategies as st
from taso.optimizer.cost import CostModelUnavailable, get_cost_model
from taso.optimizer.cost import cupy_backend as gpu
from taso.optimizer.search import run_search

import taso
from taso.models import ALL
from taso.ops import get_op

FAST = dict(warmup=1, repeats=3, min_seconds=0.0)


def has_export() -> bool:
    return hasattr(taso, "export_onnx")


needs_export = pytest.mark.skipif(not has_export(), reason="taso.export_onnx has not landed")



# ---- GPU lowerings, checked on numpy against each operator's reference -------------------------
def check_lowering(op, attrs, *xs):
    o = get_op(op)
    a = o.resolve(dict(o.make_attrs(**attrs)), [x.shape for x in xs])
    got = gpu.run_node(np, op, a, xs)
    want = o.run_ref(a, xs)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(groups=st.sampled_from([1, 2]), k=st.sampled_from([1, 3]), s=st.integers(1, 2),
       d=st.integers(1, 2), pads=st.tuples(*[st.integers(0, 2)] * 4),
       act=st.sampled_from(["none", "relu", "sigmoid", "tanh"]))
def test_conv_im2col_gemm_matches_reference(groups, k, s, d, pads, act):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, k, k)).astype(np.float32)
    check_lowering("conv2d", dict(strides=(s, s), pads=pads, dilations=(d, d), groups=groups,
                                  activation=act), x, w)


def test_conv_bias_lowering_matches_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    check_lowering("conv2d_bias", dict(pads=(1, 1, 1, 1), activation="relu"), x, w, b)


@pytest.mark.parametrize("op,attrs", [
    ("maxpool2d", dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    ("avgpool2d", dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))),
    ("avgpool2d", dict(kernel=(2, 3), strides=(2, 1), pads=(1, 0, 0, 1), count_include_pad=0)),
])
def test_pool_lowerings_match_reference(op, attrs):
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 5)).astype(np.float32)
    check_lowering(op, attrs, x)


def test_other_lowerings_match_reference():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((3, 5, 4)).astype(np.float32) for _ in range(2))
    check_lowering("matmul", dict(activation="tanh"), a, b.transpose(0, 2, 1).copy())
    check_lowering("sigmoid", {}, a)
    check_lowering("split", dict(axis=1, sizes=(2, 3)), a)


def test_whole_graph_through_lowerings_matches_reference():
    g = graph_chain()
    feeds = g.random_inputs(seed=3)
    got = gpu.run_graph(np, g, feeds, {n.id: n.data for n in g.weights})
    for x, y in zip(got, g.evaluate(feeds)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_cupy_model_refuses_cleanly_without_gpu():
    if gpu.gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(CostModelUnavailable, match="GPU"):
        get_cost_model("cupy")


def test_unknown_cost_model_lists_the_known_ones():
    # The lazily imported backends count as known before their first use.
    with pytest.raises(ValueError, match="known: analytic, cupy, ort"):
        get_cost_model("bogus")


@pytest.mark.skipif(not gpu.gpu_available(), reason="needs cupy and a CUDA GPU")
def test_cupy_times_keys_and_caches(tmp_path):
    m = get_cost_model("cupy", cache=tmp_path / "c.json", warmup=1, repeats=3)
    small = m.op_cost("matmul", {"activation": "none"}, [(8, 64), (64, 64)])
    big = m.op_cost("matmul", {"activation": "none"}, [(2048, 2048), (2048, 2048)])
    conv = m.op_cost("conv2d", dict(get_op("conv2d").make_attrs(pads=(1, 1, 1, 1))),
                     [(1, 64, 56, 56), (64, 64, 3, 3)])
    assert big > small and conv > 0
    m.save()
    again = get_cost_model("cupy", cache=tmp_path / "c.json")
    assert again.op_cost("matmul", {"activation": "none"}, [(8, 64), (64, 64)]) == small
    assert again.measured == 0


@pytest.mark.skipif(not gpu.gpu_available(), reason="needs cupy and a CUDA GPU")
def test_cupy_lowerings_match_reference_on_gpu():
    import cupy

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    o = get_op("conv2d")
    a = o.resolve(dict(o.make_attrs(pads=(1, 0, 2, 1), groups=2, activation="relu")),
                  [x.shape, w.shape])
    want = o.run_ref(a, [x, w])[0]
    for cudnn in (None, gpu.cudnn_module()):
        got = gpu.run_node(cupy, "conv2d", a, [cupy.asarray(x), cupy.asarray(w)], cudnn)[0]
        np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not gpu.gpu_available(), reason="needs cupy and a CUDA GPU")
def test_cupy_times_whole_models_against_each_other():
    m = get_cost_model("cupy", cache=False, warmup=1, repeats=8)
    g = taso.new_graph()
    x = g.new_input((256, 256), name="x")
    g.mark_output(g.relu(g.matmul(x, g.new_weight((256, 256)))))
    a, b = m.time_models([g, g], rounds=3)
    assert a > 0 and b > 0 and 0.5 < a / b < 2  # the same graph, timed twice


@pytest.mark.skipif(not gpu.gpu_available(), reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("name", sorted(ALL))
def test_cupy_runs_every_small_model_as_the_reference(name):
    import cupy

    g = ALL[name](small=True)
    feeds = g.random_inputs(seed=5)
    got = gpu.run_graph(cupy, g, {k: cupy.asarray(v) for k, v in feeds.items()},
                        {n.id: cupy.asarray(n.data) for n in g.weights}, gpu.cudnn_module())
    for x, y in zip(got, g.evaluate(feeds)):
        np.testing.assert_allclose(cupy.asnumpy(x), y, rtol=1e-3, atol=1e-3)


class DeviceArray(np.lib.mixins.NDArrayOperatorsMixin):
    """An array of another module, as cupy's: numpy functions and ufuncs dispatch
    to it through numpy's array protocols, and an implicit copy to a numpy array
    (`__array__`) is refused. Lets the GPU path's host-copy bugs show without a
    GPU."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def __array__(self, *args, **kwargs):
        raise TypeError("implicit conversion to a NumPy array is not allowed")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _device(getattr(ufunc, method)(*_host(inputs), **_host(kwargs)))

    def __array_function__(self, func, types, args, kwargs):
        return _device(func(*_host(args), **_host(kwargs)))

    def __getitem__(self, key):
        return _device(self.a[_host(key)])

    def __setitem__(self, key, value):
        self.a[_host(key)] = _host(value)

    def __getattr__(self, name):  # shape, dtype, astype, reshape, sum, ...
        v = getattr(self.a, name)
        return (lambda *a, **k: _device(v(*_host(a), **_host(k)))) if callable(v) else _device(v)


def _host(x):
    if isinstance(x, DeviceArray):
        return x.a
    if isinstance(x, (list, tuple)):
        return type(x)(_host(v) for v in x)
    return {k: _host(v) for k, v in x.items()} if isinstance(x, dict) else x


def _device(x):
    if isinstance(x, (np.ndarray, np.generic)):
        return DeviceArray(x)
    return type(x)(_device(v) for v in x) if isinstance(x, (list, tuple)) else x


class DeviceModule:
    """The module of DeviceArray, as `cupy` is of cupy arrays (numpy's functions,
    on device arrays; submodules alike)."""

    def __init__(self, module=np):
        self.module = module

    def asarray(self, x, dtype=None):
        return DeviceArray(np.asarray(_host(x), dtype))

    def __getattr__(self, name):
        f = getattr(self.module, name)
        if isinstance(f, types.ModuleType):
            return DeviceModule(f)
        return (lambda *a, **k: _device(f(*_host(a), **_host(k)))) if callable(f) else f


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_gpu_path_keeps_arrays_on_the_device(name, monkeypatch):
    from taso.ops import activation
    from taso.ops.activation import erf64

    def host_erf(xp, x):  # cupyx's erf, where there is no cupyx
        return DeviceArray(erf64(_host(x)).astype(np.float32))

    monkeypatch.setattr(activation, "erf_xp", host_erf)
    xp = DeviceModule()
    g = ALL[name](small=True)
    feeds = g.random_inputs(seed=5)
    for graph in (g, run_search(g, cost_model="analytic", budget=50).graph):
        got = gpu.run_graph(xp, graph, {k: xp.asarray(v) for k, v in feeds.items()},
                            {n.id: xp.asarray(n.data) for n in graph.weights})
        for x, y in zip(got, g.evaluate(feeds)):
            assert isinstance(x, DeviceArray)
            np.testing.assert_allclose(x.a, y, rtol=1e-3, atol=1e-3)
