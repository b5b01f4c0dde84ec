"""Publish a checkpoint or a corpus to the Hugging Face Hub, with its card.

    python scripts/push_to_hub.py --model runs/reproduce-small/model --repo-id ORG/hmm-roformer-small --dry-run
    python scripts/push_to_hub.py --model runs/reproduce-small/model --repo-id ORG/hmm-roformer-small \\
        --dataset-repo-id ORG/hmm-mixture-small
    python scripts/push_to_hub.py --dataset runs/reproduce-small/corpus --repo-id ORG/hmm-mixture-small --private
    python scripts/push_to_hub.py --model runs/study/models/depth4-seed0/training --repo-id ORG/hmm-roformer-d4 \\
        --kept-networks

--model uploads the weights (safetensors), the two model code files, config.json with its
auto_map, the corpus and run configs, the HMM parameters, the figures and results, and the
model card rendered for the repo; checkpoints, logs and pickled training state stay home.
--dataset uploads the Parquet shards, the HMM parameters, the config and the dataset card.
--revision puts the commit on a branch (made from main where it is new; a failed upload may
leave that new branch behind, at main's head).

--kept-networks pushes the model to main, then every network its training kept
(`run.checkpoints`: step-<N>/ in the model's development/, or in training/development/ beside
a reproduction's model/) to its own branch step-<N>, made from main where it is new and left
holding that network's files only: weights, code, configs with the auto_map, the HMM
parameters, and its own card, whose model-index carries its place on the in-context ladder
(per split its KL from the split's reference, the best rung's, the learner it is nearest, its
top-1 accuracy; and the gate) where a development record placed it: --development FILE, else
the model folder's development/development.json or record.json (the pipeline's), else
development.json beside the kept networks (hmm-development's default --out). Without one, each
card says the network was not placed and its model-index is empty. `hmm-development
--checkpoints ORG/NAME` reads every step-<N> revision back. A model without kept networks, or a
kept network that would not load, is refused before anything is sent; a failed upload says
which revisions went up.

--dry-run prints what would go where (every revision's, with --kept-networks), with sizes, and
touches no network. Log in first with `hf auth login` (or set HF_TOKEN). The files of a revision
go up in one commit through `huggingface_hub` (create_repo, create_commit): a failed upload
changes no file of that revision.
--endpoint (default: $HF_ENDPOINT, else the Hub) sends them to another Hub server, such as
the test suite's `tests/hub_server.py`.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import Parser, error_line, refuse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a model folder (scripts/train.py or scripts/reproduce.py)")
    what.add_argument(
        "--dataset", help="an exported corpus folder (scripts/generate.py or scripts/reproduce.py)"
    )
    parser.add_argument("--repo-id", required=True, help="ORG/NAME on the Hub")
    parser.add_argument(
        "--dataset-repo-id", help="with --model: the corpus's Hub repo, named in the model card"
    )
    parser.add_argument(
        "--revision",
        help="the branch to upload to, made from main where it is new: a network kept over training goes "
        "to its step's (step-500), where `hmm-development --checkpoints ORG/NAME@step-500` reads it "
        "(default: main)",
    )
    parser.add_argument(
        "--kept-networks",
        action="store_true",
        help="with --model: after the model (to main), every network its training kept, each to its branch "
        "step-<N> with its card and its place on the ladder",
    )
    parser.add_argument(
        "--development",
        help="with --kept-networks: the development record that placed them (development.json, or a study "
        "model's record.json; default: found beside the model, see above)",
    )
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--dry-run", action="store_true", help="print the planned upload; no network")
    parser.add_argument(
        "--endpoint",
        help="the Hub server (default: $HF_ENDPOINT, else https://huggingface.co)",
    )
    args = parser.parse_args(argv)
    if args.dataset and args.dataset_repo_id:
        parser.error("--dataset-repo-id goes with --model (it names the corpus in the model card)")
    if args.kept_networks and not args.model:
        parser.error("--kept-networks goes with --model (a model's networks kept over training)")
    if args.kept_networks and args.revision:
        parser.error(
            "--kept-networks pushes the model to main and each kept network to its step-<N>: drop --revision"
        )
    if args.development and not args.kept_networks:
        parser.error("--development goes with --kept-networks (the record that placed the kept networks)")
    from ..hub import HUB, format_plan, plan_dataset_upload, plan_model_upload, push_plan

    args.endpoint = args.endpoint or os.environ.get("HF_ENDPOINT") or HUB
    if args.kept_networks:
        return push_kept_networks(args)
    try:
        if args.model:
            plan = plan_model_upload(
                args.model, args.repo_id, private=args.private, dataset_repo_id=args.dataset_repo_id
            )
        else:
            plan = plan_dataset_upload(args.dataset, args.repo_id, private=args.private)
    except ValueError as error:
        return refuse(error)
    print(format_plan(plan, args.endpoint))
    if args.dry_run:
        print("dry run: nothing was uploaded")
        return 0
    try:
        url = push_plan(plan, args.endpoint, revision=args.revision)
    except Exception as error:  # the Hub's errors: not logged in, no write access, offline, a server fault
        message = f"the upload to {args.repo_id} at {args.endpoint} failed; no new revision was published"
        print(error_line(f"{message} ({type(error).__name__}: {error})"), file=sys.stderr)
        return 1
    print(f"uploaded: {url}")
    return 0


def push_kept_networks(args: argparse.Namespace) -> int:
    """`--kept-networks`: the model and every network its training kept, each revision planned
    and checked before any is sent, then sent in order (`hub.push_revisions`)."""
    from ..hub import PartialUpload, format_revisions, plan_model_revisions, push_revisions

    try:
        revisions = plan_model_revisions(
            args.model,
            args.repo_id,
            private=args.private,
            dataset_repo_id=args.dataset_repo_id,
            development=args.development,
        )
    except ValueError as error:
        return refuse(error)
    print(format_revisions(revisions, args.endpoint))
    if args.dry_run:
        print("dry run: nothing was uploaded")
        return 0
    try:
        urls = push_revisions(revisions, args.endpoint)
    except PartialUpload as upload:
        error = upload.__cause__
        left_behind = "" if upload.failed == "main" else " (a new branch may be left behind, at main's head)"
        message = (
            f"the upload to {args.repo_id} at {args.endpoint} failed at {upload.failed}, which was not "
            f"published{left_behind}; went up: {', '.join(upload.done) or 'none'}; not sent: "
            f"{', '.join(upload.left) or 'none'}"
        )
        print(error_line(f"{message} ({type(error).__name__}: {error})"), file=sys.stderr)
        return 1
    for revision, url in zip(revisions, urls, strict=True):
        print(f"uploaded {revision.revision}: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
