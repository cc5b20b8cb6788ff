"""Errors are errors: "does not apply" is an answer (a ShapeError from an
operator, a pattern's no), and any other exception in the core's questions is
raised naming the operator or rule and the shapes, never read as "no rule
fires" (unless TASO_RULE_ERRORS=skip downgrades it to a logged skip)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from taso.optimizer import engine as engine_module
from taso.optimizer.cost import CostModel, get_cost_model
from taso.optimizer.engine import Engine, EngineError
from taso.optimizer.runner import Runner
from taso.rules_db import SHIPPED, PNode, Rule, load, pattern

import taso
from taso.ops import OPS, ShapeError

FUSION = load(SHIPPED / "fusion.json")

# Two relus -> one over the concatenated rows, split after.
RELU_PAIR = Rule("relu-pair", [PNode("relu", ["x"]), PNode("relu", ["y"])],
                 [PNode("concat", ["x", "y"], {"axis": 0}), PNode("relu", [(0, 0)]),
                  PNode("split", [(1, 0)], {"axis": 0, "sizes": [{"dim": ["x", 0]},
                                                                {"dim": ["y", 0]}]})],
                 [((0, 0), (2, 0)), ((1, 0), (2, 1))])
# relu(x) -> reshape(relu(x)) to x's own shape, for a tensor of rank 3: its
# sizes name axis 2 of x, whose rank the rule leaves open.
RESHAPED = Rule("relu-reshaped", [PNode("relu", ["x"])],
                [PNode("relu", ["x"]),
                 PNode("reshape", [(0, 0)], {"shape": [{"dim": ["x", a]} for a in range(3)]})],
                [((0, 0), (1, 0))])


def analytic() -> CostModel:
    return get_cost_model("analytic")


def relu_pair_graph() -> taso.Graph:
    g = taso.new_graph()
    x, y = g.new_input((2, 4), name="x"), g.new_input((3, 4), name="y")
    g.mark_output(g.relu(x))
    g.mark_output(g.relu(y))
    return g


def fails(*_args, **_kw):
    raise IndexError("tuple index out of range")  # what a shape rule's bug looks like


def test_a_bug_in_a_shape_rule_names_the_operator_and_shapes(monkeypatch):
    g = taso.new_graph()
    g.mark_output(g.tanh(g.new_input((4, 4), name="x")))
    monkeypatch.setattr(OPS["tanh"], "shape", fails)
    e = Engine([], analytic())
    with pytest.raises(EngineError, match=r"tanh\[\(4, 4\)\].*IndexError: tuple index"):
        e.to_core(g)  # raised in Python, through the core, back to Python


def test_a_bug_met_while_matching_names_the_rule_and_shapes(monkeypatch):
    g = relu_pair_graph()
    runner = Runner([RELU_PAIR], analytic())
    monkeypatch.setattr(OPS["split"], "shape", fails)  # the target's operator
    with pytest.raises(EngineError, match=r"rule relu-pair at \{'x': \([23], 4\), 'y'"):
        runner.run(g.pruned())  # from inside the core's search
    monkeypatch.undo()
    monkeypatch.setattr(pattern, "bind_attrs", fails)  # the filter's, node by node
    node = r"rule relu-pair, source node [01] \(relu with \{\} on \[\([23], 4\)\]\)"
    with pytest.raises(EngineError, match=node):
        runner.run(g.pruned())


def test_the_rule_errors_setting_downgrades_a_bug_to_a_logged_skip(monkeypatch, caplog):
    g = relu_pair_graph()
    monkeypatch.setattr(OPS["split"], "shape", fails)
    monkeypatch.setattr(engine_module, "ON_ERROR", "skip")
    model = get_cost_model(lambda op, attrs, shapes: 1.0 if op == "relu" else 0.0)
    with caplog.at_level("WARNING", logger="taso"):
        r = Runner([RELU_PAIR], model).run(g.pruned())
    assert r.applied == {}  # taken as "does not apply"
    assert caplog.text.count("rule relu-pair at") == 1  # said once
    assert "IndexError" in caplog.text and "TASO_RULE_ERRORS=skip" in caplog.text


def test_the_environment_sets_the_rule_errors_setting():
    code = "from taso.optimizer import engine; print(engine.ON_ERROR)"
    for env, want in (({}, "raise"), ({"TASO_RULE_ERRORS": "skip"}, "skip"),
                      ({"TASO_RULE_ERRORS": "bogus"}, "raise")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", **env}, cwd="/", check=True)
        assert out.stdout.strip() == want


def test_a_size_of_an_axis_a_tensor_lacks_does_not_apply():
    with pytest.raises(ShapeError, match="axis 2 of 'x'"):
        pattern.attr_value({"dim": ["x", 2]}, {"x": _Shaped((3, 4))}, {})
    e = Engine([RESHAPED], analytic())
    for shape, found in (((2, 3), 0), ((2, 3, 4), 1)):
        g = taso.new_graph()
        g.mark_output(g.relu(g.new_input(shape, name="x")))
        assert len(e.core.expand(e.to_core(g))) == found  # no error where rank 2


def test_a_node_alone_may_match_a_pattern_that_sizes_by_another_tensor():
    reshape = FUSION.by_id("fusion-conv-bias").src[1]  # reshape(b) to [1, dim(w, 0), 1, 1]
    actual = {"shape": (1, 16, 1, 1)}
    alone = {"b": _Shaped((16,))}
    assert pattern.bind_attrs("reshape", reshape.attrs, actual, [(16,)], alone, {}, alone=True)
    with pytest.raises(KeyError):  # judged in full, the pattern needs w
        pattern.bind_attrs("reshape", reshape.attrs, actual, [(16,)], alone, {})
    for w, fits in (((16, 3, 3, 3), True), ((8, 3, 3, 3), False)):
        env = {**alone, "w": _Shaped(w)}
        assert pattern.bind_attrs("reshape", reshape.attrs, actual, [(16,)], env, {}) is fits
        assert pattern.bind_attrs("reshape", reshape.attrs, actual, [(16,)], env, {},
                                  alone=True) is fits


def test_a_value_of_another_form_binds_no_variable_of_a_list():
    assert pattern.bind(["?a", "?b"], "same", {}) is False
    assert pattern.bind([1, 1], "same", {}) is True  # resolved by the operator later
    binds: dict = {}
    assert pattern.bind(["?a", "?b"], (1, 2), binds) and binds == {"a": 1, "b": 2}


class _Shaped:
    def __init__(self, shape):
        self.shape = shape
