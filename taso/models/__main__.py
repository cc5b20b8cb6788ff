"""Summarize the model suite: `python -m taso.models [--small] [--batch-size N] [name ...]`
prints, per model, its operator and parameter counts, the seconds to build it and
to evaluate it once in numpy, and the largest relative error (max|a-b| / max|b|)
of onnxruntime on the exported model against that evaluation."""

from __future__ import annotations

import argparse
import time

import numpy as np

from taso import runtime
from taso.onnx_io import export_onnx

from . import ALL


def summarize(name: str, small: bool, batch_size: int) -> dict:
    t = time.perf_counter()
    g = ALL[name](batch_size=batch_size, small=small)
    build_s = time.perf_counter() - t
    feeds = g.random_inputs(1)
    t = time.perf_counter()
    want = g.evaluate(feeds)
    eval_s = time.perf_counter() - t
    got = runtime.session(export_onnx(g), runtime.session_options(None)).run(None, feeds)
    err = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, want))
    return {"model": name, "ops": g.num_ops(), "params": sum(n.data.size for n in g.weights),
            "build_s": build_s, "eval_s": eval_s, "rel_err": err}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m taso.models", description=__doc__)
    p.add_argument("models", nargs="*", choices=[[], *ALL], default=[],
                   help="models to summarize (default: all)")
    p.add_argument("--small", action="store_true", help="the cheap variants")
    p.add_argument("--batch-size", type=int, default=1)
    args = p.parse_args(argv)
    print(f"{'model':14s} {'ops':>5s} {'params':>11s} {'build s':>8s} {'eval s':>7s} "
          f"{'rel err':>9s}")
    for name in args.models or list(ALL):
        r = summarize(name, args.small, args.batch_size)
        print(f"{r['model']:14s} {r['ops']:5d} {r['params']:11,d} {r['build_s']:8.2f} "
              f"{r['eval_s']:7.2f} {r['rel_err']:9.2e}")


if __name__ == "__main__":
    main()
