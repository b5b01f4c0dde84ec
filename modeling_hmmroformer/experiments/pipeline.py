"""The one pipeline behind `scripts/reproduce.py` and `scripts/study.py`: a corpus, models
trained on it, every model analysed against its untrained twin, a report.

A reproduction is a pipeline of one model whose folder is the run folder; a study is a grid
of depths x seeds, each model in `models/depth<L>-seed<s>/` (`layout` draws both). The
stages, in order:

    corpus                        the exported corpus (Parquet, HMM parameters, dataset card)
    lemma1                        a study: Lemma 1 on the corpus, once
    then for each model in turn:
    train [<model>]               in this process (resumes its last complete checkpoint)
    evaluate / probe / memory / knockout [<model>]
                                  per model: Figure 1 against Bayes; the probes and the shuffle
                                  test with the untrained twin as control; the model against
                                  fixed-memory Bayes predictors (a reproduction adds Lemma 1 to
                                  memory/); rotary off in one layer at a time, model and twin
    record <model>                a study: the model's small record (`aggregate.model_record`),
                                  also copied to the records folder when there is one
                                  (a study's own stages are in `study_stages`)
    model                         a reproduction: the checkpoint to publish, with its model card
    report                        results.json, REPORT.md (a study adds its figures)

A study with a records folder (`--records`, e.g. results/depth/models) skips every stage of
a model whose record is there: a study interrupted at any point goes on from the committed
records without redoing a finished model, and its report reads records only.

A study run with `jobs` > 1 (`--jobs`) trains and analyses its models side by side in that many
worker processes, before the report (`run_models_side_by_side`): their training starts as soon as
the corpus is there, beside the shared analyses (Lemma 1, the yardsticks) that this process
computes meanwhile (`train_side_by_side`), and their analyses follow the shared ones.

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
import datetime
import fcntl
import functools
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from hmm_datasets.cache import CACHE_ENV
from hmm_datasets.corpus import open_corpus
from hmm_datasets.export import corpus_folder_problem, export_corpus
from hmm_datasets.files import build_folder, write_atomically, write_json, write_text
from hmm_datasets.names import MANIFEST_FILENAME
from hmm_datasets.predictors import reference_predictors
from model_cards.render import render_report, write_model_card
from probing.architecture import check_causal_lm, positions_outside_attention
from probing.capture import load_causal_lm, untrained_twin
from probing.knockout import rotary_knockout, scored_test_positions
from probing.plots import plot_rotary_knockout, write_probe_results
from probing.run import run_probing

from . import layout
from .development import kept_networks, place_networks
from .evaluation import figure1, load_evaluation_data, model_next_token_probs
from .memory import corpus_lemma1, corpus_model_memory
from .plots import write_development, write_figure1, write_lemma1, write_model_memory
from .settings import (
    CONFIGS_DIR,
    RunConfig,
    Settings,
    differing_settings,
    fingerprint,
    flat_settings,
    load_run_config,
)
from .summary import summarize_model_folder
from .training import (
    SIDE_BY_SIDE_ENV,
    checkpoints,
    is_complete_checkpoint,
    kept_name,
    kept_steps,
    train,
)
from .yardsticks import SPLITS, corpus_yardsticks, place_model, read_yardsticks, write_yardsticks

KINDS = ("reproduce", "study")
NOUNS = {"reproduce": "reproduction"}  # what a kind's folder is called in messages
# each model's stages, in the order they run
MODEL_STAGES = ("train", "evaluate", "probe", "memory", "knockout")
# a reproduction's stages, in the order they run (`--redo` takes any of them)
REPRODUCE_STAGES = ("corpus", *MODEL_STAGES, "model", "report")
TRAIN_COMMAND = "modeling_hmmroformer.experiments.commands.train"  # what `accelerate launch -m` runs
KNOCKOUT_SKIPPED = "skipped.json"  # in knockout/ of a model without rotary positions: why there is none
PREDICTIONS = ".predictions"  # exact predictions shared by `--jobs` workers (`shared_predictions`)
MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".py", ".yaml")  # what `model/` copies from training/


@dataclass(frozen=True)
class ModelRun:
    """One model of a pipeline: its folder and run config (which holds its depth and seed)."""

    folder: Path
    run: RunConfig
    tag: str  # "" in a reproduction, "depth<L> seed<s>" in a study: stage names end with it

    @property
    def depth(self) -> int:
        return self.run.depth

    @property
    def seed(self) -> int:
        return self.run.seed

    def path(self, name: str) -> Path:
        return self.folder / name

    def stage(self, name: str) -> str:
        return f"{name} {self.tag}".strip()


@dataclass
class Pipeline:
    """One pipeline folder and how to fill it."""

    settings: Settings
    out: Path
    kind: str  # "reproduce" or "study"
    run: RunConfig  # the run config as read (once), before each model's depth, seed and folders
    models: list[ModelRun]
    num_processes: int = 1
    progress: bool = True
    records: Path | None = None  # a study's committed records (one JSON per model)

    @property
    def corpus(self) -> Path:
        return self.out / layout.CORPUS

    def record_path(self, m: ModelRun) -> Path | None:
        """Where the records folder keeps model `m`'s record (None without a records folder)."""
        return (
            None
            if self.records is None
            else self.records / f"{layout.model_folder_name(m.depth, m.seed)}.json"
        )

    def has_record(self, m: ModelRun) -> bool:
        path = self.record_path(m)
        return path is not None and path.is_file()

    def model(self, depth: int, seed: int) -> ModelRun:
        return next(m for m in self.models if (m.depth, m.seed) == (depth, seed))

    @property
    def keeps_grid(self) -> bool:
        """A reproduction's stages are not named by depth and seed: its folder is one grid. A
        study's folder serves any grid of its settings (its models' stages are named)."""
        return self.kind != "study"

    def fingerprint(self) -> str:
        """What the folder's stages depend on (`settings.fingerprint`)."""
        return fingerprint(self.settings, self.run, grid=self.keeps_grid)

    def record_fingerprint(self) -> str:
        """What a model's record depends on: the settings without the grid's depths and seeds."""
        return fingerprint(self.settings, self.run, grid=False)

    def flat_settings(self) -> dict[str, object]:
        return flat_settings(self.settings, self.run, grid=self.keeps_grid)

    def grid(self) -> dict:
        return {"depths": list(self.settings.depths), "seeds": list(self.settings.seeds)} | {
            "seeds_per_depth": {str(d): n for d, n in self.settings.seeds_per_depth.items()}
        }


