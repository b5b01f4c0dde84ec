"""Lemma 1 on a family of HMMs built to test it: memory decay against observability.

    python scripts/lemma1.py --out results/lemma1
    python scripts/lemma1.py --out results/lemma1/rank2 --rank 2

Builds the family (`hmm_datasets.lemma1_family`: γ levels by emission rows mixed toward one
shared row, slow-mixing transitions, stationary start), measures the TV of the memory-L
predictor to the full one, task known and unknown, fits the decay rate per HMM, and writes
REPORT.md, results.json and two figures into --out. Minutes on 2 CPU cores.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from . import Parser, at_least, refuse


def write_lemma1_family(result: dict, folder: str | Path) -> dict[str, Path]:
    """`results.json`, `REPORT.md` and the two figures into `folder` (created); their paths."""
    from hmm_datasets.files import write_json, write_text
    from model_cards.lemma1_report import render_lemma1_report

    from .. import names
    from ..figures.family import plot_rate_vs_gamma, plot_tv_by_level

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json(folder / names.RESULTS_JSON, result),
        "report": write_text(folder / names.REPORT_MD, render_lemma1_report(result)),
        "tv": plot_tv_by_level(result, folder / "tv_by_level.png"),
        "rate": plot_rate_vs_gamma(result, folder / "rate_vs_gamma.png"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--rows", type=at_least(2), default=256, help="sequences per HMM")
    parser.add_argument("--length", type=at_least(3), default=96, help="tokens per sequence")
    parser.add_argument("--max-memory", type=at_least(1), default=24, help="memories L = 1..this")
    parser.add_argument("--hmms-per-level", type=at_least(1), default=4, help="HMMs per γ level")
    parser.add_argument("--rank", type=at_least(1), help="transition rank d (default: full rank)")
    parser.add_argument("--seed", type=at_least(0), default=0, help="seed of the family and rows")
    args = parser.parse_args(argv)
    from hmm_datasets.lemma1_family import ObservabilityFamily, measure_family
    from model_cards.lemma1_report import render_lemma1_report

    start = time.perf_counter()
    try:
        config = ObservabilityFamily(hmms_per_level=args.hmms_per_level, rank=args.rank, seed=args.seed)
        result = measure_family(config, range(1, args.max_memory + 1), rows=args.rows, length=args.length)
    except ValueError as error:
        return refuse(error)
    result["runtime_s"] = round(time.perf_counter() - start, 1)
    paths = write_lemma1_family(result, args.out)
    print(render_lemma1_report(result))
    print("wrote " + ", ".join(str(path) for path in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
