"""The commands: one module per console script of `pyproject.toml`, each with a `main(argv)`
that returns the exit status (`hmm-reproduce` runs `commands.reproduce.main`; `python
scripts/reproduce.py` is a thin file that calls the same function), and what every command
shares: bad input is one line on stderr (`error: ...`) and exit status 2, never a traceback
(`refuse`, `Parser`, `at_least`); `--help` shows every option's default.

    hmm-reproduce --preset tiny        # = python scripts/reproduce.py --preset tiny

A command imports at its top only what its parser needs, and the rest after its arguments are
parsed, so that `--help` and a bad option import no more than the model package's registration
(torch, transformers) and the parser's own values (docs/layers.md, "Where imports happen";
tests/test_cli.py checks it).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from transformers import HfArgumentParser

if TYPE_CHECKING:
    from ..running.engine import RunState


def error_line(error: BaseException | str) -> str:
    """`error: <message>` on one line, however many lines the message spans."""
    return "error: " + " ".join(str(error).split())


def refuse(error: BaseException | str) -> int:
    """Print `error_line(error)` on stderr and return the scripts' exit status for bad input, 2."""
    print(error_line(error), file=sys.stderr)
    return 2


def write_report(write: Callable[[], object], source: str) -> int:
    """`write()` (a report; it returns the report's path), then where it went and what from
    (`source`, e.g. "4 studies"); bad input refused in one line (`refuse`)."""
    try:
        report = write()
    except (ValueError, OSError) as error:
        return refuse(error)
    print(f"{report} written from {source}.")
    return 0


def print_outcome(out: Path, state: RunState, lines: Callable[[dict], list[str]]) -> int:
    """After a pipeline ran into `out` (`state`: its stage records): the `lines` made of its
    results.json, then where its report went and how long its stages took. Exit status 0."""
    from .. import names  # through the corpus package's names: it registers its builder (datasets)

    print()
    for line in lines(json.loads((out / names.RESULTS_JSON).read_text())):
        print(f"  {line}")
    total = sum(state.seconds().values())
    print(f"\n{out / names.REPORT_MD} written; stages took {total:.0f} s in all.")
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


class Parser(HfArgumentParser):
    """transformers' `HfArgumentParser` (the options of any dataclasses given, as
    `parse_args_into_dataclasses` reads them) whose errors are one line (`error_line`), without
    the usage lines: `--help` shows those. Its `prog` is argparse's, the command typed (`hmm-reproduce`
    through the console scripts, `reproduce.py` for `python scripts/reproduce.py`), and its
    `--help` shows each option's default (`HelpFormatter`)."""

    def __init__(self, dataclass_types=None, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(dataclass_types, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, error_line(f"{message} ({self.prog} --help lists the options)") + "\n")

    def parse_args_into_dataclasses(self, args: list[str] | None = None, **_) -> tuple:
        """The dataclasses and the other options' namespace, from `args` only (no `.args` file);
        an option no one reads is an argparse error, as `parse_args` has it. `ValueError`: a
        value a dataclass refuses."""
        *parsed, rest = super().parse_args_into_dataclasses(
            args, return_remaining_strings=True, look_for_args_file=False
        )
        if rest:
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        return tuple(parsed)


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


def add_checkpoint_options(parser: Parser, out_help: str) -> None:
    """The options of a command that reads one checkpoint on a corpus beside its untrained twin
    (`hmm-probe`, `hmm-patching`): --model, --data, --out (`out_help`), --control-seed and
    --no-control; `open_checkpoint` reads them."""
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub model id")
    parser.add_argument(
        "--data", help="corpus preset, folder or Hub dataset id (default: the checkpoint's corpus)"
    )
    parser.add_argument("--out", help=out_help)
    parser.add_argument(
        "--control-seed",
        type=int,
        help="initialisation seed of the untrained control (default: the checkpoint's training seed)",
    )
    parser.add_argument("--no-control", action="store_true", help="skip the untrained-model control")


def open_checkpoint(args: argparse.Namespace, device: str | None = None) -> tuple:
    """(its folder, None for a Hub id; the model; its corpus; the untrained twin, None with
    --no-control) of the options `add_checkpoint_options` added; `ValueError` in one line for a
    Hub id without --out, or a checkpoint or corpus that cannot be read."""
    from hmm_datasets.corpus import checkpoint_corpus, open_corpus
    from probing.architecture import check_causal_lm
    from probing.capture import checkpoint_folder, load_causal_lm, untrained_twin

    from ..settings import checkpoint_seed

    folder = checkpoint_folder(args.model)
    if folder is None and args.out is None:
        raise ValueError("--out is required when --model is a Hub id")
    model = load_causal_lm(args.model, device, check=check_causal_lm)
    corpus = open_corpus(args.data or checkpoint_corpus(args.model))
    control = None
    if not args.no_control:
        seed = args.control_seed if args.control_seed is not None else checkpoint_seed(args.model)
        control = untrained_twin(model, seed)
    return folder, model, corpus, control
