"""Train HMMRoFormer on a mixture-of-HMMs corpus with `Trainer` (run under `accelerate launch`
or in-process by the pipeline).

    accelerate launch --cpu --num_processes 1 scripts/train.py --config configs/small.yaml --model.num_hidden_layers 8

The run config (`settings.RunConfig`) names the corpus, the model's sizes and the
`TrainingArguments`. Every checkpoint is a `save_pretrained` folder (with the model code) plus
the resolved run config and the corpus config; the final model folder also holds the HMM
parameters, so the Bayes-optimal predictor can be rebuilt from it alone.
"""

from __future__ import annotations

import json
import math
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoModelForCausalLM,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.utils import logging

import hmm_datasets
from hmm_datasets import HMMMixtureConfig, HMMParams, SampleLayout
from hmm_datasets.corpus import Corpus, open_corpus
from hmm_datasets.files import build_folder, write_atomically, write_json, write_text
from hmm_datasets.scoring import flatten_scores, in_context_scores
from probing.architecture import HMM_ROFORMER

from ...modeling_hmm_roformer import HMMRoFormerForCausalLM
from .. import names
from ..analyses.evaluation import model_next_token_log_probs
from ..settings import RunConfig

logger = logging.get_logger(__name__)


# ---- data -----------------------------------------------------------------------------
def load_corpus(run: RunConfig) -> Corpus:
    """The corpus of a run: `data.source` "builder" generates the run's corpus config; a folder
    or Hub id must hold that same corpus (so the saved run config names what was trained on)."""
    source = run.data_section.source
    if source == "builder":
        return open_corpus(run.corpus_config(), run.data_section.num_proc)
    corpus = open_corpus(source, run.data_section.num_proc)
    wanted, found = run.corpus_config().generation_fields(), corpus.config.generation_fields()
    differ = [
        f"{key}={found.get(key)!r} (corpus section: {value!r})"
        for key, value in wanted.items()
        if found.get(key) != value
    ]
    if differ:
        raise ValueError(
            f"data.source={source} holds another corpus than the run config's corpus section: {', '.join(differ)}. "
            f"Make the corpus section describe it (its {names.CORPUS_CONFIG_JSON} has every field), or use "
            "data.source: builder to generate the corpus the section describes."
        )
    return corpus


@dataclass
class FixedLengthCollator:
    """Stacks fixed-length rows into `input_ids` and `labels` `[B, L]`.

    `loss_mask` chooses the tokens the loss counts ("all": every next token; "observations":
    not the delimiters, which the layout fixes; "test": the test sequence only). A row with a
    `kept_demos` value m keeps only its last m demonstrations: the dropped ones are cut from
    the front and the row is right-padded to L with the delimiter, with no loss on the padding
    (causal attention: no real token sees it).
    """

    delimiter: int
    test_segment: int
    loss_mask: str = "all"

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        input_ids = torch.as_tensor(np.stack([row["input_ids"] for row in rows]), dtype=torch.long)
        segments = torch.as_tensor(np.stack([row["segment_ids"] for row in rows]), dtype=torch.long)
        labels = input_ids.clone()
        if self.loss_mask == "observations":
            labels[input_ids == self.delimiter] = -100
        elif self.loss_mask == "test":
            labels[segments != self.test_segment] = -100
        if "kept_demos" in rows[0]:
            kept = torch.as_tensor(np.array([row["kept_demos"] for row in rows]), dtype=torch.long)
            input_ids, labels = self.shift_out_first_demos(input_ids, labels, segments, kept)
        return {"input_ids": input_ids, "labels": labels}

    def shift_out_first_demos(self, input_ids, labels, segments, kept):
        """Shift each row left past its first N - m demonstrations; pad the freed tail."""
        cut = (segments < (self.test_segment - kept)[:, None]).sum(1, keepdim=True)
        source = torch.arange(input_ids.shape[1]) + cut
        inside = source < input_ids.shape[1]
        source = source.clamp_max(input_ids.shape[1] - 1)
        input_ids = torch.where(inside, input_ids.gather(1, source), self.delimiter)
        labels = torch.where(inside, labels.gather(1, source), -100)
        return input_ids, labels


