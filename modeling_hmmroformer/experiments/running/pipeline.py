"""Runs a pipeline (`plan.Pipeline`: a reproduction or a study, `reproduction_plan` and
`study_plan`): every stage its state does not mark complete, in its plan's order, through the
stage engine (`engine`).

A study with a records folder (`--records`, e.g. results/depth/models) skips every stage of
a model whose record is there: a study interrupted at any point goes on from the committed
records without redoing a finished model, and its report reads records only.

A study run with `jobs` > 1 (`--jobs`) trains and analyses its models side by side in that many
worker processes, before the report (`run_models_side_by_side`): their training starts as soon as
the corpus is there, beside the shared analyses (Lemma 1, the yardsticks) that this process
computes meanwhile (`train_side_by_side`), and their analyses follow the shared ones. Every other
model probes before its Figure 1 (`staggered`), so that two workers compute the exact
predictions those stages share at the same time rather than one waiting for the other.

The folder's state file names the settings' fingerprint and every complete stage with its
wall time. A rerun skips the complete stages and redoes the others (and the corpus stage when its
folder no longer matches the manifest it was written with: a shard deleted, truncated or
replaced); a folder made with other settings, or a non-empty folder without a state file, is
refused before anything is written. While the report stage is to run, no older REPORT.md or
results.json is left in the folder.
Every stage builds its output in a hidden sibling and renames it into place
(`build_folder`), so an interrupted stage leaves nothing that looks complete.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from hmm_datasets.cache import CACHE_ENV
from hmm_datasets.export import corpus_folder_problem
from hmm_datasets.files import build_folder, write_atomically
from hmm_datasets.names import MANIFEST_FILENAME

from .. import names
from .engine import (
    RunState,
    StageRecord,
    differing_settings,
    forget_stages,
    mark_complete,
    now,
    read_stages,
    read_state,
    run_stage,
    write_state,
)
from .plan import ModelRun, Pipeline, model_stages
from .training import SIDE_BY_SIDE_ENV, follow_thread_share

PREDICTIONS = ".predictions"  # exact predictions shared by `--jobs` workers (`shared_predictions`)


def run_pipeline(
    pipeline: Pipeline,
    *,
    redo: str | None = None,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    reuse: Path | None = None,
) -> RunState:
    """Run every stage the state does not mark complete, in order; returns the final state. With
    `jobs` > 1 (a study), the models' stages run in that many worker processes side by side, each
    model in one worker: their training beside the shared analyses (Lemma 1, yardsticks) once the
    corpus is there, their analyses after those, all before the report; each worker gets an equal
    share of this process's threads. With `reuse` (a study folder of the same corpus settings),
    the shared stages it completed are copied from there (`reuse_shared_stages`)."""
    check_jobs(pipeline, jobs)
    state = read_pipeline_state(pipeline)
    if pipeline.plan.check is not None:
        pipeline.plan.check(pipeline)
    if redo is not None:
        state = forget_stages(state, pipeline.stage_names(), redo)
    state = forget_models_gone(pipeline, state, log)
    damage = corpus_damage(pipeline) if "corpus" in state.stages else None
    if damage is not None:  # the corpus stage is redone (the same bytes), not skipped
        log(f"corpus: {damage}; redoing the stage")
        state = forget_stages(state, ["corpus"], "corpus")
    plan = pipeline.stages(state)
    if not pipeline.progress:  # --quiet: transformers' own bars (loading weights) too
        transformers.utils.logging.disable_progress_bar()
    lender = check_reuse(pipeline, reuse) if reuse is not None else None
    pipeline.out.mkdir(parents=True, exist_ok=True)
    write_state(pipeline.state_path, state)
    withdraw_report(pipeline, state)
    if reuse is not None:
        reuse_shared_stages(pipeline, state, reuse, lender, log)
    side_by_side = model_stage_names(pipeline) if jobs > 1 else set()
    with (
        shared_predictions(pipeline.out / PREDICTIONS if jobs > 1 else None),
        contextlib.ExitStack() as early,
    ):
        for index, (stage, runner) in enumerate(plan.items(), start=1):
            if stage in side_by_side:
                if stage == next(name for name in plan if name in side_by_side):  # the first: all of them
                    early.close()  # the training started beside the shared stages ends first
                    state.stages = read_stages(pipeline.state_path)
                    run_models_side_by_side(pipeline, state, jobs, log)
                continue
            run_stage(pipeline.state_path, state, stage, runner, f"[{index}/{len(plan)}] {stage}", log)
            if stage == "corpus" and side_by_side:
                early.enter_context(train_side_by_side(pipeline, state, jobs, log))
    return state


def read_pipeline_state(p: Pipeline) -> RunState:
    """The state of `p`'s folder (`engine.read_state`): a fresh one for a new folder."""
    return read_state(p.state_path, p.fresh_state(), p.plan.noun)


SHARED_STAGES = {"corpus": names.CORPUS, "lemma1": names.LEMMA1, "yardsticks": names.YARDSTICKS}


