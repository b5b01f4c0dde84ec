#!/usr/bin/env bash
# The paper's experiment on a bare GPU box with this repo copied in, in one call:
#
#   bash benchmarks/paper_gpu.sh                 # paper preset: install, reproduce, measure, table
#   bash benchmarks/paper_gpu.sh --preset tiny   # the same path at tiny size (any machine, seconds)
#
# 1. Installs this package into the machine's own Python without touching its CUDA torch: pip is
#    given a constraint pinning torch to the installed version. With no network (the lent GPU
#    machines have none) the missing packages (datasets, evaluate and theirs) come from wheels in
#    .whl/ (see README, "The paper on a GPU").
# 2. Runs benchmarks/paper_gpu.py: every stage of scripts/reproduce.py --preset paper that is not
#    complete yet (a rerun resumes), then the throughput, MFU, Bayes and memory measurements.
#    Arguments are passed on to it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

constraint=$(mktemp)
"$PYTHON" -c "import torch; print(f'torch=={torch.__version__}')" > "$constraint"
echo "installing hmm-roformer with $(cat "$constraint") kept"
if [ -d .whl ]; then
    "$PYTHON" -m pip install --quiet --no-index --find-links .whl --no-build-isolation -c "$constraint" -e .
else
    "$PYTHON" -m pip install --quiet --no-build-isolation -c "$constraint" -e .
fi
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PYTHON" benchmarks/paper_gpu.py "$@"
