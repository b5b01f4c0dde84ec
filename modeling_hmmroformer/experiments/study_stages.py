"""A study's own stages (`pipeline.stage_plan` adds them when the pipeline is a study, so a
reproduction never imports them): each model's small record, written to its folder and to the
records folder, and the study's report, read from the records alone (`aggregate`)."""

from __future__ import annotations

import json

from hmm_datasets.files import build_folder, write_json
from model_cards.study_reports import render_study_report

from . import layout
from .aggregate import check_records, model_record, summarize_study
from .pipeline import (
    ModelRun,
    Pipeline,
    flat_settings,
    machine_description,
    model_stages,
    stage_seconds,
    write_json_and_report,
)
from .study_plots import plot_study


def check_recorded_models(p: Pipeline) -> None:
    """`ValueError` for a record in the records folder made with other settings than the study's
    (`aggregate.check_records`), before any stage runs."""
    recorded = [read_record(p, m) for m in p.models if p.has_record(m)]
    check_records(recorded, p.record_fingerprint(), flat_settings(p.settings, p.run))


def record_model(p: Pipeline, m: ModelRun, state: dict) -> None:
    """The model's small record in its folder, and in the records folder when there is one, with
    the wall times of its stages (so a study resumed on a fresh clone still reports them)."""
    record = model_record(
        m.depth, m.seed, m.folder, p.record_fingerprint(), seconds=model_seconds(p, state, m)
    )
    record["settings"] = flat_settings(p.settings, p.run)  # names the setting that differs, on a refusal
    write_json(m.path(layout.RECORD_JSON), record)
    if p.records is not None:
        write_json(p.record_path(m), record)


def model_seconds(p: Pipeline, state: dict, m: ModelRun) -> dict[str, float]:
    """Model `m`'s stage times from the state, by stage name without the model's tag."""
    return {
        name: state["stages"][m.stage(name)]["seconds"]
        for name in model_stages(p, m)
        if m.stage(name) in state["stages"]
    }


def read_record(p: Pipeline, m: ModelRun) -> dict:
    """Model `m`'s record: from the records folder, else from its model folder."""
    path = p.record_path(m) if p.has_record(m) else m.path(layout.RECORD_JSON)
    return json.loads(path.read_text())


def write_study_report(p: Pipeline, state: dict) -> None:
    """A study's figures, results.json and REPORT.md."""
    records = [read_record(p, m) for m in p.models]
    check_records(records, p.record_fingerprint(), flat_settings(p.settings, p.run))
    summary = summarize_study(
        p.settings, p.run, records, p.corpus, p.out / layout.LEMMA1, p.out / layout.YARDSTICKS
    )
    summary["stage_seconds"] = stage_seconds(state)
    summary["machine"] = machine = machine_description()
    build_folder(p.out / layout.FIGURES, lambda staging: plot_study(summary, staging))
    write_json_and_report(p, summary, render_study_report(summary, machine))