# the settings that shape the shared stages: a folder made with the same ones can lend them
SHARED_STAGE_SETTINGS = (
    "run.corpus.",
    "settings.overrides.corpus.",
    "settings.corpus_table_rows",
    "settings.memories",
    "settings.memory_rows",
    "settings.prior_particles",
    "settings.yardstick_rows",
)


def shared_stage_settings(flat: dict[str, object]) -> dict[str, object]:
    return {name: value for name, value in flat.items() if name.startswith(SHARED_STAGE_SETTINGS)}


def check_reuse(p: Pipeline, source: Path) -> RunState:
    """The state of `source`, a study folder whose shared stages `p` can take: `ValueError` for a
    folder that is not a study's, or whose corpus settings differ (naming them)."""
    path = source / p.plan.state_file
    if not path.is_file():
        raise ValueError(f"--reuse {source}: not a study folder (it has no {path.name}); nothing was copied")
    theirs = json.loads(path.read_text())
    if "settings" not in theirs:
        raise ValueError(
            f"--reuse {source}: its state keeps no settings (written by an older version): run its study "
            "once with this version, then reuse it; nothing was copied"
        )
    there, here = shared_stage_settings(theirs["settings"]), shared_stage_settings(p.flat_settings())
    if there != here:
        raise ValueError(
            f"--reuse {source}: its corpus, Lemma 1 and yardsticks were made with other settings "
            f"({differing_settings(there, here)}); nothing was copied"
        )
    return RunState.from_dict(theirs)


def reuse_shared_stages(
    p: Pipeline, state: RunState, source: Path, theirs: RunState, log: Callable[[str], None]
) -> None:
    """Copy each shared stage (corpus, Lemma 1, yardsticks) that `source` completed (`theirs`: its
    state, as `check_reuse` returned it) and `p` has not, and the exact memory-L predictions it
    shares with its workers: the same settings make the same bytes, so another architecture or
    training on one corpus is placed on the same yardsticks."""
    for stage, name in SHARED_STAGES.items():
        if stage in state.stages or stage not in theirs.stages or not (source / name).is_dir():
            continue
        started = time.perf_counter()
        build_folder(
            p.out / name,
            lambda staging, there=source / name: shutil.copytree(there, staging, dirs_exist_ok=True),
        )
        record = StageRecord(time.perf_counter() - started, now(), reused_from=str(source))
        mark_complete(p.state_path, state, stage, record)
        log(f"{stage}: copied from {source / name}")
    for path in sorted((source / PREDICTIONS).glob("bayes-memory-*.safetensors")):
        (p.out / PREDICTIONS).mkdir(exist_ok=True)
        if not (p.out / PREDICTIONS / path.name).exists():
            write_atomically(
                p.out / PREDICTIONS / path.name, lambda target, there=path: shutil.copy(there, target)
            )


@contextlib.contextmanager
def shared_predictions(folder: Path | None):
    """With a folder: this process and the workers it starts share their exact predictions there
    (`hmm_datasets.cache`: Lemma 1's memory-L predictors serve every model's memory stage)."""
    before = os.environ.get(CACHE_ENV)
    if folder is not None:
        os.environ[CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def check_jobs(p: Pipeline, jobs: int) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs {jobs!r} must be a whole number of processes, 1 or more.")
    if jobs > 1 and not p.plan.grid:
        raise ValueError(f"--jobs {jobs} runs a study's models side by side; a reproduction has one model.")
    if jobs > 1 and p.num_processes > 1:
        raise ValueError(
            f"--jobs {jobs} with --num-processes {p.num_processes}: run the models side by side or each on "
            "several GPUs, not both."
        )


def model_stage_names(p: Pipeline) -> set[str]:
    return {m.stage(name) for m in p.models for name in (*model_stages(p, m), "record")}


def run_models_side_by_side(p: Pipeline, state: RunState, jobs: int, log: Callable[[str], None]) -> None:
    """Every model not recorded yet, whole, in `jobs` worker processes (spawned: a GPU works in
    each), in the plan's order; `state` gains their stages. A worker's error stops the models not
    started and is raised here once the running ones end."""
    models = [m for m in p.models if not p.has_record(m)]
    with workers(p, models, jobs, None, log, "side by side", beside=False):
        pass
    state.stages = read_stages(p.state_path)


def train_side_by_side(p: Pipeline, state: RunState, jobs: int, log: Callable[[str], None]):
    """The training of every model not trained yet, in `jobs` worker processes, while the body of
    the `with` runs (this process computes the shared stages meanwhile: a stage that only needs
    the corpus need not wait for them); on leaving, waits for it (`workers`)."""
    models = [m for m in p.models if not p.has_record(m) and m.stage("train") not in state.stages]
    return workers(p, models, jobs, ("train",), log, "beside the shared stages", "training ")


@contextlib.contextmanager
def workers(
    p: Pipeline,
    models: list[ModelRun],
    jobs: int,
    names: tuple[str, ...] | None,
    log: Callable[[str], None],
    where: str,
    what: str = "",
    beside: bool = True,
):
    """`models`' stages (`names`, or all of them) in `min(jobs, len(models))` spawned worker
    processes, each with its share of this process's threads (`worker_threads`; `beside`: the
    body of the `with` runs shared stages meanwhile), while the body runs with the threads they
    leave (`threads_beside`); once the body is done, the workers' trainings take the threads it
    left (`training.follow_thread_share`); on leaving, waits for them. A worker's error stops the
    models not started and is raised once the running ones end."""
    if not models:
        yield
        return
    total = torch.get_num_threads()
    processes = min(jobs, len(models))
    threads = worker_threads(total, jobs, len(models), beside)
    counts = f"{len(models)} model{'s' * (len(models) > 1)} in {processes} process{'es' * (processes > 1)}"
    log(f"{what}{counts} {where}, {threads} thread(s) each ...")
    context = multiprocessing.get_context("spawn")
    share = context.Value("i", threads)  # the threads each worker's trainings follow
    with concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context, initializer=follow_thread_share, initargs=(share,)
    ) as pool:
        futures = [
            pool.submit(run_model_stages, p, m, threads, jobs, names, position)
            for position, m in enumerate(models)
        ]
        torch.set_num_threads(threads_beside(total, threads * processes))
        try:
            yield
            alone = worker_threads(total, jobs, len(models), beside=False)
            if alone != share.value:  # the stages beside them are done: their threads are the workers'
                log(f"{what}{counts}: {alone} thread(s) each from now on")
                share.value = alone
            for future in concurrent.futures.as_completed(futures):
                future.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
        finally:
            torch.set_num_threads(total)


