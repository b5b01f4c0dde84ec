"""Corpora where the token hides the state: a base corpus by levels of emission mixing.

    python scripts/ambiguity.py --preset diversity-8192 --levels 0 0.25 0.5 --out results/ambiguity
    python scripts/ambiguity.py --preset tiny --levels 0 0.5 1 --out runs/ambiguity-tiny

Per level (`emission_mixing`: the share of every emission row moved to the uniform, the HMM
draws kept), measures how much the current token tells about the hidden state exactly from the
HMMs, how much the exact per-task filter reads from the history on fresh rows of a few tasks, and
the oracle's, mixture Bayes's and the in-context ladder's next-token top-1 on test rows
(`hmm_datasets.ambiguity`); writes REPORT.md, results.json and ambiguity.png into --out. Under a
minute per level at K = 8192 on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import Parser, at_least, refuse

FIGURE = "ambiguity.png"


def share(text: str) -> float:
    """An argparse `type`: an emission mixing level, a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value:g} is not a share between 0 and 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("--preset", default="diversity-8192", help="the base corpus preset")
    parser.add_argument(
        "--levels", type=share, nargs="+", default=[0.0, 0.25, 0.5], help="emission mixing levels in [0, 1]"
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--probe-tasks", type=at_least(1), default=16, help="tasks the filter measures read")
    parser.add_argument("--rows-per-task", type=at_least(2), default=64, help="fresh rows of each of them")
    parser.add_argument(
        "--test-rows", type=at_least(1), default=128, help="test rows the predictors are scored on"
    )
    args = parser.parse_args(argv)

    from hmm_datasets import get_preset
    from hmm_datasets.ambiguity import level_measures
    from hmm_datasets.files import write_json, write_text
    from model_cards.ambiguity_report import render_ambiguity_report

    from .. import names
    from ..figures.family import plot_ambiguity
    from ..running.stages import machine_description

    start = time.perf_counter()
    try:
        configs = [get_preset(args.preset, emission_mixing=level) for level in sorted(set(args.levels))]
        levels = [level_measures(c, args.probe_tasks, args.rows_per_task, args.test_rows) for c in configs]
    except ValueError as error:
        return refuse(error)
    machine = machine_description()
    result = {
        "base": args.preset,
        "num_tasks": configs[0].num_tasks,
        "levels": levels,
        "runtime_s": round(time.perf_counter() - start, 1),
        "machine": machine["device"],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = render_ambiguity_report(result)
    written = [
        write_json(out / names.RESULTS_JSON, result),
        write_text(out / names.REPORT_MD, report),
        plot_ambiguity(result, out / FIGURE),
    ]
    print(report)
    print("wrote " + ", ".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
