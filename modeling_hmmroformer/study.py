"""The depth-and-seed study: do the paper's layerwise claims hold at the paper's depth?

One corpus, models of several depths at one width, several training seeds each (seed =
initialisation and data order); every model is measured against the Bayes-optimal
predictor (Figure 1's KL and argmax agreement), probed (Figures 2, 3(a), 3(b), with the
untrained model of the same initialisation as a control) and cut to a fixed memory (Lemma 1
for the model); Lemma 1 is measured once on the corpus. Every claim is decided per seed and
reported per depth as "holds in m of n seeds" with the across-seed mean of its statistic and
a t interval over seeds.

    <out>/
      corpus/                         the exported corpus
      lemma1/                         lemma1.json, lemma1.png (memory-L Bayes vs full)
      models/depth<L>-seed<s>/
        training/                     the Trainer's output and the final model
        analysis/                     figure1.json, probe_results.json, memory.json, figures
      figures/                        curves against relative depth l/L, mean over seeds with a band
      results.json, REPORT.md
      study_state.json                complete stages, their wall times, the settings' fingerprint

Stages (resumable, as `reproduce.py`'s): corpus, lemma1, then per model "train" and
"analyse", then report.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hmm_datasets.corpus import open_corpus
from hmm_datasets.export import build_folder, export_corpus
from model_cards.render import render_study_report
from probing.capture import load_hmm_roformer
from probing.plots import write_probe_results
from probing.run import ProbeConfig, run_probing, summarize_probe_results

from . import stages
from .evaluation import figure1, load_evaluation_data, write_figure1
from .memory import write_lemma1, write_model_memory
from .study_plots import SHUFFLE_PARTS, plot_study
from .summary import paper_claims
from .training import (
    RunConfig,
    build_model_config,
    checkpoints,
    initial_model,
    is_complete_checkpoint,
    load_run_config,
    train,
)

STATE_KIND = "study"

# t quantiles (0.975) for an across-seed interval with n - 1 degrees of freedom.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


@dataclass
class StudyConfig:
    """What a study runs (validated). `overrides` are `--section.field value` of the run config."""

    name: str = "default"
    run_config: str = "study.yaml"  # in configs/
    depths: tuple[int, ...] = (2, 4, 8, 16)
    seeds: tuple[int, ...] = (0, 1, 2)
    overrides: tuple[str, ...] = ()
    eval_rows: int = 512
    memories: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    memory_rows: int = 128
    probe: dict = field(default_factory=dict)  # ProbeConfig fields that differ from the defaults

    def __post_init__(self) -> None:
        self.depths = tuple(self.depths)
        self.seeds = tuple(self.seeds)
        self.memories = tuple(self.memories)
        self.overrides = tuple(self.overrides)
        for name in ("depths", "seeds", "memories"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name} is empty: give at least one.")
            if any(not isinstance(v, int) for v in values):
                raise ValueError(f"{name}={list(values)} must be integers.")
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{name} {repeated} given twice: give each once ({name}={list(values)}).")
        if min(self.depths) < 2:
            raise ValueError(
                f"depths={list(self.depths)}: every model needs at least 2 layers (the shuffle test "
                "compares its upper with its lower layers)."
            )
        if min(self.seeds) < 0:
            raise ValueError(f"seeds={list(self.seeds)} must be >= 0.")
        if min(self.memories) < 1:
            raise ValueError(f"memories={list(self.memories)}: a memory L keeps at least 1 token (L >= 1).")
        for name in ("eval_rows", "memory_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1.")
        layers = self.probe.get("layers")
        if layers is not None and max(layers) > min(self.depths):
            raise ValueError(
                f"probe layers {list(layers)} ask for more layers than the shallowest model has "
                f"({min(self.depths)}): leave probe layers out (all layers of every model) or use "
                f"hidden-state indices up to {min(self.depths)}."
            )
        ProbeConfig(**self.probe)  # its own checks, early

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


STUDIES = {
    "default": StudyConfig(),
    # The test suite's end-to-end run: seconds on 2 cores.
    "quick": StudyConfig(
        name="quick",
        run_config="tiny.yaml",
        depths=(2, 3),
        seeds=(0, 1),
        overrides=(
            "--training.max_steps",
            "20",
            "--training.eval_steps",
            "10",
            "--training.save_steps",
            "10",
        ),
        eval_rows=32,
        memories=(1, 2, 4),
        memory_rows=16,
        probe={
            "num_probe_tasks": 4,
            "rows_per_task": 8,
            "positions_per_row": 8,
            "distances": (1, 2),
            "num_resamples": 50,
            "shuffle_rows": 16,
            "max_iter": 20,
        },
    ),
}


@dataclass
class Study:
    """One study folder and how to fill it."""

    config: StudyConfig
    out: Path
    configs_dir: Path
    progress: bool = True

    def model_folder(self, depth: int, seed: int) -> Path:
        return self.out / "models" / f"depth{depth}-seed{seed}"

    def run_config(self, depth: int, seed: int) -> RunConfig:
        folder = self.model_folder(depth, seed)
        placed = [
            *self.config.overrides,
            f"--data.source={self.out / 'corpus'}",
            f"--training.output_dir={folder / 'training'}",
            f"--model.num_hidden_layers={depth}",
            f"--training.seed={seed}",
        ]
        if not self.progress:
            placed.append("--training.disable_tqdm=true")
        return load_run_config(self.configs_dir / self.config.run_config, placed)

    def fingerprint(self) -> str:
        """Hash of every setting that shapes the results (not of where the folder lies)."""
        run = self.run_config(self.config.depths[0], self.config.seeds[0]).to_dict()
        run["data"].pop("source", None)
        for key in ("output_dir", "disable_tqdm", "seed"):
            run["training"].pop(key, None)
        run["model"].pop("num_hidden_layers", None)
        record = {"study": self.config.to_dict(), "run": run}
        return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def models(self) -> list[tuple[int, int]]:
        """(depth, seed) pairs, seed by seed: a study stopped early has every depth for its first seeds."""
        return [(depth, seed) for seed in self.config.seeds for depth in self.config.depths]


def make_study(
    name: str, out: str | os.PathLike, *, configs_dir: str | os.PathLike, progress: bool = True, **changes
) -> Study:
    """A named study (`STUDIES`) with any of its fields changed, for folder `out`."""
    if name not in STUDIES:
        raise ValueError(f"--study {name!r} is not a study; choose one of {sorted(STUDIES)}.")
    changes = {key: value for key, value in changes.items() if value is not None}
    if "overrides" in changes:  # added to the study's own
        changes["overrides"] = (*STUDIES[name].overrides, *changes["overrides"])
    config = dataclasses.replace(STUDIES[name], **changes)
    return Study(config, Path(out), Path(configs_dir), progress)


def stage_names(study: Study) -> list[str]:
    """Every model is trained before any is analysed: training is the long part and needs
    nothing from the analysis."""
    models = study.models()
    return [
        "corpus",
        *(f"train depth{depth} seed{seed}" for depth, seed in models),
        "lemma1",
        *(f"analyse depth{depth} seed{seed}" for depth, seed in models),
        "report",
    ]


def run_study(study: Study, *, redo: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Run every stage that is not complete yet, in order; returns the final state."""
    state = stages.read_state(study.out, STATE_KIND, study.fingerprint(), study.config.name)
    names = stage_names(study)
    if redo is not None:
        state = stages.forget_stages(state, names, redo)
    runners = {
        "corpus": functools.partial(build_corpus, study),
        "lemma1": functools.partial(measure_lemma1, study),
    }
    for depth, seed in study.models():
        runners[f"train depth{depth} seed{seed}"] = functools.partial(train_one, study, depth, seed)
        runners[f"analyse depth{depth} seed{seed}"] = functools.partial(analyse_one, study, depth, seed)
    runners["report"] = functools.partial(write_study_report, study, state)
    return stages.run_stages(study.out, STATE_KIND, state, {name: runners[name] for name in names}, log)