def with_random_demo_counts(train, num_demos: int, seed: int):
    """Adds `kept_demos`, uniform on 0..N per row and fixed by the seed (so resuming keeps it)."""
    kept = np.random.default_rng(seed).integers(0, num_demos + 1, size=len(train))
    return train.add_column("kept_demos", kept.astype(np.int16))


# ---- in-context evaluation during training ------------------------------------------------
class InContextEvaluator:
    """Scores a model on fixed rows against their precomputed Bayes-optimal and oracle predictions."""

    def __init__(
        self,
        input_ids: np.ndarray,
        task_ids: np.ndarray,
        params: HMMParams,
        layout: SampleLayout,
        device: str | torch.device = "cpu",
    ):
        self.input_ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
        self.layout = layout
        predictor = hmm_datasets.BayesOptimalPredictor(params, device=device)  # the training device
        self.bayes_probs = predictor.next_token_probs(self.input_ids).cpu()
        self.oracle_probs = predictor.oracle_next_token_probs(self.input_ids, task_ids).cpu()

    def __call__(self, model: torch.nn.Module, batch_size: int = 64) -> dict:
        log_probs = model_next_token_log_probs(model, self.input_ids, batch_size)
        return in_context_scores(log_probs, self.input_ids, self.bayes_probs, self.oracle_probs, self.layout)


