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
from taso.optimizer.cost.calibrate import factor, quietest, slowdown
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
    new = first.counts["measured"]
    said = r.to_json()["costs_measured"]
    # the search's core prices the concatenation of weights as if it ran: a
    # guess, never timed (the graph folds it)
    assert said == {"new": new, "seconds": pytest.approx(first.measure_seconds, abs=1e-3),
                    "cache": str(path), "remeasured": 0, "beside": 0, "cached": 0,
                    "rescaled": 0, "fallback": 0, "busy": 0, "guessed": 1}
    assert new == 3  # matmul, split, the weight-byte price
    assert f"{new} new" in summary_text(r)
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


def matmul_chain(k: int, n: int):
    """x (8, 32) by a (32, k) weight by a (k, n) weight: reassociated, the
    weights' product is folded and one product of a new key remains."""
    g = taso.new_graph()
    x = g.new_input((8, 32))
    g.mark_output(g.matmul(g.matmul(x, g.new_weight((32, k))), g.new_weight((k, n))))
    return g


def test_a_search_guesses_new_keys_and_times_the_winners():
    from test_search import REASSOC

    m = CountingDevice(False)
    r = run_search(matmul_chain(64, 4), budget=10, rules=[REASSOC], cost_model=m)
    assert r.rules_applied == {"reassoc": 1}
    # the winner's new key was guessed, then timed: the costs reported are timed ones
    # each key timed once: the one that prices weight bytes, two original, one
    # new; the product of the two weights was guessed and never timed (it is
    # folded in the graph the search chose); the two original keys the winner
    # replaces were timed again, once, in the new key's batch
    assert m.counts["measured"] == 4 and len(m._guessed) == 1
    assert m.counts["beside"] == 2 and len(m.calls) == 6
    assert r.cost_after == pytest.approx(CountingDevice(False).graph_cost(r.graph))
    assert r.to_json()["passes"] <= 2  # a guess that moved: one more round, on timed costs


def test_the_decision_is_made_on_timed_costs():
    from test_search import REASSOC

    # the product of the weights is (32, 64): the new key costs more than the
    # two old ones together, and the search keeps the original
    m = CountingDevice(False)
    r = run_search(matmul_chain(4, 64), budget=10, rules=[REASSOC], cost_model=m)
    assert r.rules_applied == {} and r.cost_after == pytest.approx(r.cost_before)


def test_confirm_times_the_guessed_keys_of_a_winner():
    m = CountingDevice(False)
    g = matmul_chain(4, 64)
    m.begin_search(g)  # the original's keys are timed here
    timed = m.measured
    other = taso.new_graph()
    other.mark_output(other.matmul(other.new_input((8, 32)), other.new_weight((32, 64))))
    guess = m.graph_cost(other)  # a key the search meets anew: guessed, not timed
    assert m.measured == timed
    true = CountingDevice(False).graph_cost(other)
    assert m.confirm(other) == (abs(guess - true) > 0.05 * true)
    # its one key, and beside it the original's two (which `other` replaces)
    assert m.measured == timed + 3 and m.graph_cost(other) == pytest.approx(true)
    assert m.counts["beside"] == 2
    assert not m.confirm(other)  # nothing left to time
    m.end_search(None)
    assert not m.searching


class GroupedSlow(MeasuredCostModel):
    """A fusing device on which a chain costs its head's roofline estimate,
    ten times that for a grouped convolution (onnxruntime's grouped 3x3s ran
    5-10x what dense ones of their estimate did); the epilogue is free."""

    name, device, fuses = "grouped-slow", "formula", True

    def program_links(self, links):  # as onnxruntime runs them: conv+bn+relu one node
        from taso.optimizer.cost.ort import onnxruntime_program

        return onnxruntime_program(links)

    def time_chain(self, links):
        op, attrs, ins = links[0]
        est = self.roofline.op_cost(op, dict(attrs), [s for _, s, _ in ins])
        return est * (10 if dict(attrs).get("groups", 1) > 1 else 1)

    def time_overhead(self):
        return 0.0


