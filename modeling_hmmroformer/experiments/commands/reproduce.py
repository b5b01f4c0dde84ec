"""Reproduce arXiv 2506.01919 end to end: corpus, training, Figure 1, probes, cards, REPORT.md.

    python scripts/reproduce.py --preset small                    # 2 CPU cores (stage times: results/small/REPORT.md)
    python scripts/reproduce.py --preset paper --out runs/paper   # one GPU
    python scripts/reproduce.py --preset small --redo probe       # rerun the probes and what follows
    python scripts/reproduce.py --preset small --training.max_steps 2800 --out runs/small-longer

Any value of the preset's run config (configs/<preset>.yaml) is overridden with
--section.field value (sections: corpus, data, model, training, run).

A rerun of the same command skips every complete stage (corpus, train, evaluate, probe, memory,
knockout, model, report) and redoes an interrupted one; training resumes from its last complete
checkpoint. See modeling_hmmroformer/experiments/running/pipeline.py for the stages and
modeling_hmmroformer/experiments/names.py for the folder layout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..running.plan import REPRODUCE_STAGES  # the presets and stages --help lists
from ..settings import REPRODUCTIONS
from . import Parser, at_least, print_outcome, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        description=__doc__,
        epilog="Any run config field: --section.field value (scripts/train.py --help and docs/fields.md list them).",
    )
    parser.add_argument(
        "--preset", default="small", help=f"{', '.join(REPRODUCTIONS)} (default: %(default)s)"
    )
    parser.add_argument("--out", help="reproduction folder (default: runs/reproduce-<preset>)")
    parser.add_argument(
        "--redo",
        choices=REPRODUCE_STAGES,
        metavar="STAGE",
        help="redo this stage and every later one: " + ", ".join(REPRODUCE_STAGES),
    )
    parser.add_argument(
        "--num-processes", type=at_least(1), default=1, help="GPUs to train on (data parallel)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args, overrides = parser.parse_known_args(argv)
    from model_cards.render import claim_line

    from ..running.pipeline import run_pipeline
    from ..running.plan import make_pipeline
    from ..running.reproduction_plan import REPRODUCTION
    from ..settings import get_settings, parse_overrides

    out = Path(args.out or f"runs/reproduce-{args.preset}")
    try:
        settings = get_settings(args.preset, overrides=parse_overrides(overrides))
        pipeline = make_pipeline(
            settings, out, plan=REPRODUCTION, num_processes=args.num_processes, progress=not args.quiet
        )
        state = run_pipeline(pipeline, redo=args.redo)
    except (ValueError, RuntimeError, OSError) as error:
        return refuse(error)
    return print_outcome(out, state, lambda results: [claim_line(claim) for claim in results["claims"]])


if __name__ == "__main__":
    sys.exit(main())
