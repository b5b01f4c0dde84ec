"""The paper's layerwise analyses (Figures 2, 3(a), 3(b), 7) on an HMMRoFormer checkpoint.

    python scripts/probe.py --model runs/small/model
    python scripts/probe.py --model org/hmm-roformer-small --data org/hmm_mixture_small --out probes

--model: a checkpoint folder or a Hub model id; --data: a corpus preset name, an exported
corpus folder or a Hub dataset id (default: the corpus the checkpoint was trained on, from
its hmm_mixture_config.json). Writes probe_results.json and the figures (default: into
<model>/probes) and prints the tables and the paper's patterns as measured. The same probes
run on the untrained model of the checkpoint's own initialisation (its training seed) as a
control; --no-control skips it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from probing.config import ProbeConfig  # the standard library only: --help imports nothing heavy


def integers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from error


def main(argv: list[str] | None = None) -> int:
    defaults = ProbeConfig()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub model id")
    parser.add_argument(
        "--data", help="corpus preset, folder or Hub dataset id (default: the checkpoint's corpus)"
    )
    parser.add_argument("--out", help="output folder (default: <model>/probes)")
    parser.add_argument(
        "--num-probe-tasks",
        type=int,
        default=defaults.num_probe_tasks,
        help="tasks probed (default: %(default)s)",
    )
    parser.add_argument(
        "--rows-per-task",
        type=int,
        default=defaults.rows_per_task,
        help="rows per task (default: %(default)s)",
    )
    parser.add_argument(
        "--positions-per-row",
        type=int,
        default=defaults.positions_per_row,
        help="positions per row, 0: every observation position (default: %(default)s)",
    )
    parser.add_argument(
        "--distances",
        type=integers,
        default=defaults.distances,
        help="previous-token distances (default: 1,2,3,4,5)",
    )
    parser.add_argument("--layers", type=integers, help="hidden-state indices, 0 = embeddings (default: all)")
    parser.add_argument(
        "--shuffle-rows",
        type=int,
        default=defaults.shuffle_rows,
        help="rows of the shuffle test (default: up to 256)",
    )
    parser.add_argument(
        "--attention-rows",
        type=integers,
        default=defaults.attention_rows,
        help=f"Figure 7's test rows (default: {','.join(map(str, defaults.attention_rows))})",
    )
    parser.add_argument(
        "--num-resamples",
        type=int,
        default=defaults.num_resamples,
        help="bootstrap resamples (default: %(default)s)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float16", "float32"),
        default=defaults.dtype,
        help="storage of the captures (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=defaults.batch_size,
        help="rows a forward pass (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="seed of the probe rows and resamples (default: %(default)s)",
    )
    parser.add_argument(
        "--control-seed",
        type=int,
        help="initialisation seed of the untrained control (default: the checkpoint's training seed)",
    )
    parser.add_argument("--no-control", action="store_true", help="skip the untrained-model control")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    local = Path(args.model).is_absolute() or args.model.startswith(".") or args.model.count("/") > 1
    if local and not Path(args.model).is_dir():
        parser.error(f"--model {args.model}: no such checkpoint folder")
    out = Path(args.out) if args.out else (Path(args.model) / "probes" if Path(args.model).is_dir() else None)
    if out is None:
        parser.error("--out is required when --model is a Hub id")
    started = time.perf_counter()
    import modeling_hmmroformer  # noqa: F401  (registers the Auto classes)
    from hmm_datasets.corpus import checkpoint_corpus, open_corpus
    from modeling_hmmroformer.experiments.settings import checkpoint_seed
    from probing.capture import load_hmm_roformer, untrained_twin
    from probing.plots import write_probe_results
    from probing.run import format_summary, run_probing

    try:
        config = ProbeConfig(
            num_probe_tasks=args.num_probe_tasks,
            rows_per_task=args.rows_per_task,
            positions_per_row=args.positions_per_row or None,
            distances=args.distances,
            layers=args.layers,
            shuffle_rows=args.shuffle_rows,
            attention_rows=args.attention_rows,
            num_resamples=args.num_resamples,
            dtype=args.dtype,
            batch_size=args.batch_size,
            seed=args.seed,
        )
        model = load_hmm_roformer(args.model)
        corpus = open_corpus(args.data or checkpoint_corpus(args.model))
        control = None
        if not args.no_control:
            seed = args.control_seed if args.control_seed is not None else checkpoint_seed(args.model)
            control = untrained_twin(model, seed)
        result = run_probing(model, corpus, config, untrained_model=control, progress=not args.quiet)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result.results["timings_s"]["total"] = time.perf_counter() - started
    paths = write_probe_results(result, out)
    print(format_summary(result.results))
    print(f"\nwrote {', '.join(str(path) for path in paths.values())}")
    print(f"total time {result.results['timings_s']['total']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
