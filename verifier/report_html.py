"""`taso-verify --report report.html`: one self-contained HTML page on a rule
set's verification: proved / refuted / unknown counts, the slowest rules, the
axioms by use, and each refuted rule drawn with its counterexample. No scripts
and nothing fetched: the page opens offline."""

from __future__ import annotations

import html
import os
from collections import Counter
from pathlib import Path
from typing import Any

from taso.svg import bar_chart, pattern_svgs

from .axioms import AXIOMS

STYLE = """
body{font-family:'DejaVu Sans',Arial,sans-serif;font-size:14px;margin:24px;color:#222;
max-width:1180px}h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:3px;margin-top:28px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f5f5f5}td.n{text-align:right}
.pair{display:flex;gap:18px;flex-wrap:wrap}.pair>div{border:1px solid #e3e3e3;
border-radius:6px;padding:6px}.cap{font-size:12px;color:#555}.note{color:#555;font-size:13px}
section.rule{border-left:3px solid #b03a2e;padding-left:12px;margin:16px 0}
code{background:#f4f4f4;padding:0 3px;border-radius:3px;word-break:break-all}
td:first-child code{white-space:nowrap;word-break:normal}
"""
SECTIONS = ("summary", "slowest", "axioms", "refuted")
SLOWEST = 20
DRAWN = 60  # refuted rules drawn with their patterns; the rest listed


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def write_report(path: str | os.PathLike, rules: list, name: str = "",
                 summary: dict[str, Any] | None = None) -> None:
    Path(path).write_text(render(rules, name, summary), encoding="utf-8")


def render(rules: list, name: str = "", summary: dict[str, Any] | None = None) -> str:
    """The page for `rules` (rules_db.Rule with verification records), titled
    `name`; `summary`: taso-verify's summary (wall seconds), if any."""
    status = Counter(r.verification.get("status", "unverified") for r in rules)
    secs = [(r.verification.get("seconds") or 0.0, r) for r in rules]
    z3s = sorted({str(r.verification.get("z3")) for r in rules if r.verification.get("z3")})
    rows = [("rules", len(rules)),
            *((k, status.get(k, 0)) for k in ("proved", "refuted", "unknown")),
            *((("unverified", status["unverified"]),) if status.get("unverified") else ()),
            ("solver seconds", f"{sum(s for s, _ in secs):.1f} (slowest rule "
                               f"{max((s for s, _ in secs), default=0):.2f})"),
            ("z3", ", ".join(z3s) or "–")]
    if summary and "wall_seconds" in summary:
        rows.append(("wall seconds", f"{summary['wall_seconds']:.1f}"))
    out = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>taso-verify "
           f"report: {e(name)}</title><style>{STYLE}</style></head><body>"
           f"<h1>taso-verify report: {e(name)}</h1><section id='summary'><h2>Summary</h2>"
           "<table>" + "".join(f"<tr><th>{e(k)}</th><td class='n'>{e(v)}</td></tr>"
                               for k, v in rows) + "</table>",
           bar_chart(["proved", "refuted", "unknown"],
                     [("rules", [status.get(k, 0) for k in ("proved", "refuted", "unknown")])],
                     unit="rules", title="rules by status"), "</section>"]
    out.append(slowest(secs))
    out.append(axioms(rules))
    out.append(refuted(rules))
    out.append("</body></html>")
    return "\n".join(out)


def slowest(secs: list[tuple[float, Any]]) -> str:
    top = sorted(secs, key=lambda sr: -sr[0])[:SLOWEST]
    rows = "".join(f"<tr><td><code>{e(r.id)}</code></td><td>{e(r.verification.get('status'))}"
                   f"</td><td class='n'>{s:.2f}</td><td><code>{e(str(r).split(': ', 1)[-1])}"
                   f"</code></td></tr>" for s, r in top)
    return (f"<section id='slowest'><h2>Slowest rules</h2><table><tr><th>rule</th><th>status"
            f"</th><th>seconds</th><th>source ⇒ target</th></tr>{rows}</table></section>")


def axioms(rules: list) -> str:
    uses: Counter[str] = Counter()
    for r in rules:
        if r.verification.get("status") == "proved":
            uses.update(r.verification.get("axioms", []))
    names = [a.name for a in AXIOMS]
    used = sorted((n for n in uses), key=lambda n: (-uses[n], n))
    unused = [n for n in names if not uses[n]]
    return (f"<section id='axioms'><h2>Axioms by use</h2><p class='note'>Proofs whose unsat "
            f"core names each axiom: {len(used)} of {len(names)} axioms used.</p>"
            + bar_chart(used, [("proofs", [uses[n] for n in used])], unit="proofs",
                        title="axioms by use")
            + f"<p>Unused ({len(unused)}): {e(', '.join(unused)) or '–'}</p></section>")


def refuted(rules: list) -> str:
    bad = [r for r in rules if r.verification.get("status") == "refuted"]
    unknown = [r for r in rules if r.verification.get("status") == "unknown"]
    out = [f"<section id='refuted'><h2>Refuted rules ({len(bad)})</h2>"]
    if not bad:
        out.append("<p>No rule was refuted.</p>")
    for k, r in enumerate(bad):
        cex = r.verification.get("counterexample", {})
        out.append(f"<section class='rule'><h3><code>{e(r.id)}</code></h3><div><code>"
                   f"{e(str(r).split(': ', 1)[-1])}</code></div>{counterexample(cex)}")
        if k < DRAWN:
            src, dst = pattern_svgs(r)
            out.append(f"<div class='pair'><div><div class='cap'>source</div>{src}</div>"
                       f"<div><div class='cap'>target</div>{dst}</div></div>")
        out.append("</section>")
    if len(bad) > DRAWN:
        out.append(f"<p class='note'>Patterns drawn for the first {DRAWN}.</p>")
    if unknown:
        out.append(f"<h2>Unknown ({len(unknown)})</h2><table><tr><th>rule</th><th>why</th>"
                   "</tr>" + "".join(f"<tr><td><code>{e(r.id)}</code></td><td>"
                                     f"{e(r.verification.get('reason', ''))}</td></tr>"
                                     for r in unknown) + "</table>")
    out.append("</section>")
    return "".join(out)


def counterexample(cex: dict[str, Any]) -> str:
    """A counterexample's inputs and what differed, as a table."""
    if not cex:
        return "<p class='note'>No counterexample recorded.</p>"
    rows = [("input shapes", ", ".join(f"{v}: {'x'.join(map(str, s)) or 'scalar'}"
                                       for v, s in cex.get("shapes", {}).items()) or "–")]
    if cex.get("attrs"):
        rows.append(("attributes", ", ".join(f"{k}={v}" for k, v in cex["attrs"].items())))
    rows.append(("seed", cex.get("seed", "–")))
    if "max_diff" in cex:
        rows.append((f"output {cex.get('output', 0)}", f"differs by {cex['max_diff']:.3g} "
                                                       f"(scaled)"))
    if "src_shape" in cex:
        rows.append((f"output {cex.get('output', 0)}", f"source gives shape "
                     f"{'x'.join(map(str, cex['src_shape']))}, target "
                     f"{'x'.join(map(str, cex['dst_shape']))}"))
    return "<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>"
                               for k, v in rows) + "</table>"
