#!/usr/bin/env bash
# Wheels for a GPU box with no network (the lent H100/H200 machines): the packages this project
# needs that their image lacks (or has at another version than the suite passed with: the image's
# transformers is older), for its Python 3.12, into .whl/ (ignored by git; pass it as a
# carried path). benchmarks/paper_gpu.sh installs from there when the folder exists.
#
#   bash benchmarks/fetch_gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0 \
    transformers==5.23.0 regex==2026.11.15
ls -la .whl
