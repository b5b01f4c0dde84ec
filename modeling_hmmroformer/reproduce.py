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
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

from hmm_datasets.corpus import open_corpus
from hmm_datasets.export import build_folder, export_corpus
from model_cards.render import render_report, write_model_card
from probing.capture import load_hmm_roformer
from probing.plots import write_probe_results
from probing.run import ProbeConfig, run_probing

from .evaluation import figure1, load_evaluation_data, write_figure1
from .summary import summarize_model_folder
from .training import RunConfig, checkpoints, is_complete_checkpoint, load_run_config

STAGES = ("corpus", "train", "evaluate", "probe", "model", "report")
STATE_NAME = "reproduce_state.json"
STAGE_FOLDERS = {
    "corpus": "corpus",
    "train": "training",
    "evaluate": "figure1",
    "probe": "probes",
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

    def __post_init__(self) -> None:
        if self.eval_rows < 1:
            raise ValueError(f"eval_rows={self.eval_rows} must be at least 1.")
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


# ---- the state file ------------------------------------------------------------------------
def read_state(reproduction: Reproduction) -> dict:
    """The state of `out`, a fresh one for a new folder; refuses a folder made with other settings."""
    out, path = reproduction.out, reproduction.out / STATE_NAME
    fresh = {"preset": reproduction.preset.name, "fingerprint": reproduction.fingerprint(), "stages": {}}
    if not path.is_file():
        if out.exists() and any(out.iterdir()):
            raise ValueError(
                f"{out} is not empty and holds no {STATE_NAME}: it is not a reproduction folder. "
                "Choose another --out (nothing was written)."
            )
        return fresh
    state = json.loads(path.read_text())
    if state.get("fingerprint") != fresh["fingerprint"]:
        raise ValueError(
            f"{out} holds a reproduction with other settings (preset {state.get('preset')!r}, fingerprint "
            f"{state.get('fingerprint')}; these settings: {fresh['fingerprint']}). Choose another --out, or "
            "delete that folder to start over (nothing was changed)."
        )
    return state


def write_state(reproduction: Reproduction, state: dict) -> None:
    write_text_atomically(reproduction.out / STATE_NAME, json.dumps(state, indent=2) + "\n")


def write_text_atomically(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temporary sibling renamed over it)."""
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_text(text)
    os.replace(temporary, path)


def forget_stages(state: dict, first: str) -> dict:
    """The state with `first` and every later stage marked incomplete (`--redo first`)."""
    if first not in STAGES:
        raise ValueError(f"--redo {first!r} is not a stage; stages are {', '.join(STAGES)}.")
    later = STAGES[STAGES.index(first) :]
    return {**state, "stages": {name: v for name, v in state["stages"].items() if name not in later}}


# ---- running ----------------------------------------------------------------------------------
def run_reproduction(
    reproduction: Reproduction, *, redo: str | None = None, log: Callable[[str], None] = print
) -> dict:
    """Run every stage that is not complete yet, in order; returns the final state."""
    state = read_state(reproduction)
    if redo is not None:
        state = forget_stages(state, redo)
    reproduction.out.mkdir(parents=True, exist_ok=True)
    write_state(reproduction, state)
    runners = {
        "corpus": build_corpus,
        "train": train_model,
        "evaluate": evaluate_model,
        "probe": probe_model,
        "model": package_model,
        "report": write_report,
    }
    for index, stage in enumerate(STAGES, start=1):
        if stage in state["stages"]:
            log(
                f"[{index}/{len(STAGES)}] {stage}: complete, skipped ({state['stages'][stage]['seconds']:.1f} s)"
            )
            continue
        log(f"[{index}/{len(STAGES)}] {stage} ...")
        started = time.perf_counter()
        runners[stage](reproduction, state)
        seconds = time.perf_counter() - started
        state["stages"][stage] = {"seconds": seconds, "completed": _now()}
        write_state(reproduction, state)
        log(f"[{index}/{len(STAGES)}] {stage}: done in {seconds:.1f} s")
    return state


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


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
    write_text_atomically(reproduction.out / "run_config.yaml", reproduction.run.to_yaml())
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
    model = load_trained_model(reproduction)
    corpus = open_corpus(str(reproduction.path("corpus")))
    result = run_probing(
        model, corpus, ProbeConfig(**reproduction.preset.probe), progress=reproduction.progress
    )
    build_folder(reproduction.path("probe"), lambda staging: write_probe_results(result, staging))


def package_model(reproduction: Reproduction, state: dict) -> None:
    """The checkpoint to publish: final weights, code and configs, the figures, the model card."""
    trained, final = reproduction.path("train"), reproduction.path("model")

    def write(staging: Path) -> None:
        for path in sorted(trained.iterdir()):
            if path.is_file() and path.suffix in MODEL_FILE_SUFFIXES:
                shutil.copy2(path, staging / path.name)
        for stage in ("evaluate", "probe"):
            shutil.copytree(reproduction.path(stage), staging / STAGE_FOLDERS[stage])
        write_model_card(staging, summarize_model_folder(staging), location=str(final))

    build_folder(final, write)


def machine_description() -> dict:
    """The device and library versions, for the report."""
    if torch.cuda.is_available():
        device = (
            f"1 x {torch.cuda.get_device_name(0)}"
            if torch.cuda.device_count() == 1
            else (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
        )
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


REPORT_FILES = {
    "REPORT.md": "this report",
    "results.json": "every number of this report, with the stage times and the machine",
    "corpus/": "the corpus: Parquet shards, HMM parameters, dataset card (a Hub dataset repo)",
    "model/": "the final checkpoint with its code, configs, figures and model card (a Hub model repo)",
    "training/": "the Trainer's output: checkpoints, TensorBoard logs (`tensorboard --logdir training/runs`)",
    "figure1/": "Figure 1: figure1.json, figure1.png",
    "probes/": "Figures 2, 3(a), 3(b), 7: probe_results.json and the PNGs",
    "run_config.yaml": "the run config training used",
    STATE_NAME: "which stages are complete, with their wall times",
}


def write_report(reproduction: Reproduction, state: dict) -> None:
    summary = summarize_model_folder(reproduction.path("model"))
    seconds = {stage: record["seconds"] for stage, record in state["stages"].items()}
    machine = machine_description()
    results = {"preset": reproduction.preset.name, **summary, "stage_seconds": seconds, "machine": machine}
    write_text_atomically(reproduction.out / "results.json", json.dumps(results, indent=1) + "\n")
    report = render_report(
        summary,
        preset=reproduction.preset.name,
        stage_seconds=seconds,
        machine=machine,
        files=REPORT_FILES,
        files_root=f"{reproduction.out}/",
    )
    write_text_atomically(reproduction.out / "REPORT.md", report)
