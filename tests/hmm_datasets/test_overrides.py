"""The one override syntax of every script, and YAML 1.2 values."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hmm_datasets
from hmm_datasets.overrides import parse_overrides, read_yaml

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("corpus", "data", "model", "training", "run")


def test_overrides_go_to_their_sections_with_yaml_1_2_values():
    arguments = ["--training.eval_strategy=no", "--training.bf16", "false", "--training.learning_rate=1e-3"]
    arguments += ["--training.report_to", "[]", "--model.num_hidden_layers", "8"]
    assert parse_overrides(arguments, SECTIONS) == {
        "training": {"eval_strategy": "no", "bf16": False, "learning_rate": 1e-3, "report_to": []},
        "model": {"num_hidden_layers": 8},
    }
    # YAML 1.1 would read "no" as False and "3e-4" as a string
    assert read_yaml("a: no\nb: 3e-4\nc: yes\nd: true") == {"a": "no", "b": 3e-4, "c": "yes", "d": True}


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["num_tasks=64"], "write overrides as --section.field value"),
        (["--corpus.num_tasks"], "has no value"),
        (["--trainng.max_steps", "3"], "unknown section 'trainng'"),
    ],
)
def test_a_bad_override_says_how_to_write_one(arguments, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides(arguments, SECTIONS)


def test_generate_takes_the_same_syntax(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "scripts" / "generate.py"),
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / "c"),
    ]
    command += ["--corpus.num_tasks", "4", "--table-rows", "0", "--num-proc", "1"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert hmm_datasets.load_corpus_config(tmp_path / "c").num_tasks == 4
    bad = subprocess.run(
        command[:6] + ["--model.hidden_size", "8"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode != 0 and "unknown section 'model'" in bad.stderr
