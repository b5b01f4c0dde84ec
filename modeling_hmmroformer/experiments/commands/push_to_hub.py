"""Publish a checkpoint or a corpus to the Hugging Face Hub, with its card.

    python scripts/push_to_hub.py --model runs/reproduce-small/model --repo-id ORG/hmm-roformer-small --dry-run
    python scripts/push_to_hub.py --model runs/reproduce-small/model --repo-id ORG/hmm-roformer-small \\
        --dataset-repo-id ORG/hmm-mixture-small
    python scripts/push_to_hub.py --dataset runs/reproduce-small/corpus --repo-id ORG/hmm-mixture-small --private

--model uploads the weights (safetensors), the two model code files, config.json with its
auto_map, the corpus and run configs, the HMM parameters, the figures and results, and the
model card rendered for the repo; checkpoints, logs and pickled training state stay home.
--dataset uploads the Parquet shards, the HMM parameters, the config and the dataset card.
--revision puts the commit on a branch (made from main where it is new; a failed upload may
leave that new branch behind, at main's head): the networks a run keeps over training
(training/development/step-<N>) each to its step's branch. --dry-run prints what would go
where, with sizes, and touches no network. Log in first
with `hf auth login` (or set HF_TOKEN). The files go up in one commit through
`huggingface_hub` (create_repo, create_commit): a failed upload changes no file of the repo.
--endpoint (default: $HF_ENDPOINT, else the Hub) sends them to another Hub server, such as
the test suite's `tests/hub_server.py`.
"""

from __future__ import annotations

import os
import sys

from . import Parser, refuse


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
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--dry-run", action="store_true", help="print the planned upload; no network")
    parser.add_argument(
        "--endpoint",
        help="the Hub server (default: $HF_ENDPOINT, else https://huggingface.co)",
    )
    args = parser.parse_args(argv)
    from ..hub import HUB, format_plan, plan_dataset_upload, plan_model_upload, push_plan

    args.endpoint = args.endpoint or os.environ.get("HF_ENDPOINT") or HUB
    if args.dataset and args.dataset_repo_id:
        parser.error("--dataset-repo-id goes with --model (it names the corpus in the model card)")
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
        reason = " ".join(str(error).split())  # one line: the client's messages span several
        print(
            f"error: the upload to {args.repo_id} at {args.endpoint} failed; no new revision was published "
            f"({type(error).__name__}: {reason})",
            file=sys.stderr,
        )
        return 1
    print(f"uploaded: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
