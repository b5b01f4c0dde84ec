"""The paper end to end in one folder: corpus, training, Figure 1, probes, cards, report.

    <out>/
      corpus/            the exported corpus (Parquet, HMM parameters, dataset card)
      training/          the Trainer's output: checkpoints, TensorBoard logs, the final model
      figure1/           figure1.json, figure1.png (against the Bayes-optimal predictor)
      probes/            probe_results.json, Figures 2, 3(a), 3(b), 7
      model/             the checkpoint to publish: weights, code, configs, figures, model card
      REPORT.md, results.json
      reproduce_state.json   which stages are complete, their wall times, the settings' fingerprint

Stages run in order; a rerun skips every stage the state file marks complete and redoes the
others. A stage builds its folder in a hidden sibling and renames it into place when done,
so an interrupted stage leaves nothing that looks complete; training resumes from its last
complete checkpoint (checkpoints are whole: see `training.is_complete_checkpoint`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hmm_datasets.corpus import open_corpus
from hmm_datasets.export import build_folder, export_corpus
from hmm_datasets.memory import check_memories
from model_cards.render import render_report, write_model_card
from probing.capture import load_hmm_roformer
from probing.plots import write_probe_results
from probing.run import ProbeConfig, run_probing

from . import stages
from .evaluation import figure1, load_evaluation_data, write_figure1
from .memory import write_memory
from .summary import summarize_model_folder
from .training import RunConfig, checkpoints, initial_model, is_complete_checkpoint, load_run_config

STAGES = ("corpus", "train", "evaluate", "probe", "memory", "model", "report")
STATE_KIND = "reproduce"
STATE_NAME = f"{STATE_KIND}_state.json"
STAGE_FOLDERS = {
    "corpus": "corpus",
    "train": "training",
    "evaluate": "figure1",
    "probe": "probes",
    "memory": "memory",
    "model": "model",
}
MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".py", ".yaml")


@dataclass(frozen=True)
class ReproducePreset:
    """What one `--preset` runs: a run config from `configs/`, and the evaluation sizes."""

    name: str
    run_config: str  # file name in configs/
    eval_rows: int  # test rows of Figure 1
    corpus_table_rows: int  # test rows of the Bayes-optimal table on the dataset card
    probe: dict = field(default_factory=dict)  # ProbeConfig fields that differ from the defaults
    memories: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # Lemma 1's memories L
    memory_rows: int = 128  # test rows of Lemma 1 and of the model's memory

    def __post_init__(self) -> None:
        if self.eval_rows < 1:
            raise ValueError(f"eval_rows={self.eval_rows} must be at least 1.")
        if self.memory_rows < 1:
            raise ValueError(f"memory_rows={self.memory_rows} must be at least 1.")
        check_memories(self.memories)
        if self.corpus_table_rows < 0:
            raise ValueError(f"corpus_table_rows={self.corpus_table_rows} must be 0 or more.")


PRESETS = {
    "tiny": ReproducePreset(
        "tiny",
        "tiny.yaml",
        eval_rows=64,
        corpus_table_rows=64,
        probe={
            "num_probe_tasks": 8,
            "rows_per_task": 16,
            "positions_per_row": 16,
            "distances": (1, 2, 3),
            "num_resamples": 100,
            "shuffle_rows": 32,
            "max_iter": 50,
        },
        memories=(1, 2, 4, 8),
        memory_rows=32,
    ),
    "small": ReproducePreset("small", "small.yaml", eval_rows=512, corpus_table_rows=512),
    "paper": ReproducePreset("paper", "paper.yaml", eval_rows=2048, corpus_table_rows=512),
}


@dataclass
class Reproduction:
    """One reproduction folder and how to fill it."""

    preset: ReproducePreset
    out: Path
    run: RunConfig  # data.source and training.output_dir point into `out`
    train_script: Path
    num_processes: int = 1
    progress: bool = True

    def path(self, stage: str) -> Path:
        return self.out / STAGE_FOLDERS[stage]

    def fingerprint(self) -> str:
        """Hash of every setting that shapes the results (not of where the folder lies)."""
        run = self.run.to_dict()
        run["data"].pop("source", None)
        run["training"].pop("output_dir", None)
        run["training"].pop("disable_tqdm", None)
        record = {"preset": dataclasses.asdict(self.preset), "run": run}
        return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_reproduction(
    preset: str,
    out: str | os.PathLike,
    *,
    configs_dir: str | os.PathLike,
    train_script: str | os.PathLike,
    overrides: list[str] | None = None,
    num_processes: int = 1,
    progress: bool = True,
) -> Reproduction:
    """Resolve a preset's run config (with `--section.field=value` overrides) for folder `out`."""
    if preset not in PRESETS:
        raise ValueError(
            f"--preset {preset!r} is not a reproduction preset; choose one of {sorted(PRESETS)}."
        )
    if num_processes < 1:
        raise ValueError(f"--num-processes {num_processes} must be at least 1.")
    if num_processes > 1 and not torch.cuda.is_available():
        raise ValueError(
            f"--num-processes {num_processes} needs as many GPUs and there is none: on a CPU the run uses "
            "one process with every core (leave --num-processes out)."
        )
    settings, out = PRESETS[preset], Path(out)
    placed = [
        *(overrides or []),
        f"--data.source={out / STAGE_FOLDERS['corpus']}",
        f"--training.output_dir={out / STAGE_FOLDERS['train']}",
    ]
    if not progress:
        placed.append("--training.disable_tqdm=true")
    run = load_run_config(Path(configs_dir) / settings.run_config, placed)
    return Reproduction(settings, out, run, Path(train_script), num_processes, progress)