def make_pipeline(
    settings: Settings,
    out: str | os.PathLike,
    *,
    kind: str,
    configs_dir: str | os.PathLike = CONFIGS_DIR,
    num_processes: int = 1,
    progress: bool = True,
    records: str | os.PathLike | None = None,
) -> Pipeline:
    """Resolve `settings` for folder `out` as a reproduction or a study (`kind`): the run config
    read once, then one `ModelRun` per depth x seed, seed by seed (a study stopped early has
    every depth for its first seeds)."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {KINDS}.")
    if kind == "reproduce" and settings.is_grid:
        raise ValueError(
            f"{settings.name!r} trains {len(settings.depths)} depths x {len(settings.seeds)} seeds: "
            f"run it with scripts/study.py --study {settings.name}."
        )
    if num_processes < 1:
        raise ValueError(f"--num-processes {num_processes} must be at least 1.")
    if records is not None and kind != "study":
        raise ValueError("--records keeps a study's per-model records: a reproduction has none.")
    if num_processes > 1 and not torch.cuda.is_available():
        raise ValueError(
            f"--num-processes {num_processes} needs as many GPUs and there is none: on a CPU the run uses "
            "one process with every core (leave --num-processes out)."
        )
    out = Path(out)
    check_replaced_fields(settings, kind)
    source = settings.overrides.get("data", {}).get("source")
    if source is not None:  # never silently replaced by the pipeline's own corpus
        raise ValueError(
            f"--data.source {source}: a {NOUNS.get(kind, kind)} trains on the corpus it generates into "
            f"{out / layout.CORPUS} "
            "from the corpus section (--corpus.<field> value) and reads no other; to train on a corpus "
            "folder of your own, run scripts/train.py with --data.source (nothing was written)."
        )
    run = load_run_config(Path(configs_dir) / settings.run_config, settings.overrides)
    check_probe_tasks(settings, run)
    check_development_probes(settings, run)
    run = run.with_overrides({"data": {"source": str(out / layout.CORPUS)}})
    models = []
    for seed in settings.seeds or (run.seed,):
        for depth in settings.depths or (run.depth,):
            if settings.seeds and seed not in settings.seeds_of(depth):
                continue
            folder, tag = out, ""
            if kind == "study":
                folder = out / layout.MODELS / layout.model_folder_name(depth, seed)
                tag = f"depth{depth} seed{seed}"
            training = {"output_dir": str(folder / layout.TRAINING), "seed": seed}
            if not progress:
                training["disable_tqdm"] = True
            placed = run.with_depth(depth).with_overrides({"training": training})
            models.append(ModelRun(folder, placed, tag))
    records = None if records is None else Path(records)
    return Pipeline(settings, out, kind, run, models, num_processes, progress, records)


def check_replaced_fields(settings: Settings, kind: str) -> None:
    """Refuse, before anything is written, an override the pipeline would replace without a word:
    each model's folder (`training.output_dir`), and a grid's depths and seeds."""
    replaced = {("training", "output_dir"): "--out"}
    if settings.depths:
        replaced[("model", "num_hidden_layers")] = "--depths"
    if settings.seeds:
        replaced[("training", "seed")] = "--seeds"
    for (section, name), option in replaced.items():
        if name in settings.overrides.get(section, {}):
            raise ValueError(
                f"--{section}.{name}: a {NOUNS.get(kind, kind)} sets it for each model; give {option} instead "
                "(nothing was written)."
            )


def check_development_probes(settings: Settings, run: RunConfig) -> None:
    """Refuse, before anything is written, probed steps that training will not keep."""
    kept = kept_steps(run) if settings.development_probes else []
    outside = [step for step in settings.development_probes if step not in kept]
    if outside:
        keeps = kept or "none: set run.checkpoints"
        raise ValueError(
            f"development_probes {outside} are not among the steps training keeps ({keeps}); "
            "choose kept steps (nothing was written)."
        )


def check_probe_tasks(settings: Settings, run: RunConfig) -> None:
    """Refuse, before anything is written, a corpus with fewer HMMs than the probes cover."""
    probed, hmms = settings.probe_config().num_probe_tasks, run.corpus_config().num_tasks
    if probed > hmms:
        raise ValueError(
            f"the probes of {settings.name!r} cover {probed} tasks but --corpus.num_tasks is {hmms}: give the "
            f"corpus at least {probed} HMMs (--corpus.num_tasks {probed}; nothing was written)."
        )


def stage_plan(pipeline: Pipeline, state: dict) -> dict[str, Callable[[], None]]:
    """Every stage of the pipeline, in order (the module docstring)."""
    p, study = pipeline, pipeline.kind == "study"
    if study:
        from . import study_stages  # a study's own stages: a reproduction never imports them
    to_run = [m for m in p.models if not p.has_record(m)]  # a recorded model is finished
    plan = {"corpus": functools.partial(build_corpus, p)}
    if study:
        plan["lemma1"] = functools.partial(measure_lemma1, p)
    if has_unseen_tasks(p):
        plan["yardsticks"] = functools.partial(measure_yardsticks, p)
    for m in to_run:  # each model trained, analysed and recorded before the next one starts
        runners = {
            "development": functools.partial(measure_development, p, m),
            "development-probe": functools.partial(probe_development, p, m),
            "train": functools.partial(train_model, p, m),
            "evaluate": functools.partial(evaluate_model, p, m),
            "probe": functools.partial(probe_model, p, m),
            "memory": functools.partial(measure_memory, p, m, with_lemma1=not study),
            "knockout": functools.partial(measure_knockout, p, m),
        }
        plan.update({m.stage(name): runners[name] for name in model_stages(p, m)})
        if study:
            plan[m.stage("record")] = functools.partial(study_stages.record_model, p, m, state)
    if not study:
        plan["model"] = functools.partial(package_model, p, p.models[0])
    plan["report"] = functools.partial(study_stages.write_study_report if study else write_report, p, state)
    return plan


def stage_names(pipeline: Pipeline) -> list[str]:
    return list(stage_plan(pipeline, {}))


# ---- the stage engine -------------------------------------------------------------------------
def read_state(pipeline: Pipeline) -> dict:
    """The state of the folder, a fresh one for a new folder; refuses a folder made with other settings."""
    out, path = pipeline.out, pipeline.out / layout.state_file(pipeline.kind)
    noun = NOUNS.get(pipeline.kind, pipeline.kind)
    fresh = {
        "preset": pipeline.settings.name,
        "fingerprint": pipeline.fingerprint(),
        "grid": pipeline.grid(),
        "settings": pipeline.flat_settings(),
        "stages": {},
    }
    if not path.is_file():
        if out.exists() and any(out.iterdir()):
            raise ValueError(
                f"{out} is not empty and holds no {path.name}: it is not a {noun} folder. "
                "Choose another --out (nothing was written)."
            )
        return fresh
    state = json.loads(path.read_text())
    if state.get("fingerprint") != fresh["fingerprint"]:
        which = (
            differing_settings(state["settings"], fresh["settings"])
            if "settings" in state
            else f"fingerprint {state.get('fingerprint')} there, {fresh['fingerprint']} here"
        )
        raise ValueError(
            f"{out} holds a {noun} of {state.get('preset')!r} made with other settings ({which}). "
            "Choose another --out, or delete that folder to start over (nothing was changed)."
        )
    stages = dict(state["stages"])
    if state.get("grid") != fresh["grid"]:  # another grid of the same settings: its own report
        stages.pop("report", None)
    return {**fresh, "stages": stages}


def write_state(pipeline: Pipeline, state: dict) -> None:
    path = pipeline.out / layout.state_file(pipeline.kind)
    write_text(path, json.dumps(state, indent=2) + "\n")


def forget_stages(state: dict, stages: list[str], first: str) -> dict:
    """The state with `first` and every later stage marked incomplete (`--redo first`)."""
    if first not in stages:
        raise ValueError(f"--redo {first!r} is not a stage; stages are {', '.join(stages)}.")
    later = stages[stages.index(first) :]
    return {**state, "stages": {name: v for name, v in state["stages"].items() if name not in later}}


def run_pipeline(
    pipeline: Pipeline,
    *,
    redo: str | None = None,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    reuse: Path | None = None,
) -> dict:
    """Run every stage the state does not mark complete, in order; returns the final state. With
    `jobs` > 1 (a study), the models' stages run in that many worker processes side by side, each
    model in one worker: their training beside the shared analyses (Lemma 1, yardsticks) once the
    corpus is there, their analyses after those, all before the report; each worker gets an equal
    share of this process's threads. With `reuse` (a study folder of the same corpus settings),
    the shared stages it completed are copied from there (`reuse_shared_stages`)."""
    check_jobs(pipeline, jobs)
    state = read_state(pipeline)
    if pipeline.records is not None:
        from .study_stages import check_recorded_models  # a study's own: a reproduction never imports it

        check_recorded_models(pipeline)
    if redo is not None:
        state = forget_stages(state, stage_names(pipeline), redo)
    state = forget_models_gone(pipeline, state, log)
    damage = corpus_damage(pipeline) if "corpus" in state["stages"] else None
    if damage is not None:  # the corpus stage is redone (the same bytes), not skipped
        log(f"corpus: {damage}; redoing the stage")
        state = forget_stages(state, ["corpus"], "corpus")
    plan = stage_plan(pipeline, state)
    if not pipeline.progress:  # --quiet: transformers' own bars (loading weights) too
        transformers.utils.logging.disable_progress_bar()
    lender = check_reuse(pipeline, reuse) if reuse is not None else None
    pipeline.out.mkdir(parents=True, exist_ok=True)
    write_state(pipeline, state)
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
                    state["stages"] = read_state(pipeline)["stages"]
                    run_models_side_by_side(pipeline, state, jobs, log)
                continue
            run_stage(pipeline, state, stage, runner, f"[{index}/{len(plan)}] {stage}", log)
            if stage == "corpus" and side_by_side:
                early.enter_context(train_side_by_side(pipeline, state, jobs, log))
    return state


SHARED_STAGES = {"corpus": layout.CORPUS, "lemma1": layout.LEMMA1, "yardsticks": layout.YARDSTICKS}
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


def check_reuse(p: Pipeline, source: Path) -> dict:
    """The state of `source`, a study folder whose shared stages `p` can take: `ValueError` for a
    folder that is not a study's, or whose corpus settings differ (naming them)."""
    path = source / layout.state_file("study")
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
    return theirs


