"""The depth-and-seed study: the quick study end to end, claims counted over seeds, the
untrained control at the training's own initialisation, and bad input refused."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hmm_datasets import cache
from model_cards.render import memory_equivalent_text
from model_cards.study_reports import seconds_spread_text
from modeling_hmmroformer.experiments.analyses.claims import CLAIMS
from modeling_hmmroformer.experiments.analyses.evaluation import Figure1Result
from modeling_hmmroformer.experiments.analyses.record import ModelRecord
from modeling_hmmroformer.experiments.decisions.aggregate import (
    StudySummary,
    bins_of_test_positions,
    kl_by_test_position,
    time_row,
)
from modeling_hmmroformer.experiments.running import study_plan
from modeling_hmmroformer.experiments.running.engine import write_state
from modeling_hmmroformer.experiments.running.folders import read_model_results
from modeling_hmmroformer.experiments.running.pipeline import (
    check_reuse,
    read_pipeline_state,
    reuse_shared_stages,
    run_pipeline,
    staggered,
    threads_beside,
    worker_threads,
)
from modeling_hmmroformer.experiments.running.plan import MODEL_STAGES, make_pipeline
from modeling_hmmroformer.experiments.running.stages import build_corpus
from modeling_hmmroformer.experiments.running.study_plan import STUDY
from modeling_hmmroformer.experiments.running.training import prepare
from modeling_hmmroformer.experiments.settings import PIPELINES, Settings, fingerprint, get_settings
from probing.capture import untrained_twin
from probing.results import ProbeResults

ROOT = Path(__file__).resolve().parents[3]


def quick_study(out, records=None, **changes):
    return make_pipeline(get_settings("quick", **changes), out, plan=STUDY, progress=False, records=records)


def test_the_quick_study_reports_every_claim_at_every_depth(quick_studied):
    out, stdout = quick_studied
    results = json.loads((out / "results.json").read_text())
    config = PIPELINES["quick"]
    assert [d["depth"] for d in results["depths"]] == list(config.depths)
    assert len(results["models"]) == len(config.depths) * len(config.seeds)
    report = (out / "REPORT.md").read_text()
    assert [row["key"] for row in results["verdict_table"]] == [claim.key for claim in CLAIMS]
    for row in results["verdict_table"]:
        assert row["claim"] in report
        for cell in row["cells"]:  # at most two seeds: never decided, and says so (or why not read)
            plural = "" if cell["n"] == 1 else "s"
            assert cell["label"] == f"undecided ({cell['n']} seed{plural})" or cell["verdict"] in (
                "n/a",
                "not testable",
            )
            assert cell["n"] <= 2 and cell["verdict"] not in ("holds", "contradicted")
    assert "**undecided (2 seeds)**" in report
    assert "And by position in the test sequence" in report  # Figure 1 as excess KL, by test position
    for model in results["models"]:  # the twin is scored beside every model
        statistics = model["statistics"]
        assert "twin" in statistics["demonstrations"]["floors"]
        assert set(statistics["falls_with_distance"]["floors"]) == {"twin", "tokens"}
        assert len(statistics["falls_with_distance"]["own_by_split"]) == 3
        assert model == json.loads(
            (out.parent / "records" / f"depth{model['depth']}-seed{model['seed']}.json").read_text()
        )
        assert list(model["seconds"]) == [*MODEL_STAGES, "patching"]  # a fresh clone still reports the times
        assert all(seconds > 0 for seconds in model["seconds"].values())
        patching = model["patching"]  # the quick study patches each model and its twin (docs/patching.md)
        assert patching["rows"] == 16 and patching["config"]["num_tasks"] == 4
        for reading in (patching["model"], patching["control"]):
            assert len(reading["site_names"]) == model["depth"] + 1
            assert reading["same_donor_max_nats"] < 1e-5
            assert reading["donors"]["state"]["pairs"] > 0
            assert len(reading["donors"]["state"]["shares"]) == model["depth"] + 1
    for depth in results["depths"]:
        assert f"{depth['kl_bayes_model']['mean']:.3f}" in report
        below = sum(
            model["ladder"]["below_in_context"]["model"]
            for model in results["models"]
            if model["depth"] == depth["depth"]
        )
        assert depth["below_in_context"] == below  # the ladder: seeds below the in-context baseline
        assert f"| {depth['model_accuracy']['mean']:.3f}" in report
        assert f"{below} of {len(config.seeds)} |" in report
        n = len(config.seeds)  # the time table: training and analysis per model, every seed timed
        assert re.search(
            rf"\n\| {depth['depth']} \| \d+ s( \[\d+, \d+\])? \| \d+ s.* \| {n} of {n} \|\n", report
        )
        memory = depth["memory"]  # the model's memory: data per seed, text in the report
        assert len(memory["equivalent"]) == n
        assert all(e is None or isinstance(e["longest_searched"], int) for e in memory["equivalent"])
        assert (
            f"| {depth['depth']} | {'; '.join(map(memory_equivalent_text, memory['equivalent']))} |" in report
        )
    for figure in ("distance_to_bayes", "figure2_by_depth", "beliefs_by_depth", "previous_tokens_by_depth"):
        assert (out / "figures" / f"{figure}.png").stat().st_size > 0
    assert (out / "lemma1" / "lemma1.png").stat().st_size > 0
    assert set(json.loads((out / "study_state.json").read_text())["stages"]) == set(
        quick_study(out).stage_names()
    )
    assert "layers: KL to Bayes" in stdout and "undecided (2 seeds)" in stdout
    # the quick corpus has unseen tasks: every model is placed between retrieval and inference
    assert "## Retrieval or inference" in report and "two independent particle" in report
    for depth in results["depths"]:
        for split in ("test", "test_unseen"):
            row = depth["yardsticks"][split]
            assert sum(row["nearest"].values()) == len(depth["seeds"])
            assert f"| {depth['depth']} | {split} | {row['kl']['mixture']['mean']:.3f}" in report


def test_a_study_goes_on_from_its_records_without_the_models(quick_studied, tmp_path):
    out, _ = quick_studied
    records = out.parent / "records"
    fresh = quick_study(tmp_path / "again", records=records)  # a clone: the records, no model folders
    assert fresh.stage_names() == ["corpus", "lemma1", "yardsticks", "report"]
    run_pipeline(fresh, log=lambda line: None)
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    first = json.loads((out / "results.json").read_text())
    assert again["verdict_table"] == first["verdict_table"] and again["models"] == first["models"]
    # one record missing: that model alone is trained and analysed again
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in records.iterdir():
        if path.name != "depth3-seed1.json":
            (partial / path.name).write_bytes(path.read_bytes())
    names = quick_study(tmp_path / "p", records=partial).stage_names()
    assert [name for name in names if "seed" in name] == [
        "train depth3 seed1",
        "evaluate depth3 seed1",
        "probe depth3 seed1",
        "memory depth3 seed1",
        "knockout depth3 seed1",
        "patching depth3 seed1",
        "record depth3 seed1",
    ]
    # records of other settings are refused before anything is written
    eval_rows = PIPELINES["quick"].eval_rows
    with pytest.raises(
        ValueError, match=rf"other settings \(settings\.eval_rows is {eval_rows} there, 16 here\)"
    ):
        run_pipeline(quick_study(tmp_path / "other", records=records, eval_rows=16))
    assert not (tmp_path / "other").exists()


def test_a_study_that_skips_lemma1_runs_no_memory_and_its_records_join_the_others(quick_studied, tmp_path):
    """`lemma1=False`: neither Lemma 1 nor any model's memory runs; the record has no memory, the
    same fingerprint as the full study's records, and the report says what was not measured."""
    out, _ = quick_studied
    records = tmp_path / "records"
    lean = quick_study(tmp_path / "lean", records=records, depths=(2,), seeds=(0,), lemma1=False)
    stages = lean.stage_names()
    assert "lemma1" not in stages and not [s for s in stages if s.startswith("memory")]
    assert "yardsticks" in stages and "knockout depth2 seed0" in stages
    assert lean.record_fingerprint() == quick_study(tmp_path / "full").record_fingerprint()
    run_pipeline(lean, log=lambda line: None)
    assert not (tmp_path / "lean" / "lemma1").exists()
    assert not (tmp_path / "lean" / "models" / "depth2-seed0" / "memory").exists()
    record = json.loads((records / "depth2-seed0.json").read_text())
    assert record["memory"] is None
    assert json.loads((out.parent / "records" / "depth2-seed0.json").read_text())["memory"] is not None
    report = (tmp_path / "lean" / "REPORT.md").read_text()
    assert "Not measured in this study" in report and "memory_by_depth" not in report
    with pytest.raises(ValueError, match="lemma1=1 must be true or false"):
        get_settings("quick", lemma1=1)