# ---- the stages -------------------------------------------------------------------------------
def build_corpus(study: Study) -> None:
    run = study.run_config(study.config.depths[0], study.config.seeds[0])
    export_corpus(
        run.corpus_config(),
        study.out / "corpus",
        num_proc=run.data.get("num_proc"),
        overwrite=True,
        table_rows=study.config.memory_rows,
        progress=study.progress,
    )


def measure_lemma1(study: Study) -> None:
    data = load_evaluation_data(str(study.out / "corpus"), study.config.memory_rows)
    build_folder(study.out / "lemma1", lambda staging: write_lemma1(data, study.config.memories, staging))


def train_one(study: Study, depth: int, seed: int) -> None:
    """Train one model; resume from its last complete checkpoint if an earlier try was stopped."""
    run = study.run_config(depth, seed)
    folder = run.output_dir
    resume = folder.is_dir() and any(is_complete_checkpoint(p) for p in checkpoints(folder))
    if folder.exists() and not resume:
        shutil.rmtree(folder)  # stopped before its first complete checkpoint: start over
    train(run, resume=resume)


def untrained_model(study: Study, depth: int, seed: int):
    """The model as training initialised it: the same seed gives the same initial weights."""
    corpus = open_corpus(str(study.out / "corpus"))
    return initial_model(study.run_config(depth, seed), corpus.config)


