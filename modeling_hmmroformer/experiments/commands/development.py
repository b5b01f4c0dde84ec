"""A model over training: every kept network placed on its corpus's yardsticks and labelled by
the learner it is nearest (a rung of the in-context ladder, retrieval or inference).

    hmm-development --checkpoints runs/study/models/depth4-seed0/training/development
    python scripts/development.py --checkpoints runs/x/training --data diversity-8192 --out runs/x/development.json

--checkpoints: folders of checkpoints (the `step-<N>` networks `run.checkpoints` keeps, or the
Trainer's `checkpoint-<N>` folders; any causal LM checkpoint whose folder name ends in its step),
or checkpoint folders themselves. --data: a corpus preset, folder or Hub dataset id with an
unseen-task split (default: the corpus the first checkpoint was trained on). The yardsticks'
predictions (mixture Bayes, prior-level Bayes by particle learning, the oracle, on the first
--rows rows of the test and test_unseen splits) are computed once and kept in --yardsticks;
a folder that already holds them for the same corpus is read instead. Writes development.json
(every network's KL from each candidate, its accuracy, its place on the ladder and its label)
and development.png beside it, and prints a table.

Checkpoints on the Hub: ORG/NAME@REVISION, each revision a branch or tag named by its step
(`step-500`, `checkpoint-500`, Pythia's `step500`), downloaded into the Hub cache; ORG/NAME
alone (a repo id that is no folder here) reads every branch and tag of the repo named by its
step, in step order, as if each had been named (`hmm-push-to-hub --kept-networks` makes them):

    hmm-development --checkpoints ORG/NAME@step-0 ORG/NAME@step-500 ORG/NAME@step-4096 --out dev.json
    hmm-development --checkpoints ORG/NAME --out dev.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from huggingface_hub import snapshot_download  # light (tests stand in for the Hub here)

from . import Parser, at_least, refuse

if TYPE_CHECKING:
    import torch


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        help="folders of checkpoints, checkpoints, ORG/NAME@step-<N>, or ORG/NAME (its every step-<N>)",
    )
    parser.add_argument(
        "--data", help="corpus preset, folder or Hub dataset id (default: the checkpoints' corpus)"
    )
    parser.add_argument("--rows", type=at_least(1), default=128, help="rows of each test split")
    parser.add_argument(
        "--prior-particles", type=at_least(1), default=16384, help="particles of the prior-level yardstick"
    )
    parser.add_argument("--yardsticks", help="folder of the yardsticks' predictions (default: beside --out)")
    parser.add_argument("--out", help="the record's JSON (default: development.json beside the first folder)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    import transformers
    from tqdm.auto import tqdm

    from hmm_datasets.corpus import checkpoint_corpus, open_corpus

    from .. import names
    from ..analyses.yardsticks import check_unseen_split
    from ..figures.model import write_development
    from ..running.folders import place_networks

    transformers.utils.logging.disable_progress_bar()
    try:
        if args.out is None and (is_hub_checkpoint(args.checkpoints[0]) or is_hub_repo(args.checkpoints[0])):
            raise ValueError("--out is required when --checkpoints names Hub checkpoints")
        networks = sorted(network for name in args.checkpoints for network in listed(name))
        out = Path(args.out) if args.out else Path(args.checkpoints[0]).parent / names.DEVELOPMENT_JSON
        corpus = open_corpus(args.data or checkpoint_corpus(str(networks[0][1])))
        check_unseen_split(corpus)
        kept = Path(args.yardsticks) if args.yardsticks else out.parent / names.YARDSTICKS
        facts, tensors = yardsticks(corpus, kept, args.rows, args.prior_particles)
        progress = tqdm(networks, desc="networks", disable=args.quiet)
        development = place_networks(progress, corpus, facts, tensors, source=", ".join(args.checkpoints))
    except (ValueError, OSError) as error:
        return refuse(error)
    record = development.to_dict()
    written = write_development(record, out)
    print(development_table(record))
    print(f"\nwrote {written['json']} and {written['png']}")
    return 0


def listed(name: str) -> list[tuple[int, Path]]:
    """The checkpoints one `--checkpoints` entry names: a folder's checkpoints, by step, the Hub
    revision `ORG/NAME@REVISION`, or every revision of the Hub repo `ORG/NAME` named by its step
    (a one-line error where there are none)."""
    from ..running.folders import kept_networks

    if is_hub_checkpoint(name):
        return [hub_revision(name)]
    if is_hub_repo(name):
        return hub_revisions(name)
    folder = Path(name)
    if not folder.is_dir():
        raise ValueError(
            f"--checkpoints {folder}: no such folder (a Hub checkpoint: ORG/NAME@step-<N>, or ORG/NAME)."
        )
    found = kept_networks(folder)
    if not found:
        raise ValueError(
            f"--checkpoints {folder} holds no checkpoint whose folder name ends in its step "
            "(step-<N>, checkpoint-<N>): train with --run.checkpoints 13, or name the folders by step."
        )
    return found


def is_hub_checkpoint(name: str) -> bool:
    """Whether a `--checkpoints` entry names a Hub revision (`ORG/NAME@REVISION`), not a folder."""
    return "@" in name and not Path(name).exists()


def is_hub_repo(name: str) -> bool:
    """Whether a `--checkpoints` entry names a Hub repo (`ORG/NAME`, as the Hub spells repo ids)
    that is no folder here."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if "@" in name or name.count("/") != 1 or Path(name).exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_revision(name: str) -> tuple[int, Path]:
    """The step and the downloaded folder of the Hub checkpoint `ORG/NAME@REVISION`, whose
    revision (a branch or tag) is named by its step."""
    from ..running.folders import step_of

    repo_id, _, revision = name.partition("@")
    step = step_of(revision)
    if step is None:
        raise ValueError(
            f"--checkpoints {name}: the revision {revision!r} names no step; name each revision by its "
            "step (ORG/NAME@step-500, @checkpoint-500)."
        )
    return step, Path(snapshot_download(repo_id, revision=revision))


