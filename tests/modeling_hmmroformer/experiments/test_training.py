"""Training: the run config, bad input before any step, checkpoints, resume, data sources, processes."""

import importlib.util
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

import hmm_datasets
from modeling_hmmroformer.experiments.commands import train as train_command
from modeling_hmmroformer.experiments.fields import DataSection, RunSection
from modeling_hmmroformer.experiments.running import training
from modeling_hmmroformer.experiments.running.stages import TRAIN_COMMAND
from modeling_hmmroformer.experiments.running.training import (
    FixedLengthCollator,
    is_complete_checkpoint,
    prepare,
    step_time_summary,
    train,
    with_random_demo_counts,
)
from modeling_hmmroformer.experiments.settings import config_for_corpus, load_run_config

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
ACCELERATE = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
]
ACCELERATE += ["--dynamo_backend", "no"]


def tiny_run(tmp_path, *overrides):
    return load_run_config(TINY, ["--training.output_dir", str(tmp_path / "run"), *overrides])


def test_overrides_are_typed_and_reach_every_section(tmp_path):
    run = tiny_run(
        tmp_path,
        "--model.num_hidden_layers",
        "3",
        "--training.learning_rate=3e-4",
        "--run.loss_mask",
        "test",
        "--corpus.num_tasks",
        "4",
    )
    assert run.model["num_hidden_layers"] == 3 and run.training["learning_rate"] == 3e-4
    assert run.run_section.loss_mask == "test" and run.corpus_config().num_tasks == 4
    # the data and run sections read as their dataclasses: what the file leaves out, their defaults
    assert run.run_section == RunSection(loss_mask="test", eval_rows=64, vary_num_demos=True)
    assert run.data_section == DataSection(source="builder", num_proc=None)
    assert run.run == {
        "loss_mask": "test",
        "vary_num_demos": True,
        "eval_rows": 64,
    }  # as given: the fingerprint's


