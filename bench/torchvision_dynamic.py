"""Dynamic-batch torchvision models through taso-opt with no flags.

Each model (random weights, eval mode) is exported by torch.onnx with a
symbolic batch dim, optimized by `taso-opt IN -o OUT` (no flags: the default
cost model measured on this CPU), and the output is run at batch 1 and 8
beside the original in onnxruntime.

    python bench/torchvision_dynamic.py [--torch-python PY] [--out DIR] [--cost-model M]

torch is not a dependency of taso: the export runs in `--torch-python` (a
Python with torch and torchvision; default this one). Prints one line per
model and batch, and a markdown table with --markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from taso import runtime
from taso.tolerance import elementwise_errors

MODELS = ("squeezenet1_0", "mobilenet_v2", "shufflenet_v2_x1_0")

EXPORT = r'''
import sys, torch, torchvision
torch.manual_seed(0)
name, path = sys.argv[1], sys.argv[2]
m = getattr(torchvision.models, name)(weights=None).eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), path, input_names=["input"],
                  output_names=["output"], opset_version=17, dynamo=False,
                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
'''


def run(model_path: str, feeds: dict) -> list:

    return runtime.session(model_path, runtime.session_options(None, log_level=3)).run(
        None, feeds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-python", default=sys.executable)
    p.add_argument("--out", default=None, help="folder for the models (default: a temporary one)")
    p.add_argument("--cost-model", default=None, help="passed to taso-opt (default: its own)")
    p.add_argument("--models", default=",".join(MODELS))
    args = p.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="taso-tv-")
    os.makedirs(out, exist_ok=True)
    ok = True
    for name in args.models.split(","):
        src, dst = os.path.join(out, f"{name}.onnx"), os.path.join(out, f"{name}.opt.onnx")
        subprocess.run([args.torch_python, "-c", EXPORT, name, src], check=True,
                       capture_output=True)
        here = os.path.join(os.path.dirname(sys.executable), "taso-opt")
        cmd = [here if os.path.exists(here) else "taso-opt", src, "-o", dst, "--json", "-q"]
        if args.cost_model:
            cmd += ["--cost-model", args.cost_model]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t
        if r.returncode != 0:
            print(f"{name}: taso-opt exit {r.returncode}: {r.stderr.strip()}")
            ok = False
            continue
        d = json.loads(r.stdout)
        print(f"{name}: {seconds:.0f} s, {sum(d['rules_applied'].values())} rewrites, cost "
              f"{d['cost_before']:.3f} -> {d['cost_after']:.3f} ms, timed: {d.get('timed')}")
        for batch in (1, 8):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), np.float32)
            a, b = run(src, {"input": x})[0], run(dst, {"input": x})[0]
            same = a.shape == b.shape and not elementwise_errors(a, b)[0].any()
            err = elementwise_errors(a, b)[1] if a.shape == b.shape else float("inf")
            ok &= same
            print(f"  batch {batch}: output {b.shape}, max error {err:.3g}, "
                  f"{'equal' if same else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