def reuse_shared_stages(
    p: Pipeline, state: dict, source: Path, theirs: dict, log: Callable[[str], None]
) -> None:
    """Copy each shared stage (corpus, Lemma 1, yardsticks) that `source` completed (`theirs`: its
    state, as `check_reuse` returned it) and `p` has not, and the exact memory-L predictions it
    shares with its workers: the same settings make the same bytes, so another architecture or
    training on one corpus is placed on the same yardsticks."""
    for stage, name in SHARED_STAGES.items():
        if stage in state["stages"] or stage not in theirs["stages"] or not (source / name).is_dir():
            continue
        started = time.perf_counter()
        build_folder(
            p.out / name,
            lambda staging, there=source / name: shutil.copytree(there, staging, dirs_exist_ok=True),
        )
        mark_complete(
            p,
            state,
            stage,
            {"seconds": time.perf_counter() - started, "completed": now(), "reused_from": str(source)},
        )
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


def run_stage(
    p: Pipeline, state: dict, stage: str, runner: Callable[[], None], prefix: str, log: Callable[[str], None]
) -> None:
    """One stage, unless the state marks it complete; then marked complete in `state` and on disk."""
    if stage in state["stages"]:
        log(f"{prefix}: complete, skipped ({state['stages'][stage]['seconds']:.1f} s)")
        return
    log(f"{prefix} ...")
    started = time.perf_counter()
    runner()
    seconds = time.perf_counter() - started
    mark_complete(p, state, stage, {"seconds": seconds, "completed": now()})
    log(f"{prefix}: done in {seconds:.1f} s")


