"""Generate a mixture-of-HMMs corpus, export it as a Hub-ready folder, print its Bayes-optimal table.

python scripts/generate.py --preset small --out runs/small/corpus
python scripts/generate.py --preset paper --out runs/paper/corpus --num-proc 2
python scripts/generate.py --preset small --corpus.num_tasks 64 --corpus.transition_rank 4 --out ...

Any field of the corpus config is overridden with --corpus.field value. --overwrite replaces
only a corpus folder this command wrote; any other folder is refused and left as it is.
"""

from __future__ import annotations

import json
import os
import sys
import time

import hmm_datasets  # the presets --help lists (the builder's registration imports datasets)
from hmm_datasets.names import TABLE_FILENAME

from . import Parser, at_least, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument(
        "--preset",
        default="small",
        help=f"corpus preset: {', '.join(hmm_datasets.PRESETS)} (default: %(default)s)",
    )
    parser.add_argument("--out", required=True, help="folder to write (a Hub dataset repo)")
    parser.add_argument(
        "--num-proc",
        type=at_least(1),
        default=min(2, os.cpu_count() or 1),
        help="processes writing the rows; the bytes do not depend on it",
    )
    parser.add_argument(
        "--table-rows", type=at_least(0), default=512, help="test rows in the Bayes table (0: none)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing corpus folder (one this command wrote)"
    )
    parser.epilog = (
        "Override any corpus field with --corpus.field value, e.g. --corpus.num_tasks 64 "
        "(docs/fields.md lists them)."
    )
    args, overrides = parser.parse_known_args(argv)
    from ..settings import parse_overrides

    start = time.perf_counter()
    try:
        fields = parse_overrides(overrides, ("corpus",)).get("corpus", {})
        config = hmm_datasets.get_preset(args.preset, **fields)
        folder = hmm_datasets.export_corpus(
            config, args.out, num_proc=args.num_proc, overwrite=args.overwrite, table_rows=args.table_rows
        )
    except (ValueError, OSError) as error:
        return refuse(error)
    seconds = time.perf_counter() - start
    rows = sum(config.num_rows(split) for split in hmm_datasets.SPLITS)
    print(f"\nwrote {folder} ({rows} rows of {config.sequence_length} tokens) in {seconds:.1f}s")
    table_path = folder / TABLE_FILENAME
    if table_path.exists():
        print()
        print(hmm_datasets.format_accuracy_table(json.loads(table_path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
