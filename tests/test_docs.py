"""The README and docs/ as a reader meets them: every Python block and command runs (at tiny
size, in a scratch folder per page that holds a `tiny` reproduction, while the rest of the
suite runs: `page_runs` in conftest.py), every relative link resolves, and the README's
headline numbers are the committed results'."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from model_cards.render import cell_text, render_model_card
from model_cards.study_reports import render_architectures_report, render_diversity_report
from modeling_hmmroformer.experiments.running.reproduction_plan import REPORT_EXTRAS, report_text

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_blocks)
at_tiny_size, block_problems, read_blocks, PAGES, page_id = (
    doc_blocks.at_tiny_size,
    doc_blocks.block_problems,
    doc_blocks.read_blocks,
    doc_blocks.PAGES,
    doc_blocks.page_id,
)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_of_the_page_runs(page, page_runs):  # started with the suite
    done = page_runs[page].result()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]


def test_every_block_is_run_or_shown_and_the_page_has_commands():
    problems = [problem for page in PAGES for block in read_blocks(page) for problem in block_problems(block)]
    assert problems == []
    runnable = [block for block in read_blocks(ROOT / "README.md") if block.language in ("python", "bash")]
    assert len([block for block in runnable if not block.skip_reason]) >= 3  # the quick starts


def test_the_tiny_rewrite_keeps_what_is_not_a_preset_name():
    assert at_tiny_size("python scripts/reproduce.py --preset small --out runs/reproduce-small") == (
        "python scripts/reproduce.py --preset tiny --out runs/reproduce-tiny"
    )
    assert at_tiny_size('get_preset("paper"); bash benchmarks/paper_gpu.sh; probe_small.py') == (
        'get_preset("tiny"); bash benchmarks/paper_gpu.sh; probe_small.py'
    )
    assert (
        at_tiny_size("python scripts/study.py --out runs/study")
        == "python scripts/study.py --study quick --out runs/study"
    )
    assert at_tiny_size("python scripts/study.py --records results/depth/models") == (
        "python scripts/study.py --study quick --records runs/study-quick-records"
    )


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """Every heading's anchor, a repeated heading's numbered as GitHub does (`-1`, `-2`, ...)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    seen: dict[str, int] = {}
    anchors = set()
    for line in text.splitlines():
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_repeated_headings_get_numbered_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Results\n## Where it stands\n```\n# not a heading\n```\n## Where it stands\n")
    assert _anchors(page) == {"results", "where-it-stands", "where-it-stands-1"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            broken.append(target)
    assert broken == []


def test_the_readme_headline_table_is_the_committed_small_results():
    results = json.loads((ROOT / "results" / "small" / "results.json").read_text())
    readme_rows = {
        cells[0]: cells[1:3]
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("| ") and len(cells := [cell.strip() for cell in line.strip("|").split("|")]) >= 3
    }
    shown = [row for row in results["in_context"]["headline"] if row["label"] in readme_rows]
    assert len(shown) >= 4
    for row in shown:
        assert readme_rows[row["label"]] == [cell_text(row["model"]), cell_text(row["bayes"])], row["label"]


def test_the_committed_reproduction_report_and_card_are_its_results_rendered_again():
    """results/small's REPORT.md and model card are what today's renderers write from its
    results.json, byte for byte: the summary's form and the templates have not drifted apart (a
    results.json of an older form is migrated, or read as it is, when either changes)."""
    small = ROOT / "results" / "small"
    results = json.loads((small / "results.json").read_text())
    folder = Path("runs/reproduce-small")  # where `make demo` writes it
    assert report_text(results, folder) == (small / "REPORT.md").read_text()
    summary = {key: value for key, value in results.items() if key not in REPORT_EXTRAS}
    card = render_model_card(summary, location=str(folder / "model"))
    assert str(card) == (small / "README.md").read_text()


@pytest.mark.parametrize(
    "name, render",
    [
        ("diversity", render_diversity_report),
        ("inference", render_diversity_report),
        ("architectures", render_architectures_report),
    ],
)
def test_the_committed_reports_across_studies_are_their_results_rendered_again(name, render):
    """results/diversity's, results/inference's and results/architectures' REPORT.md are today's
    renderer's output of their results.json, byte for byte."""
    folder = ROOT / "results" / name
    summary = json.loads((folder / "results.json").read_text())
    assert render(summary, summary["figures"]) == (folder / "REPORT.md").read_text()


FORMATTED_NUMBER = re.compile(
    r"-?\d+\.\d+( \[-?\d+\.\d+\])?( / -?\d+\.\d+)?|.+ \d+%: (layer \d+|never) \[.*\]"
    r"|\d+\.\d \(in \d+\.\.\d+\)|(<=|>) \d+|\d+ \(\d+\.\d(, 95% \[.*\])?\)"  # a memory equivalent
)


def test_the_committed_results_hold_numbers_not_formatted_text():
    """Numbers are formatted where they are shown (`model_cards.render`), never in the data."""

    def strings(value):
        if isinstance(value, dict):
            return [s for item in value.values() for s in strings(item)]
        if isinstance(value, list):
            return [s for item in value for s in strings(item)]
        return [value] if isinstance(value, str) else []

    files = sorted((ROOT / "results").rglob("results.json"))
    assert len(files) >= 6
    formatted = {
        str(path.relative_to(ROOT)): text
        for path in files
        for text in strings(json.loads(path.read_text()))
        if FORMATTED_NUMBER.fullmatch(text)
    }
    assert formatted == {}
