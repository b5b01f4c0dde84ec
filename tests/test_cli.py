"""The commands: each `hmm-*` console script is a `main()` of
`modeling_hmmroformer.experiments.commands`, and `scripts/NAME.py` is a thin file that calls the
same function. Every `--help` tells the truth: each option has a description and shows its
default, and the usage line names the command typed (`hmm-reproduce` through the console
scripts, `reproduce.py` for `python scripts/reproduce.py`). From a wheel, in a fresh virtual
environment, every command answers (`wheel_environment`; `reproduced_tiny` runs its
`hmm-reproduce --preset tiny`)."""

import argparse
import importlib
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import hmm_datasets
from modeling_hmmroformer.experiments import commands
from modeling_hmmroformer.experiments.settings import PIPELINES, REPRODUCTIONS

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(path.stem for path in (ROOT / "scripts").glob("*.py"))
ENTRY_POINTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def command_name(script: str) -> str:
    return f"hmm-{script.replace('_', '-')}"


def command_main(script: str):
    return importlib.import_module(f"{commands.__name__}.{script}").main


class Parsed(Exception):
    """Raised instead of parsing: the test has the command's parser."""


def command_parser(name: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser the command `name` builds, caught where it would parse."""
    caught = []

    def catch(self, args=None, namespace=None):
        caught.append(self)
        raise Parsed

    monkeypatch.setattr(commands.Parser, "parse_known_args", catch)
    with pytest.raises(Parsed):
        command_main(name)([])
    [parser] = caught
    return parser


def shown_default(action: argparse.Action) -> bool:
    """Whether the option has a default worth showing (not None, not a flag's False)."""
    return action.default is not None and action.default is not False and action.default != argparse.SUPPRESS


def test_every_script_is_a_console_script_and_calls_its_main():
    assert sorted(ENTRY_POINTS) == [command_name(script) for script in SCRIPTS]
    for script in SCRIPTS:
        assert ENTRY_POINTS[command_name(script)] == f"{commands.__name__}.{script}:main"
        thin = runpy.run_path(str(ROOT / "scripts" / f"{script}.py"), run_name=f"script_{script}")
        assert thin["main"] is command_main(script), script


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_has_a_description_and_shows_its_default(name, monkeypatch):
    parser = command_parser(name, monkeypatch)
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
    for typed, shown in (
        (f"/somewhere/bin/{command_name(name)}", command_name(name)),
        (f"scripts/{name}.py", f"{name}.py"),
    ):
        monkeypatch.setattr(sys, "argv", [typed, "--help"])
        with pytest.raises(SystemExit) as done:
            command_main(name)()
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: {shown} "), (name, typed)


def test_help_lists_the_fields_and_the_named_pipelines(capsys):
    expected = {
        "train": ["--training.max_steps", "--model.hidden_size", "--corpus.num_tasks", "--run.loss_mask"],
        "reproduce": REPRODUCTIONS,
        "study": sorted(PIPELINES),
        "generate": sorted(hmm_datasets.PRESETS),
        "figure1": ["--model"],
        "push_to_hub": ["--dry-run"],
        "probe": ["--num-probe-tasks", "(default: 16)"],
    }
    for name, shown in expected.items():
        with pytest.raises(SystemExit):
            command_main(name)(["--help"])
        text = " ".join(capsys.readouterr().out.split())  # as wrapped
        for item in shown:
            assert item in text, (name, item)


# What `--help` imports beyond `import modeling_hmmroformer`, the Auto registration every command
# stands on (it needs torch and transformers' model classes; docs/layers.md, "Where imports
# happen"): the corpus package, whose import registers its `datasets` builder, for the commands
# whose options list its presets or fields, and nothing heavy for any other.
HEAVY = ("datasets", "pyarrow", "pandas", "matplotlib", "numba", "scipy", "sklearn", "transformers.trainer")
CORPUS_PACKAGE = {"datasets", "pyarrow", "pandas"}
LIST_THE_CORPUS = {"hmm-generate", "hmm-yardstick-ladder", "hmm-train", "hmm-reproduce", "hmm-study"}

# One process: the registration, then each command's --help in turn, the heavy modules each one
# loaded first. The commands that may load none go first, so any that one loads is its own.
HELP_IMPORTS = """
import contextlib, importlib, io, json, sys

import modeling_hmmroformer

entries, heavy = json.loads(sys.argv[1]), sys.argv[2].split(",")
loaded, found = set(sys.modules), {}
for name, target in entries:
    module, _, function = target.partition(":")
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.suppress(SystemExit):
        getattr(importlib.import_module(module), function)(["--help"])
    new = set(sys.modules) - loaded
    loaded |= new
    found[name] = {"usage": printed.getvalue().split(" ", 1)[0], "heavy": sorted(set(heavy) & new)}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def help_imports() -> dict:
    order = sorted(ENTRY_POINTS, key=lambda name: (name in LIST_THE_CORPUS, name))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            HELP_IMPORTS,
            json.dumps([[n, ENTRY_POINTS[n]] for n in order]),
            ",".join(HEAVY),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_help_imports_nothing_heavy_beyond_the_model_registration(name, help_imports):
    assert set(ENTRY_POINTS) >= LIST_THE_CORPUS
    allowed = CORPUS_PACKAGE if name in LIST_THE_CORPUS else set()
    assert help_imports[name]["usage"] == "usage:", name
    assert set(help_imports[name]["heavy"]) <= allowed, (
        f"{name} --help imports {help_imports[name]['heavy']}: import it in main(), after parsing"
    )


def test_a_bad_option_names_the_command_typed(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hmm-reproduce", "--redo", "knock-out"])
    with pytest.raises(SystemExit) as done:
        command_main("reproduce")()
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1
    assert "invalid choice: 'knock-out'" in err and "'knockout'" in err
    assert err.rstrip().endswith("(hmm-reproduce --help lists the options)")


def test_a_bad_study_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["hmm-study", "--study", "nope"])
    assert command_main("study")() == 2
    assert capsys.readouterr().err.startswith("error: 'nope' is not a named pipeline")
    assert list(tmp_path.iterdir()) == []


# Run in the wheel's environment: every console script it installed, loaded and asked for --help.
HELP_OF_EVERY_COMMAND = """
import contextlib, io, json, sys
from importlib.metadata import entry_points

import modeling_hmmroformer

usage = {}
for entry in entry_points(group="console_scripts"):
    if entry.name.startswith("hmm-"):
        sys.argv, printed = [entry.name, "--help"], io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
            entry.load()()
        usage[entry.name] = printed.getvalue().splitlines()[0]
print(json.dumps({"package": modeling_hmmroformer.__file__, "usage": usage}))
"""


def test_every_command_answers_from_a_wheel(wheel_environment, tmp_path):
    done = subprocess.run(
        [wheel_environment / "bin" / "python", "-c", HELP_OF_EVERY_COMMAND],
        cwd=tmp_path,
        env={name: value for name, value in os.environ.items() if name != "PYTHONPATH"},  # no clone
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert Path(found["package"]).is_relative_to(wheel_environment)  # the wheel's copy, not the clone
    assert sorted(found["usage"]) == sorted(ENTRY_POINTS)
    for name, line in found["usage"].items():
        assert line.startswith(f"usage: {name} "), line
        assert (wheel_environment / "bin" / name).is_file(), name
    assert list(tmp_path.iterdir()) == []  # --help writes nothing
