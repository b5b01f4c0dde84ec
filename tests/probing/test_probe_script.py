"""scripts/probe.py: results written for a checkpoint, one clear error line for bad input."""

import pytest


def test_probe_script_writes_results(run_script, tiny_model, tmp_path):
    tiny_model().save_pretrained(tmp_path / "model")
    fast = ["--num-probe-tasks", "4", "--rows-per-task", "8", "--shuffle-rows", "8", "--num-resamples", "50"]
    done = run_script(
        "scripts/probe.py", "--model", tmp_path / "model", "--quiet", "--data", "tiny", *fast, cwd=tmp_path
    )
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
def test_probe_script_refuses_bad_input_with_one_error_line(
    run_script, tiny_model, tmp_path, arguments, message
):
    tiny_model().save_pretrained(tmp_path / "model")
    (tmp_path / "FOLDER").mkdir()
    arguments = [str(tmp_path / "FOLDER") if a == "FOLDER" else a for a in arguments]
    done = run_script("scripts/probe.py", "--model", tmp_path / "model", "--quiet", *arguments)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "model" / "probes").exists()


def test_probe_script_names_a_missing_checkpoint_folder(run_script, tmp_path):
    done = run_script("scripts/probe.py", "--model", tmp_path / "nowhere")
    assert done.returncode == 2 and "no such checkpoint folder" in done.stderr