def test_a_study_run_a_few_depths_at_a_time_reports_every_depth_recorded(tmp_path):
    """`--depths 3` after the 2-layer models were recorded: the study's report covers both depths
    and trains only depth 3; a depth with a seed not yet recorded is left to its own run."""
    records = tmp_path / "records"
    records.mkdir()
    seeds = get_settings("quick").seeds
    for seed in seeds:
        (records / f"depth2-seed{seed}.json").write_text("{}")
    study = quick_study(tmp_path / "out", records=records, depths=(3,))
    assert study.settings.depths == (2, 3)
    assert [name for name in study.stage_names() if name.startswith("train")] == [
        f"train depth3 seed{seed}" for seed in seeds
    ]
    (records / f"depth2-seed{seeds[-1]}.json").unlink()
    assert quick_study(tmp_path / "again", records=records, depths=(3,)).settings.depths == (3,)
    assert quick_study(tmp_path / "none", depths=(3,)).settings.depths == (3,)  # no records folder


def test_a_model_folders_analyses_are_read_back_as_typed_values(quick_studied, tmp_path):
    """What the record is made of: Figure 1 and the probes as their typed values, the knock-out
    as written; a folder whose probe stage never ran is refused in one line naming the file."""
    out, _ = quick_studied
    folder = next(path for path in sorted((out / "models").iterdir()) if path.is_dir())
    analyses = read_model_results(folder)
    assert isinstance(analyses.figure1, Figure1Result) and isinstance(analyses.probes, ProbeResults)
    assert analyses.knockout == json.loads((folder / "knockout" / "knockout.json").read_text())
    assert analyses.probes.depth == analyses.probes.model["num_hidden_layers"] > 0
    unprobed = tmp_path / folder.name
    shutil.copytree(folder, unprobed, ignore=shutil.ignore_patterns("probes", "training"))
    with pytest.raises(ValueError, match="probe_results.json is missing: the model's probes stage") as error:
        read_model_results(unprobed)
    assert "\n" not in str(error.value)