def mark_complete(p: Pipeline, state: dict, stage: str, entry: dict) -> None:
    """Add `stage` to `state` and to the state file, merged under a lock with the stages other
    processes (`--jobs`) completed meanwhile (which `state` gains too)."""
    folder = os.open(p.out, os.O_RDONLY)  # the lock is the folder's: no lock file is left behind
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        on_disk = json.loads((p.out / layout.state_file(p.kind)).read_text())["stages"]
        state["stages"] = {**on_disk, **state["stages"], stage: entry}
        write_state(p, state)
    finally:
        os.close(folder)  # and the lock with it


def check_jobs(p: Pipeline, jobs: int) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs {jobs!r} must be a whole number of processes, 1 or more.")
    if jobs > 1 and p.kind != "study":
        raise ValueError(f"--jobs {jobs} runs a study's models side by side; a reproduction has one model.")
    if jobs > 1 and p.num_processes > 1:
        raise ValueError(
            f"--jobs {jobs} with --num-processes {p.num_processes}: run the models side by side or each on "
            "several GPUs, not both."
        )


def model_stage_names(p: Pipeline) -> set[str]:
    return {m.stage(name) for m in p.models for name in (*model_stages(p, m), "record")}


def run_models_side_by_side(p: Pipeline, state: dict, jobs: int, log: Callable[[str], None]) -> None:
    """Every model not recorded yet, whole, in `jobs` worker processes (spawned: a GPU works in
    each), in the plan's order; `state` gains their stages. A worker's error stops the models not
    started and is raised here once the running ones end."""
    models = [m for m in p.models if not p.has_record(m)]
    with workers(p, models, jobs, None, log, "side by side"):
        pass
    state["stages"] = read_state(p)["stages"]


