"""The task-diversity report across K (`experiments.decisions.diversity`, `scripts/diversity_report.py`):
cells from the studies' own summaries, the corpus draw's spread, the README's status table."""

import copy
import json
from pathlib import Path

import pytest

from model_cards import DIVERSITY_STATUS_MARKERS, status_markers
from model_cards.study_reports import (
    diversity_status_line,
    render_diversity_status,
    render_readme_status,
    replace_marked_block,
)
from modeling_hmmroformer.experiments.decisions.aggregate import StudySummary
from modeling_hmmroformer.experiments.decisions.diversity import (
    cell_key,
    learner_of,
    planned_cells,
    summarize_diversity,
)
from modeling_hmmroformer.experiments.figures.across import on_drawn_tokens
from modeling_hmmroformer.experiments.settings import PIPELINES, record_fingerprint

ROOT = Path(__file__).resolve().parents[3]


def as_diversity_study(
    summary: dict,
    name: str,
    num_tasks: int,
    corpus_seed: int = 0,
    shift: float = 0.0,
    depths=(4, 16),
    emission_mixing: float = 0.0,
) -> dict:
    """The quick study's summary dressed as a diversity study of K = `num_tasks` at `depths`, its
    models' records with it (the report decides from them) carrying the named study's fingerprint
    where it is a named pipeline, every trained model's Figure 1 gains moved by `shift`."""
    study = copy.deepcopy(summary)
    study["study"]["name"] = name
    study["corpus"].update(num_tasks=num_tasks, seed=corpus_seed, emission_mixing=emission_mixing)
    study["depths"] = study["depths"][: len(depths)]
    renamed = {depth["depth"]: new for depth, new in zip(study["depths"], depths)}
    for depth in study["depths"]:
        depth["depth"] = renamed[depth["depth"]]
    study["models"] = [r for r in study["models"] if r["depth"] in renamed]
    for record in study["models"]:
        record["depth"] = renamed[record["depth"]]
        if name in PIPELINES:
            record["fingerprint"] = record_fingerprint(name)
        if record.get("development"):
            record["development"]["num_tasks"] = num_tasks
        for split in [record["profiles"], *record["other_splits"]]:
            split["trained"]["demo_gain"] += shift
            split["trained"]["position_gain"] += shift
    return StudySummary.from_dict(study)


@pytest.fixture(scope="module")
def quick_summary(quick_studied) -> dict:
    return json.loads((quick_studied[0] / "results.json").read_text())


def test_cells_follow_the_planned_grid_and_the_second_draw_is_measured_against_the_first(quick_summary):
    studies = [
        as_diversity_study(quick_summary, "diversity-512-draw1", 512, corpus_seed=1, shift=0.1, depths=(4,)),
        as_diversity_study(quick_summary, "diversity-512", 512),
        as_diversity_study(quick_summary, "diversity-32", 32),
    ]
    summary = summarize_diversity(studies, ["c", "b", "a"])
    cells = [(c["study"], c["depth"]) for c in summary["cells"]]
    assert cells == [c for c in planned_cells() if c[0] != "diversity-8192"]
    assert summary["missing"] == ["diversity-8192 at 4 layers", "diversity-8192 at 16 layers"]
    (spread,) = summary["draw_spreads"]
    assert spread["draws"] == ["diversity-512", "diversity-512-draw1"]
    for key, row in spread["claims"].items():
        moved = 0.1 if key in ("demonstrations", "test_position") else 0.0
        if row["first"] is not None:
            assert row["difference"] == pytest.approx(moved, abs=1e-12), key
    (k512,) = [g for g in summary["decided"] if (g["num_tasks"], g["depth"]) == (512, 4)]
    assert k512["draws"] == [0, 1] and k512["num_seeds"] == 2 * len(quick_summary["depths"][0]["seeds"])
    assert spread["statistics"]["kl_bayes_model"]["difference"] == 0.0
    assert [c["key"] for c in summary["claims"]] == [v["key"] for v in quick_summary["depths"][0]["verdicts"]]


def test_a_corpus_whose_token_hides_the_state_is_a_cell_of_its_own(quick_summary):
    studies = [
        as_diversity_study(quick_summary, "inference-8192-draw0", 8192, depths=(4,)),
        as_diversity_study(
            quick_summary, "inference-8192-m25-draw0", 8192, depths=(4,), emission_mixing=0.25
        ),
    ]
    summary = summarize_diversity(studies, ["a", "b"])
    keys = [cell_key(g) for g in summary["decided"]]
    assert keys == [(8192, 0.0, 4), (8192, 0.25, 4)]
    assert [g["studies"] for g in summary["decided"]] == [
        ["inference-8192-draw0"],
        ["inference-8192-m25-draw0"],
    ]
    assert "K = 8192, emission mixing 0.25, 4 layers (draw 0)" in render_diversity_status(summary)
    assert "K = 8192, 4 layers (draw 0)" in render_diversity_status(summary)
    assert [cell_key(g) for g in on_drawn_tokens(summary)["decided"]] == [(8192, 0.0, 4)]
    assert "inference-8192-m25-draw0 at 4 layers" not in summary["missing"]
    assert "inference-8192-m50-draw0 at 4 layers" in summary["missing"]


