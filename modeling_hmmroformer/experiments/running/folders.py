"""What a pipeline's folders hold, written and read back: the yardsticks of a corpus, the
networks kept over training (placed on the yardsticks one by one), and a model folder
summarized for its card. The analyses take and return values; the file names are here and in
`names`.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable
from math import prod
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from hmm_datasets.corpus import Corpus
from hmm_datasets.export import load_corpus_config
from hmm_datasets.files import write_atomically, write_json
from probing.architecture import check_causal_lm
from probing.capture import load_causal_lm
from probing.names import FIGURE7_PATTERN
from probing.results import ProbeResults
from probing.summary import summarize_probe_results

from .. import names
from ..analyses.development import Development, NetworkPlace, development_from_dict, place_network
from ..analyses.evaluation import Figure1Result, model_next_token_probs
from ..analyses.record import ModelAnalyses
from ..analyses.summary import belief_table, model_claims, summarize_figure1, summarize_memory
from ..analyses.yardsticks import SPLITS, ladder_predictions


# ---- the yardsticks of a corpus ---------------------------------------------------------------
def write_yardsticks(folder: Path, facts: dict, tensors: dict[str, torch.Tensor]) -> None:
    """The yardsticks' predictions and facts into `folder`, each file whole or not at all."""
    contiguous = {name: t.contiguous() for name, t in tensors.items()}
    write_atomically(folder / names.YARDSTICKS_TENSORS, lambda staging: save_file(contiguous, str(staging)))
    write_json(folder / names.YARDSTICKS_JSON, facts)


