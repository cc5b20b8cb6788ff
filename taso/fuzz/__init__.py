"""Random valid ONNX models, for differential testing (tests/test_fuzz.py and
bench/fuzz.py).

`build_model(choose)` grows a model one node at a time from a pool of tensors
whose shapes it tracks, over the operators the loader maps (convs with groups,
dilations, strides and pads; Gemm and MatMul with transposes; broadcasting
arithmetic; concat and split on any axis, negative ones too; transpose,
reshape, pools, batch and layer norms, softmax) and some it keeps opaque
(Gather, Where, Pad modes, Resize, Slice), plus blocks that make rewrites fire:
parallel convs on one input, and one weight multiplying several rows (a
recurrent layer's steps). Inputs may have a symbolic batch dim, and weights
may be overridable (listed as graph inputs too).

`choose` is anything with `int(lo, hi)` (inclusive) and `pick(seq)`: a
hypothesis draw (`models()`, a strategy, which shrinks) or a numpy generator
(`NumpyChooser`, fast, for long runs).
"""

from .differential import OUTCOMES, default_rules, run_one, same_outputs
from .models import Chooser, NumpyChooser, build_model, models

__all__ = ["OUTCOMES", "Chooser", "NumpyChooser", "build_model", "default_rules", "models",
           "run_one", "same_outputs"]
