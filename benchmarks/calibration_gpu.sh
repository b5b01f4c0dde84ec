#!/usr/bin/env bash
# The width-256 calibration of the inference study's recipe on a bare GPU box with this repo copied
# in, in one call, its results packed to take home:
#
#   bash benchmarks/calibration_gpu.sh SECONDS DESTINATION [calibration.py arguments]
#   bash benchmarks/calibration_gpu.sh 480 "$OUT"
#
# 1. Installs this package into the machine's own Python (benchmarks/gpu_install.sh).
# 2. Runs benchmarks/calibration.py on diversity-8192 with the three width-256 rates side by side
#    (default; other arguments replace them), for at most SECONDS.
# 3. Copies into DESTINATION what comes home: benchmarks/results/calibration.json (a run lands in
#    it once its networks are placed), the development figures, and each run's log and
#    trainer_state.json (the loss and the KL to mixture Bayes every 500 steps: how far a run got
#    when the time ran out). Weights stay on the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
    echo "usage: bash benchmarks/calibration_gpu.sh SECONDS DESTINATION [calibration.py arguments]" >&2
    exit 2
fi
seconds=$1 destination=$2
shift 2
[ $# -gt 0 ] || set -- --corpora diversity-8192 --recipes w256-lr2e-3 w256-lr1e-3 w256-lr5e-4 --jobs 3 --threads 4
source benchmarks/gpu_install.sh || exit 1
start=$(date +%s)
timeout "$seconds" "$PYTHON" benchmarks/calibration.py "$@"
echo "calibration: exit $? after $(( $(date +%s) - start )) s"
mkdir -p "$destination"
cp benchmarks/results/calibration.json "$destination/" 2>/dev/null
tar czf "$destination/calibration-runs.tar.gz" benchmarks/results/calibration \
    runs/calibration/*/run.log runs/calibration/*/train_results.json \
    runs/calibration/*/checkpoint-*/trainer_state.json 2>/dev/null
ls -la "$destination"
