"""Bayes-optimal predictor throughput vs a per-sequence, per-task NumPy forward loop.

    python benchmarks/bench_bayes.py [--presets small paper]

For each preset: our batched torch predictor on a batch of test rows, and the NumPy
loop (one sequence, one task, one step at a time) on a few of the same rows, checking
that both give the same probabilities. Each side: the fastest of 3 runs.
Writes results/bayes_throughput.json.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from baselines import per_task_forward_probs
from common import timed, write_result

import hmm_datasets
from hmm_datasets.sampler import SamplingTables, generate_rows

# rows x tokens timed for ours, and for the baseline; paper: "a few sequences" on a CPU
SIZES = {
    "tiny": {"rows": 64, "tokens": None, "baseline_rows": 4, "baseline_tokens": None},
    "small": {"rows": 512, "tokens": None, "baseline_rows": 4, "baseline_tokens": None},
    "paper": {"rows": 64, "tokens": 96, "baseline_rows": 1, "baseline_tokens": 48},
}


def bench(preset: str) -> dict:
    config = hmm_datasets.get_preset(preset)
    size = SIZES[preset]
    params = hmm_datasets.sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, size["rows"])["input_ids"]
    ids = rows[:, : size["tokens"]].astype(np.int64)
    predictor = hmm_datasets.BayesOptimalPredictor(params, device="cpu")
    predictor.next_token_probs(ids[:2, :8])  # warm-up
    ours, ours_seconds = timed(predictor.next_token_probs, ids, repeats=3)

    base_ids = ids[: size["baseline_rows"], : size["baseline_tokens"]]
    baseline, base_seconds = timed(
        lambda: np.stack([per_task_forward_probs(params, row) for row in base_ids]), repeats=3
    )
    agreement = float(np.abs(baseline - ours[: len(base_ids), : base_ids.shape[1]].double().numpy()).max())

    ours_rate = ids.size / ours_seconds
    base_rate = base_ids.size / base_seconds
    return {
        "num_tasks": config.num_tasks,
        "num_states": config.num_states,
        "transition_rank": config.transition_rank,
        "ours": {
            "rows": ids.shape[0],
            "tokens_per_row": ids.shape[1],
            "seconds": ours_seconds,
            "tokens_per_s": ours_rate,
        },
        "baseline_numpy_per_task_loop": {
            "rows": base_ids.shape[0],
            "tokens_per_row": base_ids.shape[1],
            "seconds": base_seconds,
            "tokens_per_s": base_rate,
        },
        "speedup": ours_rate / base_rate,
        "max_abs_difference": agreement,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=["small", "paper"], choices=sorted(SIZES))
    args = parser.parse_args()
    torch.set_num_threads(2)
    results = {preset: bench(preset) for preset in args.presets}
    path = write_result("bayes_throughput", {"presets": results})
    print(f"{'preset':8}{'ours tok/s':>14}{'numpy loop tok/s':>18}{'speedup':>10}{'max |diff|':>12}")
    for preset, r in results.items():
        print(
            f"{preset:8}{r['ours']['tokens_per_s']:>14.1f}{r['baseline_numpy_per_task_loop']['tokens_per_s']:>18.2f}"
            f"{r['speedup']:>9.0f}x{r['max_abs_difference']:>12.1e}"
        )
    print(f"results in {path}")


if __name__ == "__main__":
    main()