@pytest.mark.parametrize("name", ["tiny", "small", "paper"])
def test_the_shipped_configs_resolve_to_a_model_that_reads_their_corpus(name):
    run = load_run_config(ROOT / "configs" / f"{name}.yaml")
    corpus = run.corpus_config()
    model = config_for_corpus(corpus, **run.model_sizes())
    assert corpus == hmm_datasets.get_preset(name)  # the run trains on the corpus its preset names
    assert model.vocab_size == corpus.vocab_size + 1
    assert model.max_position_embeddings >= corpus.sequence_length and model.num_hidden_layers >= 2
    if name == "paper":  # the paper's sizes and its 4096 steps of batch 32; GPU speed-ups on
        assert (model.num_hidden_layers, model.num_attention_heads, model.hidden_size) == (16, 16, 1024)
        assert run.training["max_steps"] * run.training["per_device_train_batch_size"] == corpus.num_train
        assert run.training["bf16"] and run.training["torch_compile"]
    else:  # CPU presets: bf16 and compile slow a CPU down
        assert not run.training.get("bf16") and not run.training.get("torch_compile")
    assert run.training["lr_scheduler_type"] == "cosine" and run.training["warmup_steps"] > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--corpus.preset", "huge"], "corpus.preset='huge' is not a corpus preset"),
        (["--model.preset", "small"], "model.preset is not read any more: write the model's sizes"),
        (["--model.num_layers", "3"], r"unknown field\(s\) \['num_layers'\] in section 'model'"),
        (["--training.learning_rte", "1"], r"unknown field\(s\) \['learning_rte'\] in section 'training'"),
        (["--optimizer.lr", "1"], "unknown section 'optimizer'"),
        (["model.num_hidden_layers", "3"], "write overrides as --section.field value"),
        (
            ["--run.loss_mask", "demos"],
            r"run.loss_mask='demos' must be one of \('all', 'observations', 'test'\)",
        ),
        (["--run.loss_mask", "3"], r"run.loss_mask='3' must be one of \('all', 'observations', 'test'\)"),
        (["--data.num_proc", "0"], "data.num_proc=0 must be at least 1"),
        (["--run.vary_num_demos", "sometimes"], "run.vary_num_demos='sometimes' must be true or false"),
        (
            ["--training.learning_rate", "fast"],
            "training.learning_rate='fast' must be a number or an integer",
        ),
        (["--training.max_steps", "-5"], "training.max_steps=-5 must be at least 1"),
        (["--training.max_steps", "0"], "training.max_steps=0 must be at least 1"),
        (["--training.learning_rate", "0"], "training.learning_rate=0 must be above 0"),
        (["--training.per_device_train_batch_size", "0"], "per_device_train_batch_size=0 must be at least 1"),
        (["--training.bf16", "1"], "training.bf16='1' must be true or false"),
        (
            ["--model.hidden_size", "30", "--model.num_attention_heads", "4"],
            "model section: .*hidden_size=30 is not divisible",
        ),
        (["--corpus.num_tasks", "0"], "corpus section: num_tasks=0"),
        (["--training.learning_rte", "1"], r"did you mean training.learning_rate\?"),
        (
            ["--training.learning_rte", "1", "--model.hiden_size", "8", "--run.eval_rows", "-1"],
            r"'hiden_size'.*'learning_rte'.*run.eval_rows=-1 must be at least 0",
        ),
    ],
)
def test_bad_configs_fail_before_training(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_run(tmp_path, *overrides)
    assert not (tmp_path / "run").exists()


def test_the_train_command_leaves_no_process_group_for_the_exit(tmp_path):
    """A gloo group still alive when the interpreter exits can abort it (SIGABRT), so the command
    destroys the group it ran in, also when it refuses its config."""
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        status = train_command.main([str(TINY), "--model.hiden_size", "8"])
    finally:
        left = torch.distributed.is_initialized()
        if left:
            torch.distributed.destroy_process_group()
    assert status == 2 and not left


@pytest.mark.skipif(torch.cuda.is_available(), reason="flex_attention is allowed on a GPU")
def test_flex_attention_on_a_cpu_is_refused_when_the_config_is_read(tmp_path):
    with pytest.raises(ValueError, match="--model.attn_implementation sdpa"):
        tiny_run(tmp_path, "--model.attn_implementation", "flex_attention")


def test_a_model_that_cannot_read_the_corpus_is_refused_when_the_config_is_read(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=5 is smaller than the corpus's 7 tokens"):
        tiny_run(tmp_path, "--model.vocab_size", "5")
    assert not (tmp_path / "run").exists()


def test_resume_without_a_checkpoint_and_rerun_over_checkpoints_are_refused(tmp_path):
    run = tiny_run(tmp_path)
    with pytest.raises(ValueError, match="--resume: no complete checkpoint"):
        prepare(run, resume=True)
    (tmp_path / "run" / "checkpoint-5").mkdir(parents=True)  # half-written: not complete
    with pytest.raises(ValueError, match="--resume: no complete checkpoint"):
        prepare(run, resume=True)
    with pytest.raises(ValueError, match="already holds checkpoints: pass --resume"):
        prepare(run, resume=False)
    with pytest.raises(ValueError, match="no run config"):
        load_run_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("mask", "counted"),
    [("all", {0, 1, 2, 3, 4, 5}), ("observations", {0, 1, 3, 4, 5}), ("test", {3, 4, 5})],
)
def test_collator_masks_the_loss(mask, counted):
    row = {"input_ids": [4, 1, 9, 2, 3, 0], "segment_ids": [0, 0, 0, 1, 1, 1]}  # delimiter 9, test segment 1
    batch = FixedLengthCollator(delimiter=9, test_segment=1, loss_mask=mask)([row, row])
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].shape == (2, 6)
    assert {i for i in range(6) if batch["labels"][0, i] != -100} == counted


@pytest.mark.parametrize(
    ("kept", "ids", "labels"),
    [
        (2, [1, 2, 9, 3, 4, 9, 5, 6, 7], [1, 2, 9, 3, 4, 9, 5, 6, 7]),
        (1, [3, 4, 9, 5, 6, 7, 9, 9, 9], [3, 4, 9, 5, 6, 7, -100, -100, -100]),
        (0, [5, 6, 7, 9, 9, 9, 9, 9, 9], [5, 6, 7] + [-100] * 6),
    ],
)
def test_collator_keeps_the_last_demos_and_pads_without_loss(kept, ids, labels):
    row = {"input_ids": [1, 2, 9, 3, 4, 9, 5, 6, 7], "segment_ids": [0, 0, 0, 1, 1, 1, 2, 2, 2]}
    full = {**row, "kept_demos": 2}
    batch = FixedLengthCollator(delimiter=9, test_segment=2)([{**row, "kept_demos": kept}, full])
    assert batch["input_ids"][0].tolist() == ids and batch["labels"][0].tolist() == labels
    assert batch["input_ids"][1].tolist() == row["input_ids"]  # each row keeps its own count


