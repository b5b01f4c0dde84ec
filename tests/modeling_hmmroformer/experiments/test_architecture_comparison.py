"""HMMRoFormer against other architectures (`experiments.decisions.architectures`,
`scripts/architectures_report.py`): studies of one corpus and training side by side, what
differs said from the numbers, bad input refused in one line."""

import copy
import json

import pytest

from modeling_hmmroformer.experiments.decisions.aggregate import StudySummary
from modeling_hmmroformer.experiments.decisions.architectures import apart, summarize_architectures


@pytest.fixture(scope="module")
def summaries(quick_studied, gpt2_studied) -> list[StudySummary]:
    return [
        StudySummary.from_dict(json.loads((folder / "results.json").read_text()))
        for folder in (quick_studied[0], gpt2_studied)
    ]


def test_the_architectures_stand_side_by_side_at_the_depth_they_share(summaries):
    summary = summarize_architectures(summaries, ["rope", "gpt2"])
    assert summary["architectures"] == ["hmm_roformer", "gpt2"]
    assert summary["depths"] == [2]  # the quick study has 2 and 3 layers, the GPT-2 one 2
    assert [(c["architecture"], c["depth"], c["seeds"]) for c in summary["cells"]] == [
        ("hmm_roformer", 2, [0, 1]),
        ("gpt2", 2, [0]),
    ]
    (difference,) = summary["differences"]
    # GPT-2 has no rotary positions: its shuffle claims read n/a for that reason, HMMRoFormer's
    # for another (2 layers are too few for a slope); a curve a model has not got is n/a, below
    # the in-context ladder or not
    assert difference["verdicts"]["position_slope"] == ["n/a (fewer than 3 layers)", "n/a (no shuffle test)"]
    # the quick study's tiny models are below the ladder: a claim they have curves for is not testable
    assert difference["verdicts"]["task_rises"] == [
        "not testable (0 of 2 seeds above the in-context ladder)",
        "not testable (0 of 1 seed above the in-context ladder)",
    ]
    assert difference["verdicts"]["demonstrations"] == ["undecided (2 seeds)", "undecided (1 seed)"]
    assert difference["num_claims"] == len(summary["claims"])
    ladder = {row["key"]: row["by_cell"] for row in summary["ladder"]}
    for key in (
        "model_accuracy",
        "kl_bayes_model",
        "top1_test_unseen",
        "kl_prior_test",
        "kl_mixture_test_unseen",
    ):
        assert [stat["n"] for stat in ladder[key]] == [2, 1], key


def test_intervals_apart_are_the_ones_that_do_not_overlap():
    assert apart({"ci_low": 0.1, "ci_high": 0.2}, {"ci_low": 0.3, "ci_high": 0.4})
    assert not apart({"ci_low": 0.1, "ci_high": 0.35}, {"ci_low": 0.3, "ci_high": 0.4})
    assert not apart({"ci_low": None, "ci_high": None, "mean": 0.1}, {"ci_low": 0.3, "ci_high": 0.4})


def test_the_report_says_what_differs_from_the_numbers(quick_studied, gpt2_studied, tmp_path, run_script):
    out = tmp_path / "architectures"
    done = run_script("scripts/architectures_report.py", quick_studied[0], gpt2_studied, "--out", out)
    assert done.returncode == 0, done.stderr
    report = (out / "REPORT.md").read_text()
    assert report.startswith("# HMMRoFormer against other architectures")
    assert "At 2 layers, the verdicts differ on" in report
    assert "gpt2 n/a (no shuffle test)" in report
    assert (out / "figures" / "claims_by_architecture.png").stat().st_size > 10_000
    summary = json.loads((out / "results.json").read_text())
    assert summary["figures"] == {"claims": "figures/claims_by_architecture.png"}
    # written again over its own report: allowed
    assert (
        run_script("scripts/architectures_report.py", quick_studied[0], gpt2_studied, "--out", out).returncode
        == 0
    )


def test_studies_that_cannot_be_compared_are_refused(summaries):
    with pytest.raises(ValueError, match="hmm_roformer is in both a and b"):
        summarize_architectures([summaries[0], summaries[0]], ["a", "b"])
    other = copy.deepcopy(summaries[1])
    other.training["max_steps"] += 1
    with pytest.raises(ValueError, match="the training of b differs from a's"):
        summarize_architectures([summaries[0], other], ["a", "b"])
    other = copy.deepcopy(summaries[1])
    for depth in other.depths:
        depth["depth"] = 7
    with pytest.raises(ValueError, match="share no depth"):
        summarize_architectures([summaries[0], other], ["a", "b"])
    with pytest.raises(ValueError, match="give two or more study folders"):
        summarize_architectures(summaries[:1], ["a"])


@pytest.mark.parametrize(
    "case, message",
    [
        ("no report", "has no results.json: run its study's report first"),
        ("foreign report", "is another report: choose another --out (nothing was written)"),
    ],
)
def test_bad_input_is_one_line_and_loses_nothing(
    quick_studied, gpt2_studied, tmp_path, run_script, case, message
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "REPORT.md").write_text("# My own notes\n")
    studies = [quick_studied[0], tmp_path if case == "no report" else gpt2_studied]
    done = run_script("scripts/architectures_report.py", *studies, "--out", out)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert (out / "REPORT.md").read_text() == "# My own notes\n" and not (out / "figures").exists()
