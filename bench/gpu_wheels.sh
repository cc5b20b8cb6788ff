#!/usr/bin/env bash
# Run here, before bench/gpu_check.sh on the GPU machine: that machine reaches no
# package index, and its image lacks the peers' packages (onnx-simplifier,
# onnxoptimizer). This fetches their wheels for its Python (3.12, x86-64) into
# .whl/, a folder git ignores locally; name .whl in the device run's carry.
set -euo pipefail
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl onnxsim==0.8.1 onnxoptimizer==0.4.2
ls -la .whl
