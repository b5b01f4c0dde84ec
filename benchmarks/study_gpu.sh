#!/usr/bin/env bash
# A study's models on a bare GPU box with this repo copied in, for as long as a call may run,
# its records packed to take home:
#
#   bash benchmarks/study_gpu.sh SECONDS PACK STUDY [STUDY ...]
#   bash benchmarks/study_gpu.sh 480 "$OUT/records.tar.gz" diversity-32 diversity-512
#
# 1. Installs this package into the machine's own Python (benchmarks/gpu_install.sh).
# 2. Runs each named study in turn (scripts/study.py --study STUDY --jobs $JOBS, default 8: models
#    side by side on the one GPU, 16 cores shared), into runs/<STUDY> with its records in
#    results/diversity/<STUDY>/models, until SECONDS have passed: a model not finished by then is
#    lost, every finished one has its record.
# 3. Packs into the tarball PACK the records, and each study's state, Lemma 1 and yardsticks (what
#    the report needs besides the records; the corpus is regenerated, byte for byte, on the way home).
#    Unpacked in the repo's root, `scripts/study.py --study STUDY --out runs/<STUDY> --records ...`
#    goes on from there.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=$1 pack=$2
shift 2
source benchmarks/gpu_install.sh || exit 1
deadline=$(( $(date +%s) + seconds ))
for study in "$@"; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -gt 30 ] || break
    echo "== $study: $left s left"
    timeout "$left" "$PYTHON" scripts/study.py --study "$study" --jobs "${JOBS:-8}" --quiet \
        --out "runs/$study" --records "results/diversity/$study/models"
done
paths=(results/diversity)
for study in "$@"; do
    for name in study_state.json lemma1 yardsticks REPORT.md results.json; do
        [ -e "runs/$study/$name" ] && paths+=("runs/$study/$name")
    done
done
tar czf "$pack" "${paths[@]}" && echo "packed ${paths[*]} into $pack"
