"""taso-opt end to end: ONNX in, checked ONNX out, summary as text or JSON."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from taso.optimizer.check import run_onnx
from taso.optimizer.cli import main, parse_shape
from taso.rules_db import SHIPPED, PNode, Rule, RuleSet

import taso
from taso.models import ALL

FUSION = str(SHIPPED / "fusion.json")


@pytest.fixture
def conv_model(tmp_path):
    g = taso.new_graph()
    x = g.new_input((1, 3, 8, 8), name="image")
    r = np.random.default_rng(0)
    y = g.conv2d(x, g.new_weight((8, 3, 3, 3)), padding="same")
    y = g.batchnorm(y, *(g.new_weight((8,), data=r.uniform(0.5, 1.5, 8).astype(np.float32))
                         for _ in range(4)))
    g.mark_output(g.relu(y), "out")
    path = tmp_path / "model.onnx"
    onnx.save(taso.export_onnx(g), path)
    return path


def test_json_summary_and_checked_output(conv_model, tmp_path, capsys):
    out = tmp_path / "opt.onnx"
    rc = main([str(conv_model), "-o", str(out), "--rules", FUSION, "--unverified", "--json",
               "--budget", "20", "--cost-model", "analytic", "-q"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cost_after"] < d["cost_before"]
    assert d["rules_applied"] == {"fusion-conv-batchnorm": 1, "fusion-conv2d_bias-relu": 1}
    assert d["explored"] >= 1 and d["search_seconds"] >= 0
    assert 0 <= d["max_error"] < 1e-3
    m = onnx.load(out)
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu"]
    feeds = {"image": np.random.default_rng(3).standard_normal((1, 3, 8, 8), np.float32)}
    np.testing.assert_allclose(run_onnx(m, feeds)[0], run_onnx(onnx.load(conv_model), feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_text_summary(conv_model, tmp_path, capsys):
    rc = main([str(conv_model), "-o", str(tmp_path / "o.onnx"), "--rules", FUSION,
               "--unverified", "--budget", "5", "--cost-model", "analytic"])
    assert rc == 0
    text = capsys.readouterr().out
    for word in ("cost before", "cost after", "graphs explored", "search seconds", "max error",
                 "fusion-conv-batchnorm"):
        assert word in text


def test_a_wrong_rule_fails_the_check_and_writes_nothing(conv_model, tmp_path, capsys):
    # Unsound on purpose, and cheaper, so the search takes it: relu(x) => x.
    bad = Rule("drop-relu", [PNode("relu", ["x"])], [], [((0, 0), "x")])
    path = tmp_path / "bad.json"
    RuleSet([bad], name="bad").save(path)
    out = tmp_path / "opt.onnx"
    rc = main([str(conv_model), "-o", str(out), "--rules", str(path), "--unverified", "-q",
               "--budget", "5", "--cost-model", "analytic"])
    assert rc == 1
    assert not out.exists()
    assert "differs from the original" in capsys.readouterr().err


def test_input_shape_parsing():
    assert parse_shape("x=1x3x224x224") == ("x", [1, 3, 224, 224])
    assert parse_shape("a.b=2,3") == ("a.b", [2, 3])
    with pytest.raises(argparse.ArgumentTypeError):
        parse_shape("nodims")


def test_console_script_on_a_model_builder(tmp_path):
    src = tmp_path / "squeezenet.onnx"
    onnx.save(taso.export_onnx(ALL["squeezenet"](small=True)), src)
    out = tmp_path / "opt.onnx"
    p = subprocess.run([sys.executable, "-m", "taso.optimizer.cli", str(src), "-o", str(out),
                        "--rules", FUSION, "--unverified", "--budget", "10", "--json",
                        "--no-partition", "--cost-model", "analytic"],
                       capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)  # not the checkout: its bare taso/ would shadow the install
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["pieces"] == 1 and out.exists()


@pytest.mark.slow  # measures NasRNN's costs on this CPU: about 15 s
def test_example_model_with_the_default_rules(tmp_path, capsys, monkeypatch):
    # The README's first command: a built-in model, the shipped proved rules,
    # costs measured on this CPU (cached where TASO_COST_CACHE says).
    monkeypatch.setenv("TASO_COST_CACHE", str(tmp_path / "costs.json"))
    out = tmp_path / "nasrnn.onnx"
    assert main(["--example", "nasrnn", "-o", str(out), "--json", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cost_model"] == "ort" and d["costs_measured"]["new"] > 0
    assert (tmp_path / "costs.json").exists()
    # Whatever it rewrote was timed against the original and kept only if faster.
    v = d["timed"]
    assert bool(d["rules_applied"]) == bool(v and v["kept"])
    assert v["verdict"] in ("faster", "not faster", "undecided", "unchanged")
    assert v["kept"] == (v["verdict"] == "faster")
    assert {"ratio", "low", "high", "rounds", "seconds"} <= set(v)
    if d["rules_applied"]:
        assert v["optimized_ms"] < v["original_ms"] and d["cost_after"] < d["cost_before"]
    assert d["max_error"] < 1e-3
    onnx.checker.check_model(onnx.load(out))


def test_the_analytic_model_runs_without_measuring(tmp_path, capsys):
    out = tmp_path / "sq.onnx"
    assert main(["--example", "squeezenet", "-o", str(out), "--json", "-q",
                 "--cost-model", "analytic"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cost_after"] < d["cost_before"] and d["rules_applied"]
    assert d["costs_measured"] is None and d["timed"] is None


def test_input_and_example_are_exclusive(conv_model, tmp_path):
    with pytest.raises(SystemExit):
        main(["-o", str(tmp_path / "o.onnx")])
    with pytest.raises(SystemExit):
        main([str(conv_model), "--example", "squeezenet", "-o", str(tmp_path / "o.onnx")])


@pytest.mark.parametrize("flags, words", [
    (["--budget", "0"], "--budget must be a whole number from 1"),
    (["--budget", "99999999999999999999999"], "--budget must be a whole number from 1"),
    (["--alpha", "0.5"], "--alpha must be"),
    (["--alpha", "nan"], "--alpha must be"),
    (["--min-gain", "1"], "--min-gain must be"),
    (["--time-limit", "-1"], "--time-limit must be"),
    (["--memory-weight", "inf"], "--memory-weight must be"),
    (["--seed", "-2"], "--seed must be"),
])
def test_bad_numbers_are_refused_before_any_work(conv_model, tmp_path, capsys, flags, words):
    with pytest.raises(SystemExit) as e:
        main([str(conv_model), "-o", str(tmp_path / "o.onnx"), *flags])
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_the_output_must_not_overwrite_the_input(conv_model, capsys):
    before = conv_model.read_bytes()
    with pytest.raises(SystemExit):
        main([str(conv_model), "-o", str(conv_model), "-q"])
    assert "is the input model" in capsys.readouterr().err
    assert conv_model.read_bytes() == before


def test_an_output_in_a_missing_folder_is_refused_up_front(conv_model, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(conv_model), "-o", str(tmp_path / "nope" / "o.onnx"), "-q"])
    assert "no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(conv_model), "-o", str(tmp_path), "-q"])
    assert "is not a file path" in capsys.readouterr().err


def test_a_truncated_input_model_is_named(conv_model, tmp_path, capsys):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(conv_model.read_bytes()[:100])
    assert main([str(cut), "-o", str(tmp_path / "o.onnx"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "cut.onnx" in err
    assert not (tmp_path / "o.onnx").exists()


def test_an_input_onnxruntime_cannot_run_is_refused(tmp_path, capsys):
    # Valid to the checker, refused by onnxruntime: an op in a domain it does not know.
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Mystery", ["x"], ["y"], domain="com.example")
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17),
                                         helper.make_opsetid("com.example", 1)])
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    rc = main([str(src), "-o", str(tmp_path / "o.onnx"), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "taso-opt:" in err, err
    assert not (tmp_path / "o.onnx").exists()


def test_a_bad_rule_file_is_one_line_naming_it(conv_model, tmp_path, capsys):
    bad = tmp_path / "rules.json"
    bad.write_text("{not json")
    assert main([str(conv_model), "-o", str(tmp_path / "o.onnx"), "--rules", str(bad),
                 "-q"]) == 2
    assert "rules.json" in capsys.readouterr().err


def test_a_cost_model_that_cannot_run_here_is_one_line(conv_model, tmp_path, capsys):
    from taso.optimizer.cost.cupy_backend import gpu_available
    cases = [("bogus", "known: analytic, cupy, ort")]
    if not gpu_available():
        cases.append(("cupy", "needs cupy and a CUDA GPU"))
    for name, words in cases:
        assert main([str(conv_model), "-o", str(tmp_path / "o.onnx"), "--cost-model", name,
                     "-q"]) == 2
        err = capsys.readouterr().err
        assert words in err, err
    assert not (tmp_path / "o.onnx").exists()


def test_the_cost_cache_can_be_reported_and_cleared(tmp_path, capsys):
    from taso.optimizer.cost.cache import CostCache

    path = tmp_path / "costs.json"
    c = CostCache(path)
    c.put("ort", "some other cpu", ("relu", (1, 8)), 0.01, cal={"run": 0.002, "conv": 0.1},
          half=0.001, reps=5)
    c.put("ort", "some other cpu", ("old",), 0.5)  # a version-1 entry: no calibration
    c.save()
    assert main(["--cost-cache-report", "--cost-cache", str(path)]) == 0
    said = capsys.readouterr().out
    assert "2 entries" in said and "some other cpu: 2 entries, 1 calibrated" in said
    assert "quietest reading: run 2.0 us, conv 100.0 us" in said
    with pytest.raises(SystemExit):  # a cache command takes no model
        main(["--cost-cache-report", "--example", "nasrnn"])
    with pytest.raises(SystemExit):  # and a search needs an output
        main(["--example", "nasrnn"])
    assert main(["--cost-cache-clear", "--cost-cache", str(path)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out and not path.exists()