def train_side_by_side(p: Pipeline, state: dict, jobs: int, log: Callable[[str], None]):
    """The training of every model not trained yet, in `jobs` worker processes, while the body of
    the `with` runs (this process computes the shared stages meanwhile: a stage that only needs
    the corpus need not wait for them); on leaving, waits for it (`workers`)."""
    models = [m for m in p.models if not p.has_record(m) and m.stage("train") not in state["stages"]]
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
):
    """`models`' stages (`names`, or all of them) in `jobs` spawned worker processes, each with
    an equal share of this process's threads, while the body of the `with` runs; on leaving,
    waits for them. A worker's error stops the models not started and is raised once the running
    ones end."""
    if not models:
        yield
        return
    threads = max(1, torch.get_num_threads() // jobs)
    log(f"{what}{len(models)} models in {jobs} processes {where}, {threads} thread(s) each ...")
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(run_model_stages, p, m, threads, jobs, names) for m in models]
        try:
            yield
            for future in concurrent.futures.as_completed(futures):
                future.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def run_model_stages(
    p: Pipeline, m: ModelRun, threads: int, jobs: int, names: tuple[str, ...] | None = None
) -> None:
    """A worker of `run_models_side_by_side` (one of `jobs`): model `m`'s stages (`names`, by
    default all of them and its record), in order, with `threads` threads."""
    torch.set_num_threads(threads)
    os.environ[SIDE_BY_SIDE_ENV] = str(jobs)  # the cores are shared on purpose: no idle-core warning
    if not p.progress:
        transformers.utils.logging.disable_progress_bar()
    state = read_state(p)
    plan = stage_plan(p, state)
    for name in names or (*model_stages(p, m), "record"):
        stage = m.stage(name)
        run_stage(p, state, stage, plan[stage], stage, print)


