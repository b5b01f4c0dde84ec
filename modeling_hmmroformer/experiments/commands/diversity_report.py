"""The studies across task diversity K: one report from the studies' own reports.

    python scripts/diversity_report.py runs/diversity-32-d4 runs/diversity-512-d4 runs/diversity-512-draw1
    python scripts/diversity_report.py runs/diversity-* --out results/diversity --readme docs/history.md
    python scripts/diversity_report.py runs/inference-* --out results/inference --readme README.md

Each folder is a `scripts/study.py` folder of one family of studies across K, the task-diversity
study (diversity-32, diversity-512, diversity-8192, diversity-512-draw1) or the inference study
(inference-<K>-draw<d>), whose report stage has run (its results.json). Writes into --out:
REPORT.md (a summary of which learner the models are nearest at each K and which claims hold
where; per cell its place on the yardsticks and its verdict table; what the corpus draw moves;
each K over training where the models kept networks; wall times), results.json (every number of
it) and figures/ (each claim's statistic against K, KL to each yardstick against K; the phase
diagram and each (K, depth)'s development). With --readme, the status block (the status line and
the claims table) between that file's "<family> status" marker lines ("inference status",
"diversity status") is rewritten from the same numbers.

    python scripts/diversity_report.py --redecide results/inference --readme README.md

decides a committed report again by today's rule (docs/study.md) from its committed records
(`<folder>/<study>/models/*.json`, the yardsticks' facts in `<folder>/<study>/yardsticks.json`),
without the study folders, and rewrites it in place. Every cell is summarized again from its
records, so a model recorded there since the report was written (`scripts/study.py --records
<folder>/<study>/models`, on any machine) joins its cell, and a study of the family recorded there
since joins the report; a record made with other settings than its study's is refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import Parser, write_report


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("studies", nargs="*", help="study folders (each with the results.json of its report)")
    parser.add_argument(
        "--redecide",
        metavar="FOLDER",
        help="a committed report folder to decide again from its records (give no study folders)",
    )
    parser.add_argument("--out", default="results/diversity", help="report folder (default: %(default)s)")
    parser.add_argument(
        "--readme",
        help="a markdown file whose status block of this family to rewrite, between its "
        "'<!-- <family> status: start/end -->' lines (default: none)",
    )
    args = parser.parse_args(argv)
    from ..reports import redecide_diversity_report, write_diversity_report

    if args.redecide is not None:
        if args.studies:
            parser.error("--redecide reads the committed records: give no study folders with it")
        return write_report(
            lambda: redecide_diversity_report(Path(args.redecide), args.readme), "its committed records"
        )
    if not args.studies:
        parser.error("give the study folders to report, or --redecide FOLDER")
    return write_report(
        lambda: write_diversity_report([Path(s) for s in args.studies], Path(args.out), args.readme),
        f"{len(args.studies)} studies",
    )


if __name__ == "__main__":
    sys.exit(main())
