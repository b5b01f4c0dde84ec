"""Resumable stages in one folder, for the reproduction and the depth-and-seed study.

A folder holds a state file (`<kind>_state.json`) that names the settings' fingerprint and
every complete stage with its wall time. A rerun skips the complete stages and redoes the
others; a folder made with other settings, or a non-empty folder without a state file, is
refused before anything is written. Stages build their output in a hidden sibling and rename
it into place (`hmm_datasets.export.build_folder`), so an interrupted stage leaves nothing
that looks complete.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers


def state_path(out: Path, kind: str) -> Path:
    return out / f"{kind}_state.json"


def read_state(out: Path, kind: str, fingerprint: str, name: str) -> dict:
    """The state of `out`, a fresh one for a new folder; refuses a folder made with other settings.

    `kind` names the folder ("reproduce", "study"), `name` the settings (a preset's name).
    """
    path = state_path(out, kind)
    noun = {"reproduce": "reproduction"}.get(kind, kind)
    fresh = {"preset": name, "fingerprint": fingerprint, "stages": {}}
    if not path.is_file():
        if out.exists() and any(out.iterdir()):
            raise ValueError(
                f"{out} is not empty and holds no {path.name}: it is not a {noun} folder. "
                "Choose another --out (nothing was written)."
            )
        return fresh
    state = json.loads(path.read_text())
    if state.get("fingerprint") != fingerprint:
        raise ValueError(
            f"{out} holds a {noun} with other settings ({state.get('preset')!r}, fingerprint "
            f"{state.get('fingerprint')}; these settings: {fingerprint}). Choose another --out, or "
            "delete that folder to start over (nothing was changed)."
        )
    return state


def write_text_atomically(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temporary sibling renamed over it)."""
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_state(out: Path, kind: str, state: dict) -> None:
    write_text_atomically(state_path(out, kind), json.dumps(state, indent=2) + "\n")


def forget_stages(state: dict, stages: list[str], first: str) -> dict:
    """The state with `first` and every later stage marked incomplete (`--redo first`)."""
    if first not in stages:
        raise ValueError(f"--redo {first!r} is not a stage; stages are {', '.join(stages)}.")
    later = stages[stages.index(first) :]
    return {**state, "stages": {name: v for name, v in state["stages"].items() if name not in later}}


def run_stages(
    out: Path,
    kind: str,
    state: dict,
    runners: dict[str, Callable[[], None]],
    log: Callable[[str], None] = print,
) -> dict:
    """Run every stage of `runners` (in order) that `state` does not mark complete."""
    out.mkdir(parents=True, exist_ok=True)
    write_state(out, kind, state)
    for index, (stage, runner) in enumerate(runners.items(), start=1):
        prefix = f"[{index}/{len(runners)}] {stage}"
        if stage in state["stages"]:
            log(f"{prefix}: complete, skipped ({state['stages'][stage]['seconds']:.1f} s)")
            continue
        log(f"{prefix} ...")
        started = time.perf_counter()
        runner()
        seconds = time.perf_counter() - started
        state["stages"][stage] = {"seconds": seconds, "completed": now()}
        write_state(out, kind, state)
        log(f"{prefix}: done in {seconds:.1f} s")
    return state


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def machine_description() -> dict:
    """The device and library versions, for the report."""
    if torch.cuda.is_available():
        device = (
            f"1 x {torch.cuda.get_device_name(0)}"
            if torch.cuda.device_count() == 1
            else (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
        )
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
