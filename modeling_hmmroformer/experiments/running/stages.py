"""The stages every pipeline shares, one function each, named in the plans
(`reproduction_plan`, `study_plan`): the corpus, Lemma 1 and the yardsticks once per folder;
then, per model, its training and its analyses against its untrained twin. Each writes its
folder whole or not at all (`build_folder`)."""

from __future__ import annotations

import datetime
import functools
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from hmm_datasets.corpus import open_corpus
from hmm_datasets.export import export_corpus
from hmm_datasets.files import build_folder, write_json, write_text
from hmm_datasets.predictors import reference_predictors
from probing.architecture import check_causal_lm, positions_outside_attention
from probing.capture import load_causal_lm, untrained_twin
from probing.knockout import rotary_knockout, scored_test_positions
from probing.patching import run_patching
from probing.plots import plot_rotary_knockout, write_patching_results, write_probe_results
from probing.run import run_probing

from .. import names
from ..analyses.evaluation import figure1, load_evaluation_data, model_next_token_probs
from ..analyses.memory import corpus_lemma1, corpus_model_memory
from ..analyses.yardsticks import SPLITS, corpus_yardsticks, place_model
from ..figures.model import write_development, write_figure1, write_lemma1, write_model_memory
from .folders import kept_networks, place_networks, read_yardsticks, write_yardsticks
from .plan import ModelRun, Pipeline, has_unseen_tasks, model_stages
from .training import checkpoints, is_complete_checkpoint, kept_name, train

TRAIN_COMMAND = "modeling_hmmroformer.experiments.commands.train"  # what `accelerate launch -m` runs
KNOCKOUT_SKIPPED = "skipped.json"  # in knockout/ of a model without rotary positions: why there is none


def shared_runners(p: Pipeline) -> dict[str, Callable[[], None]]:
    """The stages of the folder before its models: the corpus, and the yardsticks where the
    corpus has unseen tasks (a study adds Lemma 1 between them)."""
    runners = {"corpus": functools.partial(build_corpus, p)}
    if has_unseen_tasks(p):
        runners["yardsticks"] = functools.partial(measure_yardsticks, p)
    return runners


def model_runners(p: Pipeline, m: ModelRun, with_lemma1: bool) -> dict[str, Callable[[], None]]:
    """Model `m`'s stages (`plan.model_stages`), named for it, in order."""
    runners = {
        "train": functools.partial(train_model, p, m),
        "evaluate": functools.partial(evaluate_model, p, m),
        "probe": functools.partial(probe_model, p, m),
        "memory": functools.partial(measure_memory, p, m, with_lemma1=with_lemma1),
        "knockout": functools.partial(measure_knockout, p, m),
        "patching": functools.partial(measure_patching, p, m),
        "development": functools.partial(measure_development, p, m),
        "development-probe": functools.partial(probe_development, p, m),
    }
    return {m.stage(name): runners[name] for name in model_stages(p, m)}


