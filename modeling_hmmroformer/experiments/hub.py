"""Publish a model folder or an exported corpus folder to the Hugging Face Hub.

`plan_model_upload` / `plan_dataset_upload` check a folder and list exactly which file goes
where (training state such as optimizer pickles, `checkpoint-*` folders and the networks kept
over training stays home; the card is rendered for the repo it goes to): our own code, since
the library has no such check. `plan_model_revisions` plans a model and every network its
training kept (`training/development/step-<N>/`), each to its own branch `step-<N>` with a
card that carries its place on the in-context ladder where a development record placed it.
`push_plan` sends a plan with the library's own `HfApi.create_repo` and `create_commit` (one
commit: the revision gets all of the plan's files or none of them), `push_revisions` several
plans in order, to the Hub or to the endpoint given (as `HF_ENDPOINT` does; the tests run a
Hub server on 127.0.0.1, `tests/hub_server.py`). Nothing here touches the network but
`push_plan` and `push_revisions`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import AutoConfig

from hmm_datasets.export import dataset_card_for_folder
from hmm_datasets.names import CONFIG_FILENAME, DATA_DIR, PARAMS_FILENAME
from model_cards import DATASET_CARD_MARKER, MODEL_CARD_MARKER
from model_cards.render import render_kept_network_card, render_model_card
from probing.architecture import HMM_ROFORMER, check_causal_lm

from . import names
from .analyses.development import Development
from .analyses.ladder_gate import RUNG_LABELS
from .analyses.yardsticks import SPLITS, YARDSTICKS
from .running.folders import (
    kept_networks,
    read_development_record,
    step_of,
    summarize_model_folder,
    tokens_at,
)

HUB = "https://huggingface.co"
MAIN = "main"
CODE_FILES = ("configuration_hmm_roformer.py", "modeling_hmm_roformer.py")
TRAINING_STATE_SUFFIXES = (
    ".bin",
    ".pt",
    ".pth",
    ".pkl",
)  # pickles of the Trainer's state, never weights here


@dataclass(frozen=True)
class PlannedFile:
    """One file of an upload: a file of the folder, or bytes made for this upload (a card)."""

    path_in_repo: str
    source: Path | None = None
    content: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.content) if self.content is not None else self.source.stat().st_size


@dataclass
class UploadPlan:
    repo_id: str
    repo_type: str  # "model" or "dataset"
    folder: Path
    private: bool
    files: list[PlannedFile]
    skipped: list[str]  # what stays home, with why


def check_repo_id(repo_id: str) -> str:
    """`ORG/NAME` as the Hub spells repo ids; a `ValueError` saying what is wrong otherwise."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"--repo-id {repo_id!r} is not a Hub repo id: {error}") from error
    if "/" not in repo_id:
        raise ValueError(
            f"--repo-id {repo_id!r} has no owner: write ORG/NAME (your user name or an organisation)."
        )
    return repo_id


