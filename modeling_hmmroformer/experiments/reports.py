"""Reports across studies, from their folders' own reports (results.json): the task-diversity
report across K (`scripts/diversity_report.py`) and the architecture comparison
(`scripts/architectures_report.py`). Everything is checked before anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from hmm_datasets.files import build_folder, write_json, write_text
from model_cards import status_markers
from model_cards.study_reports import (
    render_architectures_report,
    render_diversity_report,
    render_readme_status,
    replace_marked_block,
)

from . import names
from .analyses.development import development_from_dict
from .analyses.record import ModelRecord
from .decisions.aggregate import StudySummary
from .decisions.architectures import ARCHITECTURES_TITLE, redecide_architectures, summarize_architectures
from .decisions.diversity import (
    DIVERSITY_TITLE,
    group_statistics,
    in_planned_order,
    on_drawn_tokens,
    planned_cells,
    redecide_diversity,
    registered_corpus,
    summarize_diversity,
)
from .figures.across import ARCHITECTURES_FIGURE, is_diversity_figure, plot_architectures, plot_diversity
from .running.stages import machine_description
from .settings import PIPELINES, record_fingerprint


def read_study_summaries(studies: list[Path]) -> list[StudySummary]:
    """The summaries (results.json) of study folders; `ValueError` naming the first folder
    whose report has not run."""
    missing = [folder for folder in studies if not (folder / names.RESULTS_JSON).is_file()]
    if missing:
        raise ValueError(
            f"{missing[0]} has no {names.RESULTS_JSON}: run its study's report first "
            f"(scripts/study.py --study NAME --out {missing[0]} --records ...)"
        )
    return [
        StudySummary.from_dict(json.loads((folder / names.RESULTS_JSON).read_text())) for folder in studies
    ]


def write_diversity_report(studies: list[Path], out: Path, readme: str | os.PathLike | None = None) -> Path:
    """The task-diversity report across K from the studies' folders: REPORT.md, results.json and
    figures/ in `out`, and the status table of `readme` (between its marker lines) when given.
    Everything is checked before anything is written; returns the report's path."""
    summaries = read_study_summaries(studies)
    summary = summarize_diversity(summaries, [str(folder) for folder in studies])
    drawn = drawn_token_studies(summary)
    developments = kept_developments(s.models for s in summaries if s.name in drawn)
    return write_diversity_summary(summary, out, readme, developments=developments)


def committed_report(folder: Path) -> tuple[dict, dict[tuple[str, int], list[ModelRecord]], dict]:
    """A committed report folder across studies (`results/diversity`, `results/architectures`):
    its results.json, its models' records by (study, depth) and each study's yardstick facts
    (None where not measured), read from where its `decided_from` names them (paths from
    `folder`; by default `<study>/models` and `<study>/yardsticks.json`). A report of a family of
    studies (`diversity.FAMILIES`) also reads every study of the family recorded there since it
    was written, and lists its studies in their planned order. `ValueError` naming what is
    missing, or a record made with other settings than its named study's."""
    path = folder / names.RESULTS_JSON
    if not path.is_file():
        raise ValueError(f"{folder} has no {names.RESULTS_JSON}: give a folder a report across studies wrote")
    summary = json.loads(path.read_text())
    studies = list(dict.fromkeys(c["study"] for c in summary["cells"]))
    if summary.get("family") is not None:
        planned = dict.fromkeys(study for study, _ in planned_cells(summary["family"]))
        studies += [
            s for s in planned if s not in studies and any((folder / s / names.MODELS).glob("*.json"))
        ]
        studies = in_planned_order(studies, summary["family"])
    sources = with_default_sources(summary.get("decided_from"), studies)
    records: dict[tuple[str, int], list[ModelRecord]] = {}
    facts: dict[str, dict | None] = {}
    for study in studies:
        files = sorted((folder / sources["records"][study]).glob("*.json"))
        if not files:
            raise ValueError(
                f"{folder / sources['records'][study]} holds no records: the report is decided from them"
            )
        read = [ModelRecord.from_dict(json.loads(f.read_text())) for f in files]
        check_registered(study, read, folder / sources["records"][study])
        for record in sorted(read, key=lambda r: r.seed):
            records.setdefault((study, record.depth), []).append(record)
        found = folder / sources["yardsticks"][study]
        facts[study] = json.loads(found.read_text()) if found.is_file() else None
    return {**summary, "decided_from": sources}, records, facts


def check_registered(study: str, records: list[ModelRecord], where: Path) -> None:
    """`ValueError` for a record in `where` made with other settings than the named study's
    (`PIPELINES`; a study not named there is not checked)."""
    if study not in PIPELINES:
        return
    expected = record_fingerprint(study)
    for record in records:
        if record.fingerprint != expected:
            raise ValueError(
                f"{where}: the record of depth {record.depth} seed {record.seed} was made with other settings "
                f"than {study}'s (fingerprint {record.fingerprint}, {study}'s {expected}): move it out of "
                "the report's records (nothing was changed)."
            )


def decided_from(studies: list[str]) -> dict:
    """Where a report's records and ladders are, from its folder: `<study>/models` and
    `<study>/yardsticks.json` (the layout `scripts/study.py --records` leaves in a report folder)."""
    return {
        "records": {study: f"{study}/models" for study in studies},
        "yardsticks": {study: f"{study}/yardsticks.json" for study in studies},
    }


def with_default_sources(sources: dict | None, studies: list[str]) -> dict:
    """A report's `decided_from`, with the default layout (`decided_from`) for every study it
    does not name."""
    defaults = decided_from(studies)
    return {kind: {**paths, **(sources or {}).get(kind, {})} for kind, paths in defaults.items()}