def forget_models_gone(p: Pipeline, state: dict, log: Callable[[str], None]) -> dict:
    """The state without the stages of models whose folder is gone (a study folder carried to
    another machine with its shared stages only): those models start over, and the report after them."""
    gone = [m for m in p.models if not m.folder.is_dir() and not p.has_record(m)]
    stages = {m.stage(name) for m in gone for name in (*model_stages(p, m), "record")} & set(state["stages"])
    if stages:
        log(f"{len(stages)} stages of models whose folder is gone are redone")
        stages.add("report")
    return {**state, "stages": {name: v for name, v in state["stages"].items() if name not in stages}}


def corpus_damage(p: Pipeline) -> str | None:
    """Why a corpus folder marked complete cannot be used as it is, or None: a file its manifest
    lists is missing, truncated or replaced, or it has no manifest (missing, or written before
    corpus folders recorded one)."""
    if not (p.corpus / MANIFEST_FILENAME).is_file():
        return (
            f"{p.corpus} has no {MANIFEST_FILENAME} (written before corpus folders recorded one, or damaged)"
        )
    return corpus_folder_problem(p.corpus)


def withdraw_report(p: Pipeline, state: dict) -> None:
    """Remove an older REPORT.md and results.json when the report stage is to run again, before any
    stage does: a run that stops on the way never leaves a report that looks current."""
    if "report" not in state["stages"]:
        for name in (layout.REPORT_MD, layout.RESULTS_JSON):
            (p.out / name).unlink(missing_ok=True)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def machine_description() -> dict:
    """The device and library versions, for the report."""
    if torch.cuda.is_available():
        count, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
        device = f"{count} x {name}"
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        device = f"{cores} CPU cores ({platform.machine()}), no GPU"
    return {
        "device": device,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


# ---- the stages -------------------------------------------------------------------------------
def build_corpus(p: Pipeline) -> None:
    export_corpus(
        p.run.corpus_config(),
        p.corpus,
        num_proc=p.run.data_section.num_proc,
        overwrite=True,  # a folder left by an interrupted stage is replaced once the new one is whole
        table_rows=p.settings.corpus_table_rows,
        progress=p.progress,
    )


def train_model(p: Pipeline, m: ModelRun) -> None:
    """Train in this process (`accelerate launch` for several GPUs); resume from the last
    complete checkpoint, or start over if an earlier try stopped before its first one."""
    folder = m.path(layout.TRAINING)
    resume = folder.is_dir() and any(is_complete_checkpoint(c) for c in checkpoints(folder))
    if folder.exists() and not resume:
        shutil.rmtree(folder)
    config_copy = m.path(layout.RUN_CONFIG_COPY)
    write_text(config_copy, m.run.to_yaml())
    if p.num_processes == 1:
        train(m.run, resume=resume)
        return
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes"]
    command += [str(p.num_processes), "--module", TRAIN_COMMAND, "--config", str(config_copy)]
    command += ["--resume"] if resume else []
    done = subprocess.run(command, check=False)
    if done.returncode != 0 or not (folder / layout.TRAIN_RESULTS_JSON).is_file():
        raise RuntimeError(
            f"training stopped (exit status {done.returncode}): {' '.join(command)}. Rerun the same "
            "command to resume from its last complete checkpoint."
        )


def measure_lemma1(p: Pipeline) -> None:
    data = load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    result = corpus_lemma1(data, p.settings.memories)
    build_folder(p.out / layout.LEMMA1, lambda staging: write_lemma1(result, staging))


def trained_model(m: ModelRun):
    """The model training wrote, HMMRoFormer or another architecture, on the GPU when there is one."""
    return load_causal_lm(str(m.path(layout.TRAINING)), check=check_causal_lm)


def model_stages(p: Pipeline, m: ModelRun) -> tuple[str, ...]:
    """Model `m`'s stages, in order: `MODEL_STAGES`, then "development" where its training keeps
    networks (`run.checkpoints`) and the corpus has the yardsticks to place them on, and
    "development-probe" where the settings probe some of them (`development_probes`)."""
    keeps = m.run.run_section.checkpoints > 0 and has_unseen_tasks(p)
    if not keeps:
        return MODEL_STAGES
    return (*MODEL_STAGES, "development", *(("development-probe",) if p.settings.development_probes else ()))


def has_unseen_tasks(p: Pipeline) -> bool:
    """Does the pipeline's corpus have an unseen-task split (and so the yardsticks stage)?"""
    return p.run.corpus_config().num_test_unseen > 0


def measure_yardsticks(p: Pipeline) -> None:
    """Every yardstick's predictions on the seen- and unseen-task test rows, once per corpus."""
    facts, tensors = corpus_yardsticks(
        open_corpus(str(p.corpus)), p.settings.yardstick_rows, p.settings.prior_particles
    )
    build_folder(p.out / layout.YARDSTICKS, lambda staging: write_yardsticks(staging, facts, tensors))


def evaluate_model(p: Pipeline, m: ModelRun) -> None:
    """Figure 1 against Bayes, with the untrained twin of the same seed scored beside the model;
    on a corpus with unseen tasks, the model against every yardstick too."""
    model = trained_model(m)
    data = load_evaluation_data(str(p.corpus), p.settings.eval_rows)
    result = figure1(model, data, twin=untrained_twin(model, m.seed), progress=p.progress)
    placed = None
    if has_unseen_tasks(p):
        _, tensors = read_yardsticks(p.out / layout.YARDSTICKS)
        vocab = data.config.vocab_size + 1
        probs = {
            split: model_next_token_probs(model, tensors[f"{split}/input_ids"], vocab) for split in SPLITS
        }
        placed = place_model(probs, tensors, data.layout)

    def write(staging: Path) -> None:
        write_figure1(result, staging)
        if placed is not None:
            write_json(staging / layout.YARDSTICKS_JSON, placed)

    build_folder(m.path(layout.FIGURE1), write)


def measure_development(p: Pipeline, m: ModelRun) -> None:
    """Every network training kept, placed on the corpus's yardsticks and labelled
    (`development.place_networks`), with its figure."""
    facts, tensors = read_yardsticks(p.out / layout.YARDSTICKS)
    kept = m.path(layout.TRAINING) / layout.DEVELOPMENT
    source = str(kept.relative_to(m.folder))
    record = place_networks(kept_networks(kept), open_corpus(str(p.corpus)), facts, tensors, source).to_dict()

    build_folder(
        m.path(layout.DEVELOPMENT),
        lambda staging: write_development(record, staging / layout.DEVELOPMENT_JSON),
    )


def probe_development(p: Pipeline, m: ModelRun) -> None:
    """The probes of the kept networks at the settings' `development_probes` steps, each with the
    network as training initialised it (step 0) as the control, each written whole in
    `development_probes/step-<N>/` as it finishes (a stopped stage keeps the finished ones)."""
    kept = dict(kept_networks(m.path(layout.TRAINING) / layout.DEVELOPMENT))
    missing = [step for step in (0, *p.settings.development_probes) if step not in kept]
    if missing:
        raise ValueError(
            f"{m.path(layout.TRAINING)} kept no network at steps {missing} (it kept {sorted(kept)}): give "
            "development_probes among the steps of run.checkpoints."
        )
    corpus, twin = open_corpus(str(p.corpus)), load_causal_lm(str(kept[0]), check=check_causal_lm)
    for step in p.settings.development_probes:
        target = m.path(layout.DEVELOPMENT_PROBES) / kept_name(step)
        if (target / layout.PROBES_JSON).is_file():
            continue
        model = load_causal_lm(str(kept[step]), check=check_causal_lm)
        result = run_probing(
            model, corpus, p.settings.probe_config(), untrained_model=twin, progress=p.progress
        )
        build_folder(target, lambda staging, r=result: write_probe_results(r, staging))


def probe_model(p: Pipeline, m: ModelRun) -> None:
    """The probes, with the model as training initialised it (its seed) as the control."""
    model = trained_model(m)
    result = run_probing(
        model,
        open_corpus(str(p.corpus)),
        p.settings.probe_config(),
        untrained_model=untrained_twin(model, m.seed),
        progress=p.progress,
    )
    build_folder(m.path(layout.PROBES), lambda staging: write_probe_results(result, staging))


def measure_memory(p: Pipeline, m: ModelRun, with_lemma1: bool) -> None:
    """The trained model against the memory-L Bayes predictors (and Lemma 1 on the same rows, if asked)."""
    model, data = trained_model(m), load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    lemma1 = corpus_lemma1(data, p.settings.memories) if with_lemma1 else None
    memory = corpus_model_memory(model, data, p.settings.memories)

    def write(staging: Path) -> None:
        if lemma1 is not None:
            write_lemma1(lemma1, staging)
        write_model_memory(memory, staging)

    build_folder(m.path(layout.MEMORY), write)


def measure_knockout(p: Pipeline, m: ModelRun) -> None:
    """Rotary off in one layer at a time, for the model and its untrained twin, on the test
    tokens of the memory rows (`probing.knockout`). A model whose positions are not rotary
    (GPT-2) has no knock-out: its folder says why (`KNOCKOUT_SKIPPED`), and the claims that read it are n/a."""
    model = trained_model(m)
    reason = positions_outside_attention(model)
    if reason is not None:
        skipped = {"skipped": reason}
        build_folder(m.path(layout.KNOCKOUT), lambda staging: write_json(staging / KNOCKOUT_SKIPPED, skipped))
        return
    data = load_evaluation_data(str(p.corpus), p.settings.memory_rows)
    bayes = reference_predictors(data.params)["bayes"].next_token_probs(data.input_ids, data.task_ids)
    scored = scored_test_positions(data.layout, len(data.input_ids))
    networks = {"trained": model, "twin": untrained_twin(model, m.seed)}
    result = {
        name: rotary_knockout(network, data.input_ids, scored, bayes, progress=p.progress)
        for name, network in networks.items()
    }

    def write(staging: Path) -> None:
        write_json(staging / layout.KNOCKOUT_JSON, result)
        plot_rotary_knockout(result["trained"], staging / layout.KNOCKOUT_PNG, untrained=result["twin"])

    build_folder(m.path(layout.KNOCKOUT), write)


def package_model(p: Pipeline, m: ModelRun) -> None:
    """The checkpoint to publish: final weights, code and configs, the analyses, the model card."""
    trained, final = m.path(layout.TRAINING), p.out / layout.MODEL

    def write(staging: Path) -> None:
        for path in sorted(trained.iterdir()):
            if path.is_file() and path.suffix in MODEL_FILE_SUFFIXES:
                shutil.copy2(path, staging / path.name)
        for name in (layout.FIGURE1, layout.PROBES, layout.MEMORY, layout.KNOCKOUT):
            shutil.copytree(m.path(name), staging / name)
        write_model_card(staging, summarize_model_folder(staging), location=str(final))

    build_folder(final, write)


REPORT_FILES = {
    layout.REPORT_MD: "this report",
    layout.RESULTS_JSON: "every number of this report, with the stage times and the machine",
    f"{layout.CORPUS}/": "the corpus: Parquet shards, HMM parameters, dataset card (a Hub dataset repo)",
    f"{layout.MODEL}/": "the final checkpoint with its code, configs, figures and model card (a Hub model repo)",
    f"{layout.TRAINING}/": "the Trainer's output: checkpoints, TensorBoard logs (`tensorboard --logdir training/runs`)",
    f"{layout.FIGURE1}/": "Figure 1: figure1.json, figure1.png",
    f"{layout.PROBES}/": "Figures 2, 3(a), 3(b), 7: probe_results.json and the PNGs",
    f"{layout.MEMORY}/": "Lemma 1 (lemma1.json, lemma1.png) and the model's own memory (memory.json)",
    f"{layout.KNOCKOUT}/": "the rotary knock-out, model and twin (knockout.json, knockout.png)",
    layout.RUN_CONFIG_COPY: "the run config training used",
    layout.state_file("reproduce"): "which stages are complete, with their wall times",
}


def stage_seconds(state: dict) -> dict[str, float]:
    return {stage: record["seconds"] for stage, record in state["stages"].items()}


def write_json_and_report(p: Pipeline, results: dict, report: str) -> None:
    write_json(p.out / layout.RESULTS_JSON, results)
    write_text(p.out / layout.REPORT_MD, report)


def write_report(p: Pipeline, state: dict) -> None:
    """A reproduction's results.json and REPORT.md, from its published model folder."""
    summary = summarize_model_folder(p.out / layout.MODEL)
    results = {
        "preset": p.settings.name,
        **summary,
        "stage_seconds": stage_seconds(state),
        "machine": machine_description(),
    }
    write_json_and_report(p, results, report_text(results, p.out))


REPORT_EXTRAS = ("preset", "stage_seconds", "machine")  # what results.json adds to the model's summary


def report_text(results: dict, out: Path) -> str:
    """REPORT.md of a reproduction in folder `out` from its results.json (`write_report`)."""
    summary = {key: value for key, value in results.items() if key not in REPORT_EXTRAS}
    return render_report(
        summary,
        preset=results["preset"],
        stage_seconds=results["stage_seconds"],
        machine=results["machine"],
        files=REPORT_FILES,
        files_root=f"{out}/",
    )
