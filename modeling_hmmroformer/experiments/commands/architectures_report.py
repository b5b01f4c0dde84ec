"""HMMRoFormer against other architectures: one report from the studies' own reports.

    python scripts/study.py --study architecture-llama --reuse runs/diversity-32 --out runs/architecture-llama
    python scripts/architectures_report.py runs/diversity-32 runs/architecture-llama --out results/architectures

Each folder is a `scripts/study.py` folder whose report stage has run (its results.json); the
studies share their corpus and training and differ in their architecture (`--study
architecture-llama` is the `diversity-32` study's models as a Llama). Writes into --out:
REPORT.md (what differs, in words from the numbers; the ladder and the yardsticks side by side;
the claims side by side; wall times), results.json (every number of it) and figures/ (each
claim's own statistic per architecture, trained and untrained).
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import Parser, write_report


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("studies", nargs="*", help="study folders (each with the results.json of its report)")
    parser.add_argument("--out", default="results/architectures", help="report folder (default: %(default)s)")
    parser.add_argument(
        "--redecide",
        metavar="FOLDER",
        help="a committed comparison to decide again from its records, where its results.json's "
        "decided_from names them (give no study folders)",
    )
    args = parser.parse_args(argv)
    from ..reports import redecide_architectures_report, write_architectures_report

    if args.redecide is not None:
        if args.studies:
            parser.error("--redecide reads the committed records: give no study folders with it")
        return write_report(
            lambda: redecide_architectures_report(Path(args.redecide)), "its committed records"
        )
    if not args.studies:
        parser.error("give the study folders to compare, or --redecide FOLDER")
    return write_report(
        lambda: write_architectures_report([Path(s) for s in args.studies], Path(args.out)),
        f"{len(args.studies)} studies",
    )


if __name__ == "__main__":
    sys.exit(main())
