"""The study: a grid of depths x seeds on one corpus, each model trained, analysed against its
twin and recorded, then the report from the records alone (`scripts/study.py`).

    corpus, lemma1, yardsticks (a corpus with unseen tasks), then for each model not recorded
    yet: train, evaluate, probe, memory, knockout (development and development-probe where it
    keeps networks over training), record; then report. A study whose settings say
    `lemma1=False` runs neither Lemma 1 nor the models' memory: no claim reads them

A model's record (`aggregate.model_record`) goes to its folder and to the records folder
(`--records`), from which a study goes on: a recorded model is finished.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from hmm_datasets.export import load_corpus_config
from hmm_datasets.files import build_folder, write_json
from model_cards.study_reports import render_study_report

from .. import names
from ..analyses.record import ModelRecord
from ..decisions.aggregate import check_records, model_record, summarize_study
from ..figures.study import plot_study
from ..settings import flat_settings
from .engine import RunState
from .folders import read_json_or_none, read_model_results
from .plan import ModelRun, Pipeline, Plan, model_stages
from .stages import machine_description, measure_lemma1, model_runners, shared_runners, write_json_and_report


def study_stages(p: Pipeline, state: RunState) -> dict[str, Callable[[], None]]:
    """Every stage of a study, in order (the module docstring): each model trained, analysed and
    recorded before the next one starts."""
    shared = shared_runners(p)
    plan = {"corpus": shared.pop("corpus")}
    if p.settings.lemma1:
        plan["lemma1"] = functools.partial(measure_lemma1, p)
    plan.update(shared)
    for m in p.models:
        if not p.has_record(m):
            plan.update(model_runners(p, m, with_lemma1=False))
            plan[m.stage("record")] = functools.partial(record_model, p, m, state)
    plan["report"] = functools.partial(write_study_report, p, state)
    return plan


def check_recorded_models(p: Pipeline) -> None:
    """`ValueError` for a record in the records folder made with other settings than the study's
    (`aggregate.check_records`), before any stage runs."""
    if p.records is None:
        return
    recorded = [read_record(p, m) for m in p.models if p.has_record(m)]
    check_records(recorded, p.record_fingerprint(), flat_settings(p.settings, p.run))


def record_model(p: Pipeline, m: ModelRun, state: RunState) -> None:
    """The model's small record in its folder, and in the records folder when there is one, with
    the wall times of its stages (so a study resumed on a fresh clone still reports them)."""
    results = read_model_results(m.folder, with_memory=p.settings.lemma1)
    record = model_record(
        m.depth,
        m.seed,
        results,
        p.record_fingerprint(),
        seconds=model_seconds(p, state, m),
        settings=flat_settings(p.settings, p.run),  # names the setting that differs, on a refusal
    ).to_dict()
    write_json(m.path(names.RECORD_JSON), record)
    if p.records is not None:
        write_json(p.record_path(m), record)


def model_seconds(p: Pipeline, state: RunState, m: ModelRun) -> dict[str, float]:
    """Model `m`'s stage times from the state, by stage name without the model's tag."""
    return {
        name: state.stages[m.stage(name)].seconds
        for name in model_stages(p, m)
        if m.stage(name) in state.stages
    }


def read_record(p: Pipeline, m: ModelRun) -> ModelRecord:
    """Model `m`'s record: from the records folder, else from its model folder."""
    path = p.record_path(m) if p.has_record(m) else m.path(names.RECORD_JSON)
    return ModelRecord.from_dict(json.loads(path.read_text()))


def write_study_report(p: Pipeline, state: RunState) -> None:
    """A study's figures, results.json and REPORT.md."""
    records = [read_record(p, m) for m in p.models]
    check_records(records, p.record_fingerprint(), flat_settings(p.settings, p.run))
    lemma1 = read_json_or_none(p.out / names.LEMMA1 / names.LEMMA1_JSON) if p.settings.lemma1 else None
    facts = read_json_or_none(p.out / names.YARDSTICKS / names.YARDSTICKS_JSON)  # unseen tasks only
    figures = dict(names.STUDY_FIGURES)
    if lemma1 is not None:
        figures["lemma1"] = f"{names.LEMMA1}/{names.LEMMA1_PNG}"
    if not any(r.memory for r in records):
        figures.pop("memory_by_depth")
    summary = summarize_study(
        p.settings, p.run, records, load_corpus_config(p.corpus), lemma1, facts, figures
    )
    summary.stage_seconds, summary.machine = state.seconds(), machine_description()
    results = summary.to_dict()
    build_folder(p.out / names.FIGURES, lambda staging: plot_study(results, staging))
    write_json_and_report(p, results, render_study_report(results, summary.machine))


STUDY = Plan("study", "study", grid=True, stages=study_stages, check=check_recorded_models)