def test_a_rerun_skips_every_stage_and_other_settings_are_refused(quick_studied, tmp_path):
    out, _ = quick_studied
    before = (out / "REPORT.md").read_text()
    logged = []
    run_pipeline(quick_study(out), log=logged.append)
    assert all("complete, skipped" in line for line in logged)
    assert (out / "REPORT.md").read_text() == before
    eval_rows = PIPELINES["quick"].eval_rows
    with pytest.raises(ValueError, match=rf"settings\.eval_rows is {eval_rows} there, 8 here"):
        run_pipeline(quick_study(out, eval_rows=8))
    assert (out / "REPORT.md").read_text() == before
    # another grid of the same settings: the folder's stages serve it, its own report is written
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    logged = []
    run_pipeline(quick_study(copy, seeds=(0,)), log=logged.append)
    assert only_the_report_ran(logged)
    assert json.loads((copy / "results.json").read_text())["study"]["seeds"] == [0]
    logged = []
    run_pipeline(quick_study(copy), log=logged.append)  # back to the whole grid: its report again
    assert only_the_report_ran(logged)
    assert json.loads((copy / "results.json").read_text())["study"]["seeds"] == list(PIPELINES["quick"].seeds)


def only_the_report_ran(logged: list[str]) -> bool:
    ran = [line for line in logged if "done in" in line]
    return len(ran) == 1 and "] report: done in" in ran[0]


def test_a_study_folder_from_before_grids_were_kept_is_refused_and_left_as_it_was(quick_studied, tmp_path):
    """Its state names the grid's fingerprint (no committed file needs that format any more): it
    is refused in one line naming both fingerprints, and nothing in it changes."""
    out, _ = quick_studied
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    study = quick_study(copy)
    state = json.loads((copy / "study_state.json").read_text())
    old = {
        "preset": "quick",
        "fingerprint": fingerprint(study.settings, study.run),
        "stages": state["stages"],
    }
    (copy / "study_state.json").write_text(json.dumps(old))
    before = sorted((path, path.stat().st_mtime_ns) for path in copy.rglob("*"))
    with pytest.raises(
        ValueError, match=f"fingerprint {old['fingerprint']} there, {study.fingerprint()} here"
    ):
        run_pipeline(study)
    assert sorted((path, path.stat().st_mtime_ns) for path in copy.rglob("*")) == before