def test_random_demo_counts_are_uniform_and_fixed_by_the_seed(tmp_path):
    train = hmm_datasets.load_hmm_mixture(hmm_datasets.get_preset("tiny"), split="train")
    kept = np.asarray(with_random_demo_counts(train, 4, seed=0)["kept_demos"])
    assert (
        set(np.unique(kept)) == {0, 1, 2, 3, 4} and np.abs(np.bincount(kept) / len(kept) - 0.2).max() < 0.06
    )
    np.testing.assert_array_equal(kept, with_random_demo_counts(train, 4, seed=0)["kept_demos"])
    run = prepare(tiny_run(tmp_path, "--run.vary_num_demos", "true"), resume=False)
    batch = next(iter(run.trainer.get_train_dataloader()))
    assert (batch["labels"] == -100).any()  # rows with fewer demonstrations are padded


def benchmark_module(name: str):
    """benchmarks/<name>.py as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_calibration_recipes_train_what_their_names_say(tmp_path):
    """benchmarks/calibration.py: the width-256 candidates are the 64-wide recipe's run at width
    256 (4 heads of 64) and the named rate, nothing else changed."""
    calibration = benchmark_module("calibration")

    def run_of(recipe: str):
        command = calibration.train_command(tmp_path, "diversity-8192", recipe, 3)
        return load_run_config(command[2], command[3:])

    base = run_of("wsd12k")
    assert (base.model["hidden_size"], base.training["learning_rate"], base.training["seed"]) == (64, 2e-3, 3)
    for name, rate in (("2e-3", 2e-3), ("1e-3", 1e-3), ("5e-4", 5e-4)):
        wide = run_of(f"w256-lr{name}")
        assert (
            wide.model["hidden_size"] == 256
            and wide.model["hidden_size"] // wide.model["num_attention_heads"] == 64
        )
        assert wide.training["learning_rate"] == rate
        assert {**wide.model, "hidden_size": 64} == base.model
        assert {**wide.training, "learning_rate": 2e-3} == base.training


def launch_tiny(output_dir: Path) -> list[str]:
    """`accelerate launch --cpu` of the tiny run, a checkpoint every 10 of its 40 steps."""
    command = ACCELERATE + ["--cpu", "--num_processes", "1", str(ROOT / "scripts" / "train.py")]
    command += [str(TINY), "--training.output_dir", str(output_dir)]  # the config as the positional argument
    return command + ["--training.save_steps", "10", "--training.logging_steps", "5"]


@pytest.mark.parametrize("arguments", [[], [str(TINY), "--config", str(TINY)]])
def test_the_run_config_is_given_exactly_once(run_script, arguments):
    done = run_script("scripts/train.py", *arguments)
    assert done.returncode == 2 and "give the run config once" in done.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run under `accelerate launch --cpu`, the way users start one."""
    out = tmp_path_factory.mktemp("trained") / "run"
    command = launch_tiny(out)
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stdout