def analyse_one(study: Study, depth: int, seed: int) -> None:
    """Figure 1 against Bayes, the probes (untrained model as control), the model's memory."""
    folder = study.model_folder(depth, seed)
    model = load_hmm_roformer(str(folder / "training"))
    data = load_evaluation_data(str(study.out / "corpus"), study.config.eval_rows)
    corpus = open_corpus(str(study.out / "corpus"))
    untrained = untrained_model(study, depth, seed).to(model.device)
    fig1 = figure1(model, data, progress=study.progress)
    probes = run_probing(
        model, corpus, ProbeConfig(**study.config.probe), untrained_model=untrained, progress=study.progress
    )
    memory_data = load_evaluation_data(str(study.out / "corpus"), study.config.memory_rows)

    def write(staging: Path) -> None:
        write_figure1(fig1, staging)
        write_probe_results(probes, staging)
        write_model_memory(model, memory_data, study.config.memories, staging, study.progress)

    build_folder(folder / "analysis", write)


# ---- aggregation ------------------------------------------------------------------------------
def across_seeds(values: list[float]) -> dict:
    """Mean over seeds with a 95% t interval (none from one seed)."""
    array = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if array.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    mean = float(array.mean())
    if array.size == 1:
        return {"mean": mean, "ci_low": None, "ci_high": None, "n": 1}
    half = T_975.get(array.size - 1, 1.96) * float(array.std(ddof=1)) / math.sqrt(array.size)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": int(array.size)}


def aggregate_claims(claims_per_seed: list[list[dict]]) -> list[dict]:
    """One row per claim: in how many seeds it holds, and its statistic across seeds.

    Each seed's claims are `paper_claims` records (`figure`, `claim`, `holds`, `statistic`);
    claims are matched by their text.
    """
    order, by_claim = [], {}
    for claims in claims_per_seed:
        for claim in claims:
            key = (claim["figure"], claim["claim"])
            if key not in by_claim:
                order.append(key)
                by_claim[key] = []
            by_claim[key].append(claim)
    rows = []
    for figure, text in order:
        seen = by_claim[(figure, text)]
        statistic = seen[0].get("statistic") or {}
        rows.append(
            {
                "figure": figure,
                "claim": text,
                "holds_in": sum(bool(c["holds"]) for c in seen),
                "seeds": len(seen),
                "statistic": statistic.get("name"),
                **across_seeds([(c.get("statistic") or {}).get("value") for c in seen]),
            }
        )
    return rows


def claims_table(depths: list[dict]) -> list[dict]:
    """Claim x depth: one row per claim (in the order first seen), one cell per depth."""
    rows, index = [], {}
    for column, depth in enumerate(depths):
        for claim in depth["claims"]:
            key = (claim["figure"], claim["claim"])
            if key not in index:
                index[key] = len(rows)
                rows.append(
                    {**{k: claim[k] for k in ("figure", "claim", "statistic")}, "cells": [None] * len(depths)}
                )
            rows[index[key]]["cells"][column] = claim
    return rows


def per_layer(records: list[dict], target: str, metric: str, positions: str = "all") -> list[float | None]:
    """Values of a per-layer metric (mean over heads), in layer order."""
    chosen = sorted(
        (
            r
            for r in records
            if (r["target"], r["metric"], r.get("positions", "all")) == (target, metric, positions)
            and r["layer"] is not None
            and r["head"] is None
        ),
        key=lambda r: r["layer"],
    )
    return [r["value"] for r in chosen]


def model_curves(probes: dict) -> dict:
    """The per-layer curves the study plots against relative depth l/L."""
    records, depth = probes["records"], probes["model"]["num_hidden_layers"]
    shuffle = {metric: per_layer(records, "shuffle", metric) for metric in SHUFFLE_PARTS}
    return {
        "attention_depth": [layer / depth for layer in range(1, depth + 1)],
        "probe_depth": probes["relative_depth"],
        "shuffle": {metric: values for metric, values in shuffle.items() if values},
        "headroom_demo1": {
            t: per_layer(records, t, "headroom_fraction", "demo1") for t in ("task", "hidden_state")
        },
        "previous_tokens": {
            str(d): per_layer(records, f"previous_token_{d}", "accuracy")
            for d in probes["settings"]["distances"]
        },
    }


