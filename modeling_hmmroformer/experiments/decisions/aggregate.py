"""A study's numbers across seeds and depths.

Every model leaves one small record (`model_record`, an `analyses.record.ModelRecord`: its
distance to Bayes, its place on the ladder, the probe splits' profiles of the model, its
untrained twin and the token-only baseline, every claim's statistics averaged over the splits,
its memory);
`summarize_study` reads only records, so a study can be reported from committed records
without the models. Per depth, the claims are decided together by the rule
(`claims.decide_claims`: holds / contradicted / not testable / n/a / undecided).

Plain data in, plain data out; `model_record` alone reads a model folder's JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from hmm_datasets.config import HMMMixtureConfig
from probing.results import ProbeResults

from ..analyses.claims import counted, decide_report, layer_one, model_statistics, profiles
from ..analyses.evaluation import Figure1Result
from ..analyses.ladder_gate import model_places, past_ladder, places_across_seeds
from ..analyses.memory import recorded_memory_equivalent
from ..analyses.record import RECORD_VERSION, ModelAnalyses, ModelRecord
from ..analyses.yardsticks import LEARNERS, nearest_learner
from ..running.engine import differing_settings
from ..settings import RunConfig, Settings
from .verdicts import across_seeds


def model_record(
    depth: int,
    seed: int,
    results: ModelAnalyses,
    fingerprint: str,
    seconds: dict[str, float] | None = None,
    settings: dict[str, object] | None = None,
) -> ModelRecord:
    """What one model's analyses say, small enough to commit: distance to Bayes, the ladder,
    Figure 1's excess KL, the probe splits' profiles, every claim's statistics (own and
    floors, averaged over the probe splits), memory, the wall time of its stages (`seconds`:
    stage name -> seconds, as the pipeline ran them) and the `settings` it was made with
    (`settings.flat_settings`). `results`: the model folder's analyses
    (`running.folders.read_model_results`)."""
    fig1 = results.figure1
    splits = profiles(fig1, results.probes, results.knockout, depth)
    return ModelRecord(
        version=RECORD_VERSION,
        fingerprint=fingerprint,
        depth=depth,
        seed=seed,
        model_vs_bayes=fig1.model_vs_bayes,
        ladder=fig1.ladder,
        kl_bayes_by_num_demos={
            "demo_counts": fig1.demo_counts,
            **{name: fig1.kl_bayes_by_num_demos[name] for name in ("model", "twin")},
        },
        kl_bayes_by_test_position=kl_curves_by_test_position(fig1),
        profiles=splits[0],
        other_splits=splits[1:],
        statistics=model_statistics(splits, results.patching),
        layer_one={network: layer_one(splits[0][network]) for network in ("trained", "twin")},
        memory=results.model_memory,
        yardsticks=results.yardsticks,
        development=results.development,
        development_statistics=development_statistics(results.development_probes, depth),
        patching=results.patching,
        seconds=seconds or {},
        settings=settings,
    )


def development_statistics(probes_by_step: dict[int, ProbeResults], depth: int) -> dict[str, dict] | None:
    """Every claim's statistics (`claims.model_statistics`) of each kept network the study probed
    (`probes_by_step`: step -> its probe results), by step as text; None where none was probed.
    Figure 1's and the knock-out's curves are the trained model's only: those claims are missing
    here."""
    if not probes_by_step:
        return None
    return {
        str(step): model_statistics(profiles(None, probes, None, depth))
        for step, probes in sorted(probes_by_step.items())
    }


def kl_curves_by_test_position(fig1: Figure1Result) -> dict:
    """KL(Bayes ‖ ·) at each test position, all demonstrations: the model, its twin and the best
    in-context predictor of the ladder (None without a ladder)."""
    curves, best = fig1.kl_bayes_by_test_position, (fig1.ladder or {}).get("best_in_context")
    return {
        "model": curves["model"],
        "twin": curves["twin"],
        "in_context": None if best is None else {"label": fig1.label(best), "kl": curves[best]},
    }


def counted_statistics(record: ModelRecord, ladder: dict | None, draw: int = 0) -> dict[str, dict]:
    """A record's statistics measured again from its profiles by today's claims, as the rule
    counts them (`claims.counted`: the layerwise claims only past the in-context ladder, on the
    corpus's `ladder` facts for unseen tasks; tagged with the corpus `draw`)."""
    places = model_places(record, ladder)
    return counted(model_statistics(record.splits, record.patching), past_ladder(places), draw)


def decide_depths(groups: list[list[ModelRecord]], ladder: dict | None, draw: int = 0) -> list[list[dict]]:
    """The claims of every depth (each a list of its records) decided together, Holm across all."""
    return decide_report([[counted_statistics(r, ladder, draw) for r in records] for records in groups])


def ladder_places(records: list[ModelRecord], ladder: dict | None) -> dict:
    """One depth's models on the ladder of each split (`ladder_gate.places_across_seeds`)."""
    return places_across_seeds([model_places(r, ladder) for r in records])


def verdict_table(depths: list[dict]) -> list[dict]:
    """Claim x depth: one row per claim, one cell (its verdict at that depth) per depth."""
    return [
        {
            **{key: depth_rows[0][key] for key in ("key", "figure", "claim", "statistic", "direction")},
            "cells": list(depth_rows),
        }
        for depth_rows in zip(*(depth["verdicts"] for depth in depths))
    ]


def pointwise_across_seeds(curves: list[list[float]]) -> list[dict]:
    """`across_seeds` at each point of equally long per-seed curves."""
    return [across_seeds(list(values)) for values in zip(*curves)]


def kl_by_demos(curves: list[dict]) -> dict:
    """KL(Bayes ‖ model) and the twin's by number of demonstrations, across seeds (`curves`: the
    records' `kl_bayes_by_num_demos`)."""
    return {
        "demo_counts": curves[0]["demo_counts"],
        **{name: pointwise_across_seeds([c[name] for c in curves]) for name in ("model", "twin")},
    }


def bins_of_test_positions(test_length: int) -> list[tuple[int, int]]:
    """Test tokens 1, 2-4, 5-16 and 17 to the last, as `(first, last)`, cut to `test_length`."""
    bins = [(1, 1), (2, 4), (5, 16), (17, test_length - 1)]
    return [(first, min(last, test_length - 1)) for first, last in bins if first <= test_length - 1]


def kl_by_test_position(kept: list[dict | None]) -> dict | None:
    """KL(Bayes ‖ ·) averaged over bins of test positions (`bins_of_test_positions`): the model and
    its twin across seeds, the best in-context predictor (the same rows for every seed), from the
    records' `kl_bayes_by_test_position`. None when no record kept the curves."""
    curves = [curve for curve in kept if curve]
    if not curves:
        return None
    bins = bins_of_test_positions(len(curves[0]["model"]))

    def binned(curve: list[float]) -> list[float]:
        return [float(np.mean(curve[first : last + 1])) for first, last in bins]

    in_context = curves[0]["in_context"]
    return {
        "bins": bins,
        **{name: pointwise_across_seeds([binned(c[name]) for c in curves]) for name in ("model", "twin")},
        "in_context": None if in_context is None else {**in_context, "kl": binned(in_context["kl"])},
    }


def yardsticks_row(placed: list[dict | None], spreads: dict[str, float]) -> dict | None:
    """One depth's models against the yardsticks (`yardsticks.place_model`; the records'
    `yardsticks`), per split: KL to each yardstick and top-1 accuracy across seeds, each yardstick's own accuracy, and how many
    seeds are nearest each learner by more than the prior-level estimate's spread on the split
    (`spreads`; `yardsticks.nearest_learner`), or tied. None for models of a corpus without
    unseen tasks."""
    if not placed or any(p is None for p in placed):
        return None
    out = {}
    for split in placed[0]:
        entries = [p[split] for p in placed]
        names = list(entries[0]["yardsticks"])
        out[split] = {
            "model_accuracy": across_seeds([e["model_accuracy"] for e in entries]),
            "kl": {name: across_seeds([e["yardsticks"][name]["kl"] for e in entries]) for name in names},
            "accuracy": {name: entries[0]["yardsticks"][name]["accuracy"] for name in names},
            "nearest": {
                name: sum(nearest_learner(kls(e), spreads[split]) == name for e in entries)
                for name in (*LEARNERS, "tied")
            },
        }
    return out


def kls(entry: dict) -> dict[str, float]:
    return {name: value["kl"] for name, value in entry["yardsticks"].items()}


def layer_one_row(layer_ones: list[dict]) -> dict:
    """Layer 1 apart: its position-only change and knock-out damage, model and twin, across seeds
    (the records' `layer_one`)."""
    return {
        network: {
            key: across_seeds([layer_one[network][key] for layer_one in layer_ones])
            for key in ("shuffle_position_only", "knockout_nll")
        }
        for network in ("trained", "twin")
    }


def memory_row(depth: int, memories: list[dict], lemma1: dict | None) -> dict:
    """One depth's memory across seeds (the records' `memory`; `memory.memory_equivalent`, for a
    record written before it from `lemma1`'s curve on the same rows): per seed the memory equivalent (None where there
    is none), the interpolated L across seeds (seeds beyond the grid left out, counted in
    `beyond_grid`), and the TV to full Bayes; records without a memory (a study that skipped
    Lemma 1) are left out."""
    memories = [m for m in memories if m is not None]
    equivalents = [recorded_memory_equivalent(m, lemma1) for m in memories]
    return {
        "depth": depth,
        "equivalent": equivalents,
        "interpolated": across_seeds([None if e is None else e["interpolated"] for e in equivalents]),
        "beyond_grid": sum(e is not None and e["memory"] is None for e in equivalents),
        "tv_full_bayes": across_seeds([m["full_vs_bayes"]["tv"] for m in memories]),
    }


def time_row(seconds: list[dict[str, float]]) -> dict:
    """One depth's wall times, training and the analyses (every later stage but the record):
    median, min and max per model, and summed, over the records that kept their stage times (the
    records' `seconds`)."""
    timed = [t for t in seconds if "train" in t]
    times = {
        "train": [t["train"] for t in timed],
        "analysis": [sum(v for k, v in t.items() if k != "train") for t in timed],
    }
    row = {"n": len(timed)}
    for name, values in times.items():
        spread = [float(np.median(values)), min(values), max(values)] if values else [None] * 3
        row[name] = {**dict(zip(("median", "min", "max"), spread)), "sum": sum(values)}
    return row


def ladder_across_seeds(ladders: list[dict | None]) -> dict:
    """The models of one depth on the ladder: accuracy, the best in-context predictor's, the
    share of the gap to Bayes closed (across seeds), and how many seeds are below the baseline."""
    if not ladders or any(ladder is None for ladder in ladders):
        return {}
    accuracy = [{rung["name"]: rung["accuracy"] for rung in ladder["rungs"]} for ladder in ladders]
    best = [ladder["best_in_context"] for ladder in ladders]
    labels = {rung["name"]: rung["label"] for rung in ladders[0]["rungs"]}
    return {
        "model_accuracy": across_seeds([a["model"] for a in accuracy]),
        "twin_accuracy": across_seeds([a.get("twin") for a in accuracy]),
        "best_in_context": labels[best[0]]
        if len(set(best)) == 1
        else ", ".join(sorted({labels[b] for b in best})),
        "best_in_context_accuracy": across_seeds([a[b] for a, b in zip(accuracy, best)]),
        "bayes_accuracy": across_seeds([a["bayes"] for a in accuracy]),
        "gap_closed": across_seeds([ladder["gap_closed"]["model"] for ladder in ladders]),
        "below_in_context": sum(ladder["below_in_context"]["model"] for ladder in ladders),
    }


def check_records(
    records: list[ModelRecord], fingerprint: str, settings: dict[str, object] | None = None
) -> None:
    """`ValueError` for a record of other settings (naming which differ, where the record keeps
    its `settings.flat_settings` and `settings` are given) or of an older version of the statistics."""
    for record in records:
        where = f"the record of depth {record.depth} seed {record.seed}"
        if record.version != RECORD_VERSION:
            raise ValueError(
                f"{where} has version {record.version}, these statistics are version {RECORD_VERSION}: "
                "delete it (and its model folder's record.json) to analyse that model again."
            )
        if record.fingerprint != fingerprint:
            which = (
                differing_settings(record.settings, settings)
                if record.settings is not None and settings is not None
                else f"fingerprint {record.fingerprint} there, {fingerprint} here"
            )
            raise ValueError(
                f"{where} was made with other settings ({which}): use another --records folder, or delete "
                "the records of the old settings (nothing was changed)."
            )


@dataclass(kw_only=True)
class StudySummary:
    """A study's summary (its results.json; the JSON object keeps the fields in this order).

    `study`: the study's settings (`Settings.to_dict`); `corpus`: the corpus config; `model` and
    `training`: what the cells of a report across studies must share (model type, width, heads,
    norm placement; steps, batch, learning rate); `depths`: per depth, in the grid's order, its
    numbers across seeds and its verdicts; `verdict_table`: claim x depth; `lemma1`: Lemma 1 on
    the corpus; `yardsticks`: what the corpus's yardsticks are (None without unseen tasks);
    `models`: the models' records; `figures`: name -> file; `stage_seconds`: each stage's wall
    time; `machine`: where it ran."""

    study: dict
    corpus: dict
    model: dict
    training: dict
    depths: list[dict]
    verdict_table: list[dict]
    lemma1: dict | None
    yardsticks: dict | None = None
    models: list[ModelRecord]
    figures: dict[str, str]
    stage_seconds: dict[str, float] = field(default_factory=dict)
    machine: dict | None = None

    @property
    def name(self) -> str:
        return self.study["name"]

    def to_dict(self) -> dict:
        """The JSON object (fields in order, the records as theirs)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StudySummary:
        """A summary from its JSON object (`ModelRecord.from_dict` reads its records)."""
        return cls(**{**data, "models": [ModelRecord.from_dict(r) for r in data["models"]]})


def summarize_study(
    settings: Settings,
    run: RunConfig,
    records: list[ModelRecord],
    corpus_config: HMMMixtureConfig,
    lemma1: dict | None,
    facts: dict | None,
    figures: dict[str, str],
) -> StudySummary:
    """Verdicts per depth across seeds, next to each depth's KL and agreement with Bayes.

    `records` are `model_record`s in the order of the grid; `run` is the study's run config;
    `lemma1` Lemma 1 on the corpus (None where the study skipped it); `facts` what the corpus's yardsticks are (rows, K', the
    prior-level estimate's convergence, the ladder; None for a corpus without unseen tasks);
    `figures` the study's figures, name -> file.
    """
    spreads = (
        {} if facts is None else {s: c["spread"]["kl_symmetric"] for s, c in facts["convergence"].items()}
    )
    ladder = None if facts is None else facts.get("ladder")
    groups = [[r for r in records if r.depth == d] for d in dict.fromkeys(r.depth for r in records)]
    verdicts = decide_depths(groups, ladder, corpus_config.seed)
    depths = []
    for mine, decided in zip(groups, verdicts):  # in the order of the grid
        depth = mine[0].depth
        depths.append(
            {
                "depth": depth,
                "seeds": [r.seed for r in mine],
                "kl_bayes_model": across_seeds([r.model_vs_bayes["kl_bayes_model"] for r in mine]),
                "agreement": across_seeds([r.model_vs_bayes["agreement"] for r in mine]),
                **ladder_across_seeds([r.ladder for r in mine]),
                "kl_by_demos": kl_by_demos([r.kl_bayes_by_num_demos for r in mine]),
                "kl_by_test_position": kl_by_test_position([r.kl_bayes_by_test_position for r in mine]),
                "ladder_places": ladder_places(mine, ladder),
                "verdicts": decided,
                "layer_one": layer_one_row([r.layer_one for r in mine]),
                "yardsticks": yardsticks_row([r.yardsticks for r in mine], spreads),
                "memory": memory_row(depth, [r.memory for r in mine], lemma1),
                "seconds": time_row([r.seconds for r in mine]),
            }
        )
    model = run.model_config(corpus_config)
    return StudySummary(
        study=settings.to_dict(),
        corpus=corpus_config.to_dict(),
        model={
            key: getattr(model, key, None)
            for key in ("model_type", "hidden_size", "num_attention_heads", "norm_placement")
        },
        training={
            key: run.training.get(key)
            for key in ("max_steps", "per_device_train_batch_size", "learning_rate")
        },
        depths=depths,
        verdict_table=verdict_table(depths),
        lemma1=lemma1,
        yardsticks=facts,
        models=records,
        figures=figures,
    )