def test_a_launched_run_writes_complete_loadable_checkpoints(trained):
    out, stdout = trained
    assert "model argmax = Bayes argmax" in stdout
    for checkpoint in ("checkpoint-10", "checkpoint-20", "checkpoint-40"):
        folder = out / checkpoint
        assert is_complete_checkpoint(folder), checkpoint
        assert (folder / "modeling_hmm_roformer.py").exists() and (
            folder / "hmm_mixture_config.json"
        ).exists()
    assert hmm_datasets.load_hmm_params(out).num_tasks == 8  # the final folder carries the parameters
    assert json.loads((out / "hmm_mixture_config.json").read_text())["name"] == "tiny"
    scores = json.loads((out / "icl_scores.json").read_text())
    assert scores["step"] == 40
    assert list((out / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == 7
    results = json.loads((out / "train_results.json").read_text())
    assert results["train_steps"] == 40
    steps_total = results["first_step_s"] + 39 * results["steady_step_s"] + results["beyond_steady_s"]
    assert 0 < results["steady_step_s"] < steps_total <= results["train_runtime"]


def test_a_bad_config_under_accelerate_launch_quiet_is_one_error_line(tmp_path):
    """docs/training.md: `accelerate launch -q` keeps the launcher's traceback out."""
    command = ACCELERATE + [
        "-q",
        "--cpu",
        "--num_processes",
        "1",
        str(ROOT / "scripts" / "train.py"),
        str(TINY),
    ]
    command += ["--training.output_dir", str(tmp_path / "run"), "--training.max_steps", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == "error: training.max_steps=0 must be at least 1", done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_training_brings_the_model_closer_to_the_bayes_optimal_predictor(trained, tmp_path):
    """KL(Bayes || model) on the run's evaluation rows: at initialisation (the same seed gives the
    same initial weights) against after the 40 steps of the launched run."""
    out, _ = trained
    at_init = prepare(tiny_run(tmp_path), resume=False)
    initial = at_init.trainer.icl_evaluator(at_init.trainer.model)["test"]
    trained_scores = json.loads((out / "icl_scores.json").read_text())["test"]
    assert trained_scores["kl_bayes_model"] < 0.9 * initial["kl_bayes_model"]  # measured: 0.683 -> 0.517
    assert trained_scores["agreement"] > initial["agreement"]


def test_step_times_split_start_up_steady_pace_and_the_rest():
    # first step ends at 5 s (compilation); steps of 1 s, one of 3 s (an evaluation)
    summary = step_time_summary(0.0, [5.0, 6.0, 7.0, 10.0, 11.0])
    assert summary == {"first_step_s": 5.0, "steady_step_s": 1.0, "beyond_steady_s": 2.0}
    assert step_time_summary(0.0, [5.0]) == {}  # one step has no pace


def _losses(run_dir: Path) -> dict[int, float]:
    state = json.loads((run_dir / "checkpoint-40" / "trainer_state.json").read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def test_a_damaged_checkpoint_is_skipped_when_resuming(trained, tmp_path, monkeypatch):
    """A checkpoint whose weights or optimizer state were cut short (a full disk, a copy stopped
    half-way) is not resumed from: the next older whole one is, with a warning; with none left,
    one ValueError line."""
    out = tmp_path / "run"
    for name in ("checkpoint-10", "checkpoint-20"):
        shutil.copytree(trained[0] / name, out / name)
    warnings = []
    monkeypatch.setattr(training.logger, "warning", warnings.append)
    assert training.resume_checkpoint(out) == out / "checkpoint-20" and not warnings
    weights = out / "checkpoint-20" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert training.resume_checkpoint(out) == out / "checkpoint-10"
    assert len(warnings) == 1 and "checkpoint-20 is damaged" in warnings[0]
    optimizer = out / "checkpoint-10" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:-100])
    with pytest.raises(ValueError, match="every complete checkpoint .* is damaged") as refused:
        training.resume_checkpoint(out)
    assert "\n" not in str(refused.value) and "optimizer.pt" in str(refused.value)


def test_a_killed_run_resumes_where_it_stopped_with_the_same_data_order(trained, tmp_path):
    out = tmp_path / "run"
    base = launch_tiny(out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        base, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while not is_complete_checkpoint(out / "checkpoint-20"):
        assert process.poll() is None and time.time() < deadline, "the run ended before its checkpoint"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "checkpoint-40").exists()
    before = {p: p.stat().st_mtime_ns for p in (out / "checkpoint-10").iterdir()}
    resumed = subprocess.run(base + ["--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # it trained the remaining steps only (a restart from step 0 would log steps 5..20 again) ...
    reader = benchmark_module("training_curves")
    logged = reader.parse_trainer_log(resumed.stdout, steps_per_epoch=512 // 16)["step"]
    assert logged == [25, 30, 35, 40]
    # ... left the earlier checkpoints alone, and saw the same batches as an uninterrupted run
    assert {p: p.stat().st_mtime_ns for p in (out / "checkpoint-10").iterdir()} == before
    uninterrupted, continued = _losses(trained[0]), _losses(out)
    for step in (25, 30, 35, 40):
        assert continued[step] == pytest.approx(uninterrupted[step], abs=1e-6)


def test_resuming_a_finished_run_changes_nothing(trained, tmp_path, run_script, caplog):
    """The launched run's train.py command again with --resume (in this process: what it
    launches is the same `main`)."""
    out = tmp_path / "run"
    shutil.copytree(trained[0], out)
    files = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    launched = launch_tiny(out)
    arguments = launched[launched.index(str(ROOT / "scripts" / "train.py")) + 1 :]
    with caplog.at_level("WARNING", logger=training.logger.name):
        resumed = run_script("scripts/train.py", *arguments, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{out} already finished at step 40: nothing to resume." in caplog.messages
    assert resumed.stdout.startswith(f"trained {40 * 16 * 52:,} tokens")  # the finished run's summary
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == files  # nothing written
    assert not (out / "checkpoint-41").exists()


class CtrlCAtStep(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def short_run(output_dir: Path):
    """12 steps, a checkpoint every 4 and a log every 3 (the checkpoints fall between logs)."""
    steps = ["--training.max_steps", "12", "--training.save_steps", "4", "--training.logging_steps", "3"]
    no_evaluation = ["--training.eval_strategy", "no", "--run.eval_rows", "0"]
    run = load_run_config(TINY, [*steps, *no_evaluation, "--training.output_dir", str(output_dir)])
    run.training["report_to"] = []
    return run


def _logged_losses(log_history: list[dict]) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in log_history if "loss" in entry}


def test_a_resumed_run_says_so_and_reports_the_whole_run(tmp_path, monkeypatch, caplog):
    """Ctrl-C at step 7 of 12, the rerun resumes from the checkpoint at step 4: its results count
    all 12 steps (the mean loss of the uninterrupted run) and the time of both parts."""
    whole = train(short_run(tmp_path / "whole"))
    run = short_run(tmp_path / "run")
    prepare_run = training.prepare

    def prepare_with_ctrl_c(run, resume):
        prepared = prepare_run(run, resume)
        prepared.trainer.add_callback(CtrlCAtStep(7))
        return prepared

    monkeypatch.setattr(training, "prepare", prepare_with_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train(run)
    monkeypatch.setattr(training, "prepare", prepare_run)
    saved = json.loads((run.output_dir / "checkpoint-4" / "trainer_state.json").read_text())
    with caplog.at_level("WARNING", logger=training.logger.name):
        resumed = train(run, resume=True)
    assert f"resuming {run.output_dir} from checkpoint-4 (step 4)" in caplog.messages
    final = json.loads((run.output_dir / "checkpoint-12" / "trainer_state.json").read_text())
    expected = _logged_losses(
        json.loads((tmp_path / "whole" / "checkpoint-12" / "trainer_state.json").read_text())["log_history"]
    )
    continued = _logged_losses(final["log_history"])
    assert sorted(continued) == sorted(expected) == [3, 4, 6, 8, 9, 12]  # a log at every checkpoint too
    for step, loss in expected.items():  # the rerun continues the same steps ...
        assert continued[step] == pytest.approx(loss, abs=1e-6), step
    # ... and its mean is the uninterrupted run's, not that of steps 5..12 alone
    assert resumed["train_loss"] == pytest.approx(whole["train_loss"], abs=1e-6)
    assert resumed["resumed_from_step"] == 4 and resumed["train_steps"] == 12
    before = saved["stateful_callbacks"]["StepTimer"]["attributes"]["seconds"]
    assert 0 < before < resumed["train_runtime"]  # the checkpoint's seconds, then this run's
    assert resumed["train_steps_per_second"] == pytest.approx(12 / resumed["train_runtime"], abs=1e-3)
    assert (
        json.loads((run.output_dir / "train_results.json").read_text())["train_loss"] == resumed["train_loss"]
    )


class FreeThreadsAtStep(TrainerCallback):
    """The study process's part (`pipeline.workers`): at `step` the stages beside the training end
    and their threads are the training's."""

    def __init__(self, share, step: int, threads: int):
        self.share, self.step, self.threads = share, step, threads
        self.seen: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(torch.get_num_threads())
        if state.global_step == self.step:
            self.share.value = self.threads


def test_a_training_in_a_study_worker_takes_the_threads_it_is_given_at_the_next_step(tmp_path, monkeypatch):
    share = multiprocessing.get_context("spawn").Value("i", 1)
    monkeypatch.setattr(training, "_thread_share", share)
    prepare_run, freed = training.prepare, []

    def prepare_freeing_at_step_5(run, resume):
        prepared = prepare_run(run, resume)
        freed.append(FreeThreadsAtStep(share, 5, 2))
        prepared.trainer.add_callback(freed[-1])  # after FollowThreadShare: it reads the next step
        return prepared

    monkeypatch.setattr(training, "prepare", prepare_freeing_at_step_5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        metrics = train(short_run(tmp_path / "run"))
    finally:
        torch.set_num_threads(threads)
    assert freed[0].seen == [1] * 5 + [2] * 7  # one thread to step 5, two from step 6 on
    assert metrics["torch_threads_at_end"] == 2 and metrics["train_steps"] == 12


def test_a_corpus_folder_that_contradicts_the_corpus_section_is_refused(tmp_path):
    folder = hmm_datasets.export_corpus(
        hmm_datasets.get_preset("tiny"), tmp_path / "corpus", table_rows=0, progress=False
    )
    run = tiny_run(tmp_path, "--data.source", str(folder), "--corpus.num_tasks", "4")
    with pytest.raises(
        ValueError,
        match=r"holds another corpus than the run config's corpus section: num_tasks=8 \(corpus section: 4\)",
    ):
        prepare(run, resume=False)
    assert not (tmp_path / "run").exists()


def test_training_reads_an_exported_corpus_folder(tmp_path):
    folder = hmm_datasets.export_corpus(
        hmm_datasets.get_preset("tiny"), tmp_path / "corpus", table_rows=0, progress=False
    )
    run = tiny_run(
        tmp_path, "--data.source", str(folder), "--training.max_steps", "4", "--training.eval_steps", "4"
    )
    run.training["report_to"] = []
    metrics = train(run)
    assert metrics["train_tokens"] == 4 * 16 * 52
    assert hmm_datasets.load_hmm_params(tmp_path / "run").num_states == 6


def test_data_parallel_processes_on_one_cpu(tmp_path):
    """Two processes (gloo): the code path of `accelerate launch --multi_gpu`, without GPUs, launching
    the train command as the pipeline does for several GPUs (a module: no clone needed)."""
    out = tmp_path / "run"
    command = ACCELERATE + ["--multi_gpu", "--num_processes", "2", "--module", TRAIN_COMMAND]
    command += ["--config", str(TINY), "--training.output_dir", str(out), "--training.use_cpu", "true"]
    command += ["--training.max_steps", "10", "--training.eval_steps", "10", "--training.save_steps", "10"]
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "train_results.json").read_text())
    assert results["train_tokens"] == 10 * 16 * 2 * 52  # both processes trained
    assert is_complete_checkpoint(out / "checkpoint-10")


def test_idle_cores_are_reported(monkeypatch):
    warnings = []
    monkeypatch.setattr(training.logger, "warning", warnings.append)
    monkeypatch.setattr(training.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # what `accelerate launch --cpu` alone sets
    training.warn_about_idle_cores()
    assert len(warnings) == 1 and "--num_processes 1" in warnings[0]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    training.warn_about_idle_cores()
    assert len(warnings) == 1


def test_training_curves_read_back_from_the_console_log(trained):
    """benchmarks/training_curves.py (for GPU runs whose checkpoints stay on the machine) reads the
    console log of a real run into the losses its trainer_state.json holds."""
    out, stdout = trained
    reader = benchmark_module("training_curves")
    curves = reader.parse_trainer_log(stdout, steps_per_epoch=512 // 16)
    logged = _losses(out)
    assert curves["step"] == sorted(logged)
    np.testing.assert_allclose(curves["loss"], [logged[step] for step in curves["step"]], rtol=1e-3)
    assert curves["eval_step"] == [20, 40]  # eval_steps 20 of configs/tiny.yaml
    with pytest.raises(ValueError, match="no training-loss lines"):
        reader.parse_trainer_log("nothing logged here", steps_per_epoch=32)
    # the pace: steps 1 -> 50 in 10 s, an evaluation, steps 60 -> 100 in 5 s; the eval's time is out
    bars = " 1%| 1/100 [00:10<16:30]\r 50%| 50/100 [00:20<00:20]\n 100%| 3/3 [00:01<00:00]\n"
    bars += " 60%| 60/100 [00:25<00:10]\r 100%| 100/100 [01:00:30<00:00]\n"
    pace = reader.parse_pace(bars)
    assert pace["first_step_s"] == 10 and pace["total_steps"] == 100
    assert pace["steady_steps_per_s"] == pytest.approx((49 + 40) / (10 + 3605))