def test_another_architecture_reuses_the_corpus_stages_of_a_study_of_the_same_corpus(quick_studied, tmp_path):
    source, _ = quick_studied
    settings = get_settings(
        "quick", overrides={"model": {"model_type": "llama"}, "training": {"max_steps": 5}}
    )
    study = make_pipeline(settings, tmp_path / "llama", plan=STUDY, progress=False)
    state = read_pipeline_state(study)
    study.out.mkdir()
    write_state(study.state_path, state)
    logged = []
    reuse_shared_stages(study, state, source, check_reuse(study, source), logged.append)
    assert list(state.stages) == ["corpus", "lemma1", "yardsticks"]
    assert all(record.reused_from == str(source) for record in state.stages.values())
    assert json.loads((study.out / "study_state.json").read_text()) == state.to_dict()
    for name in ("corpus/hmm_params.safetensors", "lemma1/lemma1.json", "yardsticks/yardsticks.safetensors"):
        assert (study.out / name).read_bytes() == (source / name).read_bytes(), name
    assert logged == [
        f"{stage}: copied from {source / stage}" for stage in ("corpus", "lemma1", "yardsticks")
    ]
    reuse_shared_stages(
        study, state, source, check_reuse(study, source), logged.append
    )  # complete here: nothing copied again
    assert len(logged) == 3
    other = make_pipeline(
        get_settings("quick", overrides={"corpus": {"seed": 1}}),
        tmp_path / "other",
        plan=STUDY,
        progress=False,
    )
    with pytest.raises(ValueError, match=r"other settings \(run.corpus.seed is 'unset' there, 1 here;"):
        check_reuse(other, source)
    with pytest.raises(ValueError, match="not a study folder"):
        check_reuse(study, tmp_path)


def test_a_study_killed_after_a_model_resumes_without_redoing_it(tmp_path, run_script):
    out, records = tmp_path / "study", tmp_path / "records"
    command = [sys.executable, "scripts/study.py", "--study", "quick", "--depths", "2", "--quiet"]
    command += ["--out", str(out), "--records", str(records)]
    first = records / "depth2-seed0.json"
    running = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not first.is_file() and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    running.kill()  # SIGKILL: no clean-up of any kind
    running.wait()
    assert first.is_file() and not (out / "REPORT.md").exists()
    recorded = first.read_bytes()
    done = run_script(*command[1:])  # the same command again, in this process
    assert done.returncode == 0, done.stderr[-2000:]
    assert "depth2 seed0" not in done.stdout and "record depth2 seed1: done" in done.stdout
    assert first.read_bytes() == recorded
    results = json.loads((out / "results.json").read_text())
    assert [(m["depth"], m["seed"]) for m in results["models"]] == [(2, 0), (2, 1)]


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
    names = study.stage_names()
    per_model = ["train", "evaluate", "probe", "memory", "knockout", "patching", "record"]
    assert names[:3] == ["corpus", "lemma1", "yardsticks"]  # the quick corpus has unseen tasks
    assert names[3:10] == [f"{stage} depth2 seed0" for stage in per_model]  # recorded before the next model
    assert names[10:17] == [f"{stage} depth3 seed0" for stage in per_model]
    unpatched = make_pipeline(  # a study that does not patch
        dataclasses.replace(PIPELINES["quick"], patching=None), tmp_path / "u", plan=STUDY, progress=False
    ).stage_names()
    assert (
        not [name for name in unpatched if name.startswith("patching")] and len(unpatched) == len(names) - 4
    )
    assert names[-1] == "report" and "model" not in names
    # a one-model pipeline as a study: the study layout, not the reproduction's
    single = make_pipeline(get_settings("tiny"), tmp_path / "t", plan=STUDY, progress=False)
    assert [m.folder.name for m in single.models] == ["depth2-seed0"]


