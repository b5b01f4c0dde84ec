"""The in-context ladder's speed: every n-gram and PPM predictor of the registry on a preset's
test rows, against a per-row Python implementation (a dict of context counts updated token by
token, `baselines.per_row_in_context_probs`) run in the same process on a few of the same rows,
checking that both give the same probabilities.

    python benchmarks/in_context_predictors.py [--presets small paper]

Writes results/in_context_predictors.json (seconds per predictor, and the ratio of the
baseline's time per row to ours).
"""

from __future__ import annotations

import argparse

import numpy as np
from baselines import per_row_in_context_probs
from common import timed, write_result

import hmm_datasets
from hmm_datasets.predictors import IN_CONTEXT, in_context_predictor
from hmm_datasets.sampler import SamplingTables, generate_rows

ROWS = {"tiny": 64, "small": 1024, "paper": 2048}  # the test split of each preset
BASELINE_ROWS = 8


def per_row_loop(rows: np.ndarray, vocab: int, order: int, kind: str) -> np.ndarray:
    return np.stack([per_row_in_context_probs(row, vocab, order, kind) for row in rows])


def bench(preset: str) -> dict:
    config = hmm_datasets.get_preset(preset)
    params = hmm_datasets.sample_hmm_params(config)
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, ROWS[preset])["input_ids"]
    ids = ids.astype(np.int64)
    vocab = config.vocab_size
    out = {"rows": int(ids.shape[0]), "tokens_per_row": int(ids.shape[1]), "predictors": {}}
    for name, (_, kind, order) in IN_CONTEXT.items():
        predictor = in_context_predictor(name, vocab)
        ours, seconds = timed(predictor.next_token_probs, ids, None)
        base, base_seconds = timed(per_row_loop, ids[:BASELINE_ROWS], vocab, order, kind)
        difference = float(np.abs(base - ours[:BASELINE_ROWS].numpy()).max())
        assert difference < 1e-9, f"{name}: the baseline and ours differ by {difference}"
        ratio = (base_seconds / BASELINE_ROWS) / (seconds / ids.shape[0])
        out["predictors"][name] = {
            "seconds": seconds,
            "per_row_python_ratio": ratio,
            "max_abs_difference": difference,
        }
        print(
            f"{preset:>6} {name:>8}: {seconds:6.2f} s for {ids.shape[0]} rows, {ratio:,.0f}x the per-row Python loop"
        )
    out["all_seconds"] = sum(entry["seconds"] for entry in out["predictors"].values())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=["small", "paper"], choices=sorted(ROWS))
    args = parser.parse_args(argv)
    results = {preset: bench(preset) for preset in args.presets}
    path = write_result("in_context_predictors", results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
