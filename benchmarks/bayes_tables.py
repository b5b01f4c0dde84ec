"""The ceiling every model is judged against: Bayes-optimal and oracle accuracy tables.

    python benchmarks/bayes_tables.py [--presets small paper] [--rows small=1024 paper=32]

Top-1 accuracy by number of demonstrations (0, 1, 2, 4, ..., N) and by test position,
on the first rows of each preset's test split (a subsample for `paper`: the mixture
forward algorithm over 8192 tasks runs at a few hundred tokens/s on 2 CPU cores).
Writes results/bayes_accuracy_<preset>.json and prints the tables.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import write_result

import hmm_datasets
from hmm_datasets.sampler import SamplingTables, generate_rows

DEFAULT_ROWS = {"tiny": 64, "small": 1024, "paper": 32}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=["small", "paper"], choices=sorted(DEFAULT_ROWS))
    parser.add_argument("--rows", nargs="*", default=[], metavar="PRESET=N", help="test rows per preset")
    args = parser.parse_args()
    rows_per_preset = {**DEFAULT_ROWS, **{k: int(v) for k, v in (item.split("=") for item in args.rows)}}
    torch.set_num_threads(2)
    for preset in args.presets:
        config = hmm_datasets.get_preset(preset)
        params = hmm_datasets.sample_hmm_params(config)
        num_rows = min(rows_per_preset[preset], config.num_test)
        rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, num_rows)
        start = time.perf_counter()
        table = hmm_datasets.accuracy_table(
            hmm_datasets.BayesOptimalPredictor(params),
            rows["input_ids"],
            rows["task_id"],
            hmm_datasets.SampleLayout.from_config(config),
        )
        seconds = time.perf_counter() - start
        path = write_result(f"bayes_accuracy_{preset}", {"preset": preset, "seconds": seconds, **table})
        print(f"\n== {preset} ({seconds:.0f}s) -> {path}")
        print(hmm_datasets.format_accuracy_table(table))


if __name__ == "__main__":
    main()
