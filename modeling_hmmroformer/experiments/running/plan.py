"""What a pipeline is before it runs: its folder, its models (one `ModelRun` per depth x seed)
and its `Plan`, the kind of pipeline it is (a reproduction or a study, `reproduction_plan` and
`study_plan`), each model's stages, and the checks of its settings made before anything is
written."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import names
from ..settings import CONFIGS_DIR, RunConfig, Settings, fingerprint, flat_settings, pipeline_run_config
from .engine import RunState

MODEL_STAGES = ("train", "evaluate", "probe", "memory", "knockout")
# a reproduction's stages on a corpus without unseen tasks (`reproduction_plan` runs them), named
# here, where `hmm-reproduce --help` reads them without importing the stages
REPRODUCE_STAGES = ("corpus", *MODEL_STAGES, "model", "report")


@dataclass(frozen=True)
class Plan:
    """A kind of pipeline: its name (its state file is `<name>_state.json`), what its folder is
    called in messages, whether its models form a grid (a study: each model in
    `models/depth<L>-seed<s>/`, its stages named by depth and seed, records, models side by side)
    and its stages (`Pipeline, RunState -> {stage name: runner}`, in order), with a check of the
    folder made before any of them runs."""

    name: str
    noun: str
    grid: bool
    stages: Callable[[Pipeline, RunState], dict[str, Callable[[], None]]]
    check: Callable[[Pipeline], None] | None = None  # before any stage: `ValueError` to refuse

    @property
    def state_file(self) -> str:
        return names.state_file(self.name)


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
    plan: Plan
    run: RunConfig  # the run config as read (once), before each model's depth, seed and folders
    models: list[ModelRun]
    num_processes: int = 1
    progress: bool = True
    records: Path | None = None  # a study's committed records (one JSON per model)

    @property
    def corpus(self) -> Path:
        return self.out / names.CORPUS

    @property
    def state_path(self) -> Path:
        return self.out / self.plan.state_file

    def fresh_state(self) -> RunState:
        """The state of this pipeline's folder before any stage ran."""
        return RunState(self.settings.name, self.fingerprint(), self.grid(), self.flat_settings())

    def stages(self, state: RunState) -> dict[str, Callable[[], None]]:
        """Every stage of the pipeline, in order: name -> runner (its plan's)."""
        return self.plan.stages(self, state)

    def stage_names(self) -> list[str]:
        return list(self.stages(self.fresh_state()))

    def record_path(self, m: ModelRun) -> Path | None:
        """Where the records folder keeps model `m`'s record (None without a records folder)."""
        return (
            None
            if self.records is None
            else self.records / f"{names.model_folder_name(m.depth, m.seed)}.json"
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
        return not self.plan.grid

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
    plan: Plan,
    configs_dir: str | os.PathLike = CONFIGS_DIR,
    num_processes: int = 1,
    progress: bool = True,
    records: str | os.PathLike | None = None,
) -> Pipeline:
    """Resolve `settings` for folder `out` as a reproduction or a study (`plan`): the run config
    read once, then one `ModelRun` per depth x seed, seed by seed (a study stopped early has
    every depth for its first seeds)."""
    if not plan.grid and settings.is_grid:
        raise ValueError(
            f"{settings.name!r} trains {len(settings.depths)} depths x {len(settings.seeds)} seeds: "
            f"run it with scripts/study.py --study {settings.name}."
        )
    if num_processes < 1:
        raise ValueError(f"--num-processes {num_processes} must be at least 1.")
    if records is not None and not plan.grid:
        raise ValueError("--records keeps a study's per-model records: a reproduction has none.")
    if num_processes > 1 and not torch.cuda.is_available():
        raise ValueError(
            f"--num-processes {num_processes} needs as many GPUs and there is none: on a CPU the run uses "
            "one process with every core (leave --num-processes out)."
        )
    out = Path(out)
    check_replaced_fields(settings, plan)
    if plan.grid and records is not None:
        settings = with_recorded_depths(settings, Path(records))
    source = settings.overrides.get("data", {}).get("source")
    if source is not None:  # never silently replaced by the pipeline's own corpus
        raise ValueError(
            f"--data.source {source}: a {plan.noun} trains on the corpus it generates into "
            f"{out / names.CORPUS} "
            "from the corpus section (--corpus.<field> value) and reads no other; to train on a corpus "
            "folder of your own, run scripts/train.py with --data.source (nothing was written)."
        )
    run = pipeline_run_config(settings, configs_dir)
    check_probe_tasks(settings, run)
    check_development_probes(settings, run)
    run = run.with_overrides({"data": {"source": str(out / names.CORPUS)}})
    models = []
    for seed in settings.seeds or (run.seed,):
        for depth in settings.depths or (run.depth,):
            if settings.seeds and seed not in settings.seeds_of(depth):
                continue
            folder, tag = out, ""
            if plan.grid:
                folder = out / names.MODELS / names.model_folder_name(depth, seed)
                tag = f"depth{depth} seed{seed}"
            training = {"output_dir": str(folder / names.TRAINING), "seed": seed}
            if not progress:
                training["disable_tqdm"] = True
            placed = run.with_depth(depth).with_overrides({"training": training})
            models.append(ModelRun(folder, placed, tag))
    records = None if records is None else Path(records)
    return Pipeline(settings, out, plan, run, models, num_processes, progress, records)


def with_recorded_depths(settings: Settings, records: Path) -> Settings:
    """`settings` with every depth added whose seeds all have a record in `records`: a study run a
    few depths at a time (`--depths 16` after the 4-layer models) reports every model recorded so
    far, and trains only what it was asked to."""
    if not settings.depths:
        return settings
    recorded = {path.stem for path in records.glob("*.json")}
    depths = {int(match.group(1)) for match in map(names.MODEL_FOLDER_NAME.fullmatch, recorded) if match}
    complete = {
        depth
        for depth in depths - set(settings.depths)
        if all(names.model_folder_name(depth, seed) in recorded for seed in settings.seeds_of(depth))
    }
    return settings.replace(depths=tuple(sorted({*settings.depths, *complete}))) if complete else settings


def check_replaced_fields(settings: Settings, plan: Plan) -> None:
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
                f"--{section}.{name}: a {plan.noun} sets it for each model; give {option} instead "
                "(nothing was written)."
            )


def check_development_probes(settings: Settings, run: RunConfig) -> None:
    """Refuse, before anything is written, probed steps that training will not keep."""
    from .training import kept_steps  # here: training imports the Trainer, and --help reads this module

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


def model_stages(p: Pipeline, m: ModelRun) -> tuple[str, ...]:
    """Model `m`'s stages, in order: `MODEL_STAGES` (without "memory" where the settings skip
    Lemma 1), "patching" where the settings patch (`Settings.patching`), then "development"
    where its training keeps
    networks (`run.checkpoints`) and the corpus has the yardsticks to place them on, and
    "development-probe" where the settings probe some of them (`development_probes`)."""
    stages = tuple(s for s in MODEL_STAGES if s != "memory" or p.settings.lemma1)
    stages += ("patching",) if p.settings.patching is not None else ()
    keeps = m.run.run_section.checkpoints > 0 and has_unseen_tasks(p)
    if not keeps:
        return stages
    return (*stages, "development", *(("development-probe",) if p.settings.development_probes else ()))


def has_unseen_tasks(p: Pipeline) -> bool:
    """Does the pipeline's corpus have an unseen-task split (and so the yardsticks stage)?"""
    return p.run.corpus_config().num_test_unseen > 0
