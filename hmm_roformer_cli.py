"""The console scripts of `pyproject.toml` (`hmm-reproduce`, `hmm-train`, ...): each runs its
file of the clone's `scripts/` as `__main__`, so the commands work from any folder once the
package is installed from the clone (`make install`, or `pip install -e .`).

    hmm-reproduce --preset tiny        # = python <clone>/scripts/reproduce.py --preset tiny

This module stands beside the packages, not in one, and imports only the standard library:
importing anything inside `modeling_hmmroformer` first runs its `__init__`, which registers the
model with the Auto classes and so imports torch and transformers (about 5 s), and `--help`
should answer before those load.
"""

from __future__ import annotations

import functools
import runpy
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"


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


# One entry point per script of scripts/ (pyproject.toml's [project.scripts]).
reproduce = functools.partial(run_script, "reproduce")
study = functools.partial(run_script, "study")
train = functools.partial(run_script, "train")
generate = functools.partial(run_script, "generate")
figure1 = functools.partial(run_script, "figure1")
probe = functools.partial(run_script, "probe")
push_to_hub = functools.partial(run_script, "push_to_hub")
