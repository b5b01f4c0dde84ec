"""A model over training: the schedule of kept networks, their resumption, the development
record of a tiny model, and the phase label's refusal below the ladder."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from transformers import TrainerCallback

from hmm_datasets.predictors import IN_CONTEXT
from modeling_hmmroformer.experiments import names
from modeling_hmmroformer.experiments.analyses.development import (
    NetworkPlace,
    SplitPlace,
    development_from_dict,
    gap_closed,
    phase_label,
)
from modeling_hmmroformer.experiments.analyses.ladder_gate import LadderPlace, learner
from modeling_hmmroformer.experiments.commands import development as command
from modeling_hmmroformer.experiments.figures.model import spread_labels
from modeling_hmmroformer.experiments.running.folders import kept_networks, step_of
from modeling_hmmroformer.experiments.running.training import (
    checkpoint_schedule,
    kept_name,
    prepare,
    train,
)
from modeling_hmmroformer.experiments.settings import load_run_config

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
# A tiny corpus of nearly deterministic HMMs (the unigram count is a weak rung) with unseen tasks,
# trained at a constant rate long enough that the network passes the unigram rung on seen tasks.
LEARNS = [
    "--corpus.num_test_unseen", "32",
    "--corpus.transition_concentration", "0.05",
    "--corpus.emission_concentration", "0.05",
    "--training.max_steps", "120",
    "--training.learning_rate", "1e-2",
    "--training.lr_scheduler_type", "constant_with_warmup",
    "--training.eval_strategy", "no",
    "--training.save_steps", "40",
    "--run.checkpoints", "5",
]  # fmt: skip


def tiny_run(tmp_path, *overrides):
    return load_run_config(TINY, ["--training.output_dir", str(tmp_path / "run"), *overrides])


# ---- the schedule ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "last, count, first", [(12000, 13, 50), (8000, 12, 10), (120, 5, 10), (10**6, 20, 1)]
)
def test_the_schedule_is_log_spaced_from_first_to_last_after_step_0(last, count, first):
    steps = checkpoint_schedule(last, count, first)
    assert steps[0] == 0 and steps[1] == first and steps[-1] == last
    assert steps == sorted(set(steps)) and len(steps) == count
    logs = np.log(steps[1:])
    ratios = np.diff(logs)  # equal in log space, up to rounding each step to a whole one
    assert np.allclose(ratios, (math.log(last) - math.log(first)) / (count - 2), atol=1.0 / first)


def test_a_short_run_keeps_each_step_once_and_a_bad_count_is_refused():
    assert checkpoint_schedule(4, 12, 1) == [0, 1, 2, 3, 4]
    assert checkpoint_schedule(100, 2) == [0, 100]
    assert checkpoint_schedule(5, 3, 10) == [0, 5]  # the first step beyond the run: the last
    assert checkpoint_schedule(100, 0) == []
    with pytest.raises(ValueError, match="run.checkpoints=1"):
        checkpoint_schedule(100, 1)


def test_checkpoints_need_max_steps(tmp_path):
    run = tiny_run(tmp_path, "--run.checkpoints", "4", "--training.max_steps", "null")  # by epochs
    with pytest.raises(ValueError, match="set training.max_steps"):
        prepare(run, resume=False)


class Killed(Exception):
    pass


class KillAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Killed


def test_a_killed_run_resumes_and_keeps_every_network_it_had_kept(tmp_path):
    run = tiny_run(tmp_path, *LEARNS)
    kept = run.output_dir / names.DEVELOPMENT
    schedule = checkpoint_schedule(120, 5, 10)  # [0, 10, 23, 52, 120]
    prepared = prepare(run, resume=False)
    prepared.trainer.add_callback(KillAt(60))  # after the Trainer's checkpoint at 40, past 52
    with pytest.raises(Killed):
        prepared.trainer.train()
    before = {step: kept / kept_name(step) for step in schedule if step <= 60}
    stamps = {step: (folder / names.WEIGHTS).stat().st_mtime_ns for step, folder in before.items()}
    assert [step for step, _ in kept_networks(kept)] == schedule[:-1]
    train(run, resume=True)  # from checkpoint-40: steps 41..60 again, 52 among them
    assert [step for step, _ in kept_networks(kept)] == schedule
    for step, folder in before.items():  # none written again, the one past the resumed step included
        assert (folder / names.WEIGHTS).stat().st_mtime_ns == stamps[step]
    assert not list(kept.glob(".*partial"))


def test_step_of_reads_the_names_checkpoints_carry():
    assert (
        step_of("step-0000500") == 500 and step_of("checkpoint-40") == 40 and step_of("step143000") == 143000
    )
    assert step_of("model") is None and step_of("step-5-old") is None


# ---- the development record of a tiny model (`tiny_development`: conftest.py) -----------------
def test_the_first_network_is_below_the_unigram_rung_and_the_last_above(tiny_development):
    record, out = tiny_development
    assert [n["step"] for n in record["networks"]] == checkpoint_schedule(120, 5, 10)
    unigram = record["ladder"]["test"]["references"]["mixture"]["unigram"]
    first, last = (record["networks"][i]["splits"]["test"] for i in (0, -1))
    assert first["distances"]["mixture"] > unigram > last["distances"]["mixture"]
    assert record["networks"][0]["tokens"] is not None  # 0 tokens at step 0
    assert record["networks"][-1]["tokens"] == 120 * 16 * 52  # steps x rows x tokens a row
    assert out.with_name("development.png").stat().st_size > 0
    assert (out.parent / names.YARDSTICKS / "yardsticks.json").is_file()


def test_each_label_is_recomputed_from_the_record(tiny_development):
    record, _ = tiny_development
    development = development_from_dict(record)
    for stored, network in zip(record["networks"], development.networks):
        for split, place in network.splits.items():
            kept = stored["splits"][split]
            assert place.label == kept["label"] and place.past_ladder == kept["past_ladder"]
            assert place.label == phase_label(
                kept["distances"], kept["distances"][kept["reference"]] < kept["best_rung_kl"]
            )
    assert development.to_dict() == record  # read back whole


def test_a_second_run_reads_the_kept_yardsticks(tiny_development, tmp_path, capsys):
    record, out = tiny_development
    again = tmp_path / "again.json"
    checkpoints = Path(record["source"])
    args = ["--checkpoints", str(checkpoints), "--yardsticks", str(out.parent / names.YARDSTICKS)]
    assert command.main([*args, "--out", str(again), "--quiet"]) == 0
    assert "the yardsticks of" not in capsys.readouterr().out  # read, not computed again
    assert json.loads(again.read_text())["networks"] == record["networks"]


def test_a_folder_without_checkpoints_is_one_line(tmp_path, capsys):
    assert command.main(["--checkpoints", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "holds no checkpoint" in err


# ---- the phase label ------------------------------------------------------------------------
DISTANCES = {name: 1.0 + 0.1 * i for i, name in enumerate(IN_CONTEXT)}  # unigram nearest of the rungs


@pytest.mark.parametrize("learner, label", [("prior", "inference"), ("mixture", "retrieval")])
def test_a_learner_label_needs_the_network_past_the_ladder(learner, label):
    distances = {**DISTANCES, "mixture": 2.0, "prior": 2.0, learner: 0.5}  # the learner nearest
    assert phase_label(distances, past_ladder=True) == label
    assert phase_label(distances, past_ladder=False) == "unigram"  # refused: the nearest rung


def test_the_nearest_rung_labels_a_network_nearer_a_rung_than_either_learner():
    distances = {**DISTANCES, "bigram": 0.3, "mixture": 0.4, "prior": 0.5}
    assert phase_label(distances, past_ladder=True) == "bigram"


def test_past_the_ladder_is_strictly_nearer_the_reference_than_the_best_rung():
    def place(model_kl):
        distances = {**DISTANCES, "oracle": model_kl, "prior": 0.1}
        return SplitPlace("oracle", distances, 0.5, "ppm3", 0.45)

    assert not place(0.45).past_ladder and place(0.45).label == "unigram"
    assert place(0.45 - 1e-9).past_ladder and place(0.45 - 1e-9).label == "inference"


# ---- the report's gate over training, and the share of the way past the best rung ---------------
def place_at(model_kl: float, reference: str = "oracle") -> SplitPlace:
    return SplitPlace(reference, {**DISTANCES, reference: model_kl}, 0.5, "ppm3", 0.45)


@pytest.mark.parametrize(
    "seen, unseen, gate",
    [
        (0.44, 0.44, "infers"),
        (0.46, 0.44, "infers"),
        (0.44, 0.45, "retrieves"),  # at the rung on unseen tasks is not past it
        (0.45, 0.45, "below the ladder"),
        (0.45, None, "below the ladder"),
        (0.44, None, "retrieves"),
    ],
)
def test_a_network_is_gated_as_the_report_gates_final_models(seen, unseen, gate):
    splits = {"test": place_at(seen, "mixture")}
    if unseen is not None:
        splits["test_unseen"] = place_at(unseen)
    network = NetworkPlace(step=10, tokens=100, splits=splits)
    final = {
        split: LadderPlace(split, p.reference, p.distances[p.reference], "ppm3", 0.45)
        for split, p in splits.items()
    }
    assert network.learner == gate == learner(final)
    assert network.to_dict()["learner"] == gate


def test_the_share_past_the_best_rung_is_0_at_the_rung_1_at_the_target_and_negative_below():
    scale = {"ppm3": 0.45, "prior": 0.15, "oracle": 0.0}
    share = {kl: gap_closed(place_at(kl).to_dict(), scale, "prior") for kl in (0.45, 0.15, 0.30, 0.60)}
    assert share[0.45] == 0.0 and share[0.15] == pytest.approx(1.0) and share[0.30] == pytest.approx(0.5)
    assert share[0.60] < 0
    assert gap_closed(place_at(0.3).to_dict(), {"ppm3": 0.45}, "prior") is None  # not measured
    assert gap_closed(place_at(0.3).to_dict(), {"prior": 0.45}, "prior") is None  # no gap to close


@pytest.mark.parametrize("positions", [[0.1, 0.11, 0.12, 0.5], [0.0, 0.2, 0.4], [0.3, 0.3, 0.3, 0.3], [0.5]])
def test_line_labels_are_spread_at_least_the_gap_apart_in_their_order(positions):
    placed = spread_labels(positions, 0.05)
    assert len(placed) == len(positions)
    assert all(b - a >= 0.05 - 1e-12 for a, b in zip(placed, placed[1:]))
    if all(b - a >= 0.05 for a, b in zip(positions, positions[1:])):
        assert placed == positions  # labels already apart stay on their lines


def test_the_phase_diagram_reads_records_and_refuses_others_in_one_line(tiny_development, tmp_path, capsys):
    from modeling_hmmroformer.experiments.commands import phase_diagram

    record, out = tiny_development
    tampered = tmp_path / "tampered.json"  # the same networks at another K
    tampered.write_text(json.dumps({**record, "num_tasks": 64}))
    figures = tmp_path / "figures"
    assert phase_diagram.main([str(out), str(tampered), "--out", str(figures)]) == 0
    names = sorted(path.name for path in figures.iterdir())
    assert names == ["development-K64.png", "development-K8.png", "phase_diagram.png"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"networks": []}))
    assert phase_diagram.main([str(other), "--out", str(figures)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not a development record" in err


# ---- in a study: the development stage and the record ------------------------------------------
@pytest.fixture(scope="module")
def kept_study(quick_studied, tmp_path_factory) -> Path:
    """The quick study at 2 layers, one seed, keeping 3 networks and probing 2 of them, its
    shared stages lent by the quick study: a folder with the study in kept/ and its records in
    records/."""
    from modeling_hmmroformer.experiments.running.engine import write_state
    from modeling_hmmroformer.experiments.running.pipeline import (
        check_reuse,
        read_pipeline_state,
        reuse_shared_stages,
        run_pipeline,
    )
    from modeling_hmmroformer.experiments.running.plan import make_pipeline
    from modeling_hmmroformer.experiments.running.study_plan import STUDY

    source, _ = quick_studied
    root = tmp_path_factory.mktemp("kept")
    study = make_pipeline(
        kept_settings(), root / "kept", plan=STUDY, progress=False, records=root / "records"
    )
    study.out.mkdir()
    state = read_pipeline_state(study)
    write_state(study.state_path, state)
    reuse_shared_stages(study, state, source, check_reuse(study, source), lambda line: None)
    run_pipeline(study, log=lambda line: None)
    return root


def kept_settings():
    from modeling_hmmroformer.experiments.settings import get_settings

    return get_settings(
        "quick", depths=(2,), seeds=(0,), overrides={"run": {"checkpoints": 3}}, development_probes=(10, 20)
    )


def test_a_study_that_keeps_networks_places_them_and_records_their_places(kept_study, tmp_path):
    from modeling_hmmroformer.experiments.running.plan import make_pipeline
    from modeling_hmmroformer.experiments.running.study_plan import STUDY
    from modeling_hmmroformer.experiments.settings import get_settings

    names = make_pipeline(kept_settings(), tmp_path / "plan", plan=STUDY, progress=False).stage_names()
    assert names.index("development depth2 seed0") + 2 == names.index("record depth2 seed0")
    assert names.index("development-probe depth2 seed0") + 1 == names.index("record depth2 seed0")
    study_out = kept_study / "kept"
    record = json.loads((kept_study / "records" / "depth2-seed0.json").read_text())
    assert [n["step"] for n in record["development"]["networks"]] == checkpoint_schedule(20, 3, 10)
    assert record["development"]["source"] == "training/development"
    assert "development" in record["seconds"]
    assert development_from_dict(record["development"]).to_dict() == record["development"]
    assert (study_out / "models" / "depth2-seed0" / "development" / "development.png").is_file()
    statistics = record["development_statistics"]
    assert list(statistics) == ["10", "20"]
    assert statistics["20"]["task_rises"] == record["statistics"]["task_rises"]  # the last kept is the model
    assert statistics["10"]["task_rises"]["own"] != statistics["20"]["task_rises"]["own"]
    assert statistics["10"]["rotary_knockout_slope"]["missing"]  # the knock-out reads the trained model only
    from modeling_hmmroformer.experiments.commands import phase_diagram

    figures = tmp_path / "figures"  # a study's record holds its development record
    assert phase_diagram.main([str(kept_study / "records" / "depth2-seed0.json"), "--out", str(figures)]) == 0
    without = make_pipeline(get_settings("quick"), tmp_path / "plain", plan=STUDY, progress=False)
    assert not any(name.startswith("development") for name in without.stage_names())


def test_probed_steps_that_training_does_not_keep_are_refused_before_anything_is_written(tmp_path):
    from modeling_hmmroformer.experiments.running.plan import make_pipeline
    from modeling_hmmroformer.experiments.running.study_plan import STUDY
    from modeling_hmmroformer.experiments.settings import get_settings

    settings = get_settings("quick", overrides={"run": {"checkpoints": 3}}, development_probes=(11,))
    with pytest.raises(
        ValueError,
        match=r"development_probes \[11\] are not among the steps training keeps \(\[0, 10, 20\]\)",
    ):
        make_pipeline(settings, tmp_path / "study", plan=STUDY)
    with pytest.raises(ValueError, match="none: set run.checkpoints"):
        make_pipeline(get_settings("quick", development_probes=(10,)), tmp_path / "study", plan=STUDY)
    assert not (tmp_path / "study").exists()


# ---- across cells: the report of a family of studies over training ------------------------------
def test_the_report_across_k_describes_each_cell_over_training(kept_study, tmp_path, run_script):
    """Two inference studies made of the kept study (two HMM draws of K = 32): the report places
    every kept step of both models on each split, gives each claim at the steps both probed, draws
    the phase diagram and the cell's development, and is the same when decided again from the
    committed records; a diversity study beside them is refused."""
    from modeling_hmmroformer.experiments.decisions.diversity import summarize_diversity
    from tests.modeling_hmmroformer.experiments.test_diversity import as_diversity_study

    summary = json.loads((kept_study / "kept" / "results.json").read_text())
    studies = [
        as_diversity_study(summary, f"inference-32-draw{draw}", 32, corpus_seed=draw, depths=(4,))
        for draw in (0, 1)
    ]
    with pytest.raises(ValueError, match="one report gathers the studies of one family"):
        summarize_diversity(
            [studies[0], as_diversity_study(summary, "diversity-32", 32, depths=(4,))], ["a", "b"]
        )
    across = summarize_diversity(studies, ["a", "b"])
    assert across["family"] == "inference" and "inference-512-draw0 at 4 layers" in across["missing"]
    (cell,) = across["over_training"]
    assert (cell["num_tasks"], cell["depth"], cell["num_models"]) == (32, 4, 2)
    record = summary["models"][0]
    development = development_from_dict(record["development"])
    for split, rows in cell["places"].items():
        assert [r["step"] for r in rows] == checkpoint_schedule(20, 3, 10)
        for row, network in zip(rows, development.networks, strict=True):
            place = network.splits[split]
            assert row["kl_reference"]["mean"] == pytest.approx(place.distances[place.reference])
            assert row["labels"] == {place.label: 2} and row["past"] == 2 * place.past_ladder
            assert row["tokens"] == network.tokens
    statistics = record["development_statistics"]
    assert cell["claims"]
    for key, rows in cell["claims"].items():
        assert [r["step"] for r in rows] == [10, 20]
        for row in rows:
            own = statistics[str(row["step"])][key]["own"]
            assert row["own"]["n"] == (0 if own is None else 2)
            assert row["own"]["mean"] == (None if own is None else pytest.approx(own))
    assert "rotary_knockout_slope" not in cell["claims"]  # never measured over training

    folders = []
    for study in studies:
        folder = tmp_path / study.name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(study.to_dict()))
        folders.append(folder)
    out = tmp_path / "inference"
    done = run_script("scripts/diversity_report.py", *folders, "--out", out)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((out / "results.json").read_text())
    report = (out / "REPORT.md").read_text()
    assert "## Over training" in report and "### K = 32, 4 layers, over training: 2 models" in report
    for name in ("phase_diagram", "development_K32_L4"):
        assert (
            out / written["figures"][name]
        ).stat().st_size > 0 and f"]({written['figures'][name]})" in report
    for study in studies:  # the committed layout: each study's records and yardsticks beside the report
        models = out / study.name / "models"
        models.mkdir(parents=True)
        (out / study.name / "yardsticks.json").write_text(json.dumps(study.yardsticks))
        for model in study.models:
            (models / f"depth{model.depth}-seed{model.seed}.json").write_text(json.dumps(model.to_dict()))
    assert run_script("scripts/diversity_report.py", "--redecide", out).returncode == 0
    assert json.loads((out / "results.json").read_text())["over_training"] == written["over_training"]


def test_hub_revisions_named_by_their_step_are_read_as_the_folders_are(
    tiny_development, tmp_path, monkeypatch
):
    record, out = tiny_development
    kept = {step: path for step, path in kept_networks(Path(record["source"]))}
    asked = []

    def snapshot_download(repo_id, revision):  # the Hub, as the folders of the kept networks
        asked.append((repo_id, revision))
        return str(kept[step_of(revision)])

    monkeypatch.setattr(command, "snapshot_download", snapshot_download)
    steps = sorted(kept)[-2:]
    again = tmp_path / "hub.json"
    args = ["--checkpoints", *(f"org/tiny@step-{step}" for step in steps), "--out", str(again)]
    yardsticks = ["--yardsticks", str(out.parent / names.YARDSTICKS), "--quiet"]
    assert command.main([*args, *yardsticks]) == 0
    assert asked == [("org/tiny", f"step-{step}") for step in steps]
    assert json.loads(again.read_text())["networks"] == record["networks"][-2:]


@pytest.mark.parametrize(
    ("checkpoints", "message"),
    [
        (["org/tiny@main", "--out", "x.json"], "the revision 'main' names no step"),
        (["org/tiny@step-5"], "--out is required when --checkpoints names Hub checkpoints"),
        (["org/tiny"], "--out is required when --checkpoints names Hub checkpoints"),  # its every step
        (["no/such/step-5"], "--checkpoints no/such/step-5: no such folder"),  # a folder, not the Hub
    ],
)
def test_a_hub_checkpoint_without_a_step_or_an_out_is_one_line(checkpoints, message, capsys):
    assert command.main(["--checkpoints", *checkpoints]) == 2
    assert message in capsys.readouterr().err


def refs_of(*names):
    from huggingface_hub.hf_api import GitRefInfo, GitRefs

    branches = [GitRefInfo(name=name, ref=f"refs/heads/{name}", target_commit="0" * 40) for name in names]
    return GitRefs(branches=branches, converts=[], tags=[])


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (refs_of("main", "v1"), "none of its branches and tags is named by a step"),
        (refs_of("main", "step-5", "checkpoint-5"), "steps named by more than one revision"),
    ],
)
def test_a_hub_repo_without_one_revision_per_step_is_one_line(refs, message, monkeypatch, capsys):
    from huggingface_hub import HfApi

    monkeypatch.setattr(HfApi, "list_repo_refs", lambda self, repo_id: refs)
    assert command.main(["--checkpoints", "org/tiny", "--out", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --checkpoints org/tiny: ") and err.count("\n") == 1 and message in err


def test_a_hub_repos_step_revisions_are_read_in_step_order(monkeypatch):
    from huggingface_hub import HfApi

    monkeypatch.setattr(HfApi, "list_repo_refs", lambda self, repo_id: refs_of("step-120", "main", "step-10"))
    monkeypatch.setattr(command, "snapshot_download", lambda repo_id, revision: f"/hub/{repo_id}/{revision}")
    assert command.listed("org/tiny") == [
        (10, Path("/hub/org/tiny/step-10")),
        (120, Path("/hub/org/tiny/step-120")),
    ]
    assert command.is_hub_repo("org/tiny") and not command.is_hub_repo("org/tiny@step-5")
    assert not command.is_hub_repo("no/such/step-5") and not command.is_hub_repo("bad name/x")
