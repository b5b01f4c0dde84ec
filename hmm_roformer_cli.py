"""The console scripts of `pyproject.toml` (`hmm-reproduce`, `hmm-train`, ...): each runs its
file of the clone's `scripts/` as `__main__`, so the commands work from any folder once the
package is installed from the clone (`make install`, or `pip install -e .`).

    hmm-reproduce --preset tiny        # = python <clone>/scripts/reproduce.py --preset tiny

This module stands beside the packages, not in one, and imports only the standard library:
importing anything inside `modeling_hmmroformer` first runs its `__init__`, which registers the
model with the Auto classes and so imports torch and transformers (about 5 s), and `--help`
should answer before those load. It also holds what every script shares: bad input is one line
on stderr (`error: ...`) and exit status 2, never a traceback (`refuse`, `Parser`, `at_least`).
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

SCRIPTS = Path(__file__).resolve().parent / "scripts"
command: str | None = None  # the console script running now (`hmm-reproduce`), for usage lines


def run_script(name: str) -> None:
    """Run `scripts/<name>.py` with this process's arguments (it exits with its own status)."""
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        sys.exit(
            f"error: {path} is missing: the hmm-* commands run the scripts of the clone this package was "
            "installed from (pip install -e <clone>)."
        )
    global command
    command, sys.argv[0] = Path(sys.argv[0]).name, str(path)  # usage lines name what was typed
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        command = None


# One entry point per script of scripts/ (pyproject.toml's [project.scripts]).
reproduce = functools.partial(run_script, "reproduce")
study = functools.partial(run_script, "study")
train = functools.partial(run_script, "train")
generate = functools.partial(run_script, "generate")
figure1 = functools.partial(run_script, "figure1")
probe = functools.partial(run_script, "probe")
push_to_hub = functools.partial(run_script, "push_to_hub")
lemma1 = functools.partial(run_script, "lemma1")
diversity_report = functools.partial(run_script, "diversity_report")
architectures_report = functools.partial(run_script, "architectures_report")


# ---- what every script shares: one line on stderr and exit status 2 for bad input --------------
def error_line(error: BaseException | str) -> str:
    """`error: <message>` on one line, however many lines the message spans."""
    return "error: " + " ".join(str(error).split())


def refuse(error: BaseException | str) -> int:
    """Print `error_line(error)` on stderr and return the scripts' exit status for bad input, 2."""
    print(error_line(error), file=sys.stderr)
    return 2


def write_report(write: Callable[[], object], studies: int) -> int:
    """`write()` (a report from `studies` study folders; it returns the report's path), then where
    it went; bad input refused in one line (`refuse`)."""
    try:
        report = write()
    except (ValueError, OSError) as error:
        return refuse(error)
    print(f"{report} written from {studies} studies.")
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written (the scripts' docstrings), and every option's default after
    its help where it has one (not None or False) and the help does not already say it; lines
    wrapped between words, never inside a hyphenated name (`architecture-llama`)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        if (
            not action.option_strings
            or action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
            or "%(default)" in help
            or "(default:" in help
        ):
            return help
        return f"{help} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line (`error_line`), without the usage
    lines: `--help` shows those. Its `prog` is the command typed (`hmm-reproduce` through the
    console scripts, `reproduce.py` for `python scripts/reproduce.py`), and its `--help` shows
    each option's default (`HelpFormatter`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("prog", command)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, error_line(f"{message} ({self.prog} --help lists the options)") + "\n")


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse `type`: an integer of at least `minimum` (counts of rows, processes, ...)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse
