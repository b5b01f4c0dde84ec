#!/usr/bin/env bash
# The paper's experiment on a bare GPU box with this repo copied in, in one call:
#
#   bash benchmarks/paper_gpu.sh                 # paper preset: install, reproduce, measure, table
#   bash benchmarks/paper_gpu.sh --preset tiny   # the same path at tiny size (any machine, seconds)
#
# 1. Installs this package into the machine's own Python without touching its CUDA torch: pip is
#    given a constraint pinning torch to the installed version. With no network (the lent GPU
#    machines have none) the wheels in .whl/ (benchmarks/fetch_gpu_wheels.sh) go in first at
#    their exact versions, then the package without a resolver run (README, "The paper on one GPU").
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
    # No index there: the carried wheels replace the image's versions (its transformers is older),
    # then the package goes in without a resolver run (pip's resolver refuses the image's local
    # torch version "2.11.0+cu130" under --no-index); the import below stands in for that check.
    "$PYTHON" -m pip install --quiet --no-index --no-deps .whl/*.whl
    "$PYTHON" -m pip install --quiet --no-index --no-deps --no-build-isolation -e .
else
    "$PYTHON" -m pip install --quiet --no-build-isolation -c "$constraint" -e .
fi
"$PYTHON" -c "import torch, transformers, datasets; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'datasets', datasets.__version__)"

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PYTHON" benchmarks/paper_gpu.py "$@"