def hub_revisions(repo_id: str) -> list[tuple[int, Path]]:
    """Every revision of the Hub repo `repo_id` named by its step (its branches and tags, as
    `HfApi.list_repo_refs` lists them), in step order, each read as `ORG/NAME@REVISION` is
    (`hub_revision`). A one-line error where the Hub lists none, or two names for one step."""
    from huggingface_hub import HfApi

    from ..running.folders import step_of

    try:
        refs = HfApi().list_repo_refs(repo_id)
    except OSError as error:  # the Hub's errors: no such repo, no access, offline
        reason = " ".join(str(error).split())
        raise ValueError(
            f"--checkpoints {repo_id}: no such folder here, and the Hub lists no revisions of it "
            f"({type(error).__name__}: {reason})."
        ) from None
    by_step: dict[int, set[str]] = {}
    for ref in [*refs.branches, *refs.tags]:
        step = step_of(ref.name)
        if step is not None:
            by_step.setdefault(step, set()).add(ref.name)
    if not by_step:
        raise ValueError(
            f"--checkpoints {repo_id}: none of its branches and tags is named by a step (step-<N>): push "
            "a model's kept networks with hmm-push-to-hub --kept-networks, or name revisions (ORG/NAME@REV)."
        )
    twice = {step: sorted(named) for step, named in by_step.items() if len(named) > 1}
    if twice:
        raise ValueError(
            f"--checkpoints {repo_id}: steps named by more than one revision ({twice}): name the revisions "
            "to read (ORG/NAME@REVISION)."
        )
    return [hub_revision(f"{repo_id}@{ref}") for step, (ref,) in sorted(by_step.items())]


def yardsticks(corpus, folder: Path, rows: int, particles: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """The yardsticks' facts and predictions: read from `folder` where it holds them for this
    corpus, else computed (`corpus_yardsticks`) and written there, whole or not at all."""
    from hmm_datasets.files import build_folder

    from .. import names
    from ..analyses.yardsticks import check_same_corpus, corpus_yardsticks
    from ..running.folders import read_yardsticks, write_yardsticks

    if (folder / names.YARDSTICKS_JSON).is_file():
        facts, tensors = read_yardsticks(folder)
        check_same_corpus(facts, corpus.config)
        return facts, tensors
    start = time.perf_counter()
    print(
        f"the yardsticks of {corpus.config.name} on {rows} rows per split ({particles} particles)...",
        flush=True,
    )
    facts, tensors = corpus_yardsticks(corpus, rows, particles)
    build_folder(folder, lambda staging: write_yardsticks(staging, facts, tensors))
    print(f"  {folder} written in {time.perf_counter() - start:.0f} s", flush=True)
    return facts, tensors


def development_table(record: dict) -> str:
    """A line per network: its step, tokens, and per split its KL from the reference beside the
    best rung's, and its label."""
    splits = list(record["networks"][0]["splits"]) if record["networks"] else []
    head = f"{'step':>7} {'tokens':>11}" + "".join(f"  {split + ': KL, rung, label':<44}" for split in splits)
    lines = [head]
    for network in record["networks"]:
        line = f"{network['step']:>7} {network['tokens'] or '':>11}"
        for split in splits:
            place = network["splits"][split]
            kl = place["distances"][place["reference"]]
            line += f"  {kl:6.3f} {place['best_rung_kl']:6.3f} {place['label']:<30}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