class InContextTrainer(Trainer):
    """`Trainer` whose evaluation adds the in-context metrics (logged as `eval_icl/...`)."""

    def __init__(self, *args, icl_evaluator: InContextEvaluator | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.icl_evaluator = icl_evaluator

    def _issue_warnings_after_load(self, load_result) -> None:
        """On resume: the tied output projection is saved once, as the input embedding, so its key
        is missing from every checkpoint by design; it is tied again, not warned about."""
        tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        if self.icl_evaluator is None:
            return metrics
        scores = self.icl_evaluator(self.model)
        flat = flatten_scores(scores, prefix=f"{metric_key_prefix}_icl")
        self.log(flat)
        metrics.update(flat)
        if self.is_world_process_zero():
            record = {"step": self.state.global_step, **scores}
            write_json(Path(self.args.output_dir) / names.ICL_SCORES_JSON, record)
        return metrics


class SaveRunConfigCallback(TrainerCallback):
    """Writes the run config and the corpus config into every checkpoint (last: marks it complete)."""

    def __init__(self, run: RunConfig, corpus_config: HMMMixtureConfig):
        self.run, self.corpus_config = run, corpus_config

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            write_run_files(checkpoint, self.run, self.corpus_config)
        return control


class LogAtEverySave(TrainerCallback):
    """Logs the loss at every checkpoint, so a checkpoint's log history covers every step up to
    it (a resumed run's report counts them: `whole_run_metrics`)."""

    def on_step_end(self, args, state, control, **kwargs):
        control.should_log = control.should_log or control.should_save
        return control


def checkpoint_schedule(last_step: int, count: int, first_step: int = 10) -> list[int]:
    """The steps a run keeps its network at (`run.checkpoints`): step 0 (as initialised) and
    `count - 1` steps log-spaced from `first_step` to `last_step`, both included, rounded to
    whole steps (steps that round alike are kept once, so a short run keeps fewer)."""
    if count == 0:
        return []
    if count < 2:
        raise ValueError(
            f"run.checkpoints={count} keeps step 0 alone: choose 0 (none) or at least 2 (step 0 and the last)."
        )
    first = min(first_step, last_step)
    spaced = np.rint(np.geomspace(first, last_step, count - 1)) if count > 2 else [last_step]
    return sorted({0, *(int(step) for step in spaced)})


class DevelopmentCheckpoints(TrainerCallback):
    """Keeps the network at the steps of `checkpoint_schedule` in `folder/step-<N>` (a
    `save_pretrained` folder with the run files: weights only, no optimizer), each written whole
    or not at all. A step whose folder is already complete is not written again, so a run that
    was stopped and resumes from an earlier Trainer checkpoint keeps every network it kept."""

    def __init__(self, folder: Path, steps: list[int], run: RunConfig, corpus_config: HMMMixtureConfig):
        self.folder, self.steps = folder, set(steps)
        self.run, self.corpus_config = run, corpus_config

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0:
            self.keep(0, model, state)
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.keep(state.global_step, model, state)
        return control

    def keep(self, step: int, model, state) -> None:
        target = self.folder / kept_name(step)
        if step not in self.steps or not state.is_world_process_zero or is_kept_network(target):
            return

        def write(staging: Path) -> None:
            model.save_pretrained(str(staging))
            write_run_files(staging, self.run, self.corpus_config)

        build_folder(target, write)


def kept_name(step: int) -> str:
    """The folder name of the network kept at `step`: `step-<N>`, N zero-padded to 7 digits (they
    list in order)."""
    return f"step-{step:07d}"


def kept_steps(run: RunConfig) -> list[int]:
    """The steps a run keeps its network at (`checkpoint_schedule` of its `run` section up to
    `training.max_steps`); kept networks without a `max_steps` are refused."""
    section, max_steps = run.run_section, int(run.training.get("max_steps", -1))
    if section.checkpoints and max_steps <= 0:
        raise ValueError(
            f"run.checkpoints={section.checkpoints} spaces the kept networks up to training.max_steps: "
            "set training.max_steps."
        )
    return checkpoint_schedule(max_steps, section.checkpoints, section.first_checkpoint_step)


def is_kept_network(folder: Path) -> bool:
    """Whether a kept network's folder is complete (its run config is written last)."""
    files = (names.MODEL_CONFIG_JSON, names.WEIGHTS, names.RUN_CONFIG_YAML)
    return all((folder / name).exists() for name in files)


class StepTimer(TrainerCallback, ExportableState):
    """Records when each optimizer step ends, to tell a run's start-up (compilation, first
    batches) and its evaluations and saves apart from its steady pace (`step_time_summary`).

    Each checkpoint keeps the seconds of training it holds (its trainer_state.json's
    `stateful_callbacks`); a run resumed from it starts counting from them (`seconds_before`)."""

    def __init__(self):
        self.started, self.step_ends, self.seconds_before = None, [], 0.0

    def seconds(self) -> float:
        """Seconds of training so far, those of the checkpoint this run resumed from included."""
        return self.seconds_before + (time.perf_counter() - self.started if self.started else 0.0)

    def state(self) -> dict:
        return {"args": {}, "attributes": {"seconds": self.seconds()}}

    def on_train_begin(self, args, state, control, **kwargs):
        # a resumed run's state is its checkpoint's; one saved before this callback had none
        saved = state.stateful_callbacks.setdefault(type(self).__name__, self.state())
        self.seconds_before = saved["attributes"].get("seconds", 0.0)
        self.started, self.step_ends = time.perf_counter(), []
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ends.append(time.perf_counter())
        return control


def step_time_summary(started: float, step_ends: list[float]) -> dict[str, float]:
    """Seconds to the end of the first step (start-up: compilation, first batches), the median
    step after it (the steady pace: evaluations and saves fall into a few steps only), and
    what the other steps took beyond that pace (evaluations, saves, stalls)."""
    if len(step_ends) < 2:
        return {}
    durations = np.diff(np.asarray(step_ends))
    steady = float(np.median(durations))
    return {
        "first_step_s": step_ends[0] - started,
        "steady_step_s": steady,
        "beyond_steady_s": float(durations.sum() - steady * durations.size),
    }


def whole_run_metrics(
    metrics: dict, log_history: list[dict], resumed_at: int, seconds_before: float, samples_per_step: int
) -> dict:
    """A resumed run's `Trainer` metrics count only the steps after its checkpoint (at step
    `resumed_at`); these count the whole run of `metrics["train_steps"]` steps.

    The mean loss: the checkpoint's logged losses (each the mean over the steps since the log
    before it; `LogAtEverySave` puts the last one at the checkpoint), weighted by those steps, with
    this run's mean over its own. The time: the checkpoint's training seconds (`StepTimer`) plus
    this run's; steps an interruption lost after the checkpoint were trained again and count once.
    """
    earlier = [
        (entry["step"], entry["loss"])
        for entry in log_history
        if "loss" in entry and entry["step"] <= resumed_at
    ]
    widths = np.diff([0, *(step for step, _ in earlier)])
    earlier_loss = float(np.dot(widths, [loss for _, loss in earlier]))
    steps, own_steps = metrics["train_steps"], metrics["train_steps"] - resumed_at
    counted = int(widths.sum()) + own_steps  # every step, unless the checkpoint's last log came before it
    seconds = seconds_before + metrics["train_runtime"]
    return {
        **metrics,
        "train_loss": (earlier_loss + metrics["train_loss"] * own_steps) / counted,
        "train_runtime": seconds,
        "train_steps_per_second": round(steps / seconds, 3),
        "train_samples_per_second": round(steps * samples_per_step / seconds, 3),
        "resumed_from_step": resumed_at,
    }


def write_run_files(folder: Path, run: RunConfig, corpus_config: HMMMixtureConfig) -> None:
    """The corpus config, then the run config (written last: a checkpoint with it is complete)."""
    write_text(folder / names.CORPUS_CONFIG_JSON, corpus_config.to_json() + "\n")
    write_text(folder / names.RUN_CONFIG_YAML, run.to_yaml())


# ---- checkpoints ------------------------------------------------------------------------------
def is_complete_checkpoint(folder: Path) -> bool:
    files = (names.MODEL_CONFIG_JSON, names.WEIGHTS, TRAINER_STATE_NAME, names.RUN_CONFIG_YAML)
    return all((folder / name).exists() for name in files)


def checkpoint_step(folder: Path) -> int:
    """N of a `checkpoint-N` folder."""
    return int(folder.name.split("-")[-1])


def checkpoints(output_dir: Path) -> list[Path]:
    """`checkpoint-N` folders, oldest first."""
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=checkpoint_step)


