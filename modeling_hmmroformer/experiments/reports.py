"""Reports across studies, from their folders' own reports (results.json): the task-diversity
report across K (`scripts/diversity_report.py`) and the architecture comparison
(`scripts/architectures_report.py`). Everything is checked before anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from model_cards.study_reports import (
    render_architectures_report,
    render_diversity_report,
    render_diversity_status,
    replace_marked_block,
)

from . import layout
from .architectures import ARCHITECTURES_TITLE, summarize_architectures
from .diversity import DIVERSITY_TITLE, summarize_diversity
from .pipeline import machine_description
from .report_plots import ARCHITECTURES_FIGURE, is_diversity_figure, plot_architectures, plot_diversity


def read_study_summaries(studies: list[Path]) -> list[dict]:
    """The summaries (results.json) of study folders; `ValueError` naming the first folder
    whose report has not run."""
    missing = [folder for folder in studies if not (folder / layout.RESULTS_JSON).is_file()]
    if missing:
        raise ValueError(
            f"{missing[0]} has no {layout.RESULTS_JSON}: run its study's report first "
            f"(scripts/study.py --study NAME --out {missing[0]} --records ...)"
        )
    return [json.loads((folder / layout.RESULTS_JSON).read_text()) for folder in studies]


def write_diversity_report(studies: list[Path], out: Path, readme: str | os.PathLike | None = None) -> Path:
    """The task-diversity report across K from the studies' folders: REPORT.md, results.json and
    figures/ in `out`, and the status table of `readme` (between its marker lines) when given.
    Everything is checked before anything is written; returns the report's path."""
    summary = summarize_diversity(read_study_summaries(studies), [str(folder) for folder in studies])
    readme_text = None
    if readme is not None:
        readme_text = replace_marked_block(Path(readme).read_text(), render_diversity_status(summary))
    check_report_folder(out, DIVERSITY_TITLE, is_diversity_figure)
    figures = write_report_figures(out, lambda staging: plot_diversity(summary, staging))
    summary["figures"], summary["machine"] = figures, machine_description()
    layout.write_json(out / layout.RESULTS_JSON, summary)
    layout.write_text(out / layout.REPORT_MD, render_diversity_report(summary, figures))
    if readme_text is not None:
        layout.write_text(Path(readme), readme_text)
    return out / layout.REPORT_MD


def write_architectures_report(studies: list[Path], out: Path) -> Path:
    """The architecture comparison from the studies' folders: REPORT.md, results.json and
    figures/ in `out`, everything checked before anything is written; returns the report's path."""
    summary = summarize_architectures(read_study_summaries(studies), [str(folder) for folder in studies])
    check_report_folder(out, ARCHITECTURES_TITLE, lambda name: name == ARCHITECTURES_FIGURE)
    figures = write_report_figures(out, lambda staging: plot_architectures(summary, staging))
    summary["figures"], summary["machine"] = figures, machine_description()
    layout.write_json(out / layout.RESULTS_JSON, summary)
    layout.write_text(out / layout.REPORT_MD, render_architectures_report(summary, figures))
    return out / layout.REPORT_MD


def write_report_figures(out: Path, plot: Callable[[Path], dict[str, str]]) -> dict[str, str]:
    """`plot(staging)` writes the figures (returning figure name -> file name) into `out`'s
    figures/, staged so that a failure leaves no half of them; returns name -> path from `out`."""
    figures: dict[str, str] = {}

    def staged(staging: Path) -> None:
        figures.update({name: f"{layout.FIGURES}/{file}" for name, file in plot(staging).items()})

    out.mkdir(parents=True, exist_ok=True)
    layout.build_folder(out / layout.FIGURES, staged)
    return figures


def check_report_folder(out: Path, title: str, is_ours: Callable[[str], bool]) -> None:
    """`ValueError` when `out` holds a REPORT.md (not starting with `title`) or figures this
    report did not write (it would replace them)."""
    report, figures = out / layout.REPORT_MD, out / layout.FIGURES
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
