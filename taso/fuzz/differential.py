"""The differential check: a random model through the API or taso-opt, and
the result compared with the original in onnxruntime by the harness itself."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import traceback

import numpy as np
import onnx

from .. import runtime
from ..tolerance import elementwise_errors

OUTCOMES = ("optimized", "refused", "crashed", "wrong")


def _session(model: onnx.ModelProto):
    return runtime.session(model, runtime.session_options(None))  # onnxruntime's defaults


def _feed_sets(model: onnx.ModelProto, seed: int) -> list[dict[str, np.ndarray]]:
    """Inputs at batch 1 (or the model's own) and, with a symbolic batch, at 3;
    overridable initializers at their defaults and at random values."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    symbolic = any(d.dim_param for i in model.graph.input
                   for d in i.type.tensor_type.shape.dim)
    sets = []
    for batch in ((1, 3) if symbolic else (None,)):
        for override in (False, True):
            feeds = {}
            for i in model.graph.input:
                if i.name in inits and not override:
                    continue
                dims = [d.dim_value if d.HasField("dim_value") else batch
                        for d in i.type.tensor_type.shape.dim]
                feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
            sets.append(feeds)
    return sets


def same_outputs(original: onnx.ModelProto, optimized: onnx.ModelProto,
                 seed: int = 0) -> str | None:
    """None when `optimized` computes what `original` does in onnxruntime (its
    default settings, not the library's) on every input set, else what
    differs. Written apart from the library's check on purpose (its own
    sessions and inputs), with the tolerance the library states."""
    a, b = _session(original), _session(optimized)
    names_b = {i.name for i in (*b.get_inputs(), *b.get_overridable_initializers())}
    for k, feeds in enumerate(_feed_sets(original, seed)):
        want = a.run(None, feeds)
        missing = set(feeds) - names_b
        if missing:
            return f"the optimized model lost input(s) {sorted(missing)}"
        got = b.run(None, {n: v for n, v in feeds.items() if n in names_b})
        if len(want) != len(got):
            return f"{len(want)} outputs became {len(got)}"
        for j, (x, y) in enumerate(zip(want, got)):
            if x.shape != y.shape:
                return f"input set {k}, output {j}: shape {x.shape} became {y.shape}"
            bad, err = elementwise_errors(x, y)
            if bad.any():
                return f"input set {k}, output {j}: max difference {err:.3g}"
    return None


_RULES: list = []


def default_rules() -> list:
    """The shipped proved rules, read once (reading them takes a second)."""
    if not _RULES:
        from taso.optimizer.search import resolve_rules

        _RULES.extend(resolve_rules(None))
    return _RULES


def run_one(model: onnx.ModelProto, via: str, cost_model: str, budget: int = 50,
            folder: str | None = None, cache: str | None = None) -> tuple[str, str]:
    """One model through the API (`via="api"`) or taso-opt's main (`"cli"`),
    and the outcome (one of OUTCOMES) with a detail line."""
    from taso.errors import CheckError, ModelError, ShapeError
    from taso.onnx_io import export_onnx, load_onnx
    from taso.optimizer.search import optimize

    if via == "api":
        if cache and cost_model in ("ort", "cupy"):
            from taso.optimizer.cost.factory import make_cost_model

            cost_model = make_cost_model(cost_model, cache_path=cache)
        try:
            g = load_onnx(model)
            best = optimize(g, budget=budget, cost_model=cost_model, timing=False,
                                 rules=default_rules())
            out = export_onnx(best)
        except (ModelError, ShapeError, CheckError) as e:
            text = str(e)
            if "\n" in text.strip():
                return "crashed", f"a message of several lines: {text[:200]!r}"
            return "refused", f"{type(e).__name__}: {text}"
        except Exception:
            return "crashed", traceback.format_exc(limit=-3)
    else:
        from taso.optimizer.cli import main

        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src, dst = os.path.join(tmp, "in.onnx"), os.path.join(tmp, "out.onnx")
            onnx.save(model, src)
            err = io.StringIO()
            args = [src, "-o", dst, "--cost-model", cost_model, "--budget", str(budget), "-q",
                    "--json", "--no-timing"]
            if cache:
                args += ["--cost-cache", cache]
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    rc = main(args)
            except SystemExit as e:
                rc = e.code
            except Exception:
                return "crashed", traceback.format_exc(limit=-3)
            lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("taso-opt:")]
            if rc != 0:
                if rc in (1, 2) and len(lines) == 1 and "Traceback" not in err.getvalue():
                    return "refused", lines[0]
                return "crashed", f"exit {rc}: {err.getvalue()[-300:]!r}"
            out = onnx.load(dst)
    try:
        problem = same_outputs(model, out)
    except Exception as e:
        return "wrong", f"the optimized model does not run: {str(e).splitlines()[0][:200]}"
    return ("wrong", problem) if problem else ("optimized", "")
