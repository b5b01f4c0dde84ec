"""scripts/probe.py: results written for a checkpoint, one clear error line for bad input."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def probe_script():
    spec = importlib.util.spec_from_file_location("probe_script", ROOT / "scripts" / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_script_writes_results(tiny_model, tmp_path):
    tiny_model().save_pretrained(tmp_path / "model")
    command = [
        sys.executable,
        str(ROOT / "scripts" / "probe.py"),
        "--model",
        str(tmp_path / "model"),
        "--quiet",
    ]
    fast = ["--num-probe-tasks", "4", "--rows-per-task", "8", "--shuffle-rows", "8", "--num-resamples", "50"]
    done = subprocess.run([*command, "--data", "tiny", *fast], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Patterns of the paper" in done.stdout
    written = sorted(path.name for path in (tmp_path / "model" / "probes").iterdir())
    assert written == [
        "figure2_shuffle.png",
        "figure3a_hidden_state_task.png",
        "figure3b_previous_tokens.png",
        "figure7_attention_row0.png",
        "probe_results.json",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "hmm_mixture_config.json"),  # a checkpoint that does not say its corpus, and no --data
        (["--data", "tiny", "--distances", "9"], "distance=9"),
        (["--data", "tiny", "--layers", "5"], "out of range"),
        (["--data", "FOLDER"], "hmm_mixture_config.json"),  # a folder that is not a corpus
    ],
)
def test_probe_script_refuses_bad_input_with_one_error_line(tiny_model, tmp_path, capsys, arguments, message):
    tiny_model().save_pretrained(tmp_path / "model")
    (tmp_path / "FOLDER").mkdir()
    arguments = [str(tmp_path / "FOLDER") if a == "FOLDER" else a for a in arguments]
    capsys.readouterr()
    code = probe_script().main(["--model", str(tmp_path / "model"), "--quiet", *arguments])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "model" / "probes").exists()


def test_probe_script_names_a_missing_checkpoint_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        probe_script().main(["--model", str(tmp_path / "nowhere")])
    assert stopped.value.code == 2 and "no such checkpoint folder" in capsys.readouterr().err