# ---- the state file and the run ---------------------------------------------------------------
def read_state(reproduction: Reproduction) -> dict:
    """The state of `out`, a fresh one for a new folder; refuses a folder made with other settings."""
    return stages.read_state(
        reproduction.out, STATE_KIND, reproduction.fingerprint(), reproduction.preset.name
    )


def run_reproduction(
    reproduction: Reproduction, *, redo: str | None = None, log: Callable[[str], None] = print
) -> dict:
    """Run every stage that is not complete yet, in order; returns the final state."""
    state = read_state(reproduction)
    if redo is not None:
        state = stages.forget_stages(state, list(STAGES), redo)
    runners = {
        "corpus": build_corpus,
        "train": train_model,
        "evaluate": evaluate_model,
        "probe": probe_model,
        "memory": measure_memory,
        "model": package_model,
        "report": write_report,
    }
    return stages.run_stages(
        reproduction.out,
        STATE_KIND,
        state,
        {stage: functools.partial(runners[stage], reproduction, state) for stage in STAGES},
        log,
    )


# ---- the stages -------------------------------------------------------------------------------
def build_corpus(reproduction: Reproduction, state: dict) -> None:
    export_corpus(
        reproduction.run.corpus_config(),
        reproduction.path("corpus"),
        num_proc=reproduction.run.data.get("num_proc"),
        overwrite=True,  # a folder left by an interrupted stage is replaced once the new one is whole
        table_rows=reproduction.preset.corpus_table_rows,
        progress=reproduction.progress,
    )


def launch_command(reproduction: Reproduction, resume: bool) -> list[str]:
    """`accelerate launch` of scripts/train.py with this reproduction's run config."""
    processes = reproduction.num_processes
    if torch.cuda.is_available():
        devices = (["--multi_gpu"] if processes > 1 else []) + ["--num_processes", str(processes)]
    else:
        devices = ["--cpu", "--num_processes", "1"]  # without --num_processes accelerate uses one thread
    command = [sys.executable, "-m", "accelerate.commands.launch", *devices, str(reproduction.train_script)]
    command += ["--config", str(reproduction.out / "run_config.yaml")]
    return command + (["--resume"] if resume else [])


def train_model(reproduction: Reproduction, state: dict) -> None:
    """Train under `accelerate launch`; resume from the last complete checkpoint if there is one."""
    folder = reproduction.path("train")
    resume = folder.is_dir() and any(is_complete_checkpoint(p) for p in checkpoints(folder))
    if folder.exists() and not resume:
        shutil.rmtree(folder)  # a run stopped before its first complete checkpoint: start over
    stages.write_text_atomically(reproduction.out / "run_config.yaml", reproduction.run.to_yaml())
    command = launch_command(reproduction, resume)
    done = subprocess.run(command, check=False)
    if done.returncode != 0 or not (folder / "train_results.json").is_file():
        raise RuntimeError(
            f"training stopped (exit status {done.returncode}): {' '.join(command)}. Rerun the same "
            "reproduce command to resume from its last complete checkpoint."
        )