def machine_description() -> dict:
    """The device and library versions, for the report."""
    if torch.cuda.is_available():
        count, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
        device = f"{count} x {name}"
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        device = f"{cores} CPU cores ({platform.machine()}), no GPU"
    return {
        "device": device,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def build_corpus(p: Pipeline) -> None:
    export_corpus(
        p.run.corpus_config(),
        p.corpus,
        num_proc=p.run.data_section.num_proc,
        overwrite=True,  # a folder left by an interrupted stage is replaced once the new one is whole
        table_rows=p.settings.corpus_table_rows,
        progress=p.progress,
    )


def train_model(p: Pipeline, m: ModelRun) -> None:
    """Train in this process (`accelerate launch` for several GPUs); resume from the last
    complete checkpoint, or start over if an earlier try stopped before its first one."""
    folder = m.path(names.TRAINING)
    resume = folder.is_dir() and any(is_complete_checkpoint(c) for c in checkpoints(folder))
    if folder.exists() and not resume:
        shutil.rmtree(folder)
    config_copy = m.path(names.RUN_CONFIG_COPY)
    write_text(config_copy, m.run.to_yaml())
    if p.num_processes == 1:
        train(m.run, resume=resume)
        return
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes"]
    command += [str(p.num_processes), "--module", TRAIN_COMMAND, "--config", str(config_copy)]
    command += ["--resume"] if resume else []
    done = subprocess.run(command, check=False)
    if done.returncode != 0 or not (folder / names.TRAIN_RESULTS_JSON).is_file():
        raise RuntimeError(
            f"training stopped (exit status {done.returncode}): {' '.join(command)}. Rerun the same "
            "command to resume from its last complete checkpoint."
        )


def measure_lemma1(p: Pipeline) -> None:
    data = load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    result = corpus_lemma1(data, p.settings.memories)
    build_folder(p.out / names.LEMMA1, lambda staging: write_lemma1(result, staging))


def trained_model(m: ModelRun):
    """The model training wrote, HMMRoFormer or another architecture, on the GPU when there is one."""
    return load_causal_lm(str(m.path(names.TRAINING)), check=check_causal_lm)


def measure_yardsticks(p: Pipeline) -> None:
    """Every yardstick's predictions on the seen- and unseen-task test rows, once per corpus."""
    facts, tensors = corpus_yardsticks(
        open_corpus(str(p.corpus)), p.settings.yardstick_rows, p.settings.prior_particles
    )
    build_folder(p.out / names.YARDSTICKS, lambda staging: write_yardsticks(staging, facts, tensors))


def evaluate_model(p: Pipeline, m: ModelRun) -> None:
    """Figure 1 against Bayes, with the untrained twin of the same seed scored beside the model;
    on a corpus with unseen tasks, the model against every yardstick too."""
    model = trained_model(m)
    data = load_evaluation_data(str(p.corpus), p.settings.eval_rows)
    result = figure1(model, data, twin=untrained_twin(model, m.seed), progress=p.progress)
    placed = None
    if has_unseen_tasks(p):
        _, tensors = read_yardsticks(p.out / names.YARDSTICKS)
        vocab = data.config.vocab_size + 1
        probs = {
            split: model_next_token_probs(model, tensors[f"{split}/input_ids"], vocab) for split in SPLITS
        }
        placed = place_model(probs, tensors, data.layout)

    def write(staging: Path) -> None:
        write_figure1(result.to_dict(), staging)
        if placed is not None:
            write_json(staging / names.YARDSTICKS_JSON, placed)

    build_folder(m.path(names.FIGURE1), write)


def measure_development(p: Pipeline, m: ModelRun) -> None:
    """Every network training kept, placed on the corpus's yardsticks and labelled
    (`development.place_networks`), with its figure."""
    facts, tensors = read_yardsticks(p.out / names.YARDSTICKS)
    kept = m.path(names.TRAINING) / names.DEVELOPMENT
    source = str(kept.relative_to(m.folder))
    record = place_networks(kept_networks(kept), open_corpus(str(p.corpus)), facts, tensors, source).to_dict()

    build_folder(
        m.path(names.DEVELOPMENT),
        lambda staging: write_development(record, staging / names.DEVELOPMENT_JSON),
    )


def probe_development(p: Pipeline, m: ModelRun) -> None:
    """The probes of the kept networks at the settings' `development_probes` steps, each with the
    network as training initialised it (step 0) as the control, each written whole in
    `development_probes/step-<N>/` as it finishes (a stopped stage keeps the finished ones)."""
    kept = dict(kept_networks(m.path(names.TRAINING) / names.DEVELOPMENT))
    missing = [step for step in (0, *p.settings.development_probes) if step not in kept]
    if missing:
        raise ValueError(
            f"{m.path(names.TRAINING)} kept no network at steps {missing} (it kept {sorted(kept)}): give "
            "development_probes among the steps of run.checkpoints."
        )
    corpus, twin = open_corpus(str(p.corpus)), load_causal_lm(str(kept[0]), check=check_causal_lm)
    for step in p.settings.development_probes:
        target = m.path(names.DEVELOPMENT_PROBES) / kept_name(step)
        if (target / names.PROBES_JSON).is_file():
            continue
        model = load_causal_lm(str(kept[step]), check=check_causal_lm)
        result = run_probing(
            model, corpus, p.settings.probe_config(), untrained_model=twin, progress=p.progress
        )
        build_folder(target, lambda staging, r=result: write_probe_results(r, staging))


def probe_model(p: Pipeline, m: ModelRun) -> None:
    """The probes, with the model as training initialised it (its seed) as the control."""
    model = trained_model(m)
    result = run_probing(
        model,
        open_corpus(str(p.corpus)),
        p.settings.probe_config(),
        untrained_model=untrained_twin(model, m.seed),
        progress=p.progress,
    )
    build_folder(m.path(names.PROBES), lambda staging: write_probe_results(result, staging))


def measure_memory(p: Pipeline, m: ModelRun, with_lemma1: bool) -> None:
    """The trained model against the memory-L Bayes predictors (and Lemma 1 on the same rows, if asked)."""
    model, data = trained_model(m), load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    lemma1 = corpus_lemma1(data, p.settings.memories) if with_lemma1 else None
    memory = corpus_model_memory(model, data, p.settings.memories)

    def write(staging: Path) -> None:
        if lemma1 is not None:
            write_lemma1(lemma1, staging)
        write_model_memory(memory, staging)

    build_folder(m.path(names.MEMORY), write)


def measure_knockout(p: Pipeline, m: ModelRun) -> None:
    """Rotary off in one layer at a time, for the model and its untrained twin, on the test
    tokens of the memory rows (`probing.knockout`). A model whose positions are not rotary
    (GPT-2) has no knock-out: its folder says why (`KNOCKOUT_SKIPPED`), and the claims that read it are n/a."""
    model = trained_model(m)
    reason = positions_outside_attention(model)
    if reason is not None:
        skipped = {"skipped": reason}
        build_folder(m.path(names.KNOCKOUT), lambda staging: write_json(staging / KNOCKOUT_SKIPPED, skipped))
        return
    data = load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    bayes = reference_predictors(data.params)["bayes"].next_token_probs(data.input_ids, data.task_ids)
    scored = scored_test_positions(data.layout, len(data.input_ids))
    networks = {"trained": model, "twin": untrained_twin(model, m.seed)}
    result = {
        name: rotary_knockout(network, data.input_ids, scored, bayes, progress=p.progress)
        for name, network in networks.items()
    }

    def write(staging: Path) -> None:
        write_json(staging / names.KNOCKOUT_JSON, result)
        plot_rotary_knockout(result["trained"], staging / names.KNOCKOUT_PNG, untrained=result["twin"])

    build_folder(m.path(names.KNOCKOUT), write)


def measure_patching(p: Pipeline, m: ModelRun) -> None:
    """Activation patching of the model and of its untrained twin on the same fresh rows, donors
    and positions (`probing.patching.run_patching`, the settings' `PatchingConfig`)."""
    model = trained_model(m)
    corpus = open_corpus(str(p.corpus))
    result = run_patching(
        model, corpus.config, corpus.params, p.settings.patching_config(), untrained_twin(model, m.seed)
    )
    build_folder(m.path(names.PATCHING), lambda staging: write_patching_results(result, staging))


def write_json_and_report(p: Pipeline, results: dict, report: str) -> None:
    write_json(p.out / names.RESULTS_JSON, results)
    write_text(p.out / names.REPORT_MD, report)
