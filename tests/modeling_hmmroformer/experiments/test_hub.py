"""scripts/push_to_hub.py: the planned upload of a model or corpus folder (the upload itself, on the real
client against a Hub server, is in test_hub_roundtrip.py)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import DatasetCard, ModelCard

from modeling_hmmroformer.experiments.hub import format_plan, plan_dataset_upload, plan_model_upload

ROOT = Path(__file__).resolve().parents[3]


def push_script():
    spec = importlib.util.spec_from_file_location("push_to_hub_script", ROOT / "scripts" / "push_to_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_upload_carries_weights_code_config_card_and_figures(reproduced_tiny):
    out, _ = reproduced_tiny
    plan = plan_model_upload(out / "model", "me/hmm-roformer-tiny", dataset_repo_id="me/hmm-mixture-tiny")
    paths = [planned.path_in_repo for planned in plan.files]
    assert {
        "model.safetensors",
        "config.json",
        "configuration_hmm_roformer.py",
        "modeling_hmm_roformer.py",
        "README.md",
        "hmm_params.safetensors",
        "hmm_mixture_config.json",
        "figure1/figure1.png",
        "probes/figure2_shuffle.png",
        "probes/probe_results.json",
    } <= set(paths)
    assert not [p for p in paths if p.endswith((".bin", ".pt", ".pth")) or p.startswith("checkpoint-")]
    card = ModelCard(next(p for p in plan.files if p.path_in_repo == "README.md").content.decode())
    assert card.data.datasets == ["me/hmm-mixture-tiny"]
    assert 'from_pretrained("me/hmm-roformer-tiny", trust_remote_code=True)' in card.text
    assert card.data.eval_results[0].dataset_type == "me/hmm-mixture-tiny"


def test_a_training_folder_leaves_its_checkpoints_logs_and_pickles_home(reproduced_tiny):
    out, _ = reproduced_tiny
    plan = plan_model_upload(out / "training", "me/hmm-roformer-tiny")
    paths = [planned.path_in_repo for planned in plan.files]
    assert "model.safetensors" in paths and "README.md" in paths
    assert not [p for p in paths if p.startswith(("checkpoint-", "runs/")) or p.endswith(".bin")]
    assert "training_args.bin (training state, a pickle)" in plan.skipped
    assert any(reason.startswith("checkpoint-40/") for reason in plan.skipped)


def test_the_corpus_upload_carries_parquet_parameters_and_a_card_for_the_repo(reproduced_tiny):
    out, _ = reproduced_tiny
    plan = plan_dataset_upload(out / "corpus", "me/hmm-mixture-tiny")
    paths = [planned.path_in_repo for planned in plan.files]
    assert paths == sorted(paths)
    assert {"README.md", "hmm_params.safetensors", "hmm_mixture_config.json", "bayes_accuracy.json"} <= set(
        paths
    )
    assert sorted(p for p in paths if p.startswith("data/")) == sorted(
        f"data/{path.name}" for path in (out / "corpus" / "data").glob("*.parquet")
    )
    card = DatasetCard(next(p for p in plan.files if p.path_in_repo == "README.md").content.decode())
    assert 'load_dataset("me/hmm-mixture-tiny")' in card.text
    assert card.data.configs[0]["data_files"][0]["path"] == "data/train-*.parquet"


def test_dry_run_prints_every_file_with_its_size_and_touches_no_network(reproduced_tiny, capsys):
    out, _ = reproduced_tiny
    arguments = ["--model", str(out / "model"), "--repo-id", "me/hmm-roformer-tiny", "--dry-run"]
    assert push_script().main(arguments) == 0
    printed = capsys.readouterr().out
    plan = plan_model_upload(out / "model", "me/hmm-roformer-tiny")
    assert printed.strip() == format_plan(plan) + "\ndry run: nothing was uploaded"
    size = (out / "model" / "model.safetensors").stat().st_size
    line = next(line for line in printed.splitlines() if line.strip().startswith("model.safetensors "))
    assert f"{size / 1000:.1f} kB" in line and str(out / "model" / "model.safetensors") in line


def broken_copy(source: Path, tmp_path: Path, change) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(source, folder)
    change(folder)
    return folder


def drop_auto_map(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "change, message",
    [
        (drop_auto_map, "no auto_map"),
        (lambda f: (f / "modeling_hmm_roformer.py").unlink(), "lacks the model code"),
        (lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"), "no model.safetensors"),
        (
            lambda f: (f / "config.json").write_text('{"model_type": "vit"}'),
            "neither an HMMRoFormer nor a causal LM",
        ),
        (
            lambda f: (f / "config.json").write_text('{"model_type": "nonsense"}'),
            "neither an HMMRoFormer nor a",
        ),
    ],
)
def test_a_model_folder_that_would_not_load_from_the_hub_is_refused(
    reproduced_tiny, tmp_path, capsys, change, message
):
    folder = broken_copy(reproduced_tiny[0] / "model", tmp_path, change)
    arguments = ["--model", str(folder), "--repo-id", "me/x", "--dry-run"]
    assert push_script().main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("error:") and message in error


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--repo-id", "no-owner"], "has no owner"),
        (["--repo-id", "me/bad name"], "not a Hub repo id"),
        (["--repo-id", "me/x", "--dataset", "MODEL"], "not an exported corpus"),
        (["--repo-id", "me/x", "--model", "MISSING"], "no such folder"),
    ],
)
def test_bad_arguments_are_one_error_line(reproduced_tiny, capsys, arguments, message):
    out, _ = reproduced_tiny
    arguments = [
        str(out / "model") if a == "MODEL" else str(out / "missing") if a == "MISSING" else a
        for a in arguments
    ]
    if "--model" not in arguments and "--dataset" not in arguments:
        arguments += ["--model", str(out / "model")]
    assert push_script().main([*arguments, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_the_card_of_another_architecture_loads_it_with_plain_transformers(gpt2_studied):
    plan = plan_model_upload(gpt2_studied / "models" / "depth2-seed0" / "training", "me/gpt2-tiny")
    card = ModelCard(next(p for p in plan.files if p.path_in_repo == "README.md").content.decode())
    assert "A causal language model of transformers' `gpt2` architecture (" in card.text
    assert 'model = AutoModelForCausalLM.from_pretrained("me/gpt2-tiny")\n' in card.text
    assert "trust_remote_code" not in card.text and "import modeling_hmmroformer" not in card.text