def checkpoint_damage(folder: Path) -> str | None:
    """Why a complete checkpoint's weights or optimizer state cannot be read back (a file cut
    short by a full disk or a copy stopped half-way), or None: safetensors' header must cover
    the file, and optimizer.pt must end as the zip archive torch saves."""
    try:
        with safe_open(str(folder / names.WEIGHTS), framework="pt"):
            pass
    except (SafetensorError, OSError) as error:
        return f"its model.safetensors cannot be read ({' '.join(str(error).split())})"
    optimizer = folder / "optimizer.pt"
    if optimizer.exists() and not zipfile.is_zipfile(optimizer):
        return "its optimizer.pt is cut short or damaged"
    return None


def resume_checkpoint(output_dir: Path) -> Path:
    """The newest complete checkpoint of a run whose files can be read (an older one, with a
    warning, when the newest is damaged); a clear error when there is none."""
    complete = [p for p in checkpoints(output_dir) if is_complete_checkpoint(p)]
    damaged = []
    for folder in reversed(complete):
        damage = checkpoint_damage(folder)
        if damage is None:
            if damaged:
                logger.warning(f"{'; '.join(damaged)}: resuming from {folder.name} instead")
            return folder
        damaged.append(f"{folder.name} is damaged: {damage}")
    if damaged:
        raise ValueError(
            f"--resume: every complete checkpoint in {output_dir} is damaged ({'; '.join(damaged)}). "
            "Start the run again without --resume, into another --training.output_dir."
        )
    raise ValueError(
        f"--resume: no complete checkpoint in {output_dir} (a complete one holds config.json, "
        f"model.safetensors, trainer_state.json and {names.RUN_CONFIG_YAML}). Start the run without --resume."
    )


