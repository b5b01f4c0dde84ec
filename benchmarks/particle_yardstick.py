"""The prior-level yardstick by particle learning on `small`'s prior: its cost and its convergence.

    python benchmarks/particle_yardstick.py [--preset small] [--rows 32] [--particles 256 1024 4096 16384]

On the first rows of the preset's test split (the mixture's own HMMs: seen tasks), for each
number of particles N (`hmm_datasets.particle`: Rao-Blackwellised particle filtering, the HMM's
parameters integrated out, float64 on the CPU): the wall time of one pass per seed, the spread
between the estimates of seeds 0 and 1 (symmetric KL, nats per scored token) and the rule's
verdict, the KL of the largest N (seed 2, independent) to seed 0's estimate (its bias, plus
the largest estimate's own noise), the NLL of seed 0's estimate on the actual tokens, and the KL from mixture Bayes (the K
training HMMs) to it. For comparison on the same rows: mixture Bayes, the K'-draws estimator of
`hmm_datasets.prior` (K' = 8192, draw 0) and PPM-C of order 8 (the best in-context predictor),
and the NLL per number of demonstrations seen. Writes results/particle_yardstick.json.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from common import preset_test_rows, timed, write_result

import hmm_datasets
from hmm_datasets.memory import masked_mean
from hmm_datasets.particle import ParticlePriorPredictor, convergence_report
from hmm_datasets.predictors import ppm_next_token_probs
from hmm_datasets.prior import convergence, prior_level_probs
from hmm_datasets.scoring import next_token_scores

SEEDS = (0, 1)
REFERENCE_SEED = 2  # the largest N again: independent of the two compared at every N
DRAWS = 8192  # the K'-draws estimator compared with, on the same rows


def nll_by_demos(probs, ids, scored, segment, num_demos: int) -> list[float]:
    """NLL per number of demonstrations seen (0..N, N: the test sequence)."""
    nll = next_token_scores(probs, ids)["nll"]
    return [masked_mean(nll, scored & (segment == m)) for m in range(num_demos + 1)]


def bench(preset: str, num_rows: int, particles: list[int]) -> dict:
    config, params, ids, scored, segment = preset_test_rows(preset, num_rows)
    mixture = hmm_datasets.BayesOptimalPredictor(params, device="cpu", dtype=torch.float64).next_token_probs(
        ids
    )
    draws = prior_level_probs(config, ids, DRAWS, 0, device="cpu")
    ppm = ppm_next_token_probs(ids, config.vocab_size, 8)
    references = {"mixture_bayes": mixture, f"prior_draws_{DRAWS}": draws, "ppm8": ppm}
    nll = {name: masked_mean(next_token_scores(p, ids)["nll"], scored) for name, p in references.items()}
    by_demos = {
        name: nll_by_demos(p, ids, scored, segment, config.num_demos) for name, p in references.items()
    }
    largest = max(particles)
    reference, reference_seconds = timed(
        ParticlePriorPredictor(config, largest, REFERENCE_SEED).next_token_probs, ids
    )
    rows = []
    for num_particles in particles:
        estimates, seconds = [], []
        for seed in SEEDS:
            probs, elapsed = timed(ParticlePriorPredictor(config, num_particles, seed).next_token_probs, ids)
            estimates.append(probs)
            seconds.append(elapsed)
        report = convergence_report(config, ids, num_particles, SEEDS, *estimates)
        nll[f"particles_{num_particles}"] = masked_mean(next_token_scores(estimates[0], ids)["nll"], scored)
        by_demos[f"particles_{num_particles}"] = nll_by_demos(
            estimates[0], ids, scored, segment, config.num_demos
        )
        rows.append(
            {
                "num_particles": num_particles,
                "seconds_per_pass": seconds,
                "spread": report["spread"],
                "converged": report["converged"],
                "label": report["label"],
                "to_largest": convergence(reference, estimates[0], scored),
                "mixture_to_particles": convergence(mixture, estimates[0], scored),
                "draws_to_particles": convergence(draws, estimates[0], scored),
            }
        )
    return {
        "preset": preset,
        "num_tasks": config.num_tasks,
        "num_states": config.num_states,
        "vocab_size": config.vocab_size,
        "concentrations": [
            config.initial_concentration,
            config.transition_concentration,
            config.emission_concentration,
        ],
        "rows": int(ids.shape[0]),
        "tokens_per_row": int(ids.shape[1]),
        "scored_positions": int(scored.sum()),
        "dtype": "float64",
        "largest": {"num_particles": largest, "seed": REFERENCE_SEED, "seconds": reference_seconds},
        "nll": nll,
        "nll_by_demos_seen": by_demos,
        "by_particles": rows,
    }


def print_table(result: dict) -> None:
    nll = result["nll"]
    print(
        f"{result['preset']}: {result['rows']} test rows x {result['tokens_per_row']} tokens, "
        f"{result['scored_positions']} scored positions; NLL mixture Bayes {nll['mixture_bayes']:.3f}, "
        f"K'={DRAWS} draws {nll[f'prior_draws_{DRAWS}']:.3f}, PPM-C 8 {nll['ppm8']:.3f} nats/token"
    )
    print(
        f"{'N':>6} {'s/pass':>7} {'spread':>7} {'agree':>6} {'to_max':>7} {'NLL':>6} {'mix->N':>7} {'draws->N':>8}  verdict"
    )
    for row in result["by_particles"]:
        n = row["num_particles"]
        print(
            f"{n:>6} {np.mean(row['seconds_per_pass']):>7.1f} {row['spread']['kl_symmetric']:>7.4f} "
            f"{row['spread']['agreement']:>6.3f} {row['to_largest']['kl_a_b']:>7.4f} {nll[f'particles_{n}']:>6.3f} "
            f"{row['mixture_to_particles']['kl_a_b']:>7.4f} {row['draws_to_particles']['kl_a_b']:>8.4f}  "
            f"{row['label']}"
        )
    print("NLL by demonstrations seen (0..N, N: the test sequence):")
    for name, values in result["nll_by_demos_seen"].items():
        print(f"  {name:>20}: " + " ".join(f"{v:.3f}" for v in values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rows", type=int, default=32, help="test rows")
    parser.add_argument("--particles", type=int, nargs="+", default=[256, 1024, 4096, 16384], help="the N")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    result = bench(args.preset, args.rows, sorted(args.particles))
    result["load_average_before_after"] = [load_before, os.getloadavg()[0]]
    print_table(result)
    path = write_result("particle_yardstick", {args.preset: result})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
