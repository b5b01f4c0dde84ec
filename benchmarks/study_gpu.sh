#!/usr/bin/env bash
# A study's models on a bare GPU box with this repo copied in, for as long as a call may run,
# its records packed to take home:
#
#   bash benchmarks/study_gpu.sh SECONDS PACK STUDY[@DEPTH] [STUDY[@DEPTH] ...]
#   bash benchmarks/study_gpu.sh 480 "$OUT/records.tar.gz" diversity-32@16 diversity-512@4
#
# 1. Installs this package into the machine's own Python (benchmarks/gpu_install.sh).
# 2. Runs the named studies side by side (scripts/study.py --study STUDY [--depths DEPTH] --jobs
#    $JOBS, default 8, and the cores divided among them: models side by side on the one GPU, the 16 cores shared),
#    each into runs/<STUDY>[-d<DEPTH>] with its records in results/<FAMILY>/<STUDY>/models (FAMILY:
#    the study's name up to its first dash, diversity or inference), until
#    SECONDS have passed: a model not finished by then is lost, every finished one has its record.
# 3. Packs into the tarball PACK the records, and each study folder's state, Lemma 1 and yardsticks
#    (what the report needs besides the records; the corpus is regenerated, byte for byte, at home).
#    Unpacked in the repo's root, `scripts/study.py --study STUDY --out runs/<STUDY>... --records
#    results/<FAMILY>/<STUDY>/models` goes on from there.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=$1 pack=$2
shift 2
source benchmarks/gpu_install.sh || exit 1
jobs=$(( ${JOBS:-8} / $# )); [ "$jobs" -ge 1 ] || jobs=1
threads=$(( $(nproc) / $# )); [ "$threads" -ge 1 ] || threads=1  # each study its share of the cores
folders=() studies=()
for item in "$@"; do
    study=${item%@*} folder="runs/${item%@*}" depths=()
    if [ "$item" != "$study" ]; then
        folder="$folder-d${item#*@}" depths=(--depths "${item#*@}")
    fi
    folders+=("$folder") studies+=("$study") records="results/${study%%-*}/$study/models"
    echo "== $study ${depths[*]} into $folder: $jobs processes, $threads threads in all, $seconds s"
    OMP_NUM_THREADS=$threads timeout "$seconds" "$PYTHON" scripts/study.py --study "$study" "${depths[@]}" \
        --jobs "$jobs" --quiet --out "$folder" --records "$records" &
done
wait
# timeout stops each study's main process; its spawned workers go too, before anything is packed
pkill -f multiprocessing.spawn && sleep 2
paths=()
for study in "${studies[@]}"; do
    [ -d "results/${study%%-*}/$study" ] && paths+=("results/${study%%-*}/$study")
done
for folder in "${folders[@]}"; do
    for name in study_state.json lemma1 yardsticks REPORT.md results.json; do
        [ -e "$folder/$name" ] && paths+=("$folder/$name")
    done
done
tar czf "$pack" "${paths[@]}" && echo "packed ${paths[*]} into $pack"
# The models not yet recorded, in parts under 15 MiB: their final weights and the analyses' JSON
# (no optimizer checkpoints, logs, figures or the corpus's HMMs). Unpacked at home (cat
# PACK.models.* | tar xz), such a model resumes after its last complete stage.
models=()
for i in "${!folders[@]}"; do
    folder=${folders[$i]}
    for model in "$folder"/models/*/; do
        [ -d "$model" ] || continue
        record="results/${studies[$i]%%-*}/${studies[$i]}/models/$(basename "$model").json"
        [ -e "$record" ] || models+=("${model%/}")
    done
done
if [ ${#models[@]} -gt 0 ]; then
    tar cz --exclude='checkpoint-*' --exclude='*/training/runs' --exclude='*.png' \
        --exclude='hmm_params.safetensors' "${models[@]}" | split -b 15m - "$pack.models."
    echo "packed unrecorded models ${models[*]} into $pack.models.*"
fi
