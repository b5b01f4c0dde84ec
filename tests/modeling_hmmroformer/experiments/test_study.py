"""The depth-and-seed study: the quick study end to end, claims counted over seeds, the
untrained control at the training's own initialisation, and bad input refused."""

import json
from pathlib import Path

import pytest
import torch

from modeling_hmmroformer.experiments.aggregate import aggregate_claims, claims_table
from modeling_hmmroformer.experiments.pipeline import build_corpus, make_pipeline, run_pipeline, stage_names
from modeling_hmmroformer.experiments.settings import PRESETS, Settings, get_settings
from modeling_hmmroformer.experiments.training import prepare
from modeling_hmmroformer.experiments.verdicts import across_seeds
from probing.capture import untrained_twin

ROOT = Path(__file__).resolve().parents[3]


def quick_study(out, **changes):
    return make_pipeline(get_settings("quick", **changes), out, kind="study", progress=False)


def test_the_quick_study_reports_every_claim_at_every_depth(quick_studied):
    out, stdout = quick_studied
    results = json.loads((out / "results.json").read_text())
    config = PRESETS["quick"]
    assert [d["depth"] for d in results["depths"]] == list(config.depths)
    assert len(results["models"]) == len(config.depths) * len(config.seeds)
    report = (out / "REPORT.md").read_text()
    for row in results["claims_table"]:
        assert row["claim"] in report
        for cell in row["cells"]:
            assert cell["seeds"] == len(config.seeds) and 0 <= cell["holds_in"] <= cell["seeds"]
            assert f"**{cell['holds_in']}/{cell['seeds']}**" in report
    for depth in results["depths"]:
        assert f"{depth['kl_bayes_model']['mean']:.3f}" in report
        below = sum(
            model["ladder"]["below_in_context"]["model"]
            for model in results["models"]
            if model["depth"] == depth["depth"]
        )
        assert depth["below_in_context"] == below  # the ladder: seeds below the in-context baseline
        assert f"| {depth['depth']} | {depth['model_accuracy']['mean']:.3f}" in report
        assert f"{below} of {len(config.seeds)} |" in report
    figures = (
        "distance_to_bayes",
        "shuffle_by_depth",
        "headroom_by_depth",
        "previous_tokens_by_depth",
        "memory_by_depth",
    )
    for figure in figures:
        assert (out / "figures" / f"{figure}.png").stat().st_size > 0
    assert (out / "lemma1" / "lemma1.png").stat().st_size > 0
    assert set(json.loads((out / "study_state.json").read_text())["stages"]) == set(
        stage_names(quick_study(out))
    )
    assert "layers: KL to Bayes" in stdout


def test_a_rerun_skips_every_stage_and_other_settings_are_refused(quick_studied):
    out, _ = quick_studied
    before = (out / "REPORT.md").read_text()
    logged = []
    run_pipeline(quick_study(out), log=logged.append)
    assert all("complete, skipped" in line for line in logged)
    assert (out / "REPORT.md").read_text() == before
    with pytest.raises(ValueError, match="other settings"):
        run_pipeline(quick_study(out, seeds=(0, 1, 2)))
    assert (out / "REPORT.md").read_text() == before


def test_the_untrained_control_is_the_trainings_own_initialisation(tmp_path):
    study = quick_study(tmp_path / "s")
    study.out.mkdir()
    build_corpus(study)
    initial = prepare(study.model(2, 1).run, resume=False).trainer.model
    control = untrained_twin(initial, 1)  # the one builder of the control: the pipeline's and probe.py's
    for (name, a), (_, b) in zip(initial.state_dict().items(), control.state_dict().items()):
        assert torch.equal(a, b), name
    other_seed = untrained_twin(initial, 0)
    assert not torch.equal(other_seed.lm_head.weight, control.lm_head.weight)
    assert prepare(study.model(2, 0).run, resume=False).trainer.model.lm_head.weight.equal(
        other_seed.lm_head.weight
    )


def test_a_study_is_a_grid_of_models_each_in_its_folder(tmp_path):
    study = quick_study(tmp_path / "s")
    assert [(m.depth, m.seed) for m in study.models] == [(2, 0), (3, 0), (2, 1), (3, 1)]  # seed by seed
    model = study.model(3, 1)
    assert model.folder == tmp_path / "s" / "models" / "depth3-seed1"
    assert model.run.model["num_hidden_layers"] == 3 and model.run.seed == 1
    assert model.run.training["max_steps"] == 20  # the study's own override, applied to the run config
    names = stage_names(study)
    assert names[:5] == [
        "corpus",
        "train depth2 seed0",
        "train depth3 seed0",
        "train depth2 seed1",
        "train depth3 seed1",
    ]
    assert names[5:9] == ["lemma1", "evaluate depth2 seed0", "probe depth2 seed0", "memory depth2 seed0"]
    assert names[-1] == "report" and "model" not in names
    # a one-model pipeline as a study: the study layout, not the reproduction's
    single = make_pipeline(get_settings("tiny"), tmp_path / "t", kind="study", progress=False)
    assert [m.folder.name for m in single.models] == ["depth2-seed0"]


def claim(text: str, holds: bool, value: float) -> dict:
    return {"figure": "2", "claim": text, "holds": holds, "statistic": {"name": "stat", "value": value}}


def test_claims_are_counted_over_seeds_with_a_t_interval():
    per_seed = [
        [claim("a", True, 1.0), claim("b", False, -1.0)],
        [claim("a", True, 2.0), claim("b", True, 1.0)],
        [claim("a", False, 3.0), claim("b", False, 0.0)],
    ]
    rows = {row["claim"]: row for row in aggregate_claims(per_seed)}
    assert (rows["a"]["holds_in"], rows["a"]["seeds"]) == (2, 3)
    assert (rows["b"]["holds_in"], rows["b"]["seeds"]) == (1, 3)
    assert rows["a"]["mean"] == pytest.approx(2.0)
    # mean 2, sd 1, n 3: 2 +- 4.303 / sqrt(3)
    assert rows["a"]["ci_low"] == pytest.approx(2 - 4.303 / 3**0.5)
    assert rows["a"]["ci_high"] == pytest.approx(2 + 4.303 / 3**0.5)
    one = across_seeds([0.5])
    assert one["mean"] == 0.5 and one["ci_low"] is None
    assert across_seeds([None, float("nan")])["n"] == 0
    table = claims_table([{"claims": aggregate_claims(per_seed)}, {"claims": aggregate_claims(per_seed[:1])}])
    assert [row["claim"] for row in table] == ["a", "b"]
    assert [cell["holds_in"] for cell in table[0]["cells"]] == [2, 1]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seeds": (0, 1, 0)}, "given twice"),
        ({"depths": (2, 2)}, "given twice"),
        ({"memories": (0, 4)}, "at least 1 token"),
        ({"depths": (1, 4)}, "at least 2 layers"),
        ({"probe": {"layers": (0, 1, 5)}}, "more layers than"),
    ],
)
def test_bad_study_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        Settings("bad", "tiny.yaml", **{"depths": (2, 3), **changes})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--seeds", "0", "0"], "given twice"),
        (["--memories", "0"], "at least 1 token"),
        (["--study", "nope"], "'nope' is not a named pipeline"),
        (["--redo", "nothing"], "not a stage"),
    ],
)
def test_bad_input_is_one_error_line_and_writes_nothing(run_script, tmp_path, arguments, message):
    out = tmp_path / "study"
    done = run_script("scripts/study.py", "--study", "quick", "--out", out, *arguments)
    assert done.returncode == 2
    assert message in done.stderr
    assert not out.exists()
