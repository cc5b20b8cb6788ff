"""The HTML reports: taso-opt --report (where each rule fired, what was refused
and why, cost per operator, the search's progress) and taso-verify --report,
checked for content here and rendered in headless Chromium where it exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from taso.optimizer.cli import main as opt_main
from taso.optimizer.cost.analytic import AnalyticCost
from taso.optimizer.report_html import SECTIONS
from taso.optimizer.search import run_search
from taso.rules_db import SHIPPED, RuleSet, load
from taso.verifier.cli import main as verify_main
from taso.verifier.report_html import SECTIONS as VERIFY_SECTIONS
from taso.verifier.report_html import render as render_verify

import taso

FUSION = str(SHIPPED / "fusion.json")


def conv_graph(layers: int = 2):
    g = taso.new_graph()
    y = g.new_input((1, 3, 8, 8), name="image")
    r = np.random.default_rng(0)
    for k in range(layers):
        c = 3 if k == 0 else 8
        y = g.conv2d(y, g.new_weight((8, c, 3, 3)), padding="same")
        y = g.batchnorm(y, *(g.new_weight((8,), data=r.uniform(0.5, 1.5, 8).astype(np.float32))
                             for _ in range(4)))
        y = g.relu(y)
    g.mark_output(y, "out")
    return g


class Outline(HTMLParser):
    """Section ids, and per <svg> how many elements it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.svgs: list[int] = []
        self.external: list[str] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"])
        if tag in ("script", "link", "img", "iframe"):
            self.external.append(tag)
        if tag == "svg":
            self.svgs.append(0)
            self._depth += 1
        elif self._depth:
            self.svgs[-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._depth -= 1


def outline(text: str) -> Outline:
    o = Outline()
    o.feed(text)
    return o


def top_sections(o: Outline, expected: tuple[str, ...]) -> bool:
    return [s for s in o.sections if s in expected] == list(expected)


def test_report_draws_each_rewrite_where_it_fired(tmp_path):
    path = tmp_path / "r.html"
    rep = run_search(conv_graph(), rules=FUSION, unverified=True, cost_model="analytic",
                     budget=50, report=path, report_name="two convs")
    text = path.read_text()
    o = outline(text)
    assert top_sections(o, SECTIONS)
    assert not o.external  # one file, opens offline
    assert o.svgs and min(o.svgs) > 0
    # One section per rewrite, named by its rule, with the rule's proof record.
    applied = sum(rep.rules_applied.values())
    assert applied >= 4
    assert len(re.findall(r"<section class='rewrite'", text)) == applied
    for rid in rep.rules_applied:
        assert f"<code>{rid}</code>" in text
    assert "from axioms:" in text and "provenance: source=hand-written" in text
    assert "the model before" in text and "the model after" in text
    assert "1x8x8x8" in text  # tensor shapes in the regions
    assert "two convs" in text and "analytic" in text
    assert rep.extra["report_seconds"] >= 0


def test_regions_are_the_matched_and_built_nodes():
    from taso.optimizer.trace import Trace

    trace = Trace()
    run_search(conv_graph(1), rules=FUSION, unverified=True, cost_model="analytic",
               budget=50, _trace=trace, check=False)
    rules = {r.id: r for r in load(FUSION)}
    assert trace.steps
    for s in trace.steps:
        matched = [n for n in s.before["nodes"] if n["role"] == "focus"]
        assert sorted(n["op"] for n in matched) == sorted(n.op for n in rules[s.rule].src)
        built = [n for n in s.after["nodes"] if n["role"] == "focus"]
        assert {n["op"] for n in built} <= {n.op for n in rules[s.rule].dst}
        assert s.cost_after < s.cost_before
    assert trace.pieces and trace.pieces[0].progress[0][0] == 0


def test_refusals_are_grouped_with_their_numbers(tmp_path):
    path = tmp_path / "r.html"
    rep = run_search(conv_graph(), rules=FUSION, unverified=True, cost_model="analytic",
                     budget=50, min_gain=0.9, report=path)
    assert not rep.rules_applied
    text = path.read_text()
    assert "below --min-gain" in text and "needed &gt; 90.0%" in text
    assert "No rewrite was applied" in text


class TimedSlower(AnalyticCost):
    """Prices as the roofline does, and times every optimized model slower."""

    measured_gain = 0.01

    def time_models(self, graphs):
        return [1.0, 1.2][:len(graphs)]


def test_a_model_measured_slower_is_said_so(tmp_path):
    path = tmp_path / "r.html"
    rep = run_search(conv_graph(), rules=FUSION, unverified=True, cost_model=TimedSlower(),
                     budget=50, report=path)
    assert not rep.rules_applied and rep.extra["timed"]["verdict"] == "not faster"
    text = path.read_text()
    assert "not measured faster as a whole model" in text
    assert ("1.000 ms → 1.200 ms, ×0.83 not faster: original kept (needed faster by more "
            "than 1.0%)") in text
    assert "the original's 1.000 ms, not faster: the original was kept" in text
    assert "measured whole model" in text  # predicted sum set against the measurement



def test_each_verdict_reads_as_what_was_kept():
    from taso.optimizer.report_html import measured
    from taso.optimizer.runner import timed_text

    v = {"verdict": "faster", "kept": True, "original_ms": 1.765, "optimized_ms": 1.012,
         "ratio": 1 / 1.74, "low": 1 / 1.79, "high": 1 / 1.70, "confidence": 0.99,
         "rounds": 12, "seconds": 3.2, "rules": {"r": 1}}
    assert timed_text(v) == "1.765 ms -> 1.012 ms, x1.74 [x1.70, x1.79] faster: kept"
    assert "99% confidence interval over 12 interleaved rounds" in measured(v)
    slower = {**v, "verdict": "not faster", "kept": False, "ratio": 1.02, "low": 1.0,
              "high": 1.04}
    assert timed_text(slower).endswith("x0.98 [x0.96, x1.00] not faster: original kept")
    assert "class='bad'" in measured(slower)
    undecided = {**slower, "verdict": "undecided", "seconds": 20.4}
    assert timed_text(undecided).endswith("undecided after 20 s: original kept")
    unchanged = {"verdict": "unchanged", "kept": False, "original_ms": None,
                 "optimized_ms": None, "ratio": None, "low": None, "high": None, "rules": {}}
    assert timed_text(unchanged) == measured(unchanged) == "unchanged (no rewrite applied)"


def test_cli_report_flag(tmp_path, capsys):
    out, rep = tmp_path / "o.onnx", tmp_path / "r.html"
    onnx.save(taso.export_onnx(conv_graph()), tmp_path / "m.onnx")
    assert opt_main([str(tmp_path / "m.onnx"), "-o", str(out), "--rules", FUSION,
                     "--unverified", "--cost-model", "analytic", "-q", "--report",
                     str(rep)]) == 0
    assert f"wrote {rep}" in capsys.readouterr().out
    assert top_sections(outline(rep.read_text()), SECTIONS)
    with pytest.raises(SystemExit):
        opt_main([str(tmp_path / "m.onnx"), "-o", str(out), "--report", str(out)])
    assert "--report" in capsys.readouterr().err


def verify_rules_set():
    rules = [r for r in load(SHIPPED / "generated.json").rules
             if r.status == "refuted"][:3]
    rules += load(SHIPPED / "taso.json").rules[:5]
    return RuleSet(rules, name="mixed")


def test_verify_report_content():
    rs = verify_rules_set()
    text = render_verify(rs.rules, "mixed")
    o = outline(text)
    assert top_sections(o, VERIFY_SECTIONS)
    assert not o.external and min(o.svgs) > 0
    assert "Refuted rules (3)" in text and "input shapes" in text
    assert "matmul-assoc" in text  # axioms by use


def test_verify_cli_report(tmp_path, capsys):
    rs = RuleSet(load(SHIPPED / "taso.json").rules[:2], name="mini")
    src, rep = tmp_path / "mini.json", tmp_path / "v.html"
    rs.save(src)
    assert verify_main([str(src), "--timeout", "5", "--output", str(tmp_path / "o.json"),
                        "--report", str(rep), "--json"]) == 0
    assert top_sections(outline(rep.read_text()), VERIFY_SECTIONS)


# ---- in a real browser ---------------------------------------------------------------
def chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome")) if p), None)


def render_in_chromium(path: Path) -> tuple[str, str]:
    """The DOM Chromium built from `path`, and its log (console messages)."""
    exe = chromium()
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=2000", "--dump-dom", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def console_errors(log: str) -> list[str]:
    """The page's console messages: the reports run no script, so any is an
    error (a parse error, a refused resource)."""
    return [line for line in log.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed here "
                                               "(Debian's chromium package provides it)")
def test_reports_render_in_headless_chromium(tmp_path):
    page = tmp_path / "opt.html"
    run_search(conv_graph(), rules=FUSION, unverified=True, cost_model=TimedSlower(),
               budget=50, report=page, report_name="in a browser")
    vpage = tmp_path / "verify.html"
    vpage.write_text(render_verify(verify_rules_set().rules, "mixed"))
    for p, sections in ((page, SECTIONS), (vpage, VERIFY_SECTIONS)):
        dom, log = render_in_chromium(p)
        assert not console_errors(log), console_errors(log)
        o = outline(dom)
        assert top_sections(o, sections)
        assert o.svgs and min(o.svgs) > 0
    # The check itself sees an error where a page has one.
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFn();</script></body></html>")
    assert console_errors(render_in_chromium(bad)[1])
