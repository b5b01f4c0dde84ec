"""Any transformers causal LM trained through the same pipeline (`model.model_type`): saved as
its own architecture's checkpoint, started from the weights its twin has, analysed by the study,
and bad sections refused in one line."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from modeling_hmmroformer.experiments.running.training import prepare, train
from modeling_hmmroformer.experiments.settings import load_run_config
from probing.capture import untrained_twin

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"


def tiny_run(tmp_path, *overrides):
    return load_run_config(TINY, ["--training.output_dir", str(tmp_path / "run"), *overrides])


@pytest.mark.parametrize(
    "model_type, architecture",
    [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"), ("gpt2", "GPT2LMHeadModel")],
)
def test_an_architecture_trains_and_saves_its_own_checkpoint(tmp_path, model_type, architecture):
    run = tiny_run(
        tmp_path, "--model.model_type", model_type, "--training.max_steps", "2", "--run.eval_rows", "0"
    )
    train(run)
    folder = run.output_dir
    assert not list(folder.glob("*.py"))  # no remote code: plain transformers loads it
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == architecture and model.config.vocab_size == 7
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (2, 32)
    if model_type != "gpt2":
        assert model.config.intermediate_size == 4 * 32  # HMMRoFormer's MLP width, not the architecture's own


def test_the_twin_is_the_initialisation_training_started_from(tmp_path):
    run = tiny_run(tmp_path, "--model.model_type", "llama", "--training.seed", "5")
    initial = prepare(run, resume=False).trainer.model
    twin = untrained_twin(initial, 5)
    for (name, a), b in zip(initial.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--model.model_type", "nope"], "model_type='nope' is not a model type transformers knows"),
        (["--model.model_type", "t5"], "model_type='t5' has no causal-LM model in transformers"),
        (
            ["--model.model_type", "llama", "--model.norm_placement", "pre"],
            "model.norm_placement does not apply to a 'llama' model (its config has no such field): remove",
        ),
        (
            ["--model.model_type", "llama", "--model.num_key_value_heads", "3"],
            "num_key_value_heads=3 does not divide num_attention_heads=2",
        ),
    ],
)
def test_a_model_section_an_architecture_cannot_take_is_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(ValueError, match="model section: " + message.replace("(", r"\(").replace(")", r"\)")):
        tiny_run(tmp_path, *overrides)


def test_a_study_of_gpt2_decides_what_it_can_and_says_why_not_the_rest(gpt2_studied):
    assert (
        "no rotary embedding"
        in (gpt2_studied / "models" / "depth2-seed0" / "knockout" / "skipped.json").read_text()
    )
    report = (gpt2_studied / "REPORT.md").read_text()
    assert "- models: gpt2, width 32" in report
    assert "**n/a (no shuffle test)**" in report and "**n/a (no knock-out)**" in report
