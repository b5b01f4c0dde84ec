"""Publish a model folder or an exported corpus folder to the Hugging Face Hub.

`plan_model_upload` / `plan_dataset_upload` check a folder and list exactly which file goes
where (training state such as optimizer pickles and `checkpoint-*` folders stays home; the
card is rendered for the repo it goes to): our own code, since the library has no such
check. `push_plan` sends a plan with the library's own `HfApi.create_repo` and
`create_commit` (one commit: the repo gets all of the plan's files or none of them), to the
Hub or to the endpoint given (as `HF_ENDPOINT` does; the tests run a Hub server on
127.0.0.1, `tests/hub_server.py`). Nothing here touches the network but `push_plan`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import AutoConfig

from hmm_datasets.export import dataset_card_for_folder
from hmm_datasets.names import CONFIG_FILENAME, DATA_DIR, PARAMS_FILENAME
from model_cards import DATASET_CARD_MARKER, MODEL_CARD_MARKER
from model_cards.render import render_model_card
from probing.architecture import HMM_ROFORMER, check_causal_lm

from . import names
from .running.folders import summarize_model_folder

HUB = "https://huggingface.co"
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
    files, skipped = [], []
    for path in folder_files(folder):
        top = path.parts[0]
        if len(path.parts) > 1 and (top.startswith("checkpoint-") or top == "runs"):
            reason = f"{top}/ (training checkpoints and logs)"
            if reason not in skipped:
                skipped.append(reason)
        elif path.suffix in TRAINING_STATE_SUFFIXES:
            skipped.append(f"{path} (training state, a pickle)")
        elif path != Path("README.md"):
            files.append(PlannedFile(path.as_posix(), folder / path))
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


def check_model_folder(folder: Path) -> None:
    """A folder `from_pretrained` can load without the plugin: HMMRoFormer with its code
    (`trust_remote_code=True`), or another transformers causal LM as it is."""
    config_path = folder / names.MODEL_CONFIG_JSON
    if not config_path.is_file():
        raise ValueError(
            f"--model {folder} has no config.json: pass a model folder written by scripts/train.py."
        )
    config = json.loads(config_path.read_text())
    if config.get("model_type") == HMM_ROFORMER:
        check_remote_code(folder, config)
    else:
        check_causal_lm_type(folder, config.get("model_type"))
    if not ((folder / names.WEIGHTS).is_file() or (folder / names.WEIGHTS_INDEX).is_file()):
        raise ValueError(
            f"--model {folder} has no model.safetensors: the Hub copy carries safetensors weights only. "
            "Save the model with save_pretrained (safe_serialization is the default)."
        )


def check_remote_code(folder: Path, config: dict) -> None:
    """An HMMRoFormer folder carries its code and the auto_map that points at it."""
    if "AutoModelForCausalLM" not in (config.get("auto_map") or {}):
        raise ValueError(
            f"--model {folder}: config.json has no auto_map, so the Hub copy would not load with "
            "trust_remote_code=True. Save the model again with save_pretrained (it writes the auto_map)."
        )
    missing = [name for name in CODE_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(
            f"--model {folder} lacks the model code {missing}: save it again with save_pretrained, which copies it."
        )


def check_causal_lm_type(folder: Path, model_type: str | None) -> None:
    """Another architecture goes as it is when transformers has a causal LM of its type."""
    try:
        check_causal_lm(AutoConfig.for_model(model_type))
    except ValueError:
        raise ValueError(
            f"--model {folder} holds a {model_type!r} model, which is neither an HMMRoFormer nor a causal LM "
            "transformers knows: this script publishes causal LMs trained by scripts/train.py."
        ) from None


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


def format_plan(plan: UploadPlan, endpoint: str = HUB) -> str:
    """What would go where, with sizes: the `--dry-run` output."""
    url = f"{endpoint.rstrip('/')}/{'datasets/' if plan.repo_type == 'dataset' else ''}{plan.repo_id}"
    lines = [f"{plan.repo_type} repo {plan.repo_id} ({'private' if plan.private else 'public'}): {url}"]
    width = max(len(planned.path_in_repo) for planned in plan.files)
    for planned in plan.files:
        origin = str(planned.source) if planned.source is not None else "rendered for this repo"
        lines.append(f"  {planned.path_in_repo:<{width}}  {human_size(planned.size):>9}  <- {origin}")
    total = sum(planned.size for planned in plan.files)
    lines.append(f"{len(plan.files)} files, {human_size(total)}")
    if plan.skipped:
        lines.append("not uploaded: " + "; ".join(plan.skipped))
    return "\n".join(lines)


def push_plan(
    plan: UploadPlan, endpoint: str | None = None, token: str | None = None, revision: str | None = None
) -> str:
    """Create the repo (if needed) and upload the plan's files in one commit; returns the commit URL.

    `endpoint`: the Hub's address (default: `HF_ENDPOINT` as `huggingface_hub` read it, else
    https://huggingface.co); `token`: default the one `hf auth login` saved or `HF_TOKEN`;
    `revision`: the branch the commit goes to, made from main where it is new (default: main).
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
    info = api.create_commit(
        repo_id=plan.repo_id,
        repo_type=plan.repo_type,
        operations=operations,
        commit_message=f"Upload {plan.repo_type} from hmm-roformer ({len(operations)} files)",
        revision=revision,
    )
    return str(info.commit_url)
