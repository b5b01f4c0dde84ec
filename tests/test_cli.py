"""Every script's `--help` tells the truth: each option has a description and shows its default,
and the usage line names the command typed (`hmm-reproduce` through the console scripts,
`reproduce.py` for `python scripts/reproduce.py`). Cheap: the scripts import nothing heavy
before parsing."""

import argparse
import runpy
import sys
from pathlib import Path

import pytest

import hmm_roformer_cli as commands

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(path.stem for path in (ROOT / "scripts").glob("*.py"))


class Parsed(Exception):
    """Raised instead of parsing: the test has the script's parser."""


def script_parser(name: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser `scripts/<name>.py` builds, caught where it would parse."""
    caught = []

    def catch(self, args=None, namespace=None):
        caught.append(self)
        raise Parsed

    monkeypatch.setattr(commands.Parser, "parse_known_args", catch)
    main = runpy.run_path(str(ROOT / "scripts" / f"{name}.py"), run_name=f"script_{name}")["main"]
    with pytest.raises(Parsed):
        main([])
    [parser] = caught
    return parser


def shown_default(action: argparse.Action) -> bool:
    """Whether the option has a default worth showing (not None, not a flag's False)."""
    return action.default is not None and action.default is not False and action.default != argparse.SUPPRESS


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_has_a_description_and_shows_its_default(name, monkeypatch):
    parser = script_parser(name, monkeypatch)
    assert isinstance(parser, commands.Parser)
    formatter = parser._get_formatter()
    options = [action for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    assert options, name
    for action in options:
        option = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"{name}: {option} has no description"
        shown = formatter._expand_help(action)
        if shown_default(action):
            assert "(default: " in shown, f"{name}: {option} does not show its default: {shown!r}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_usage_line_names_the_command_typed(name, monkeypatch, capsys):
    command = f"hmm-{name.replace('_', '-')}"
    monkeypatch.setattr(sys, "argv", [f"/somewhere/bin/{command}", "--help"])
    with pytest.raises(SystemExit) as done:
        getattr(commands, name)()
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {command} "), name
    assert commands.command is None  # the next parser built in this process names its own script
    monkeypatch.setattr(sys, "argv", [str(ROOT / "scripts" / f"{name}.py"), "--help"])
    main = runpy.run_path(str(ROOT / "scripts" / f"{name}.py"), run_name=f"script_{name}")["main"]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {name}.py "), name


def test_a_bad_option_names_the_command_typed(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hmm-reproduce", "--redo", "knock-out"])
    with pytest.raises(SystemExit) as done:
        commands.reproduce()
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1
    assert "invalid choice: 'knock-out'" in err and "'knockout'" in err
    assert err.rstrip().endswith("(hmm-reproduce --help lists the options)")
