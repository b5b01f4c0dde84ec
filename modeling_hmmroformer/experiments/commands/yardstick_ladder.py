"""The in-context ladder on a study's yardstick rows, added to its yardsticks.json.

    hmm-yardstick-ladder --yardsticks results/diversity/diversity-32/yardsticks.json --corpus diversity-32
    python scripts/yardstick_ladder.py --corpus diversity-512 --corpus-seed 1 \\
        --yardsticks results/diversity/diversity-512-draw1/yardsticks.json

A study's yardsticks stage (`yardsticks.corpus_yardsticks`) measured its yardsticks on the first
rows of the corpus's test and test_unseen splits; a study measured before the ladder was part of
it lacks the file's "ladder". This command opens the corpus the study used (--corpus: a preset,
with --corpus-seed where the study overrode its seed, or a corpus folder), scores every rung of
the in-context ladder and the mixture and oracle yardsticks against the oracle and the mixture
on the same rows (`yardsticks.yardstick_ladder`; the prior-level yardstick's predictions are not
kept with a committed study, so it is left out), and writes the file again, whole or not at all,
with "ladder" added and every other value as it was. A corpus whose K or rows differ from the
file's is refused in one line and the file left as it is. The file does not record the corpus's
seed, so a draw of the same K and rows (`diversity-512` and its draw 1) is not told apart: name
the seed the study used.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import hmm_datasets  # the presets --help lists (the builder's registration imports datasets)

from . import Parser, at_least, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("--yardsticks", required=True, help="a study's yardsticks.json (rewritten)")
    parser.add_argument(
        "--corpus",
        required=True,
        help=f"the study's corpus: a preset ({', '.join(hmm_datasets.PRESETS)}) or a corpus folder",
    )
    parser.add_argument("--corpus-seed", type=at_least(0), help="the preset's seed, where the study set one")
    args = parser.parse_args(argv)
    from hmm_datasets.files import write_json

    from ..analyses.yardsticks import yardstick_ladder

    start = time.perf_counter()
    path = Path(args.yardsticks)
    try:
        facts = json.loads(path.read_text())
        if not isinstance(facts, dict):
            raise ValueError(f"{path} holds no yardsticks' facts (a JSON object).")
        corpus = matching_corpus(facts, args.corpus, args.corpus_seed)
        rows = max(int(count) for count in facts["rows"].values())
        print(f"{path}: the ladder on {rows} rows per split of {corpus.source} (K={corpus.config.num_tasks})")
        ladder = yardstick_ladder(corpus, rows, log=lambda line: print(f"  {line}", flush=True))
    except (ValueError, OSError) as error:
        return refuse(error)
    write_json(path, {**facts, "ladder": ladder})
    print(f"{path} written with its ladder in {time.perf_counter() - start:.0f} s.")
    return 0


def matching_corpus(facts: dict, source: str, seed: int | None):
    """The corpus `source` names (a preset, with `seed` overriding its own, or a folder), opened
    only once its K, rows and unseen split match the yardsticks' `facts` (`check_same_corpus`):
    a preset's config is checked before its rows are generated."""
    from hmm_datasets.corpus import open_corpus

    from ..analyses.yardsticks import check_same_corpus, check_unseen_split

    if source in hmm_datasets.PRESETS:
        config = hmm_datasets.get_preset(source, **({} if seed is None else {"seed": seed}))
        check_same_corpus(facts, config)
        if config.num_test_unseen < 1:
            raise ValueError(f"the preset {source} has no test_unseen split: the yardsticks need one.")
        corpus = open_corpus(config)
    elif seed is not None:
        raise ValueError(f"--corpus-seed overrides a preset's seed; {source} is not a preset.")
    else:
        corpus = open_corpus(source)
    check_unseen_split(corpus)
    check_same_corpus(facts, corpus.config)
    return corpus


if __name__ == "__main__":
    sys.exit(main())
