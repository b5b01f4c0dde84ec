"""The prior-level yardstick on a preset's prior: its cost and its Monte Carlo convergence.

    python benchmarks/prior_yardstick.py [--presets small tiny] [--rows 128] [--draws 512 2048 8192]

On the first rows of each preset's test split (`SIZES`, or `--rows` and `--draws` for every preset) (the mixture's own HMMs: seen tasks), for
each K' of its draws: the wall time of one prior-level prediction pass (`hmm_datasets.prior`:
drawing K' HMMs from the prior, building the predictor's tables, predicting every row; float32
on the CPU), the KL between the estimates of two independent draws of K' HMMs (the Monte Carlo
spread, and the convergence rule's verdict), the KL of the largest K' (draw 2, independent of
draws 0 and 1) to the K' estimate of draw 0 (its bias, plus the largest estimate's own noise),
and the KL from mixture Bayes (the K training HMMs) to the K' estimate: how far retrieval and
inference are apart on seen tasks. Also per number of demonstrations seen (the segment of the
predicted token), the median per-position spread (is the mean a few outliers?), the smallest
K' spread again in float64 (is it rounding?), the largest K' timed again in row chunks of a 256 MiB
working set, and a power-law fit of the spread against K' with its
extrapolation to the convergence tolerance.
Writes results/prior_yardstick.json.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from common import preset_test_rows, timed, write_result

import hmm_datasets
from hmm_datasets.memory import masked_mean
from hmm_datasets.prior import (
    CONVERGENCE_TOLERANCE,
    convergence,
    measure_convergence,
    per_position_kl,
    predictor_over_draws,
    prior_draws,
    prior_level_probs,
)
from hmm_datasets.scoring import next_token_scores

SIZES = {  # test rows and K' per preset: `small` is the study's prior; `tiny` a denser one, for contrast
    "small": {"rows": 128, "draws": (512, 2048, 8192)},
    "tiny": {"rows": 64, "draws": (8, 64, 512)},
}
REFERENCE_DRAW = 2  # the largest estimate's draw: independent of the two compared at every K'
DEVICE = "cpu"
CHUNKED_BUDGET = 2**28  # bytes: the largest K' timed again with this `memory_budget_bytes`


def by_segment(probs_a, probs_b, scored, segment, num_demos: int) -> list[float]:
    """KL(a || b) per number of demonstrations seen (0..N, N: the test sequence)."""
    return [convergence(probs_a, probs_b, scored & (segment == m))["kl_a_b"] for m in range(num_demos + 1)]


def extrapolate(draws: list[int], spreads: list[float], tolerance: float) -> dict:
    """Least squares of log spread on log K': spread ~ C K'^-slope, and the K' it would take to
    reach `tolerance` (an extrapolation, not a measurement)."""
    slope, intercept = np.polyfit(np.log(draws), np.log(spreads), 1)
    needed = float(np.exp((np.log(tolerance) - intercept) / slope)) if slope < 0 else None
    return {"slope": float(-slope), "C": float(np.exp(intercept)), "draws_for_tolerance": needed}


def bench(preset: str, num_rows: int, draws: list[int]) -> dict:
    config, params, ids, scored, segment = preset_test_rows(preset, num_rows)
    prior_level_probs(config, ids[:2, :8], 4, 0, device=DEVICE)  # warm-up (not the rows timed)
    mixture, mixture_seconds = timed(
        hmm_datasets.BayesOptimalPredictor(params, device=DEVICE).next_token_probs, ids
    )
    nll = {"mixture_bayes": masked_mean(next_token_scores(mixture, ids)["nll"], scored)}
    seconds = {}
    for num_draws in draws:  # the passes, timed on their first (uncached) call
        for draw in (0, 1):
            _, seconds[(num_draws, draw)] = timed(
                prior_level_probs, config, ids, num_draws, draw, device=DEVICE
            )
    largest = max(draws)
    reference, reference_seconds = timed(
        prior_level_probs, config, ids, largest, REFERENCE_DRAW, device=DEVICE
    )
    # the same pass in row chunks of a 256 MiB working set: the default 2 GiB budget on a CPU takes
    # all rows at once, and [K', rows, S] temporaries that overflow the caches slow every step
    chunked = predictor_over_draws(
        prior_draws(config, largest, REFERENCE_DRAW), device=DEVICE, memory_budget_bytes=CHUNKED_BUDGET
    )
    _, chunked_seconds = timed(chunked.next_token_probs, ids)
    rows = []
    for num_draws in draws:
        report = measure_convergence(config, ids, num_draws, device=DEVICE)  # cached: no pass repeated
        estimate = prior_level_probs(config, ids, num_draws, 0, device=DEVICE)
        other = prior_level_probs(config, ids, num_draws, 1, device=DEVICE)
        nll[f"prior_{num_draws}"] = masked_mean(next_token_scores(estimate, ids)["nll"], scored)
        rows.append(
            {
                "num_draws": num_draws,
                "seconds_per_pass": [seconds[(num_draws, 0)], seconds[(num_draws, 1)]],
                "spread": report["spread"],
                "converged": report["converged"],
                "label": report["label"],
                "to_largest": convergence(reference, estimate, scored),
                "mixture_to_prior": convergence(mixture, estimate, scored),
                "mixture_to_prior_draw_1": convergence(mixture, other, scored)["kl_a_b"],
                "spread_median_position": float(per_position_kl(estimate, other)[scored].median()),
                "spread_by_demos_seen": by_segment(estimate, other, scored, segment, config.num_demos),
                "mixture_to_prior_by_demos_seen": by_segment(
                    mixture, estimate, scored, segment, config.num_demos
                ),
            }
        )
    spreads = [row["spread"]["kl_symmetric"] for row in rows]
    smallest = min(draws)  # is the spread a float32 artefact? the same pair in float64
    exact = [
        prior_level_probs(config, ids, smallest, draw, device=DEVICE, dtype=torch.float64) for draw in (0, 1)
    ]
    float64_spread = convergence(*exact, scored)["kl_symmetric"]
    return {
        "preset": preset,
        "num_tasks": config.num_tasks,
        "num_states": config.num_states,
        "vocab_size": config.vocab_size,
        "rows": int(ids.shape[0]),
        "tokens_per_row": int(ids.shape[1]),
        "scored_positions": int(scored.sum()),
        "device": DEVICE,
        "dtype": "float32",
        "tolerance": CONVERGENCE_TOLERANCE,
        "mixture_bayes_seconds": mixture_seconds,
        "largest": {
            "num_draws": largest,
            "draw": REFERENCE_DRAW,
            "seconds": reference_seconds,
            "seconds_256mib_budget": chunked_seconds,
        },
        "nll": nll,
        "by_draws": rows,
        "float64_spread": {"num_draws": smallest, "kl_symmetric": float64_spread},
        "extrapolation": extrapolate(list(draws), spreads, CONVERGENCE_TOLERANCE),
    }


def print_table(result: dict) -> None:
    print(
        f"{result['preset']}: {result['rows']} test rows x {result['tokens_per_row']} tokens, "
        f"{result['scored_positions']} scored positions; mixture Bayes (K={result['num_tasks']}) "
        f"{result['mixture_bayes_seconds']:.2f} s, NLL {result['nll']['mixture_bayes']:.3f} nats/token"
    )
    print(
        f"{'K_prime':>7} {'s/pass':>7} {'spread':>7} {'agree':>6} {'to_max':>7} {'mix->K':>7} {'NLL':>6}  verdict"
    )
    for row in result["by_draws"]:
        k = row["num_draws"]
        print(
            f"{k:>7} {np.mean(row['seconds_per_pass']):>7.1f} {row['spread']['kl_symmetric']:>7.4f} "
            f"{row['spread']['agreement']:>6.3f} {row['to_largest']['kl_a_b']:>7.4f} "
            f"{row['mixture_to_prior']['kl_a_b']:>7.4f} {result['nll'][f'prior_{k}']:>6.3f}  {row['label']}"
        )
    largest = result["largest"]
    print(
        f"K'={largest['num_draws']}: {largest['seconds']:.1f} s per pass with the default memory budget, "
        f"{largest['seconds_256mib_budget']:.1f} s in row chunks of 256 MiB"
    )
    check = result["float64_spread"]
    print(f"the spread at K'={check['num_draws']} in float64: {check['kl_symmetric']:.4f}")
    fit = result["extrapolation"]
    needed = (
        "no number of" if fit["draws_for_tolerance"] is None else f"about {fit['draws_for_tolerance']:.3g}"
    )
    print(
        f"spread ~ {fit['C']:.3g} K'^-{fit['slope']:.3f}: {CONVERGENCE_TOLERANCE} nats/token would need "
        f"{needed} draws (extrapolated)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=list(SIZES), choices=sorted(SIZES))
    parser.add_argument("--rows", type=int, default=None, help="test rows (default: SIZES)")
    parser.add_argument("--draws", type=int, nargs="+", default=None, help="the K' (default: SIZES)")
    args = parser.parse_args(argv)
    results = {}
    for preset in args.presets:
        load_before = os.getloadavg()[0]
        draws = sorted(args.draws or SIZES[preset]["draws"])
        results[preset] = bench(preset, args.rows or SIZES[preset]["rows"], draws)
        results[preset]["load_average_before_after"] = [load_before, os.getloadavg()[0]]
        print_table(results[preset])
    path = write_result("prior_yardstick", results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