def committed_statistics(folder: Path) -> dict[tuple[int, float, int], list[dict[str, dict]]]:
    """A committed report of a family of studies across K (`committed_report`), as the rule reads
    it: per (K, emission mixing, depth), every seed's statistics (`diversity.group_statistics`)."""
    _, records, facts = committed_report(folder)
    cells = [
        dict(
            zip(("num_tasks", "corpus_seed", "emission_mixing"), registered_corpus(study)),
            study=study,
            depth=depth,
        )
        for study, depth in records
    ]
    ladders = {study: (found or {}).get("ladder") for study, found in facts.items()}
    return group_statistics(cells, records, ladders)


def redecide_diversity_report(folder: Path, readme: str | os.PathLike | None = None) -> Path:
    """A committed cross-K report decided again by today's rule from its committed records
    (`committed_report`), rewritten in place (and `readme`'s status table when given)."""
    summary, records, facts = committed_report(folder)
    summary = redecide_diversity(summary, records, facts)
    drawn = drawn_token_studies(summary)
    developments = kept_developments(mine for (study, _), mine in records.items() if study in drawn)
    return write_diversity_summary(summary, folder, readme, summary.get("machine"), developments)


def redecide_architectures_report(folder: Path) -> Path:
    """A committed architecture comparison decided again by today's rule from its committed
    records (`committed_report`; one corpus, so one ladder), rewritten in place."""
    summary, records, facts = committed_report(folder)
    summary = redecide_architectures(summary, records, (next(iter(facts.values())) or {}).get("ladder"))
    return write_architectures_summary(summary, folder, summary.get("machine"))


def drawn_token_studies(summary: dict) -> set[str]:
    """The studies of a cross-K summary on corpora whose emissions are the prior's draws
    (`diversity.on_drawn_tokens`): those whose development the figures over training draw."""
    return {cell["study"] for cell in on_drawn_tokens(summary)["cells"]}


def kept_developments(models: Iterable[list[ModelRecord]]) -> list[dict]:
    """The development records (`development.Development`, labels recomputed) of the models
    that kept networks over training, each with its model's `depth`, from lists of model records."""
    return [
        {**development_from_dict(r.development).to_dict(), "depth": r.depth}
        for group in models
        for r in group
        if r.development
    ]


def write_diversity_summary(
    summary: dict,
    out: Path,
    readme: str | os.PathLike | None = None,
    machine: dict | None = None,
    developments: list[dict] = (),
) -> Path:
    """REPORT.md, results.json and figures/ of a cross-K summary in `out`, and the status block
    of `readme` when given (`render_readme_status`, between its family's `status_markers`); `machine`: where its studies ran (this machine by default);
    `developments`: the models' networks over training, for the phase diagram and each K's
    development figure."""
    readme_text = None
    if readme is not None:
        markers = status_markers(summary.get("family", "diversity"))
        readme_text = replace_marked_block(Path(readme).read_text(), render_readme_status(summary), markers)
    check_report_folder(out, DIVERSITY_TITLE, is_diversity_figure)
    figures = write_report_figures(out, lambda staging: plot_diversity(summary, staging, developments))
    summary["figures"], summary["machine"] = figures, machine or machine_description()
    write_json(out / names.RESULTS_JSON, summary)
    write_text(out / names.REPORT_MD, render_diversity_report(summary, figures))
    if readme_text is not None:
        write_text(Path(readme), readme_text)
    return out / names.REPORT_MD


def write_architectures_report(studies: list[Path], out: Path) -> Path:
    """The architecture comparison from the studies' folders: REPORT.md, results.json and
    figures/ in `out`, everything checked before anything is written; returns the report's path."""
    summary = summarize_architectures(read_study_summaries(studies), [str(folder) for folder in studies])
    return write_architectures_summary(summary, out)


def write_architectures_summary(summary: dict, out: Path, machine: dict | None = None) -> Path:
    """REPORT.md, results.json and figures/ of an architecture comparison in `out`."""
    check_report_folder(out, ARCHITECTURES_TITLE, lambda name: name == ARCHITECTURES_FIGURE)
    figures = write_report_figures(out, lambda staging: plot_architectures(summary, staging))
    summary["figures"], summary["machine"] = figures, machine or machine_description()
    write_json(out / names.RESULTS_JSON, summary)
    write_text(out / names.REPORT_MD, render_architectures_report(summary, figures))
    return out / names.REPORT_MD


def write_report_figures(out: Path, plot: Callable[[Path], dict[str, str]]) -> dict[str, str]:
    """`plot(staging)` writes the figures (returning figure name -> file name) into `out`'s
    figures/, staged so that a failure leaves no half of them; returns name -> path from `out`."""
    figures: dict[str, str] = {}

    def staged(staging: Path) -> None:
        figures.update({name: f"{names.FIGURES}/{file}" for name, file in plot(staging).items()})

    out.mkdir(parents=True, exist_ok=True)
    build_folder(out / names.FIGURES, staged)
    return figures


def check_report_folder(out: Path, title: str, is_ours: Callable[[str], bool]) -> None:
    """`ValueError` when `out` holds a REPORT.md (not starting with `title`) or figures this
    report did not write (it would replace them)."""
    report, figures = out / names.REPORT_MD, out / names.FIGURES
    if report.is_file() and not report.read_text().startswith(title):
        raise ValueError(f"{report} is another report: choose another --out (nothing was written)")
    strangers = [
        path.name for path in (figures.iterdir() if figures.is_dir() else []) if not is_ours(path.name)
    ]
    if strangers:
        raise ValueError(
            f"{figures} holds files this report did not write ({strangers[0]}, ...): choose another --out "
            "(nothing was written)"
        )