def test_a_grid_can_train_fewer_seeds_at_some_depths(tmp_path):
    study = quick_study(tmp_path / "s", seeds=(0, 1, 2), seeds_per_depth={2: 1})
    assert [(m.depth, m.seed) for m in study.models] == [(2, 0), (3, 0), (3, 1), (3, 2)]
    default = PIPELINES["default"]
    assert {depth: len(default.seeds_of(depth)) for depth in default.depths} == {2: 3, 4: 6, 8: 3, 16: 6}


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
        (["--corpus.num_tasks", "3"], "cover 4 tasks but --corpus.num_tasks is 3"),
        (["--jobs", "0"], "--jobs 0 must be a whole number"),
        (
            ["--model.num_hidden_layers", "8"],
            "--model.num_hidden_layers: a study sets it for each model; give --depths",
        ),
        (["--training.seed", "3"], "--training.seed: a study sets it for each model; give --seeds"),
        (["--training.output_dir", "x"], "--training.output_dir: a study sets it for each model; give --out"),
    ],
)
def test_bad_input_is_one_error_line_and_writes_nothing(run_script, tmp_path, arguments, message):
    out = tmp_path / "study"
    done = run_script("scripts/study.py", "--study", "quick", "--out", out, *arguments)
    assert done.returncode == 2
    assert message in done.stderr
    assert not out.exists()


def test_a_study_summary_reads_its_results_json_and_writes_it_back(quick_studied):
    written = json.loads((quick_studied[0] / "results.json").read_text())
    summary = StudySummary.from_dict(written)
    assert summary.name == "quick" and len(summary.models) == len(written["models"]) > 1
    assert all(isinstance(record, ModelRecord) for record in summary.models)
    assert json.dumps(summary.to_dict()) == json.dumps(written)  # every field, in the file's order


def test_the_time_table_reads_the_records_that_kept_their_times():
    timed = {"train": 100.0, "evaluate": 5.0, "probe": 20.0, "memory": 1.0, "knockout": 4.0}
    row = time_row([timed, {**timed, "train": 300.0}, {}])  # the last record kept no times
    assert row["n"] == 2
    assert row["train"] == {"median": 200.0, "min": 100.0, "max": 300.0, "sum": 400.0}
    assert row["analysis"] == {"median": 30.0, "min": 30.0, "max": 30.0, "sum": 60.0}
    assert seconds_spread_text(row["train"]) == "200 s [100, 300]"
    assert seconds_spread_text(row["analysis"]) == "30 s"
    assert seconds_spread_text(time_row([{}])["train"]) == "not recorded"


def test_excess_kl_by_test_position_is_averaged_in_bins_across_seeds():
    assert bins_of_test_positions(64) == [(1, 1), (2, 4), (5, 16), (17, 63)]
    assert bins_of_test_positions(8) == [(1, 1), (2, 4), (5, 7)]  # cut to the test sequence
    curve = [9.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]  # position 0 is not a test token scored
    kept = [
        {"model": curve, "twin": [2 * v for v in curve], "in_context": None},
        {"model": [v + 1 for v in curve], "twin": curve, "in_context": None},
        None,  # a record made before the curves were kept
    ]
    row = kl_by_test_position(kept)
    assert [stat["mean"] for stat in row["model"]] == [1.5, 2.5, 3.5]
    assert [stat["n"] for stat in row["twin"]] == [2, 2, 2]
    assert row["in_context"] is None
    assert kl_by_test_position([None]) is None


def without_times(record):
    """A record without its wall times (the only thing two runs of a model may differ in)."""
    if isinstance(record, dict):
        return {key: without_times(value) for key, value in record.items() if key != "seconds"}
    return [without_times(value) for value in record] if isinstance(record, list) else record