def model_record(study: Study, depth: int, seed: int) -> dict:
    """What one model's analysis says: its distance to Bayes, its claims, curves and memory."""
    analysis = study.model_folder(depth, seed) / "analysis"
    fig1 = json.loads((analysis / "figure1.json").read_text())
    probes = json.loads((analysis / "probe_results.json").read_text())
    memory = json.loads((analysis / "memory.json").read_text())
    peaks = probes["patterns"]["figure3b"]["by_distance"]
    return {
        "depth": depth,
        "seed": seed,
        "model_vs_bayes": fig1["model_vs_bayes"],
        "claims": paper_claims(fig1, summarize_probe_results(probes)),
        "curves": model_curves(probes),
        "peak_layers": {distance: peak["peak_layer"] for distance, peak in peaks.items()},
        "memory": memory,
    }


def peak_row(depth: int, records: list[dict]) -> dict:
    """One depth's Figure 3(b) peak layer per distance: per seed and across seeds."""
    distances = list(records[0]["peak_layers"])
    return {
        "depth": depth,
        "by_distance": {
            d: {
                "per_seed": [r["peak_layers"][d] for r in records],
                **across_seeds([r["peak_layers"][d] for r in records]),
            }
            for d in distances
        },
    }


def memory_row(depth: int, records: list[dict]) -> dict:
    """One depth's fixed-memory behaviour across seeds (`modeling_hmmroformer.memory`)."""
    memories = [r["memory"] for r in records]
    at_best = [m["tv_full_vs_bayes_memory"][m["memories"].index(m["best_memory"])] for m in memories]
    cut = [across_seeds(list(values)) for values in zip(*(m["tv_cut_vs_full"] for m in memories))]
    return {
        "depth": depth,
        "best": [m["best_memory"] for m in memories],
        "tv_at_best": across_seeds(at_best),
        "tv_full_bayes": across_seeds([m["full_vs_bayes"]["tv"] for m in memories]),
        "cut_tv": [f"{c['mean']:.3f}" if c["mean"] is not None else "n/a" for c in cut],
    }


def summarize_study(study: Study) -> dict:
    """Claims per depth across seeds, next to each depth's KL and agreement with Bayes."""
    records = [model_record(study, depth, seed) for depth, seed in study.models()]
    run = study.run_config(study.config.depths[0], study.config.seeds[0])
    corpus = open_corpus(str(study.out / "corpus"))
    depths = []
    for depth in study.config.depths:
        mine = [r for r in records if r["depth"] == depth]
        depths.append(
            {
                "depth": depth,
                "seeds": [r["seed"] for r in mine],
                "kl_bayes_model": across_seeds([r["model_vs_bayes"]["kl_bayes_model"] for r in mine]),
                "agreement": across_seeds([r["model_vs_bayes"]["agreement"] for r in mine]),
                "claims": aggregate_claims([r["claims"] for r in mine]),
            }
        )
    model = build_model_config(run, corpus.config)
    return {
        "study": study.config.to_dict(),
        "corpus": corpus.config.to_dict(),
        "model": {
            key: getattr(model, key) for key in ("hidden_size", "num_attention_heads", "norm_placement")
        },
        "training": {
            key: run.training.get(key)
            for key in ("max_steps", "per_device_train_batch_size", "learning_rate")
        },
        "depths": depths,
        "claims_table": claims_table(depths),
        "peak_table": [peak_row(d, [r for r in records if r["depth"] == d]) for d in study.config.depths],
        "memory_table": [memory_row(d, [r for r in records if r["depth"] == d]) for d in study.config.depths],
        "lemma1": json.loads((study.out / "lemma1" / "lemma1.json").read_text()),
        "models": records,
    }


def write_study_report(study: Study, state: dict) -> None:
    """results.json, the figures and REPORT.md (the last stage)."""
    summary = summarize_study(study)
    summary["stage_seconds"] = {stage: record["seconds"] for stage, record in state["stages"].items()}
    machine = stages.machine_description()
    summary["machine"] = machine

    def write(staging: Path) -> None:
        plot_study(summary, staging)

    build_folder(study.out / "figures", write)
    stages.write_text_atomically(study.out / "results.json", json.dumps(summary, indent=1) + "\n")
    stages.write_text_atomically(study.out / "REPORT.md", render_study_report(summary, machine))
