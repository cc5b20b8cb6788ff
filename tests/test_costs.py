"""Measured cost models, the cost cache, memory weighting and the GPU lowerings.

Timings use tiny keys and few repeats: what is checked is that measuring
happens (or does not) when it should, never how fast anything is.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cost_graphs import conv_block, graph_chain, merged_matmuls
from taso.optimizer.cost import CostModel, get_cost_model
from taso.optimizer.cost import cupy_backend as gpu
from taso.optimizer.cost.cache import CostCache
from taso.optimizer.cost.factory import make_cost_model
from taso.optimizer.cost.measured import MeasuredCostModel, fusable_chains
from taso.optimizer.cost.memory import (
    MemoryWeighted,
    peak_activation_bytes,
    peak_memory_bytes,
    weight_bytes,
)
from taso.optimizer.search import run_search

import taso
from taso.models import ALL

FAST = dict(warmup=1, repeats=3, min_seconds=0.0)


def has_export() -> bool:
    return hasattr(taso, "export_onnx")


needs_export = pytest.mark.skipif(not has_export(), reason="taso.export_onnx has not landed")


# ---- cache -----------------------------------------------------------------------------
def test_cache_round_trip(tmp_path):
    path = tmp_path / "costs.json"
    key = ("conv2d", (("groups", 1), ("pads", (1, 1, 1, 1))), ((1, 8, 4, 4), (8, 8, 3, 3)))
    c = CostCache(path)
    assert c.get("ort", "cpu", key) is None
    c.put("ort", "cpu", key, 0.25)
    c.put("cupy", "gpu", key, 0.01)
    c.save()
    doc = json.loads(path.read_text())
    assert doc["format"] == "taso-cost-cache"  # plain data a user can read
    again = CostCache(path)
    assert again.get("ort", "cpu", key) == 0.25
    assert again.get("cupy", "gpu", key) == 0.01
    assert again.get("ort", "other cpu", key) is None  # keyed by device too
    assert (again.hits, again.misses) == (2, 1)


def test_cache_merges_concurrent_writers(tmp_path):
    path = tmp_path / "costs.json"
    a, b = CostCache(path), CostCache(path)
    a.put("ort", "cpu", ("x",), 1.0)
    b.put("ort", "cpu", ("y",), 2.0)
    a.save()
    b.save()  # must not drop what `a` wrote
    c = CostCache(path)
    assert c.get("ort", "cpu", ("x",)) == 1.0 and c.get("ort", "cpu", ("y",)) == 2.0


def test_cache_default_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_COST_CACHE", str(tmp_path / "c.json"))
    assert CostCache().path == tmp_path / "c.json"
    monkeypatch.delenv("TASO_COST_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert CostCache().path == tmp_path / "taso" / "costs.json"


# ---- the measured base, with a deterministic fake device ------------------------------------
class CountingDevice(MeasuredCostModel):
    """A measured model whose 'device' answers from a formula and counts calls."""

    name = "counting"
    device = "formula"

    def __init__(self, cache):
        super().__init__(cache)
        self.calls = []

    def time_chain(self, links):
        if len(links) == 1:
            op, _, ins = links[0]
            self.calls.append((op, tuple(kind == "w" for kind, _, _ in ins)))
        else:
            self.calls.append(tuple(op for op, _, _ in links))
        return 1.0 + sum(int(np.prod(s)) for _, _, ins in links for _, s, _ in ins) / 1000

    def time_overhead(self):
        return 1.0


def test_measured_model_times_each_key_once_and_persists(tmp_path):
    path = tmp_path / "costs.json"
    m = CountingDevice(path)
    g = merged_matmuls()
    first = m.graph_cost(g)
    assert m.measured == 3  # overhead, matmul, split; concat of weights is folded
    assert ("concat", (True, True, True)) not in m.calls
    assert ("matmul", (False, True)) in m.calls
    assert m.graph_cost(g) == first and m.measured == 3  # memo
    m.save()
    again = CountingDevice(path)
    assert again.graph_cost(g) == first
    assert again.measured == 0 and again.calls == []  # a second run measures nothing


def test_the_search_report_says_what_was_measured(tmp_path):
    from taso.optimizer.report import summary_text
    from taso.optimizer.search import run_search
    path = tmp_path / "costs.json"
    g = merged_matmuls()
    first = CountingDevice(path)
    r = run_search(g, budget=5, rules=[], cost_model=first, timing=False)
    assert r.to_json()["costs_measured"] == {"new": first.measured, "seconds": pytest.approx(
        first.measure_seconds, abs=1e-3), "cache": str(path)} and first.measured > 0
    assert f"{first.measured} new in" in summary_text(r)
    first.save()
    r = run_search(g, budget=5, rules=[], cost_model=CountingDevice(path), timing=False)
    assert r.to_json()["costs_measured"]["new"] == 0  # all from the cache
    plain = run_search(g, budget=5, rules=[], cost_model="analytic")
    assert plain.to_json()["costs_measured"] is None
    assert "costs measured" not in summary_text(plain)


def test_fusable_chains():
    g = conv_block(residual=True)
    const = g.constant_nodes()
    chains = fusable_chains(g, g.live(), const)
    assert [[g.nodes[i].op for i in c] for c in chains] == [
        ["conv2d", "batchnorm", "ewadd", "relu"]]
    # a second consumer of the conv output ends the chain at the conv
    h = taso.new_graph()
    x = h.new_input((1, 4, 8, 8))
    y = h.conv2d(x, h.new_weight((4, 4, 1, 1)))
    h.mark_output(h.relu(y))
    h.mark_output(h.tanh(y))
    assert fusable_chains(h, h.live(), h.constant_nodes()) == []


def test_residual_layernorm_joins_the_product_chain():
    # onnxruntime fuses the residual add into the normalization after it
    g = taso.new_graph()
    x = g.new_input((1, 8, 16))
    y = g.add(x, g.add(g.matmul(x, g.new_weight((16, 16))), g.new_weight((16,))))
    g.mark_output(g.layernorm(y, g.new_weight((16,)), g.new_weight((16,))))
    chains = fusable_chains(g, g.live(), g.constant_nodes())
    assert [[g.nodes[i].op for i in c] for c in chains] == [["matmul", "add", "ewadd", "layernorm"]]
    # in BERT too, where the residual (the add's first operand) is the previous
    # normalization's output, which other nodes read as well
    bert = ALL["bert_base"](small=True)
    kinds = [tuple(bert.nodes[i].op for i in c)
             for c in fusable_chains(bert, bert.live(), bert.constant_nodes())]
    assert kinds.count(("matmul", "add", "ewadd", "layernorm")) == 2 * 2  # two layers


def erf_gelu_dense(g: taso.Graph, x, w, b):
    """A dense layer and its GELU as PyTorch exports them: h = x·w + b, then
    (erf(h / sqrt 2) + 1) * h * 0.5."""
    def scalar(v):
        return g.new_weight((), data=np.float32(v))
    h = g.add(g.matmul(x, w), b)
    e = g.add(g.erf(g.div(h, scalar(2 ** 0.5))), scalar(1.0))
    return g.scalar_mul(g.ewmul(e, h), scalar(0.5))


def test_a_decomposed_gelu_joins_its_product_chain():
    from taso.optimizer.cost.ort import chain_graph

    from taso.runtime import optimized_model, session_options

    g = taso.new_graph()
    x = g.new_input((1, 4, 8))
    g.mark_output(erf_gelu_dense(g, x, g.new_weight((8, 16)), g.new_weight((16,))))
    const = g.constant_nodes()
    chains = fusable_chains(g, g.live(), const)
    assert [[g.nodes[i].op for i in c] for c in chains] == [
        ["matmul", "add", "div", "erf", "add", "ewmul", "scalar_mul"]]
    links = MeasuredCostModel.links(g, chains[0], const)
    assert [[kind for kind, _, _ in ins] for _, _, ins in links] == [
        ["x", "w"], ["prev", "w"], ["prev", f"={float(np.float32(2 ** 0.5))!r}"], ["prev"],
        ["prev", "=1.0"], ["prev", "@1"], ["prev", "=0.5"]]
    # timed as onnxruntime runs it: the constants kept, the GELU fused
    fused = optimized_model(taso.export_onnx(chain_graph(links)), session_options(None))
    assert "Gelu" in {n.op_type for n in fused.graph.node}


def test_an_add_of_two_products_joins_one_chain():
    g = taso.new_graph()
    x, h = g.new_input((1, 8)), g.new_input((1, 8))
    g.mark_output(g.tanh(g.ewadd(g.matmul(x, g.new_weight((8, 8))),
                                 g.matmul(h, g.new_weight((8, 8))))))
    chains = fusable_chains(g, g.live(), g.constant_nodes())
    assert [[g.nodes[i].op for i in c] for c in chains] == [["matmul", "ewadd", "tanh"]]
    m = CountingDevice(False)
    m.fuses = True
    m.graph_cost(g)
    assert sorted(map(str, m.calls)) == sorted(map(str, [("matmul", "ewadd", "tanh"),
                                                         ("matmul", (False, True))]))
    # the first operand's chain, by structure: with the first product replaced
    # by a split of a stacked one, the add joins the second product's chain
    g = taso.new_graph()
    x, h = g.new_input((2, 8)), g.new_input((1, 8))
    first, other = g.split(g.matmul(x, g.new_weight((8, 8))), 0, (1, 1))
    g.mark_output(other)
    g.mark_output(g.tanh(g.ewadd(first, g.matmul(h, g.new_weight((8, 8))))))
    chains = fusable_chains(g, g.live(), g.constant_nodes())
    assert [[g.nodes[i].op for i in c] for c in chains] == [["matmul", "ewadd", "tanh"]]
    assert g.nodes[chains[0][0]].inputs[0] == h.ref


def test_no_node_is_in_two_chains():
    # h is read twice inside the first chain, so from the second one the add's
    # first operand does not look like a chain's end; the add stays the first's
    g = taso.new_graph()
    x, y = g.new_input((1, 8)), g.new_input((1, 8))
    h = g.add(g.matmul(x, g.new_weight((8, 8))), g.new_weight((8,)))
    q = g.matmul(y, g.new_weight((8, 8)))
    g.mark_output(g.ewadd(g.ewadd(h, q), g.relu(h)))
    chains = fusable_chains(g, g.live(), g.constant_nodes())
    ids = [i for c in chains for i in c]
    assert len(ids) == len(set(ids))
    assert [[g.nodes[i].op for i in c] for c in chains] == [
        ["matmul", "add", "ewadd", "relu", "ewadd"]]


def test_chain_programs_read_earlier_links_and_constant_values():
    from taso.optimizer.cost.ort import chain_graph

    f32 = "float32"
    links = [("relu", {}, (("=2.0", (2, 3), f32),)), ("tanh", {}, (("prev", (2, 3), f32),)),
             ("ewadd", {}, (("prev", (2, 3), f32), ("@0", (2, 3), f32)))]
    want = np.full((2, 3), np.tanh(2.0) + 2.0, np.float32)
    np.testing.assert_allclose(chain_graph(links).evaluate({})[0], want, rtol=1e-6)
    np.testing.assert_allclose(gpu.chain_program(np, links)(), want, rtol=1e-6)


def test_fusing_device_times_chains_as_one_program():
    m = CountingDevice(False)
    m.fuses = True
    cost = m.graph_cost(conv_block(residual=True))
    assert m.calls == [("conv2d", "batchnorm", "ewadd", "relu")]
    # every input of every link, less the overhead of one run
    sizes = (256 + 144) + (256 + 4 * 4) + (256 + 256) + 256
    assert cost == pytest.approx(1.0 + sizes / 1000 - 1.0)
    assert not CountingDevice(False).fuses  # per-node by default


class DriftingDevice(CountingDevice):
    """A formula device that runs `slowdown` times slower than when it priced."""

    slowdown = 1.0

    def time_chain(self, links):
        return super().time_chain(links) * self.slowdown

    def time_overhead(self):
        return 0.0


class BurstDevice(CountingDevice):
    """A formula device that runs each program `burst` times slower (less the
    fixed cost of a run) the first time it times it, as a moment of
    disturbance on a shared machine would."""

    burst = 2.0

    def __init__(self, cache):
        super().__init__(cache)
        self.seen = set()

    def time_chain(self, links):
        first = repr(links) not in self.seen
        self.seen.add(repr(links))
        ms = super().time_chain(links) - self.time_overhead()
        return ms * (self.burst if first else 1.0) + self.time_overhead()


def test_settling_keeps_the_lower_of_two_timings(tmp_path):
    g = merged_matmuls()
    steady = CountingDevice(False)
    m = BurstDevice(tmp_path / "costs.json")
    assert m.graph_cost(g) == pytest.approx(2 * steady.graph_cost(g))
    assert m.settle(below_ms=10.0)  # each key timed again, lower now
    assert m.graph_cost(g) == pytest.approx(steady.graph_cost(g))
    assert not m.settle(below_ms=10.0)  # each key is settled once
    m.save()
    assert BurstDevice(tmp_path / "costs.json").graph_cost(g) == pytest.approx(
        steady.graph_cost(g))  # the settled timing is what the cache keeps
    big = BurstDevice(False)
    first = big.graph_cost(g)
    assert not big.settle(below_ms=1e-6) and big.graph_cost(g) == first  # only small keys


def test_the_search_runs_again_on_settled_costs():
    g = merged_matmuls()
    steady = run_search(g, budget=5, rules=[], cost_model=CountingDevice(False))
    settled = run_search(g, budget=5, rules=[], cost_model=BurstDevice(False))
    assert settled.cost_before == pytest.approx(steady.cost_before)
    assert settled.explored == 2 * steady.explored  # two passes: timed, then settled
    assert settled.to_json()["passes"] == 2 and steady.to_json()["passes"] == 1


def test_predictions_follow_the_device_speed_now(tmp_path):
    g = conv_block(residual=True)
    m = DriftingDevice(tmp_path / "costs.json")
    m.fuses = True
    base = m.predict_latency(g)
    assert m.last_speed == pytest.approx(1.0)
    m.save()
    later = DriftingDevice(tmp_path / "costs.json")  # the costs cached, the device slower
    later.fuses, later.slowdown = True, 1.5
    assert later.graph_cost(g) == m.graph_cost(g)  # the search's costs stay as cached
    assert later.predict_latency(g) == pytest.approx(1.5 * base)
    assert later.last_speed == pytest.approx(1.5)
    later.recalibrate = False
    assert later.predict_latency(g) == pytest.approx(base) and later.last_speed == 1.0
    # one key's cached cost off by 2x does not move the speed: the median of keys
    g = taso.new_graph()
    x = g.new_input((4, 8))
    for k in (8, 16, 24):
        g.mark_output(g.relu(g.matmul(x, g.new_weight((8, k)))))
    m = DriftingDevice(False)
    m.graph_cost(g)
    m._memo[max(m._memo, key=m._memo.get)] *= 2
    assert m.speed_now(g) == pytest.approx(1.0)


def test_the_device_speed_is_read_from_what_weighs_in_the_model():
    # one product that is most of the model, as cached; nine small keys that
    # now time twice as fast: the product's drift is the model's
    class PerOp(DriftingDevice):
        now: dict = {}

        def time_chain(self, links):
            return super().time_chain(links) * self.now.get(links[0][0], 1.0)

    g = taso.new_graph()
    g.mark_output(g.matmul(g.new_input((64, 256)), g.new_weight((256, 256))))
    for k in range(1, 10):
        g.mark_output(g.relu(g.new_input((1, k))))
    m = PerOp(False)
    m.graph_cost(g)
    m.now = {"relu": 0.5}
    assert m.speed_now(g, sample=10) == pytest.approx(1.0)
    m.now = {"matmul": 1.3, "relu": 0.5}
    assert m.speed_now(g, sample=10) == pytest.approx(1.3)


def test_commutative_operands_are_priced_in_one_order():
    m = CountingDevice(False)
    m.fuses = True
    a = m.op_cost("add", {}, [(1, 8), (8,)], consts=[False, True])
    assert m.op_cost("add", {}, [(8,), (1, 8)], consts=[True, False]) == a
    assert m.calls == [("add", (False, True))]  # timed once, activation first

    def dense(bias_first: bool):
        g = taso.new_graph()
        x = g.new_input((1, 4, 8))
        y, b = g.matmul(x, g.new_weight((8, 8))), g.new_weight((8,))
        g.mark_output(g.relu(g.add(b, y) if bias_first else g.add(y, b)))
        return g

    assert m.graph_cost(dense(True)) == m.graph_cost(dense(False))
    assert m.calls[1:] == [("matmul", "add", "relu")]


def test_all_constant_inputs_cost_nothing(tmp_path):
    m = CountingDevice(False)
    assert m.op_cost("matmul", {"activation": "none"}, [(4, 4), (4, 4)], consts=[True, True]) == 0
    assert m.op_cost("weight", {}, []) == 0 and m.calls == []


# ---- custom and weighted costs ---------------------------------------------------------------
def test_callable_cost_model():
    seen = []

    def fn(op, attrs, shapes):
        seen.append(op)
        return {"input": 0.0, "weight": 0.0, "matmul": 2.0}.get(op, 0.5)

    m = get_cost_model(fn)
    assert isinstance(m, CostModel)
    assert m.graph_cost(merged_matmuls()) == 2.0 + 0.5  # matmul + split; concat folded
    assert "concat" not in seen


def test_a_weight_byte_costs_what_a_one_row_product_reads_it_in():
    analytic = get_cost_model("analytic")
    one_row = analytic.op_cost("matmul", {"activation": "none"}, [(1, 1024), (1024, 1024)])
    assert one_row > 0 and analytic.weight_byte_cost() == pytest.approx(one_row / 2**22)

    def relu_only(op, attrs, shapes):  # a user model that prices one operator
        if op != "relu":
            raise KeyError(op)
        return 1.0
    assert get_cost_model(relu_only).weight_byte_cost() == 0.0  # unknown: not counted


def test_peak_memory_of_a_chain():
    g = graph_chain()
    act = 4 * 8 * 8 * 4
    assert weight_bytes(g) == 4 * 4 * 3 * 3 * 4
    assert peak_activation_bytes(g) == 2 * act  # an input and an output at a time
    assert peak_memory_bytes(g) == weight_bytes(g) + 2 * act


def test_peak_memory_counts_parallel_branches():
    g = taso.new_graph()
    x = g.new_input((256,))
    a, b, c = g.relu(x), g.tanh(x), g.sigmoid(x)
    g.mark_output(g.ewadd(g.ewadd(a, b), c))
    # x, a, b, c live together when c is computed
    assert peak_activation_bytes(g) == 4 * 256 * 4


def test_folded_weights_count_once():
    g = merged_matmuls(2)  # concat(w0, w1) folds into one 8x16 weight
    assert weight_bytes(g) == 8 * 16 * 4


def test_memory_weight_adds_peak_memory():
    base = get_cost_model(lambda op, attrs, shapes: 0.0 if op in ("input", "weight") else 1.0)
    g = graph_chain()
    m = MemoryWeighted(base, memory_weight=2.0)
    assert m.op_cost("relu", {}, [(1024, 256)]) == pytest.approx(1.0 + 2.0)  # writes 1 MiB
    assert m.op_cost("reshape", {"shape": (256, 1024)}, [(1024, 256)]) == 1.0  # a view
    assert m.graph_cost(g) == pytest.approx(base.graph_cost(g)
                                            + 2.0 * peak_memory_bytes(g) / 2**20)


def test_memory_weight_penalizes_merge_plus_split():
    def split_graph(merged):
        g = taso.new_graph()
        x = g.new_input((64, 64))
        ws = [g.new_weight((64, 64)) for _ in range(3)]
        if merged:
            outs = g.split(g.matmul(x, g.concat(1, ws)), 1, 3)
        else:
            outs = [g.matmul(x, w) for w in ws]
        for t in outs:
            g.mark_output(t)
        return g

    time_only = get_cost_model(lambda op, attrs, shapes: 0.0)
    m = MemoryWeighted(time_only, memory_weight=1.0)
    assert peak_memory_bytes(split_graph(True)) > peak_memory_bytes(split_graph(False))
    assert m.graph_cost(split_graph(True)) > m.graph_cost(split_graph(False))


def test_a_memory_weighted_model_times_no_whole_models():
    # Its objective is not time alone; its base's comparisons stay hidden.
    from taso.optimizer.cost.ort import OrtCostModel
    from taso.optimizer.runner import times_models

    m = MemoryWeighted(OrtCostModel(cache=False), memory_weight=1.0)
    assert m.compare_models is None and m.time_models is None and not times_models(m)


def test_make_cost_model_applies_options(tmp_path):
    m = make_cost_model("analytic", memory_weight=0.5)
    assert isinstance(m, MemoryWeighted) and m.base.name == "analytic"
    assert make_cost_model("analytic").name == "analytic"
    if has_export():
        o = make_cost_model("ort", cache_path=tmp_path / "c.json", threads=1)
        assert o.cache.path == tmp_path / "c.json" and o.threads == 1