def test_models_side_by_side_give_the_records_of_one_at_a_time(tmp_path, quick_studied, monkeypatch):
    """The session's quick study ran its models one at a time, with one thread (OMP_NUM_THREADS=1)."""
    threads, logged, lemma1_threads = torch.get_num_threads(), [], []
    side_by_side = quick_study(tmp_path / "two", depths=(2,), seeds=(0, 1))
    lemma1 = study_plan.measure_lemma1
    monkeypatch.setattr(
        study_plan, "measure_lemma1", lambda p: lemma1_threads.append(torch.get_num_threads()) or lemma1(p)
    )
    torch.set_num_threads(2)  # shared by two workers: one thread each
    try:
        run_pipeline(side_by_side, log=logged.append, jobs=2)
        threads_after = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    assert "2 models in 2 processes side by side, 1 thread(s) each ..." in logged
    # Lemma 1 ran here beside the two trainings on the one thread they left, then the threads came back
    assert lemma1_threads == [1] and threads_after == 2
    # their training started once the corpus was there, before Lemma 1 and the yardsticks ran here
    training = logged.index("training 2 models in 2 processes beside the shared stages, 1 thread(s) each ...")
    shared = [i for i, line in enumerate(logged) if line.endswith(("] lemma1 ...", "] yardsticks ..."))]
    assert len(shared) == 2 and training < min(shared)
    for record in ("models/depth2-seed0/record.json", "models/depth2-seed1/record.json"):  # seed 1 staggered
        one, two = (
            json.loads((folder / record).read_text()) for folder in (quick_studied[0], tmp_path / "two")
        )
        assert without_times(one) == without_times(two)
    # Lemma 1's memory-L predictions, made before the workers started, served their memory stages
    assert list((tmp_path / "two" / ".predictions").glob("bayes-memory-*.safetensors"))
    assert cache.CACHE_ENV not in os.environ  # set only while the stages ran
    state = json.loads((tmp_path / "two" / "study_state.json").read_text())
    assert all(m.stage(name) in state["stages"] for m in side_by_side.models for name in MODEL_STAGES)
    # a model folder gone (a folder carried elsewhere without it): its stages are redone, alone
    shutil.rmtree(tmp_path / "two" / "models" / "depth2-seed1")
    logged.clear()
    run_pipeline(side_by_side, log=logged.append)
    redone = (*MODEL_STAGES, "patching", "record")  # the quick study patches its models
    assert f"{len(redone)} stages of models whose folder is gone are redone" in logged
    total = 3 + 2 * len(redone) + 1  # corpus, lemma1, yardsticks; two models; the report
    assert [line for line in logged if line.endswith("...")] == [
        f"[{i}/{total}] {name} depth2 seed1 ..." for i, name in enumerate(redone, start=total - len(redone))
    ] + [f"[{total}/{total}] report ..."]


def test_every_other_model_side_by_side_probes_before_its_figure1():
    stages = (*MODEL_STAGES, "record")
    assert staggered(stages, 0) == staggered(stages, 2) == stages
    odd = staggered(stages, 1)
    assert sorted(odd) == sorted(stages) and odd.index("probe") < odd.index("evaluate")
    assert [s for s in odd if s not in ("probe", "evaluate")] == [
        s for s in stages if s not in ("probe", "evaluate")
    ]
    assert staggered(("train",), 1) == ("train",)  # the trainings beside the shared stages


@pytest.mark.parametrize(
    ("total", "busy", "kept"), [(2, 2, 1), (2, 1, 1), (4, 2, 2), (16, 16, 1), (16, 8, 8)]
)
def test_the_study_process_keeps_the_threads_its_workers_leave_and_at_least_one(total, busy, kept):
    assert threads_beside(total, busy) == kept


@pytest.mark.parametrize(
    ("total", "jobs", "models", "beside", "threads"),
    [
        (2, 2, 1, True, 1),  # a draw's one training beside the shared stages leaves them a core
        (2, 2, 1, False, 2),  # its analyses alone: every thread
        (2, 2, 2, False, 1),  # two models side by side share the cores
        (2, 2, 5, False, 1),  # more models than workers: the workers' share
        (16, 4, 2, False, 8),
        (16, 4, 2, True, 4),
        (1, 2, 1, False, 1),  # at least one
        (1, 4, 4, True, 1),
    ],
)
def test_a_worker_gets_its_share_of_the_threads_and_all_of_them_alone(total, jobs, models, beside, threads):
    assert worker_threads(total, jobs, models, beside) == threads


@pytest.mark.parametrize("jobs", [0, 1.5, True])
def test_a_bad_number_of_jobs_is_refused(tmp_path, jobs):
    with pytest.raises(ValueError, match="--jobs"):
        run_pipeline(quick_study(tmp_path / "s"), jobs=jobs)
    assert not (tmp_path / "s").exists()