def load_trained_model(reproduction: Reproduction):
    return load_hmm_roformer(str(reproduction.path("train")))  # on the GPU when there is one


def evaluate_model(reproduction: Reproduction, state: dict) -> None:
    model = load_trained_model(reproduction)
    data = load_evaluation_data(str(reproduction.path("corpus")), reproduction.preset.eval_rows)
    result = figure1(model, data, progress=reproduction.progress)
    build_folder(reproduction.path("evaluate"), lambda staging: write_figure1(result, staging))


def probe_model(reproduction: Reproduction, state: dict) -> None:
    """The probes, with the model as training initialised it as the control."""
    model = load_trained_model(reproduction)
    corpus = open_corpus(str(reproduction.path("corpus")))
    untrained = initial_model(reproduction.run, corpus.config).to(model.device)
    result = run_probing(
        model,
        corpus,
        ProbeConfig(**reproduction.preset.probe),
        untrained_model=untrained,
        progress=reproduction.progress,
    )
    build_folder(reproduction.path("probe"), lambda staging: write_probe_results(result, staging))


def measure_memory(reproduction: Reproduction, state: dict) -> None:
    """Lemma 1 on the corpus, and the trained model cut to its last L tokens."""
    model = load_trained_model(reproduction)
    data = load_evaluation_data(str(reproduction.path("corpus")), reproduction.preset.memory_rows)
    build_folder(
        reproduction.path("memory"),
        lambda staging: write_memory(
            model, data, reproduction.preset.memories, staging, reproduction.progress
        ),
    )


def package_model(reproduction: Reproduction, state: dict) -> None:
    """The checkpoint to publish: final weights, code and configs, the figures, the model card."""
    trained, final = reproduction.path("train"), reproduction.path("model")

    def write(staging: Path) -> None:
        for path in sorted(trained.iterdir()):
            if path.is_file() and path.suffix in MODEL_FILE_SUFFIXES:
                shutil.copy2(path, staging / path.name)
        for stage in ("evaluate", "probe", "memory"):
            shutil.copytree(reproduction.path(stage), staging / STAGE_FOLDERS[stage])
        write_model_card(staging, summarize_model_folder(staging), location=str(final))

    build_folder(final, write)


REPORT_FILES = {
    "REPORT.md": "this report",
    "results.json": "every number of this report, with the stage times and the machine",
    "corpus/": "the corpus: Parquet shards, HMM parameters, dataset card (a Hub dataset repo)",
    "model/": "the final checkpoint with its code, configs, figures and model card (a Hub model repo)",
    "training/": "the Trainer's output: checkpoints, TensorBoard logs (`tensorboard --logdir training/runs`)",
    "figure1/": "Figure 1: figure1.json, figure1.png",
    "probes/": "Figures 2, 3(a), 3(b), 7: probe_results.json and the PNGs",
    "memory/": "Lemma 1 (lemma1.json, lemma1.png) and the model's own memory (memory.json)",
    "run_config.yaml": "the run config training used",
    STATE_NAME: "which stages are complete, with their wall times",
}


def write_report(reproduction: Reproduction, state: dict) -> None:
    summary = summarize_model_folder(reproduction.path("model"))
    seconds = {stage: record["seconds"] for stage, record in state["stages"].items()}
    machine = stages.machine_description()
    results = {"preset": reproduction.preset.name, **summary, "stage_seconds": seconds, "machine": machine}
    stages.write_text_atomically(reproduction.out / "results.json", json.dumps(results, indent=1) + "\n")
    report = render_report(
        summary,
        preset=reproduction.preset.name,
        stage_seconds=seconds,
        machine=machine,
        files=REPORT_FILES,
        files_root=f"{reproduction.out}/",
    )
    stages.write_text_atomically(reproduction.out / "REPORT.md", report)
