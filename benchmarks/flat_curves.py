"""Every claim's statistic on flat noisy curves: what the rule's statistics give a network with no
pattern at all (its mean should be about 0, or the claim not testable), at 4 and 16 layers.

    python benchmarks/flat_curves.py            # 4,000 draws per depth: benchmarks/results/flat_curves.json

Each draw is a trained network, a twin and a token-only floor whose every curve is flat at its
level plus independent noise (SD 0.01; the two probe halves with independent probe noise, as
when fitted apart); the statistic is the claim's own, measured by `claims.CLAIMS`. A claim is
"testable" in a draw where its preconditions hold. Figure 1's statistics read no curve and are
left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modeling_hmmroformer.experiments.analyses.claims import CLAIMS  # noqa: E402

OUT = Path(__file__).parent / "results" / "flat_curves.json"
NOISE = 0.01


def flat_profile(rng: np.random.Generator, depth: int, level: float) -> dict:
    """A network whose every curve is flat at `level` plus noise, over layers 0..L (1..L for
    attention), previous tokens at distances 1..5 with their two halves' own noise."""

    def curve(n: int) -> list[float]:
        return (level + rng.normal(0, NOISE, n)).tolist()

    layers = depth + 1
    return {
        "depth": depth,
        "probe_depth": [layer / depth for layer in range(layers)],
        "attention_depth": [layer / depth for layer in range(1, layers)],
        "shuffle_position_only": curve(depth),
        "knockout_nll": curve(depth),
        "beliefs": {name: {"log_r2": curve(layers)} for name in ("task_posterior", "state_filter_per_task")},
        "previous_tokens": {
            str(d): {"all": curve(layers), "halves_apart": [curve(layers), curve(layers)]}
            for d in range(1, 6)
        },
    }


def token_floor(rng: np.random.Generator, level: float) -> dict:
    one = lambda: [level + rng.normal(0, NOISE)]  # noqa: E731
    return {
        "beliefs": {"task_posterior": {"log_r2": one()}},
        "previous_tokens": {str(d): {"all": one(), "halves_apart": [one(), one()]} for d in range(1, 6)},
        "features": {"previous_tokens": ["current_token", "segment", "offset"], "beliefs": []},
    }


def flat_means(depth: int, draws: int, seed: int) -> dict[str, dict]:
    """Per claim (Figures 2 and 3): the mean and SD of its own statistic over the draws where it
    is testable, and the share of draws where it is."""
    rng = np.random.default_rng([seed, depth])
    claims = [claim for claim in CLAIMS if claim.figure != "1"]
    found: dict[str, list[float]] = {claim.key: [] for claim in claims}
    for _ in range(draws):
        nets = {
            "trained": flat_profile(rng, depth, 0.5),
            "twin": flat_profile(rng, depth, 0.3),  # below the trained curves: distances testable
            "tokens": token_floor(rng, 0.3),
        }
        for claim in claims:
            value = claim.measured(nets)
            if value["missing"] is None:
                found[claim.key].append(value["own"])
    return {
        key: {
            "mean": float(np.mean(values)) if values else None,
            "sd": float(np.std(values)) if values else None,
            "testable_share": len(values) / draws,
        }
        for key, values in found.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    results = {
        "noise_sd": NOISE,
        "draws": args.draws,
        "by_depth": {str(depth): flat_means(depth, args.draws, 0) for depth in (4, 16)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'claim':<24} {'depth':>5} {'mean':>9} {'sd':>8} {'testable':>9}")
    for depth, claims in results["by_depth"].items():
        for key, row in claims.items():
            mean = "—" if row["mean"] is None else f"{row['mean']:+.4f}"
            sd = "—" if row["sd"] is None else f"{row['sd']:.4f}"
            print(f"{key:<24} {depth:>5} {mean:>9} {sd:>8} {row['testable_share']:>9.3f}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