def test_a_lone_contraction_is_guessed_by_the_timed_units_of_its_kind():
    g = taso.new_graph()
    x = g.new_input((1, 64, 28, 28))
    for groups, name in ((8, "grouped"), (1, "dense")):
        y = g.conv2d(x, g.new_weight((64, 64 // groups, 3, 3)), padding="same", groups=groups)
        y = g.batchnorm(y, *[g.new_weight((64,)) for _ in range(4)])
        g.mark_output(g.relu(y), name)
    m = GroupedSlow(False)
    m.price_within(g)
    m.begin_search(g)  # times the two chains: the only units of their kind
    # a lone convolution of another size, as a search meets one after folding
    # the normalization: no unit of its label was timed
    for groups, slow in ((16, 10), (1, 1)):
        shapes = [(1, 64, 14, 14), (64, 64 // groups, 3, 3)]
        attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": groups,
                 "activation": "none"}
        est = m.roofline.op_cost("conv2d", attrs, shapes)
        assert m.op_cost("conv2d", attrs, shapes, (False, True)) == \
            pytest.approx(slow * est, rel=0.01)
    m.end_search(None)


class PerGroupSlow(GroupedSlow):
    """Grouped convolutions of 8 channels a group run at 10x their estimate,
    those of 16 at 2x: their estimates cannot tell them apart."""

    def time_chain(self, links):
        op, attrs, ins = links[0]
        est = self.roofline.op_cost(op, dict(attrs), [s for _, s, _ in ins])
        return est * {8: 10, 16: 2}.get(ins[1][1][1], 1)


def test_a_lone_contraction_the_search_met_in_a_unit_is_priced_as_that_unit():
    g = taso.new_graph()
    x = g.new_input((1, 64, 28, 28))
    for groups in (8, 4):
        y = g.conv2d(x, g.new_weight((64, 64 // groups, 3, 3)), padding="same", groups=groups)
        y = g.batchnorm(y, *[g.new_weight((64,)) for _ in range(4)])
        g.mark_output(g.relu(y))
    m = PerGroupSlow(False)
    m.price_within(g)
    m.begin_search(g)
    # the second chain's convolution alone, before the normalization is folded
    shapes = [(1, 64, 28, 28), (64, 16, 3, 3)]
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 4,
             "activation": "none"}
    est = m.roofline.op_cost("conv2d", attrs, shapes)
    # (the unit timed is the convolution with its bias: a bias's traffic more)
    assert m.op_cost("conv2d", attrs, shapes, (False, True)) == pytest.approx(2 * est, rel=0.01)
    m.end_search(None)


def test_a_pass_times_the_chains_of_its_pieces_in_one_batch():
    def chain(channels: int):  # a conv and its relu: one chain, a key each size
        g = taso.new_graph()
        x = g.new_input((1, channels, 8, 8))
        g.mark_output(g.relu(g.conv2d(x, g.new_weight((channels, channels, 3, 3)),
                                      padding="same")))
        return g
    m = CountingDevice(False)
    m.fuses = True
    m.begin_search(chain(4))
    batches, measure = [], m._measure

    def counted(units, beside=None):
        batches.append(len(units))
        measure(units, beside)
    m._measure = counted
    m.time_ahead([chain(8), chain(16), chain(8)])
    assert batches == [2]  # both new chains, once each, in one batch
    timed = len(m.calls)
    m.graph_cost(chain(8)) + m.graph_cost(chain(16))
    assert len(m.calls) == timed and batches == [2]  # priced from memory
    m.end_search(None)


class HiddenLoad(CountingDevice):
    """A device slowed `load` times once the original's keys are timed, by a
    load that no reference program shows (it has none): this Intel VM's
    reference programs hardly slow beside a busy core while its small
    operators do."""

    load = 1.0

    def begin_search(self, graph):
        super().begin_search(graph)
        self.load = 2.0

    def time_chain(self, links):
        return self.time_overhead() + self.load * (super().time_chain(links)
                                                   - self.time_overhead())


def test_a_winner_is_timed_beside_the_keys_it_replaces(tmp_path):
    from test_search import REASSOC

    # reassociated, (8,32)x(32,16)x(16,32) becomes one (8,32)x(32,32) product:
    # 1408 against 1280 input elements, 10% less on an even device. Timed 2x
    # slower than the original's keys, the new key alone looked 1.8x dearer;
    # timed in one batch with the keys it replaces, both sides are slowed alike.
    g = matmul_chain(16, 32)
    even = run_search(g, budget=10, rules=[REASSOC], cost_model=CountingDevice(False),
                      timing=False)
    assert even.rules_applied == {"reassoc": 1}
    m = HiddenLoad(tmp_path / "costs.json")
    r = run_search(g, budget=10, rules=[REASSOC], cost_model=m, timing=False)
    assert r.rules_applied == {"reassoc": 1}
    assert m.counts["beside"] == 2
    assert r.cost_before / r.cost_after == pytest.approx(even.cost_before / even.cost_after)
    # timed again only for this decision: the cache keeps the original's timings
    m.save()
    assert CountingDevice(tmp_path / "costs.json").graph_cost(g) == pytest.approx(
        even.cost_before)


class LoadedDevice(CountingDevice):
    """A formula device under a load that slows programs of `ms` by
    `calibrate.factor` between an idle and a loaded reading of two reference
    programs (1 ms and 100 ms): small programs by `small`, large by `large`."""

    IDLE = {"small": 1.0, "large": 100.0}

    def __init__(self, cache, small=1.0, large=1.0):
        super().__init__(cache)
        self.now = {"small": small, "large": 100.0 * large}

    def slow(self, ms):
        return ms * factor(self.IDLE, self.now, ms)

    def time_chain(self, links):
        return self.slow(super().time_chain(links))

    def time_overhead(self):
        return 0.0

    def reference_reading(self):
        return dict(self.now)


def test_costs_timed_under_load_are_carried_to_the_quiet_state(tmp_path):
    path = tmp_path / "costs.json"
    g = matmul_chain(64, 4)
    idle = LoadedDevice(False).graph_cost(g)
    loaded = LoadedDevice(path, small=3.0, large=1.5)
    loaded.reading()  # an idle reading was never seen: the quiet state is this one
    loaded.cache.note_reading(loaded.name, loaded.device, LoadedDevice.IDLE)
    assert loaded.graph_cost(g) == pytest.approx(idle)  # timed slow, priced as idle
    loaded.save()
    entries = [e for *_, k, e in CostCache(path).entries() if "run-overhead" not in k]
    assert entries and all(e["cal"] == loaded.now and e["ms"] > 0 for e in entries)
    # later, on an idle machine: the entries are carried; a search re-times the
    # keys a decision rests on (the original's), since the machine is quieter now
    later = LoadedDevice(path)
    assert later.graph_cost(g) == pytest.approx(idle) and later.measured == 0
    assert later.counts["rescaled"] == 2 and set(later._doubted) == set(later._memo)
    later.begin_search(g)
    later.end_search(None)
    assert later.counts["remeasured"] == 2 and later.graph_cost(g) == pytest.approx(idle)


def test_a_busier_machine_keeps_the_quieter_timings(tmp_path):
    path = tmp_path / "costs.json"
    g = matmul_chain(64, 4)
    first = LoadedDevice(path)
    idle = first.graph_cost(g)
    first.save()
    busy = LoadedDevice(path, small=4.0, large=2.0)
    busy.begin_search(g)
    busy.end_search(None)
    assert busy.graph_cost(g) == pytest.approx(idle)
    assert busy.counts["remeasured"] == 0 and busy.counts["busy"] == 1


def test_version_1_caches_are_read_as_uncalibrated_entries(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"format": "taso-cost-cache", "version": 1,
                                "entries": {"ort": {"cpu": {"('x',)": 1.5}}}}))
    c = CostCache(path)
    assert c.get("ort", "cpu", ("x",)) == 1.5 and "cal" not in c.entry("ort", "cpu", ("x",))
    c.put("ort", "cpu", ("y",), 2.0, cal={"run": 0.01}, half=0.1, reps=4)
    c.save()
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and doc["entries"]["ort"]["cpu"]["('x',)"] == {"ms": 1.5}
    assert doc["quiet"] == {"ort": {"cpu": {"run": 0.01}}}
    assert CostCache(path).entry("ort", "cpu", ("y",))["reps"] == 4


def test_the_calibration_factor_follows_the_duration():
    then, now = {"a": 0.01, "b": 1.0}, {"a": 0.04, "b": 1.0}
    assert factor(then, now, 0.001) == pytest.approx(4.0)  # below the smallest
    assert factor(then, now, 0.1) == pytest.approx(2.0)  # halfway in log time
    assert factor(then, now, 10.0) == pytest.approx(1.0)
    assert factor(None, now, 1.0) == 1.0 and factor(then, {}, 1.0) == 1.0
    assert quietest({"a": 2.0}, None, {"a": 1.0, "b": 3.0}) == {"a": 1.0, "b": 3.0}
    assert slowdown({"a": 2.0, "b": 8.0}, {"a": 1.0, "b": 2.0}) == pytest.approx(
        8 ** 0.5)


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


def test_another_running_process_is_seen():
    import subprocess
    import sys
    import time

    from taso.optimizer.cost.calibrate import others_running

    if others_running() is None:
        pytest.skip("the OS does not count runnable processes (/proc/loadavg)")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert others_running(samples=10) >= 0.5
    finally:
        spin.kill()
        spin.wait()


def test_a_busy_thread_of_this_process_is_no_other_process():
    import threading

    import numpy as np
    from taso.optimizer.cost.calibrate import others_running

    if others_running() is None:
        pytest.skip("the OS does not count runnable processes (/proc/loadavg)")
    quiet = others_running(samples=10)
    stop = threading.Event()
    a = np.ones((256, 256), dtype=np.float32)

    def work() -> None:  # numpy's product releases the GIL: the thread stays runnable
        while not stop.is_set():
            a @ a

    t = threading.Thread(target=work)
    t.start()
    try:
        assert others_running(samples=10) <= quiet + 0.4
    finally:
        stop.set()
        t.join()