# ---- the run ----------------------------------------------------------------------------------
def build_model(run: RunConfig, corpus_config: HMMMixtureConfig) -> PreTrainedModel:
    """The model of a run: its `model:` section, sized to read the corpus (an HMMRoFormer, or the
    transformers architecture `model.model_type` names, saved as that architecture's own checkpoint)."""
    config = run.model_config(corpus_config)
    model = (
        HMMRoFormerForCausalLM(config)
        if run.model_type == HMM_ROFORMER
        else AutoModelForCausalLM.from_config(config)
    )
    model.set_attn_implementation(run.attn_implementation)
    return model


SIDE_BY_SIDE_ENV = "HMM_ROFORMER_JOBS"  # set in a study's workers (`--jobs`): processes sharing the cores
_thread_share = None  # in a study's worker: the threads its trainings follow (`follow_thread_share`)


def follow_thread_share(share) -> None:
    """The initializer of a study's worker process (`pipeline.workers`): every training in this
    process sets its torch threads to `share.value` (a `multiprocessing.Value`) whenever it
    changes (`FollowThreadShare`), so a draw's lone training takes the core the shared stages
    beside it leave when they end."""
    global _thread_share
    _thread_share = share


class FollowThreadShare(TrainerCallback):
    """At each step's end, sets this process's torch threads to `share.value` where it changed
    (1 or more; an intra-op setting, so the steps' results do not depend on it beyond rounding)."""

    def __init__(self, share):
        self.share = share

    def on_step_end(self, args, state, control, **kwargs):
        threads = self.share.value
        if threads >= 1 and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        return control


