"""The probing target: `scripts/probe.py` on the trained `small` checkpoint in under 3 minutes
on 2 CPU cores, and which of the paper's patterns appear there, with their numbers.

    python benchmarks/probe_small.py                          # probes runs/small/model
    python benchmarks/probe_small.py --model path/to/checkpoint

Train the checkpoint first (docs/training.md). The probe run is the docs command, timed
as a user sees it (a fresh process: imports, model, corpus, capture, probes, shuffle test,
figures). A second run in this process stores activations in float32 instead of float16 and
reports the largest change of any probe accuracy. Writes results/probe_small.json and the
figures to results/probe_small/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, write_result

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 180


def run_probe_script(model: Path, out: Path) -> float:
    command = [sys.executable, str(ROOT / "scripts" / "probe.py"), "--model", str(model), "--out", str(out)]
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    return time.perf_counter() - started


def float32_difference(model_dir: Path, results) -> float:
    """Largest |accuracy(float16 storage) - accuracy(float32 storage)| over every probe record."""
    sys.path.insert(0, str(ROOT))
    from hmm_datasets.corpus import checkpoint_corpus, open_corpus
    from probing import load_hmm_roformer
    from probing.run import ProbeConfig, run_probing

    settings = {**results.settings, "dtype": "float32"}
    config = ProbeConfig(**settings)
    rerun = run_probing(
        load_hmm_roformer(str(model_dir)),
        open_corpus(checkpoint_corpus(str(model_dir))),
        config,
        progress=False,
    )

    def accuracies(results):
        records = results.record_set()
        return {
            (r.target, r.layer): r.value for r in records if (r.metric, r.network) == ("accuracy", "trained")
        }

    half, full = accuracies(results), accuracies(rerun.results)
    return max(abs(half[key] - full[key]) for key in half)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(ROOT / "runs" / "small" / "model"))
    args = parser.parse_args()
    model = Path(args.model)
    if not (model / "config.json").is_file():
        parser.error(
            f"{model} is not a checkpoint: train one with configs/small.yaml first (docs/training.md)."
        )
    out = RESULTS / "probe_small"
    wall = run_probe_script(model, out)
    sys.path.insert(0, str(ROOT))
    from probing.results import ProbeResults

    results = ProbeResults.read(out / "probe_results.json")
    difference = float32_difference(model, results)
    summary = {
        "model": str(model),
        "wall_time_s": wall,
        "target_s": TARGET_S,
        "meets_target": wall <= TARGET_S,
        "stage_times_s": results.timings_s,
        "float16_vs_float32_max_accuracy_change": difference,
        "patterns": results.patterns,
        "figures": sorted(path.name for path in out.glob("*.png")),
    }
    path = write_result("probe_small", summary)
    print(f"\nscripts/probe.py wall time {wall:.1f} s (target {TARGET_S} s)")
    print(f"float16 vs float32 activations: largest probe accuracy change {difference:.4f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