def folder_files(folder: Path) -> list[Path]:
    """Every file under `folder`, relative to it, sorted; hidden files and folders left out."""
    return sorted(
        path.relative_to(folder)
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def plan_model_upload(
    folder: str | os.PathLike, repo_id: str, *, private: bool = False, dataset_repo_id: str | None = None
) -> UploadPlan:
    """Check a model folder and plan its upload: weights (safetensors), code, configs, figures, card."""
    folder = _existing_folder(folder, "--model")
    check_repo_id(repo_id)
    if dataset_repo_id is not None:
        check_repo_id(dataset_repo_id)
    check_model_folder(folder)
    files, skipped = model_files(folder)
    card = folder / "README.md"
    if card.is_file() and MODEL_CARD_MARKER not in card.read_text():
        files.append(PlannedFile("README.md", card))  # a card written by hand goes as it is
    else:
        rendered = render_model_card(
            summarize_model_folder(folder),
            location=str(folder),
            repo_id=repo_id,
            dataset_repo_id=dataset_repo_id,
        )
        files.append(PlannedFile("README.md", content=str(rendered).encode()))
    return UploadPlan(repo_id, "model", folder, private, _sorted(files), skipped)


def model_files(folder: Path) -> tuple[list[PlannedFile], list[str]]:
    """The files of a model folder that go up, its own README.md aside, and what stays home, with
    why: the Trainer's checkpoints and logs, the networks kept over training, pickled state."""
    files, skipped = [], []
    for path in folder_files(folder):
        top = path.parts[0]
        if len(path.parts) > 1 and (top.startswith("checkpoint-") or top == "runs"):
            reason = f"{top}/ (training checkpoints and logs)"
        elif is_in_kept_network(folder, path):
            reason = (
                f"{top}/step-*/ (the networks kept over training: --kept-networks pushes each to its branch)"
            )
        elif path.suffix in TRAINING_STATE_SUFFIXES:
            reason = f"{path} (training state, a pickle)"
        else:
            if path != Path("README.md"):
                files.append(PlannedFile(path.as_posix(), folder / path))
            continue
        if reason not in skipped:
            skipped.append(reason)
    return files, skipped


def is_in_kept_network(folder: Path, path: Path) -> bool:
    """Whether `path` (relative to the model folder `folder`) lies in a network kept over
    training, `development/step-<N>/` (a checkpoint folder named by its step)."""
    if len(path.parts) < 3 or path.parts[0] != names.DEVELOPMENT or step_of(path.parts[1]) is None:
        return False
    return (folder / path.parts[0] / path.parts[1] / names.MODEL_CONFIG_JSON).is_file()


def check_model_folder(folder: Path, name: str | None = None) -> None:
    """A folder `from_pretrained` can load without the plugin: HMMRoFormer with its code
    (`trust_remote_code=True`), or another transformers causal LM as it is. `name`: how the
    errors name the folder (default: `--model <folder>`)."""
    name = name or f"--model {folder}"
    config_path = folder / names.MODEL_CONFIG_JSON
    if not config_path.is_file():
        raise ValueError(f"{name} has no config.json: pass a model folder written by scripts/train.py.")
    config = json.loads(config_path.read_text())
    if config.get("model_type") == HMM_ROFORMER:
        check_remote_code(folder, config, name)
    else:
        check_causal_lm_type(config.get("model_type"), name)
    if not ((folder / names.WEIGHTS).is_file() or (folder / names.WEIGHTS_INDEX).is_file()):
        raise ValueError(
            f"{name} has no model.safetensors: the Hub copy carries safetensors weights only. "
            "Save the model with save_pretrained (safe_serialization is the default)."
        )


def check_remote_code(folder: Path, config: dict, name: str) -> None:
    """An HMMRoFormer folder carries its code and the auto_map that points at it."""
    if "AutoModelForCausalLM" not in (config.get("auto_map") or {}):
        raise ValueError(
            f"{name}: config.json has no auto_map, so the Hub copy would not load with "
            "trust_remote_code=True. Save the model again with save_pretrained (it writes the auto_map)."
        )
    missing = [file for file in CODE_FILES if not (folder / file).is_file()]
    if missing:
        raise ValueError(
            f"{name} lacks the model code {missing}: save it again with save_pretrained, which copies it."
        )


def check_causal_lm_type(model_type: str | None, name: str) -> None:
    """Another architecture goes as it is when transformers has a causal LM of its type."""
    try:
        check_causal_lm(AutoConfig.for_model(model_type))
    except ValueError:
        raise ValueError(
            f"{name} holds a {model_type!r} model, which is neither an HMMRoFormer nor a causal LM "
            "transformers knows: this script publishes causal LMs trained by scripts/train.py."
        ) from None


# ---- the networks kept over training, each to its branch -------------------------------------
@dataclass(frozen=True)
class RevisionPlan:
    """One revision of a model repo and the upload that makes it: main (the model: its files are
    added to main's) or the branch `step-<N>` of a network kept over training (made from main
    where it is new, then left holding the plan's files and no others: `exact`). `about`: what
    the revision holds, in words, for the dry run."""

    revision: str
    plan: UploadPlan
    about: str

    @property
    def exact(self) -> bool:
        return self.revision != MAIN


def kept_revision(step: int) -> str:
    """The branch of the network kept at training step `step`: `step-<N>`, whose step
    `hmm-development --checkpoints ORG/NAME` reads back."""
    return f"step-{step}"


def plan_model_revisions(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    dataset_repo_id: str | None = None,
    development: str | os.PathLike | None = None,
) -> list[RevisionPlan]:
    """The model in `folder` to main (`plan_model_upload`), then every network its training kept,
    by step, each to its branch (`kept_revision`, `plan_kept_upload`): every folder checked
    before anything is sent. `development`: the development record that placed the kept networks
    (default: `find_development_record`'s; where there is none, each card says so)."""
    main = plan_model_upload(folder, repo_id, private=private, dataset_repo_id=dataset_repo_id)
    kept = kept_networks_folder(main.folder)
    record_path = Path(development) if development is not None else find_development_record(kept)
    record = None if record_path is None else read_development_record(record_path)
    unplaced = unplaced_reason(record_path)
    revisions = [RevisionPlan(MAIN, main, "the model")]
    for step, network in kept_networks(kept):
        placement = network_placement(record, step)
        plan = plan_kept_upload(network, step, main, placement, dataset_repo_id, unplaced)
        placed = (
            f"placed ({placement['learner']}) by {record_path}" if placement else f"not placed ({unplaced})"
        )
        revisions.append(
            RevisionPlan(kept_revision(step), plan, f"the network kept at step {step}, {placed}")
        )
    return revisions


def kept_networks_folder(model: Path) -> Path:
    """Where the networks kept over training of the model in `model` lie: `<model>/development/`
    (a `training.output_dir`, a study model's `training/`) or `<model>/../training/development/`
    (a reproduction's `model/`). A `ValueError` saying how to keep some where neither holds any."""
    places = (model / names.DEVELOPMENT, model.parent / names.TRAINING / names.DEVELOPMENT)
    for place in places:
        if place.is_dir() and kept_networks(place):
            return place
    raise ValueError(
        f"--kept-networks: {model} kept no networks over training (no step-<N>/ checkpoint in {places[0]} "
        f"or {places[1]}): train with --run.checkpoints N (docs/development.md), or leave out --kept-networks."
    )


def find_development_record(kept: Path) -> Path | None:
    """The development record of the networks kept in `kept`, where the pipeline or
    `hmm-development` wrote it: the model folder's `development/development.json` or its
    `record.json` (a study's model; `kept` is the model's `training/development/`), else
    `development.json` beside `kept` (`hmm-development`'s default `--out`). None where none is."""
    candidates = [kept.parent / names.DEVELOPMENT_JSON]
    if kept.parent.name == names.TRAINING:
        model = kept.parent.parent
        candidates[:0] = [model / names.DEVELOPMENT / names.DEVELOPMENT_JSON, model / names.RECORD_JSON]
    return next((path for path in candidates if path.is_file()), None)


def unplaced_reason(record_path: Path | None) -> str:
    """Why a kept network's card carries no place on the ladder (the record named by its file
    name: the card goes to the Hub, the folder stays home)."""
    if record_path is None:
        return "no development record of the run was found when it was pushed"
    return f"the run's development record ({record_path.name}) places no network at this step"


def network_placement(record: Development | None, step: int) -> dict | None:
    """The place on the in-context ladder of the network kept at `step`, as its card shows it
    (plain data: the corpus, the gate, and per split its KL from the split's reference, the best
    rung's, the learner it is nearest, its top-1 accuracy); None where `record` places none."""
    network = next((n for n in record.networks if n.step == step), None) if record else None
    if network is None:
        return None
    splits = [
        {
            "split": split,
            "title": SPLITS.get(split, split),
            "reference": YARDSTICKS[place.reference].split(" (")[0],
            "kl": place.distances[place.reference],
            "best_rung": RUNG_LABELS.get(place.best_rung, place.best_rung),
            "best_rung_kl": place.best_rung_kl,
            "past_ladder": place.past_ladder,
            "label": place.label,
            "accuracy": place.accuracy,
        }
        for split, place in network.splits.items()
    ]
    return {"corpus": record.corpus, "learner": network.learner, "splits": splits}


def plan_kept_upload(
    folder: Path,
    step: int,
    main: UploadPlan,
    placement: dict | None,
    dataset_repo_id: str | None,
    unplaced: str,
) -> UploadPlan:
    """The network kept at `step` in `folder`, as its branch holds it: its weights, code and
    configs (checked as a model folder is), the HMM parameters of the model's folder (`main`'s)
    where the network trained on the same corpus, and its own card (`render_kept_network_card`:
    its `placement`, or `unplaced`, why it has none)."""
    check_model_folder(folder, f"the network kept at step {step} ({folder})")
    files, skipped = model_files(folder)
    params = main.folder / names.PARAMS_FILENAME
    if (
        not (folder / names.PARAMS_FILENAME).is_file()
        and params.is_file()
        and same_corpus(folder, main.folder)
    ):
        files.append(PlannedFile(names.PARAMS_FILENAME, params))
    card = render_kept_network_card(
        summarize_model_folder(folder),
        kept={
            "step": step,
            "revision": kept_revision(step),
            "tokens": tokens_at(folder, step),
            "placement": placement,
            "unplaced": unplaced,
        },
        repo_id=main.repo_id,
        dataset_repo_id=dataset_repo_id,
    )
    files.append(PlannedFile("README.md", content=str(card).encode()))
    return UploadPlan(main.repo_id, "model", folder, main.private, _sorted(files), skipped)


def same_corpus(folder: Path, other: Path) -> bool:
    """Whether two checkpoints carry the same corpus config (`hmm_mixture_config.json`)."""
    configs = [path / names.CORPUS_CONFIG_JSON for path in (folder, other)]
    if not all(path.is_file() for path in configs):
        return False
    first, second = (json.loads(path.read_text()) for path in configs)
    return first == second


def plan_dataset_upload(folder: str | os.PathLike, repo_id: str, *, private: bool = False) -> UploadPlan:
    """Check an exported corpus folder and plan its upload: Parquet shards, HMM parameters, card."""
    folder = _existing_folder(folder, "--dataset")
    check_repo_id(repo_id)
    needed = [CONFIG_FILENAME, PARAMS_FILENAME]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing or not list((folder / DATA_DIR).glob("*.parquet")):
        raise ValueError(
            f"--dataset {folder} is not an exported corpus (missing: {missing or [DATA_DIR + '/*.parquet']}): "
            "pass a folder written by scripts/generate.py or scripts/reproduce.py."
        )
    files, skipped = [], []
    for path in folder_files(folder):
        if path.suffix == ".lock":
            skipped.append(f"{path} (a file lock)")
        elif path != Path("README.md"):
            files.append(PlannedFile(path.as_posix(), folder / path))
    card = folder / "README.md"
    if card.is_file() and DATASET_CARD_MARKER not in card.read_text():
        files.append(PlannedFile("README.md", card))
    else:
        files.append(PlannedFile("README.md", content=str(dataset_card_for_folder(folder, repo_id)).encode()))
    return UploadPlan(repo_id, "dataset", folder, private, _sorted(files), skipped)


def _existing_folder(folder: str | os.PathLike, flag: str) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{flag} {folder}: no such folder.")
    return folder


def _sorted(files: list[PlannedFile]) -> list[PlannedFile]:
    return sorted(files, key=lambda planned: planned.path_in_repo)


def human_size(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def repo_url(plan: UploadPlan, endpoint: str = HUB) -> str:
    """The address of the plan's repo on the Hub at `endpoint`."""
    return f"{endpoint.rstrip('/')}/{'datasets/' if plan.repo_type == 'dataset' else ''}{plan.repo_id}"


def repo_line(plan: UploadPlan, endpoint: str = HUB) -> str:
    """The plan's repo: its kind, id, visibility and address."""
    visibility = "private" if plan.private else "public"
    return f"{plan.repo_type} repo {plan.repo_id} ({visibility}): {repo_url(plan, endpoint)}"


def format_plan(plan: UploadPlan, endpoint: str = HUB) -> str:
    """What would go where, with sizes: the `--dry-run` output."""
    return "\n".join([repo_line(plan, endpoint), *plan_lines(plan)])


def plan_lines(plan: UploadPlan) -> list[str]:
    """A plan's files, each with its size and origin, their count and size, and what stays home."""
    lines = []
    width = max(len(planned.path_in_repo) for planned in plan.files)
    for planned in plan.files:
        origin = str(planned.source) if planned.source is not None else "rendered for this repo"
        lines.append(f"  {planned.path_in_repo:<{width}}  {human_size(planned.size):>9}  <- {origin}")
    total = sum(planned.size for planned in plan.files)
    lines.append(f"{len(plan.files)} files, {human_size(total)}")
    if plan.skipped:
        lines.append("not uploaded: " + "; ".join(plan.skipped))
    return lines


def format_revisions(revisions: list[RevisionPlan], endpoint: str = HUB) -> str:
    """Every revision's plan, with sizes, under the revision it makes (`plan_model_revisions`):
    the `--dry-run` output of `--kept-networks`."""
    [main, *kept] = revisions
    lines = [
        repo_line(main.plan, endpoint),
        f"revision {main.revision}: {main.about}",
        *plan_lines(main.plan),
    ]
    for revision in kept:
        lines.append(
            f"revision {revision.revision} ({repo_url(revision.plan, endpoint)}/tree/{revision.revision}; "
            f"made from main where new, then holding these files only): {revision.about}"
        )
        lines += plan_lines(revision.plan)
    total = sum(planned.size for revision in revisions for planned in revision.plan.files)
    lines.append(f"{len(revisions)} revisions, {human_size(total)} in all")
    return "\n".join(lines)


def push_plan(
    plan: UploadPlan,
    endpoint: str | None = None,
    token: str | None = None,
    revision: str | None = None,
    exact: bool = False,
) -> str:
    """Create the repo (if needed) and upload the plan's files in one commit; returns the commit URL.

    `endpoint`: the Hub's address (default: `HF_ENDPOINT` as `huggingface_hub` read it, else
    https://huggingface.co); `token`: default the one `hf auth login` saved or `HF_TOKEN`;
    `revision`: the branch the commit goes to, made from main where it is new (default: main);
    `exact`: the same commit deletes the revision's files the plan does not carry (a branch made
    from main would otherwise keep main's), `.gitattributes` aside.
    """
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(plan.repo_id, repo_type=plan.repo_type, private=plan.private, exist_ok=True)
    if revision is not None:
        api.create_branch(plan.repo_id, branch=revision, repo_type=plan.repo_type, exist_ok=True)
    operations = [
        CommitOperationAdd(
            path_in_repo=planned.path_in_repo,
            path_or_fileobj=planned.content if planned.content is not None else str(planned.source),
        )
        for planned in plan.files
    ]
    if exact:
        carried = {planned.path_in_repo for planned in plan.files} | {".gitattributes"}
        present = api.list_repo_files(plan.repo_id, repo_type=plan.repo_type, revision=revision)
        operations += [CommitOperationDelete(path_in_repo=path) for path in present if path not in carried]
    info = api.create_commit(
        repo_id=plan.repo_id,
        repo_type=plan.repo_type,
        operations=operations,
        commit_message=f"Upload {plan.repo_type} from hmm-roformer ({len(plan.files)} files)",
        revision=revision,
    )
    return str(info.commit_url)


class PartialUpload(Exception):
    """An upload of several revisions that stopped at one (`push_revisions`): the revisions that
    went up, the one whose upload failed, those never sent, and the error (its `__cause__`)."""

    def __init__(self, done: list[str], failed: str, left: list[str]):
        super().__init__(f"the upload of {failed} failed")
        self.done, self.failed, self.left = done, failed, left


def push_revisions(
    revisions: list[RevisionPlan], endpoint: str | None = None, token: str | None = None
) -> list[str]:
    """Each revision's plan in order, one commit each (`push_plan`); the commit URLs. Where one
    fails, `PartialUpload` says which went up before it and which were never sent."""
    urls = []
    for index, revision in enumerate(revisions):
        branch = None if revision.revision == MAIN else revision.revision
        try:
            urls.append(push_plan(revision.plan, endpoint, token, revision=branch, exact=revision.exact))
        except Exception as error:  # the Hub's errors: not logged in, no write access, offline, a fault
            done, left = revisions[:index], revisions[index + 1 :]
            raise PartialUpload(
                [r.revision for r in done], revision.revision, [r.revision for r in left]
            ) from error
    return urls
