#!/usr/bin/env bash
# The GPU half of the cost-model work, in one go on a machine with a CUDA GPU:
# build and install taso there, run the cupy tests, then the end-to-end benchmark
# with costs measured on the GPU (its accuracy column compares predictions with
# whole-model runs through the same GPU lowerings).
#
#   here:  bash bench/gpu_wheels.sh                    # wheels the GPU image lacks
#   there: bash bench/gpu_check.sh OUT_DIR [E2E_ARGS]  # with .whl carried
#
# It expects the GPU image's python3 with cupy, onnx, onnxruntime, matplotlib,
# pytest, hypothesis, scikit-build-core, nanobind, cmake and ninja, and no network.
# E2E_ARGS go to bench/e2e.py (for example --models nasrnn,bert_base).
set -euo pipefail
root=$(pwd)
out="${1:-${OUT:-$root/bench/results/gpu}}"
shift || true
mkdir -p "$out"
stamp() { echo "[gpu_check] $(date +%T) $*"; }
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
stamp "building taso"
python3 -m pip install -q --no-index --no-deps --no-build-isolation "$root" 2>&1 | tail -3
# From outside the checkout: its bare taso/ folder would shadow the installed package.
cd /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
gpu=$(python3 -c "from taso.optimizer.cost.cupy_backend import gpu_available as g; print(g())")
echo "gpu: $gpu"
stamp "cupy tests"
python3 -m pytest -q -rs -p no:cacheprovider "$root/tests/test_costs.py" -k "cupy or lowering" \
    2>&1 | tee "$out/cupy_tests.txt"
if [ "$gpu" != "True" ]; then
    stamp "no CUDA GPU that cupy can use: stopping before the benchmark"
    exit 1
fi
stamp "end-to-end benchmark, costs measured on the GPU"
PYTHONUNBUFFERED=1 python3 "$root/bench/e2e.py" --cost-model cupy --rounds 7 \
    --cost-cache "$out/costs.json" --out "$out" "$@" 2>&1 | tee "$out/e2e_log.txt"
stamp "done"