def test_a_cell_given_twice_another_study_or_another_training_is_refused(quick_summary):
    study = as_diversity_study(quick_summary, "diversity-32", 32)
    with pytest.raises(ValueError, match="diversity-32 at 4 layers is in both a and b"):
        summarize_diversity([study, study], ["a", "b"])
    with pytest.raises(ValueError, match="not a diversity study"):
        summarize_diversity([StudySummary.from_dict(quick_summary)], ["runs/quick"])
    longer = copy.deepcopy(as_diversity_study(quick_summary, "diversity-512", 512))
    longer.training["max_steps"] += 1
    with pytest.raises(ValueError, match="the training of b"):
        summarize_diversity([study, longer], ["a", "b"])
    llama = copy.deepcopy(as_diversity_study(quick_summary, "diversity-512", 512))
    llama.model["model_type"] = "llama"
    with pytest.raises(ValueError, match="the model of b"):
        summarize_diversity([study, llama], ["a", "b"])
    # a summary written before the model type was kept is HMMRoFormer's
    older = copy.deepcopy(as_diversity_study(quick_summary, "diversity-512", 512))
    del older.model["model_type"]
    assert summarize_diversity([study, older], ["a", "b"])["setup"]["model"]["model_type"] == "hmm_roformer"


def test_a_cells_learner_is_the_one_more_than_half_of_its_seeds_are():
    assert learner_of({"infers": 4, "retrieves": 0, "below the ladder": 2}) == "infers"
    assert learner_of({"infers": 0, "retrieves": 6, "below the ladder": 0}) == "retrieves"
    assert learner_of({"infers": 3, "retrieves": 3, "below the ladder": 0}) == "mixed"
    assert learner_of({"infers": 1, "retrieves": 0, "below the ladder": 5}) == "below the ladder"


def test_the_report_the_figures_and_the_readme_table_are_written_from_the_study_folders(
    quick_summary, tmp_path, run_script
):
    folders = []
    for name, k in (("diversity-32", 32), ("diversity-512", 512)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(as_diversity_study(quick_summary, name, k).to_dict()))
        folders.append(folder)
    readme = tmp_path / "README.md"
    start, end = DIVERSITY_STATUS_MARKERS
    readme.write_text(f"# title\n\n{start}\nold table\n{end}\n\nafter\n")
    out = tmp_path / "report"
    done = run_script("scripts/diversity_report.py", *folders, "--out", out, "--readme", readme)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    report = (out / "REPORT.md").read_text()
    status = render_diversity_status(results)
    block = render_readme_status(results)
    assert status in report and readme.read_text() == f"# title\n\n{start}\n{block}\n{end}\n\nafter\n"
    assert block.startswith(report.splitlines()[2])  # the report's status line, then its table
    assert (
        "| K = 32, 4 layers (draw 0) | K = 32, 16 layers (draw 0) | K = 512, 4 layers (draw 0) | K = 512, 16 layers (draw 0) |"
        in status
    )
    assert "Not run yet: diversity-8192 at 4 layers" in report
    interim = f"**Status (interim: {len(results['missing'])} planned cells not run yet;"
    assert len(results["missing"]) >= 2 and report.splitlines()[2].startswith(interim)
    assert "from the records of its studies (diversity-32, diversity-512:" in report
    for name, figure in results["figures"].items():
        assert (out / figure).stat().st_size > 0 and f"]({figure})" in report, name
    assert len(results["figures"]) == 1 + len(results["claims"]) + bool(results["patching"])
    assert bool(results["patching"]) == ("patching_by_site" in results["figures"])


@pytest.mark.parametrize(
    "case, message",
    [
        ("no markers", "diversity status: start"),
        ("no results", "has no results.json: run its study's report first"),
        ("a stranger in figures", "did not write (mine.txt"),
    ],
)
def test_bad_input_is_one_line_and_loses_nothing(quick_summary, tmp_path, run_script, case, message):
    folder, out = tmp_path / "diversity-32", tmp_path / "report"
    folder.mkdir()
    if case != "no results":
        (folder / "results.json").write_text(
            json.dumps(as_diversity_study(quick_summary, "diversity-32", 32).to_dict())
        )
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    arguments = [folder, "--out", out, *(["--readme", readme] if case == "no markers" else [])]
    if case == "a stranger in figures":
        (out / "figures").mkdir(parents=True)
        (out / "figures" / "mine.txt").write_text("a file of the user's")
    done = run_script("scripts/diversity_report.py", *arguments)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1
    assert readme.read_text() == "no markers\n" and not (out / "REPORT.md").exists()
    assert case != "a stranger in figures" or (out / "figures" / "mine.txt").is_file()


def test_replace_marked_block_needs_both_markers_once_in_order():
    start, end = DIVERSITY_STATUS_MARKERS
    assert replace_marked_block(f"a\n{start}\nx\n{end}\nb", "new") == f"a\n{start}\nnew\n{end}\nb"
    for text in (f"{end}\n{start}", f"{start}\n{start}\n{end}", "none"):
        with pytest.raises(ValueError, match="once each and in that order"):
            replace_marked_block(text, "new")


@pytest.mark.parametrize("page, family", [("README.md", "inference"), ("docs/history.md", "diversity")])
def test_the_status_blocks_of_the_pages_are_the_committed_reports(page, family):
    """The README's answer is the inference report's status block, the history page's table the
    task-diversity report's: each what `--readme` writes from the committed results.json."""
    text = (ROOT / page).read_text()
    start, end = status_markers(family)
    block = text.split(start)[1].split(end)[0].strip()
    assert block == render_readme_status(json.loads((ROOT / "results" / family / "results.json").read_text()))


def test_the_status_line_is_interim_exactly_while_planned_cells_have_not_run():
    decided = [
        {"verdicts": [{"verdict": "holds"}], "learners": {"infers": 1, "retrieves": 0}, "num_seeds": 2}
    ]
    complete = diversity_status_line({"decided": decided, "missing": []})
    waiting = diversity_status_line({"decided": decided, "missing": ["inference-32-draw3 at 4 layers"]})
    assert complete.startswith("**Status:** 1 verdicts") and "interim" not in complete
    assert waiting.startswith("**Status (interim: 1 planned cells not run yet;")
    assert waiting.split(":** ")[1] == complete.split(":** ")[1]
