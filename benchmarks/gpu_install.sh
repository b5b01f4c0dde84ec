#!/usr/bin/env bash
# Installs this package into a bare GPU box's own Python without touching its CUDA torch (sourced
# by paper_gpu.sh and study_gpu.sh; PYTHON names the interpreter, default python3).
#
# pip is given a constraint pinning torch to the installed version. With no network (the lent GPU
# machines have none) the wheels in .whl/ (benchmarks/fetch_gpu_wheels.sh) go in first at their
# exact versions, then the package without a resolver run (README, "The paper on one GPU").
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