def warn_about_idle_cores() -> None:
    """`accelerate launch --cpu` without `--num_processes` sets OMP_NUM_THREADS=1: half speed on 2 cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get(SIDE_BY_SIDE_ENV, "1")))
    if torch.get_num_threads() * processes < cores:
        logger.warning(
            f"training on CPU with {torch.get_num_threads()} thread(s) per process x {processes} process(es) "
            f"on {cores} cores. `accelerate launch --cpu` without --num_processes sets OMP_NUM_THREADS=1: "
            f"pass --num_processes 1 (or --num_cpu_threads_per_process {cores // processes}) to use every core."
        )


@dataclass
class PreparedRun:
    trainer: InContextTrainer
    corpus: Corpus
    checkpoint: Path | None  # where training resumes, if it does


def prepare(run: RunConfig, resume: bool) -> PreparedRun:
    """Everything before the first step: checks, corpus, model, trainer (errors come here)."""
    output_dir = run.output_dir
    checkpoint = resume_checkpoint(output_dir) if resume else None
    if not resume and output_dir.exists() and checkpoints(output_dir):
        raise ValueError(
            f"{output_dir} already holds checkpoints: pass --resume to continue that run, or choose another "
            "training.output_dir."
        )
    arguments = run.training_arguments()
    kept = kept_steps(run)
    if arguments.device.type == "cpu":
        warn_about_idle_cores()
    set_seed(arguments.seed)
    with arguments.main_process_first(desc="corpus"):
        corpus = load_corpus(run)
    model = build_model(run, corpus.config)
    columns = ["input_ids", "segment_ids"]
    train = corpus.splits["train"]
    train_columns = columns
    run_settings = run.run_section
    if run_settings.vary_num_demos:
        train = with_random_demo_counts(train, corpus.config.num_demos, arguments.seed)
        train_columns = [*columns, "kept_demos"]
    train = train.with_format("numpy", columns=train_columns)
    validation = corpus.splits["validation"]
    evaluator = None
    if run_settings.eval_rows > 0 and len(validation) > 0:
        rows = validation.select(range(min(run_settings.eval_rows, len(validation)))).with_format("numpy")
        evaluator = InContextEvaluator(
            np.stack(rows["input_ids"]),
            np.asarray(rows["task_id"]),
            corpus.params,
            corpus.layout,
            device=arguments.device,
        )
    callbacks = [SaveRunConfigCallback(run, corpus.config), LogAtEverySave(), StepTimer()]
    if _thread_share is not None:
        callbacks.append(FollowThreadShare(_thread_share))
    if kept:
        folder = output_dir / names.DEVELOPMENT
        callbacks.append(DevelopmentCheckpoints(folder, kept, run, corpus.config))
    trainer = InContextTrainer(
        model=model,
        args=arguments,
        train_dataset=train,
        eval_dataset=validation.with_format("numpy", columns=columns) if len(validation) else None,
        data_collator=FixedLengthCollator(
            corpus.config.delimiter, corpus.config.num_demos, run_settings.loss_mask
        ),
        callbacks=callbacks,
        icl_evaluator=evaluator,
    )
    if trainer.is_world_process_zero():
        write_text(output_dir / names.RUN_CONFIG_YAML, run.to_yaml())
    return PreparedRun(trainer, corpus, checkpoint)


def finished_run_metrics(run: RunConfig) -> dict | None:
    """The results of a run that already trained all its steps (its newest checkpoint is at
    `max_steps` and its final folder is written), else None: resuming it has nothing to do."""
    results = run.output_dir / names.TRAIN_RESULTS_JSON
    if not results.is_file():
        return None
    state = json.loads((resume_checkpoint(run.output_dir) / TRAINER_STATE_NAME).read_text())
    max_steps = int(run.training.get("max_steps", -1))
    if state["global_step"] < (max_steps if max_steps > 0 else state["max_steps"]):
        return None
    return json.loads(results.read_text())


def train(run: RunConfig, resume: bool = False) -> dict:
    """Run training to the end; the final model folder gets the run files and HMM parameters.

    With `resume`, training continues from the newest complete checkpoint (saying so) and trains
    only the remaining steps, and its results count the whole run (`whole_run_metrics`); a run
    that already finished is left as it is (its results are returned).
    """
    if resume and (finished := finished_run_metrics(run)) is not None:
        logger.warning(
            f"{run.output_dir} already finished at step {finished.get('train_steps')}: nothing to resume."
        )
        return finished
    prepared = prepare(run, resume)
    trainer, corpus, checkpoint = prepared.trainer, prepared.corpus, prepared.checkpoint
    if checkpoint is not None:
        logger.warning(
            f"resuming {run.output_dir} from {checkpoint.name} (step {checkpoint_step(checkpoint)})"
        )
    result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    trainer.save_model(str(run.output_dir))
    metrics = dict(result.metrics)
    if trainer.args.eval_strategy != "no" and trainer.eval_dataset is not None:
        metrics.update(trainer.evaluate())
    if trainer.is_world_process_zero():
        write_run_files(run.output_dir, run, corpus.config)
        write_atomically(run.output_dir / names.PARAMS_FILENAME, corpus.params.save)
        tokens = trainer.state.global_step * _tokens_per_step(trainer, corpus.config)
        metrics["train_tokens"] = tokens
        metrics["train_steps"] = trainer.state.global_step
        timer = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepTimer))
        metrics.update(step_time_summary(timer.started, timer.step_ends))
        metrics["torch_threads_at_end"] = torch.get_num_threads()
        if checkpoint is not None:
            samples_per_step = _tokens_per_step(trainer, corpus.config) // corpus.config.sequence_length
            metrics = whole_run_metrics(
                metrics,
                trainer.state.log_history,
                checkpoint_step(checkpoint),
                timer.seconds_before,
                samples_per_step,
            )
        if torch.cuda.is_available():  # this process's peak, evaluation included
            metrics["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        write_text(run.output_dir / names.TRAIN_RESULTS_JSON, json.dumps(_jsonable(metrics), indent=2) + "\n")
    return metrics


def _tokens_per_step(trainer: Trainer, corpus_config: HMMMixtureConfig) -> int:
    args = trainer.args
    return (
        args.per_device_train_batch_size
        * args.gradient_accumulation_steps
        * max(1, args.world_size)
        * corpus_config.sequence_length
    )


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
