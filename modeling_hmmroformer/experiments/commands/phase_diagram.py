"""The phase diagram across task diversity: every kept network of several models (each a
`hmm-development` record) at its training tokens and its corpus's K, labelled by the learner it
is nearest (a rung of the in-context ladder, retrieval or inference), on seen and unseen tasks.

    hmm-phase-diagram runs/*/development.json --out runs/phase_diagram.png
    hmm-phase-diagram results/inference/*/models/*.json --out results/inference/phase_diagram.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..development import development_from_dict
from ..report_plots import plot_phase_diagram
from . import Parser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument(
        "records", nargs="+", help="development.json files of hmm-development, or a study's model records"
    )
    parser.add_argument("--out", required=True, help="the figure (PNG)")
    args = parser.parse_args(argv)
    try:
        records = [read_record(Path(path)) for path in args.records]
    except (ValueError, OSError) as error:
        return refuse(error)
    print(f"wrote {plot_phase_diagram(records, args.out)} from {len(records)} records")
    return 0


def read_record(path: Path) -> dict:
    """A development record (or a study model's record, which holds one), its labels recomputed
    from its distances (`development_from_dict`)."""
    try:
        data = json.loads(path.read_text())
        return development_from_dict(data.get("development") or data).to_dict()
    except (KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a development record of hmm-development ({error}).") from None


if __name__ == "__main__":
    sys.exit(main())