def read_yardsticks(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The yardsticks' facts and predictions `write_yardsticks` wrote into `folder`."""
    return json.loads((folder / names.YARDSTICKS_JSON).read_text()), load_file(
        str(folder / names.YARDSTICKS_TENSORS)
    )


# ---- the networks kept over training ----------------------------------------------------------
_STEP = re.compile(r"(?:^|[-_]|step)(\d+)$")


def step_of(name: str) -> int | None:
    """The training step a checkpoint's folder or revision name carries (`step-0000500`,
    `checkpoint-500`, Pythia's `step500`), or None."""
    found = _STEP.search(name)
    return int(found.group(1)) if found else None


def kept_networks(folder: Path) -> list[tuple[int, Path]]:
    """The checkpoints in `folder` (sub-folders holding a config.json whose name ends in a step),
    by step; `folder` itself where it is one checkpoint."""
    config = names.MODEL_CONFIG_JSON
    inside = [(step_of(p.name), p) for p in folder.iterdir() if p.is_dir() and (p / config).is_file()]
    found = sorted((step, path) for step, path in inside if step is not None)
    if not found and (folder / config).is_file():
        step = step_of(folder.name)
        return [(0 if step is None else step, folder)]
    return found


def tokens_at(folder: Path, step: int) -> int | None:
    """Training tokens at `step`, from the run config and corpus config a checkpoint of
    `scripts/train.py` carries (one process: the world size is not recorded); None elsewhere."""
    run_config, corpus_config = folder / names.RUN_CONFIG_YAML, folder / names.CORPUS_CONFIG_JSON
    if not (run_config.is_file() and corpus_config.is_file()):
        return None
    training = (yaml.safe_load(run_config.read_text()) or {}).get("training", {})
    rows = int(training.get("per_device_train_batch_size", 8)) * int(
        training.get("gradient_accumulation_steps", 1)
    )
    return step * rows * load_corpus_config(folder).sequence_length


def place_networks(
    networks: Iterable[tuple[int, Path]],
    corpus: Corpus,
    facts: dict,
    tensors: dict[str, torch.Tensor],
    source: str,
) -> Development:
    """Every network of `networks` (step, checkpoint folder) placed on the yardsticks of
    `corpus` (`facts` and `tensors`: `yardsticks.corpus_yardsticks`' on the same corpus), each
    loaded in turn on the GPU when there is one."""
    development = Development(
        source=source,
        corpus=corpus.config.name,
        num_tasks=corpus.config.num_tasks,
        rows={split: int(count) for split, count in facts["rows"].items()},
        ladder=facts["ladder"],
    )
    vocab = corpus.config.vocab_size
    candidates = {  # the rungs, and mixture, prior and oracle as the yardsticks hold them
        split: ladder_predictions(corpus.rows(split, count), tensors, None)
        for split, count in development.rows.items()
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for step, folder in networks:
        model = load_causal_lm(str(folder), device, check=check_causal_lm)
        places = {}
        for split in SPLITS:
            ids = tensors[f"{split}/input_ids"].long()
            probs = model_next_token_probs(model, ids, vocab + 1)
            places[split] = place_network(
                probs, candidates[split], ids, split, facts["ladder"], corpus.layout
            )
        development.networks.append(NetworkPlace(step, tokens_at(folder, step), places))
    return development


def read_development_record(path: Path) -> Development:
    """The development record in the file `path`: a `development.json` (`hmm-development`, a
    model's development stage) or a study model's `record.json`, which holds one under
    "development"; its labels recomputed from its distances (`development_from_dict`). A
    `ValueError` naming the file where it holds none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"the development record {path} cannot be read ({error}).") from None
    record = data.get("development", data) if isinstance(data, dict) else data
    if record is None:
        raise ValueError(f"{path} holds no development record: its model kept no networks over training.")
    try:
        return development_from_dict(record)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(
            f"{path} is not a development record (development.json of hmm-development, or a study "
            f"model's record.json with its development; {type(error).__name__}: {error})."
        ) from None


# ---- a model folder's analyses, for its record ---------------------------------------------------
ANALYSES_RECORDED = ("figure1", "probes", "knockout", "model_memory", "yardsticks", "development", "patching")


def read_model_results(folder: Path, with_memory: bool = True) -> ModelAnalyses:
    """What `decisions.aggregate.model_record` reads of a study's model folder (`ModelAnalyses`):
    Figure 1, the probes and the model's memory, which every model has, and where they were made
    the knock-out, its place on the yardsticks, its development, the probes of its kept
    networks and its activation patching. Without `with_memory` (a study that skips Lemma 1) the memory is not asked for."""
    files = {name: folder / names.ANALYSIS_FILES[name] for name in ANALYSES_RECORDED}
    results = {name: read_json_or_none(path) for name, path in files.items()}
    for name in ("figure1", "probes", *(("model_memory",) if with_memory else ())):
        if results[name] is None:
            raise ValueError(f"{files[name]} is missing: the model's {name} stage has not run.")
    probed = sorted((folder / names.DEVELOPMENT_PROBES).glob(f"step-*/{names.PROBES_JSON}"))
    return ModelAnalyses(
        figure1=Figure1Result.from_dict(results["figure1"]),
        probes=ProbeResults.from_dict(results["probes"]),
        model_memory=results["model_memory"],
        knockout=results["knockout"],
        yardsticks=results["yardsticks"],
        development=results["development"],
        patching=results["patching"],
        development_probes={step_of(path.parent.name): ProbeResults.read(path) for path in probed},
    )


# ---- a model folder, for its card ---------------------------------------------------------------
def safetensors_parameter_count(path: str | os.PathLike) -> int:
    """Number of values stored in a safetensors file, read from its header only."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def summarize_model_folder(folder: str | os.PathLike) -> dict:
    """Everything the card and the report show, from whatever a model folder holds: config.json,
    the corpus and run configs and the training results (`scripts/train.py`), and the analyses'
    results (`names.ANALYSIS_FILES`: `scripts/figure1.py`, `scripts/probe.py`, the pipeline)."""
    folder = Path(folder)
    if not (folder / names.MODEL_CONFIG_JSON).is_file():
        raise ValueError(f"{folder} has no config.json: pass a model folder written by scripts/train.py.")
    # through AutoConfig: any architecture's names (GPT-2's n_layer is its num_hidden_layers)
    config = AutoConfig.from_pretrained(folder)
    summary: dict = {
        "model": {
            key: getattr(config, key, None)
            for key in (
                "model_type",
                "num_hidden_layers",
                "num_attention_heads",
                "hidden_size",
                "intermediate_size",
                "vocab_size",
                "norm_placement",
            )
        }
    }
    if (folder / names.WEIGHTS).is_file():
        summary["model"]["num_parameters"] = safetensors_parameter_count(folder / names.WEIGHTS)
    optional = {
        "corpus": names.CORPUS_CONFIG_JSON,
        "training": names.TRAIN_RESULTS_JSON,
        **names.ANALYSIS_FILES,
    }
    raw = {name: read_json_or_none(folder / path) for name, path in optional.items()}
    summary["corpus"] = raw["corpus"]
    summary["training"] = raw["training"]
    run_config = folder / names.RUN_CONFIG_YAML
    summary["run_config"] = yaml.safe_load(run_config.read_text()) if run_config.is_file() else None
    figure1 = None if raw["figure1"] is None else Figure1Result.from_dict(raw["figure1"])
    summary["in_context"] = None if figure1 is None else summarize_figure1(figure1)
    probes = None if raw["probes"] is None else ProbeResults.from_dict(raw["probes"])
    summary["probes"] = None if probes is None else summarize_probe_results(probes)
    summary["memory"] = summarize_memory(raw["lemma1"], raw["model_memory"])
    summary["beliefs"] = belief_table(probes)
    summary["claims"] = model_claims(figure1, probes, raw["knockout"], config.num_hidden_layers)
    figure7 = folder.glob(f"{names.PROBES}/{FIGURE7_PATTERN.format(row='*')}")
    summary["figure7"] = sorted(str(p.relative_to(folder)) for p in figure7)
    summary["figures"] = {
        name: path
        for name, path in names.CARD_FIGURES.items()
        if name not in ("knockout", "patching") or raw[name]  # the analyses a pipeline may not make
    }
    return summary


def read_json_or_none(path: Path) -> dict | None:
    """The JSON file at `path`, or None where there is none (an analysis not made)."""
    return json.loads(path.read_text()) if path.is_file() else None
