"""scripts/probe.py: results written for a checkpoint, one clear error line for bad input."""

import pytest


def test_probe_script_writes_results(run_script, tiny_model, tmp_path):
    tiny_model().save_pretrained(tmp_path / "model")
    fast = ["--num-probe-tasks", "4", "--rows-per-task", "8", "--shuffle-rows", "8", "--num-resamples", "50"]
    done = run_script(
        "scripts/probe.py", "--model", tmp_path / "model", "--quiet", "--data", "tiny", *fast, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "The paper's patterns as numbers" in done.stdout
    assert "The paper's claims, as the study's rule reads this one model" in done.stdout
    # one model, no figure 1 and no knock-out run by this script: said, not guessed
    assert "undecided (1 seed)" in done.stdout and "n/a (no knock-out)" in done.stdout
    assert "n/a (no figure 1)" in done.stdout
    assert not any(word in done.stdout for word in (": yes\n", ": no\n", ": holds", ": contradicted"))
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


@pytest.mark.parametrize("bad", ["truncated weights", "mistyped folder", "corpus without its test split"])
def test_a_bad_checkpoint_or_corpus_is_one_line_and_writes_nothing(run_script, tiny_model, tmp_path, bad):
    import hmm_datasets

    tiny_model().save_pretrained(tmp_path / "model")
    weights = tmp_path / "model" / "model.safetensors"
    arguments = ["--model", "model", "--data", "tiny", "--quiet"]
    if bad == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:5000])
        message = "cannot read the weights of 'model' (SafetensorError"
    elif bad == "mistyped folder":  # a local path, not a Hub id: never "--out is required"
        arguments[1] = "runs/modell"
        (tmp_path / "runs").mkdir()
        message = "no such checkpoint folder: runs/modell"
    else:
        corpus = hmm_datasets.export_corpus(
            hmm_datasets.get_preset("tiny"), tmp_path / "corpus", table_rows=0
        )
        next((corpus / "data").glob("test-*.parquet")).unlink()
        arguments[3] = "corpus"
        message = f"{corpus.name} is incomplete: the test split"
    before = sorted(tmp_path.rglob("*"))
    done = run_script("scripts/probe.py", *arguments, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {message}") and "Traceback" not in done.stderr
    assert sorted(tmp_path.rglob("*")) == before
