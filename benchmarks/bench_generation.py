"""Corpus generation throughput: the builder end to end to Parquet vs a per-step `np.random.choice` sampler.

    python benchmarks/bench_generation.py [--preset paper] [--num-proc 2] [--baseline-rows 200]

Ours: `HMMMixture.download_and_prepare(file_format="parquet", num_proc=...)` for the whole
corpus (all splits, parameters sampled from scratch). Baseline: rows drawn one token at a
time with `RandomState.choice` (rows only, nothing written: generous to the baseline).
Both run in this process on this machine; writes results/generation_<preset>.json.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

import datasets
import numpy as np
from baselines import choice_sampler_row
from common import timed, write_result

import hmm_datasets
from hmm_datasets.sampler import SamplingTables, generate_rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--baseline-rows", type=int, default=500)
    args = parser.parse_args()
    config = hmm_datasets.get_preset(args.preset)
    total_rows = config.num_train + config.num_validation + config.num_test
    datasets.disable_progress_bars()

    work = tempfile.mkdtemp(prefix="bench_generation_")
    try:
        builder = hmm_datasets.builder_for(config, cache_dir=f"{work}/cache")
        _, builder_seconds = timed(
            builder.download_and_prepare,
            output_dir=f"{work}/parquet",
            file_format="parquet",
            num_proc=args.num_proc,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    params = hmm_datasets.sample_hmm_params(config)
    tables = SamplingTables.from_params(params)
    sample_rows = min(8192, config.num_train)
    _, sampler_seconds = timed(generate_rows, config, tables, "train", 0, sample_rows, repeats=3)

    layout = hmm_datasets.SampleLayout.from_config(config)
    rng = np.random.RandomState(0)
    _, baseline_seconds = timed(
        lambda: [choice_sampler_row(params, layout, rng) for _ in range(args.baseline_rows)]
    )

    ours = total_rows / builder_seconds
    baseline = args.baseline_rows / baseline_seconds
    result = {
        "preset": args.preset,
        "sequence_length": config.sequence_length,
        "num_proc": args.num_proc,
        "builder_to_parquet": {
            "rows": total_rows,
            "seconds": builder_seconds,
            "rows_per_s": ours,
            "tokens_per_s": ours * config.sequence_length,
        },
        "sampler_only_one_process": {"rows": sample_rows, "rows_per_s": sample_rows / sampler_seconds},
        "baseline_choice_sampler": {
            "rows": args.baseline_rows,
            "rows_per_s": baseline,
            "tokens_per_s": baseline * config.sequence_length,
        },
        "speedup_end_to_end_vs_baseline": ours / baseline,
        "speedup_sampler_vs_baseline": sample_rows / sampler_seconds / baseline,
        "baseline_seconds_for_whole_corpus": total_rows / baseline,
    }
    path = write_result(f"generation_{args.preset}", result)
    print(
        f"preset {args.preset}: {total_rows} rows x {config.sequence_length} tokens, num_proc={args.num_proc}"
    )
    print(f"{'':32}{'rows/s':>12}{'tokens/s':>14}{'corpus time':>14}")
    print(
        f"{'builder -> Parquet (ours)':32}{ours:>12.0f}{ours * config.sequence_length:>14.3g}{builder_seconds:>13.1f}s"
    )
    print(
        f"{'np.random.choice per step':32}{baseline:>12.1f}{baseline * config.sequence_length:>14.3g}"
        f"{total_rows / baseline:>13.0f}s"
    )
    print(f"speedup {result['speedup_end_to_end_vs_baseline']:.0f}x end to end; results in {path}")


if __name__ == "__main__":
    main()
