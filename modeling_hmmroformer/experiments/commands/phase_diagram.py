"""The phase diagram across task diversity: every kept network of several models (each a
`hmm-development` record, or a study model's record that holds one) at its training tokens and
its corpus's K, gated as the report gates the final models (infers, retrieves, below the
ladder) and with the share of the way from the best rung to the split's best learner it has
gone, on seen and unseen tasks; and per (K, depth), the cell's development (each model's KL from
the split's reference against training tokens, and their mean).

    hmm-phase-diagram runs/*/development.json --out runs/phase
    hmm-phase-diagram results/inference/*/models/*.json --out results/inference/figures

Writes phase_diagram.png and development-K<k>-L<depth>.png (development-K<k>.png for records
that do not name their depth) into --out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import Parser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument(
        "records", nargs="+", help="development.json files of hmm-development, or a study's model records"
    )
    parser.add_argument("--out", required=True, help="folder of the figures")
    args = parser.parse_args(argv)
    from ..figures.across import (
        PHASE_DIAGRAM_FIGURE,
        development_cells,
        development_figure,
        plot_cell_development,
        plot_phase_diagram,
    )

    try:
        records = [read_record(Path(path)) for path in args.records]
    except (ValueError, OSError) as error:
        return refuse(error)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = [plot_phase_diagram(records, out / PHASE_DIAGRAM_FIGURE)]
    for (k, depth), cell in development_cells(records).items():
        written.append(plot_cell_development(cell, out / development_figure(k, depth)[1]))
    print(f"wrote {', '.join(map(str, written))} from {len(records)} records")
    return 0


def read_record(path: Path) -> dict:
    """A development record (or a study model's record, which holds one, with the model's
    `depth`), its labels recomputed from its distances (`folders.read_development_record`)."""
    from ..running.folders import read_development_record

    development = read_development_record(path)  # a one-line ValueError for anything else
    data = json.loads(path.read_text())
    return {**development.to_dict(), **({"depth": data["depth"]} if data.get("development") else {})}


if __name__ == "__main__":
    sys.exit(main())
