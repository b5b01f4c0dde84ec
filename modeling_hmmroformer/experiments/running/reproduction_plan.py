"""The reproduction: one model trained on the corpus it generates, analysed against its twin,
published as a checkpoint with its model card, and a report (`scripts/reproduce.py`).

    corpus, yardsticks (a corpus with unseen tasks), train, evaluate, probe, memory (with Lemma 1
    on the same rows), knockout, model (the checkpoint to publish), report
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

from hmm_datasets.files import build_folder
from model_cards.render import render_report, write_model_card

from .. import names
from .engine import RunState
from .folders import summarize_model_folder
from .plan import ModelRun, Pipeline, Plan
from .stages import machine_description, model_runners, shared_runners, write_json_and_report

MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".py", ".yaml")  # what `model/` copies from training/


def reproduction_stages(p: Pipeline, state: RunState) -> dict[str, Callable[[], None]]:
    """Every stage of a reproduction, in order (the module docstring)."""
    [m] = p.models
    return {
        **shared_runners(p),
        **model_runners(p, m, with_lemma1=True),
        "model": functools.partial(package_model, p, m),
        "report": functools.partial(write_report, p, state),
    }


REPRODUCTION = Plan("reproduce", "reproduction", grid=False, stages=reproduction_stages)


def package_model(p: Pipeline, m: ModelRun) -> None:
    """The checkpoint to publish: final weights, code and configs, the analyses, the model card."""
    trained, final = m.path(names.TRAINING), p.out / names.MODEL

    def write(staging: Path) -> None:
        for path in sorted(trained.iterdir()):
            if path.is_file() and path.suffix in MODEL_FILE_SUFFIXES:
                shutil.copy2(path, staging / path.name)
        for name in (names.FIGURE1, names.PROBES, names.MEMORY, names.KNOCKOUT):
            shutil.copytree(m.path(name), staging / name)
        write_model_card(staging, summarize_model_folder(staging), location=str(final))

    build_folder(final, write)


REPORT_FILES = {
    names.REPORT_MD: "this report",
    names.RESULTS_JSON: "every number of this report, with the stage times and the machine",
    f"{names.CORPUS}/": "the corpus: Parquet shards, HMM parameters, dataset card (a Hub dataset repo)",
    f"{names.MODEL}/": "the final checkpoint with its code, configs, figures and model card (a Hub model repo)",
    f"{names.TRAINING}/": "the Trainer's output: checkpoints, TensorBoard logs (`tensorboard --logdir training/runs`)",
    f"{names.FIGURE1}/": "Figure 1: figure1.json, figure1.png",
    f"{names.PROBES}/": "Figures 2, 3(a), 3(b), 7: probe_results.json and the PNGs",
    f"{names.MEMORY}/": "Lemma 1 (lemma1.json, lemma1.png) and the model's own memory (memory.json)",
    f"{names.KNOCKOUT}/": "the rotary knock-out, model and twin (knockout.json, knockout.png)",
    names.RUN_CONFIG_COPY: "the run config training used",
    names.state_file("reproduce"): "which stages are complete, with their wall times",
}


def write_report(p: Pipeline, state: RunState) -> None:
    """A reproduction's results.json and REPORT.md, from its published model folder."""
    summary = summarize_model_folder(p.out / names.MODEL)
    results = {
        "preset": p.settings.name,
        **summary,
        "stage_seconds": state.seconds(),
        "machine": machine_description(),
    }
    write_json_and_report(p, results, report_text(results, p.out))


REPORT_EXTRAS = ("preset", "stage_seconds", "machine")  # what results.json adds to the model's summary


def report_text(results: dict, out: Path) -> str:
    """REPORT.md of a reproduction in folder `out` from its results.json (`write_report`)."""
    summary = {key: value for key, value in results.items() if key not in REPORT_EXTRAS}
    return render_report(
        summary,
        preset=results["preset"],
        stage_seconds=results["stage_seconds"],
        machine=results["machine"],
        files=REPORT_FILES,
        files_root=f"{out}/",
    )
