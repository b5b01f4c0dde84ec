#!/usr/bin/env bash
# The paper's experiment on a bare GPU box with this repo copied in, in one call:
#
#   bash benchmarks/paper_gpu.sh                 # paper preset: install, reproduce, measure, table
#   bash benchmarks/paper_gpu.sh --preset tiny   # the same path at tiny size (any machine, seconds)
#
# 1. Installs this package into the machine's own Python (benchmarks/gpu_install.sh).
# 2. Runs benchmarks/paper_gpu.py: every stage of scripts/reproduce.py --preset paper that is not
#    complete yet (a rerun resumes), then the throughput, MFU, Bayes and memory measurements.
#    Arguments are passed on to it.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_install.sh
exec "$PYTHON" benchmarks/paper_gpu.py "$@"