def worker_threads(total: int, jobs: int, models: int, beside: bool) -> int:
    """The threads of each of a study's workers: an equal share of this process's `total` among
    `jobs` workers, or among the `models` left where they are fewer and no shared stage runs
    `beside` them (a draw's one model analysed alone gets every thread, not half of them with
    the other core idle). At least one."""
    share = jobs if beside else min(jobs, models)
    return max(1, total // share)


def threads_beside(total: int, busy: int) -> int:
    """The threads this process keeps while workers use `busy` of its `total`: those they leave,
    and one where they leave none. A thread on a core a worker keeps busy makes its process's
    other threads wait for it at every operation: on 2 cores, the shared stages' two threads
    beside two one-thread trainings held each training to about half its speed."""
    return max(1, total - busy)


def staggered(stages: tuple[str, ...], position: int) -> tuple[str, ...]:
    """A worker's order of its model's `stages`: the model at an odd `position` side by side runs
    its probes before its Figure 1. Both stages read exact predictions that the workers share
    (`hmm_datasets.cache`: the Bayes predictor of Figure 1's rows, the beliefs of the probe
    rows), and neither reads the other's output, so two models started together compute those
    at the same time instead of one waiting for what the other computes."""
    if position % 2 == 0 or not {"evaluate", "probe"} <= set(stages):
        return stages
    swap = {"evaluate": "probe", "probe": "evaluate"}
    return tuple(swap.get(stage, stage) for stage in stages)


def run_model_stages(
    p: Pipeline,
    m: ModelRun,
    threads: int,
    jobs: int,
    names: tuple[str, ...] | None = None,
    position: int = 0,
) -> None:
    """A worker of `run_models_side_by_side` (one of `jobs`): model `m`'s stages (`names`, by
    default all of them and its record), in order (`staggered` by its `position` among the models
    side by side), with `threads` threads."""
    torch.set_num_threads(threads)
    os.environ[SIDE_BY_SIDE_ENV] = str(jobs)  # the cores are shared on purpose: no idle-core warning
    if not p.progress:
        transformers.utils.logging.disable_progress_bar()
    state = read_pipeline_state(p)
    plan = p.stages(state)
    for name in staggered(names or (*model_stages(p, m), "record"), position):
        stage = m.stage(name)
        run_stage(p.state_path, state, stage, plan[stage], stage, print)


def forget_models_gone(p: Pipeline, state: RunState, log: Callable[[str], None]) -> RunState:
    """The state without the stages of models whose folder is gone (a study folder carried to
    another machine with its shared stages only): those models start over, and the report after them."""
    gone = [m for m in p.models if not m.folder.is_dir() and not p.has_record(m)]
    stages = {m.stage(name) for m in gone for name in (*model_stages(p, m), "record")} & set(state.stages)
    if stages:
        log(f"{len(stages)} stages of models whose folder is gone are redone")
        stages.add("report")
    return state.without(stages)


def corpus_damage(p: Pipeline) -> str | None:
    """Why a corpus folder marked complete cannot be used as it is, or None: a file its manifest
    lists is missing, truncated or replaced, or it has no manifest (missing, or written before
    corpus folders recorded one)."""
    if not (p.corpus / MANIFEST_FILENAME).is_file():
        return (
            f"{p.corpus} has no {MANIFEST_FILENAME} (written before corpus folders recorded one, or damaged)"
        )
    return corpus_folder_problem(p.corpus)


def withdraw_report(p: Pipeline, state: RunState) -> None:
    """Remove an older REPORT.md and results.json when the report stage is to run again, before any
    stage does: a run that stops on the way never leaves a report that looks current."""
    if "report" not in state.stages:
        for name in (names.REPORT_MD, names.RESULTS_JSON):
            (p.out / name).unlink(missing_ok=True)
