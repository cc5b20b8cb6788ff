#!/usr/bin/env bash
# The GPU half of the cost-model work, for a machine with a CUDA GPU, in one go:
# install the `gpu` extra, run the cupy tests (they skip without a GPU), then
# the end-to-end benchmark with costs measured on the GPU, whose accuracy
# column compares predictions with whole-model runs on the GPU.
#   bash bench/gpu_check.sh [OUT_DIR]
set -euo pipefail
out="${1:-${OUT:-bench/results/gpu}}"
mkdir -p "$out"
pip install -q 'cupy-cuda12x' 2>&1 | tail -1
python -c "from taso.optimizer.cost.cupy_backend import gpu_available as g; print('gpu:', g())"
python -m pytest -q -rs tests/test_costs.py -k "cupy or lowering" 2>&1 | tee "$out/cupy_tests.txt"
python bench/e2e.py --cost-model cupy --unverified --rounds 7 \
    --cost-cache "$out/costs.json" --out "$out" 2>&1 | tee "$out/e2e_log.txt"
