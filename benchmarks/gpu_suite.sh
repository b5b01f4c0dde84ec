#!/usr/bin/env bash
# The test suite on a bare GPU box with this repo (and .whl/) copied in, where the CUDA-only tests
# run too (flex_attention against sdpa) and every training test trains on the GPU:
#
#   bash benchmarks/gpu_suite.sh                 # the whole suite, 8 workers (pytest-xdist)
#   bash benchmarks/gpu_suite.sh -k flex -n 0    # extra arguments go to pytest
#
# Installs like paper_gpu.sh (benchmarks/gpu_install.sh). WORKERS sets the number of workers and
# OMP_NUM_THREADS each one's threads (2: 16 workers of 16 threads each finished no test in 3 min on
# a 16-core H100 box). -v streams each test's verdict as it ends, so a run cut off by a time limit
# still names its failures.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_install.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PYTHON" -m pytest -v -p no:cacheprovider -p no:benchmark --tb=short -n "${WORKERS:-8}" "$@"
