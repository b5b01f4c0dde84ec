"""The depth-and-seed study: do the paper's layerwise claims hold at the paper's depth?

    python scripts/study.py --records results/study/models   # default: depths 2,4,8,16; 6 seeds at 4 and 16, 3 at 2 and 8
    python scripts/study.py --study quick --out /tmp/q   # tiny models, seconds (the test suite runs it)
    python scripts/study.py --study small --seeds 0 1 2  # any named pipeline: here the CPU demo's model, 3 seeds
    python scripts/study.py --study diversity-512 --depths 4 --records results/diversity/diversity-512/models  # task diversity
    python scripts/study.py --depths 8 16 --seeds 0 1 2 3 --out runs/study-deep
    python scripts/study.py --redo lemma1            # redo Lemma 1 and every later stage
    python scripts/study.py --study diversity-32 --jobs 8 --quiet   # 8 models side by side (a GPU box)
    python scripts/study.py --training.per_device_train_batch_size 128 --training.bf16 true   # on a GPU

One corpus and Lemma 1 on it, then each model in turn trained, analysed with its untrained
twin (Figure 1 against Bayes, probes and belief-state probes, the shuffle test, the rotary
knock-out, the model against memory-L Bayes predictors) and recorded (one small JSON per model,
also in --records); then REPORT.md with the verdict table: per claim and depth, the trained
models' own statistic and its effects over the untrained twin and the token-only baseline across
seeds, and the verdict of docs/study.md's decision rule (holds, contradicted, not testable, n/a
or undecided; undecided below six seeds). Any value of the run config (configs/study.yaml) is
overridden with --section.field value. A rerun skips complete stages and recorded models; an
interrupted model resumes from its last complete checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..settings import PIPELINES  # the named pipelines --help lists
from . import Parser, print_outcome, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        description=__doc__,
        epilog="Any run config field: --section.field value (scripts/train.py --help and docs/fields.md list them).",
    )
    parser.add_argument(
        "--study",
        default="default",
        help=f"a named pipeline: {', '.join(PIPELINES)} (default: %(default)s)",
    )
    parser.add_argument("--out", help="study folder (default: runs/study-<study>)")
    parser.add_argument("--depths", type=int, nargs="+", help="numbers of layers (default: the study's)")
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds (default: the study's)")
    parser.add_argument(
        "--memories", type=int, nargs="+", help="memories L for Lemma 1 (default: the study's)"
    )
    parser.add_argument(
        "--records",
        help="folder of the per-model records (e.g. results/depth/models): a model recorded there is not "
        "trained or analysed again, and the report reads the records (default: none)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="models trained and analysed side by side in this many processes, each with an equal share "
        "of the threads, e.g. 8 on a 16-core GPU box (default: %(default)s)",
    )
    parser.add_argument("--redo", help="redo this stage and every later one (a stage's name, e.g. lemma1)")
    parser.add_argument(
        "--reuse",
        metavar="FOLDER",
        help="copy the corpus, Lemma 1 and the yardsticks from this study folder, made with the same corpus "
        "settings (checked), instead of computing them: e.g. --study architecture-llama --reuse "
        "runs/diversity-32 (default: none)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args, overrides = parser.parse_known_args(argv)
    from ..running.pipeline import run_pipeline
    from ..running.plan import make_pipeline
    from ..running.study_plan import STUDY
    from ..settings import get_settings, parse_overrides

    out = Path(args.out or f"runs/study-{args.study}")
    try:
        settings = get_settings(
            args.study,
            depths=args.depths,
            seeds=args.seeds,
            memories=args.memories,
            overrides=parse_overrides(overrides),
        )
        pipeline = make_pipeline(settings, out, plan=STUDY, progress=not args.quiet, records=args.records)
        reuse = Path(args.reuse) if args.reuse else None
        state = run_pipeline(pipeline, redo=args.redo, jobs=args.jobs, reuse=reuse)
    except (ValueError, RuntimeError, OSError) as error:
        return refuse(error)
    return print_outcome(out, state, depth_lines)


def depth_lines(results: dict) -> list[str]:
    """Per depth of a study's results: its place against Bayes, then its verdicts."""
    from model_cards.render import claim_line

    lines = []
    for depth in results["depths"]:
        kl, agreement = depth["kl_bayes_model"]["mean"], depth["agreement"]["mean"]
        lines.append(f"{depth['depth']:>2} layers: KL to Bayes {kl:.3f}, agreement {agreement:.3f}")
        lines += [f"    {claim_line(row)}" for row in depth["verdicts"]]
    return lines


if __name__ == "__main__":
    sys.exit(main())
