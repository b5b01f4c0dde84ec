"""The console scripts of `pyproject.toml` (`hmm-reproduce`, `hmm-train`, ...): each runs its
file of the clone's `scripts/` as `__main__`, so the commands work from any folder once the
package is installed from the clone (`make install`, or `pip install -e .`).

    hmm-reproduce --preset tiny        # = python <clone>/scripts/reproduce.py --preset tiny
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def run_script(name: str) -> None:
    """Run `scripts/<name>.py` with this process's arguments (it exits with its own status)."""
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        sys.exit(
            f"error: {path} is missing: the hmm-* commands run the scripts of the clone this package was "
            "installed from (pip install -e <clone>)."
        )
    sys.argv[0] = str(path)
    runpy.run_path(str(path), run_name="__main__")


def reproduce() -> None:
    run_script("reproduce")


def study() -> None:
    run_script("study")


def train() -> None:
    run_script("train")


def generate() -> None:
    run_script("generate")


def figure1() -> None:
    run_script("figure1")


def probe() -> None:
    run_script("probe")


def push_to_hub() -> None:
    run_script("push_to_hub")
