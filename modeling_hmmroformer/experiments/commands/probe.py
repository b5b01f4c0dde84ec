"""The paper's layerwise analyses (Figures 2, 3(a), 3(b), 7) on a causal LM checkpoint: an
HMMRoFormer, or any transformers causal LM trained on the corpus (Llama, Qwen2 and GPT-2 are
tested; the shuffle test needs rotary positions and is skipped, saying why, without them).

    python scripts/probe.py --model runs/small/model
    python scripts/probe.py --model org/hmm-roformer-small --data org/hmm_mixture_small --out probes

--model: a checkpoint folder or a Hub model id; --data: a corpus preset name, an exported
corpus folder or a Hub dataset id (default: the corpus the checkpoint was trained on, from
its hmm_mixture_config.json). Writes probe_results.json and the figures (default: into
<model>/probes) and prints the tables, the paper's patterns as numbers, and the claims as the
study's rule reads one model (its own statistics and its effects over the untrained twin and
the token-only baseline; "undecided (1 seed)": a verdict needs six training seeds, see
docs/study.md). The same probes run on the untrained model of the checkpoint's own
initialisation (its training seed) as a control; --no-control skips it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from probing.config import ProbeConfig  # its fields are options: a module of dataclasses alone

from . import Parser, add_checkpoint_options, open_checkpoint, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(ProbeConfig, description=__doc__)  # every ProbeConfig field is an option
    add_checkpoint_options(parser, "output folder (default: <model>/probes)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    try:
        config, args = parser.parse_args_into_dataclasses(argv)
    except ValueError as error:  # a setting ProbeConfig refuses
        return refuse(error)
    import transformers

    from model_cards.render import format_claims
    from probing.plots import write_probe_results
    from probing.run import run_probing
    from probing.summary import format_summary

    from ..analyses.summary import model_claims

    started = time.perf_counter()
    if args.quiet:  # transformers' own bar (loading weights) too
        transformers.utils.logging.disable_progress_bar()
    try:
        folder, model, corpus, control = open_checkpoint(args)
        result = run_probing(model, corpus, config, untrained_model=control, progress=not args.quiet)
    except (ValueError, OSError) as error:
        return refuse(error)
    results = result.results
    results.timings_s["total"] = time.perf_counter() - started
    paths = write_probe_results(result, Path(args.out) if args.out else folder / "probes")
    print(format_summary(results))
    print("\nThe paper's claims, as the study's rule reads this one model (docs/study.md):")
    print(format_claims(model_claims(None, results, None, results.depth)))
    print(f"\nwrote {', '.join(str(path) for path in paths.values())}")
    print(f"total time {results.timings_s['total']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
