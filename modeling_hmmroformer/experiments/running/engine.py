"""The stage engine: a run folder's state file and the stages it marks complete, knowing nothing
of what the stages do (no torch, no corpus, no model).

A state file names the settings a folder was made with (their fingerprint, and each setting by
its dotted name so that a refusal can say which one differs) and every complete stage with its
wall time. A stage runs unless the state marks it complete; when it ends it is merged into the
file under a lock on the folder, with the stages that other processes completed meanwhile.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hmm_datasets.files import write_text


@dataclass(frozen=True)
class StageRecord:
    """A complete stage: its wall time, when it ended, and the folder it was copied from if it was."""

    seconds: float
    completed: str
    reused_from: str | None = None

    def to_dict(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@dataclass
class RunState:
    """What a run folder's state file holds."""

    preset: str
    fingerprint: str
    grid: dict
    settings: dict[str, object]
    stages: dict[str, StageRecord] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "stages": {name: s.to_dict() for name, s in self.stages.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> RunState:
        return cls(
            preset=data.get("preset"),
            fingerprint=data.get("fingerprint"),
            grid=data.get("grid"),
            settings=data.get("settings"),
            stages={name: StageRecord(**record) for name, record in data["stages"].items()},
        )

    def seconds(self) -> dict[str, float]:
        """Each complete stage's wall time."""
        return {name: record.seconds for name, record in self.stages.items()}

    def without(self, names: Iterable[str]) -> RunState:
        """This state with the stages `names` marked incomplete."""
        names = set(names)
        kept = {name: record for name, record in self.stages.items() if name not in names}
        return dataclasses.replace(self, stages=kept)


def differing_settings(there: dict[str, object], here: dict[str, object]) -> str:
    """ "run.corpus.seed is 1 there, 0 here; ..." for every setting on which two flat settings
    (dotted name -> value) differ (the first three, and how many more)."""
    names = sorted(name for name in there.keys() | here.keys() if there.get(name) != here.get(name))
    texts = [
        f"{name} is {there.get(name, 'unset')!r} there, {here.get(name, 'unset')!r} here" for name in names
    ]
    more = f"; and {len(texts) - 3} more" if len(texts) > 3 else ""
    return "; ".join(texts[:3]) + more


def read_state(path: Path, fresh: RunState, noun: str) -> RunState:
    """The state in `path`, or `fresh` for a new folder. `ValueError` (nothing written) for a
    non-empty folder without a state file, or one made with other settings than `fresh`'s. A
    folder of the same settings run for another grid keeps its stages but not its report."""
    out = path.parent
    if not path.is_file():
        if out.exists() and any(out.iterdir()):
            raise ValueError(
                f"{out} is not empty and holds no {path.name}: it is not a {noun} folder. "
                "Choose another --out (nothing was written)."
            )
        return fresh
    state = json.loads(path.read_text())
    if state.get("fingerprint") != fresh.fingerprint:
        which = (
            differing_settings(state["settings"], fresh.settings)
            if "settings" in state
            else f"fingerprint {state.get('fingerprint')} there, {fresh.fingerprint} here"
        )
        raise ValueError(
            f"{out} holds a {noun} of {state.get('preset')!r} made with other settings ({which}). "
            "Choose another --out, or delete that folder to start over (nothing was changed)."
        )
    stages = RunState.from_dict(state).stages
    if state.get("grid") != fresh.grid:  # another grid of the same settings: its own report
        stages.pop("report", None)
    return dataclasses.replace(fresh, stages=stages)


def read_stages(path: Path) -> dict[str, StageRecord]:
    """The complete stages of the state file `path`, as other processes left it."""
    return RunState.from_dict(json.loads(path.read_text())).stages


def write_state(path: Path, state: RunState) -> None:
    write_text(path, json.dumps(state.to_dict(), indent=2) + "\n")


def forget_stages(state: RunState, stages: list[str], first: str) -> RunState:
    """The state with `first` and every later stage of `stages` marked incomplete (`--redo first`)."""
    if first not in stages:
        raise ValueError(f"--redo {first!r} is not a stage; stages are {', '.join(stages)}.")
    return state.without(stages[stages.index(first) :])


def run_stage(
    path: Path,
    state: RunState,
    stage: str,
    runner: Callable[[], None],
    prefix: str,
    log: Callable[[str], None],
) -> None:
    """One stage, unless `state` marks it complete; then marked complete in `state` and in the
    state file `path`."""
    if stage in state.stages:
        log(f"{prefix}: complete, skipped ({state.stages[stage].seconds:.1f} s)")
        return
    log(f"{prefix} ...")
    started = time.perf_counter()
    runner()
    seconds = time.perf_counter() - started
    mark_complete(path, state, stage, StageRecord(seconds, now()))
    log(f"{prefix}: done in {seconds:.1f} s")


def mark_complete(path: Path, state: RunState, stage: str, record: StageRecord) -> None:
    """Add `stage` to `state` and to the state file `path`, merged under a lock with the stages
    other processes completed meanwhile (which `state` gains too)."""
    folder = os.open(path.parent, os.O_RDONLY)  # the lock is the folder's: no lock file is left behind
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        state.stages = {**read_stages(path), **state.stages, stage: record}
        write_state(path, state)
    finally:
        os.close(folder)  # and the lock with it


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
