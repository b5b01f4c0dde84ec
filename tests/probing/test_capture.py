"""Capture: the model's own states at the chosen positions; loading through the Auto classes."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from probing import capture_hidden_states, load_hmm_roformer, sample_positions


def test_captured_states_are_the_models_states_at_the_chosen_positions(tiny_model, layout):
    model = tiny_model()
    ids = np.random.default_rng(2).integers(0, 6, size=(5, layout.sequence_length))
    positions = sample_positions(layout, 5, 7, seed=0)
    assert not layout.delimiter_mask()[positions].any()
    captured = capture_hidden_states(model, ids, positions, layers=[0, 2], batch_size=2, progress=False)
    assert captured.shape == (2, 5, 7, 32) and captured.dtype == torch.float16
    with torch.no_grad():
        states = model(torch.as_tensor(ids), output_hidden_states=True).hidden_states
    for index, layer in enumerate([0, 2]):
        expected = torch.stack([states[layer][row, positions[row]] for row in range(5)])
        torch.testing.assert_close(captured[index].float(), expected, atol=2e-3, rtol=2e-3)


def test_the_last_layer_before_the_final_norm_is_what_the_norm_reads(tiny_model, layout):
    model = tiny_model(norm_placement="pre")
    ids = np.random.default_rng(3).integers(0, 6, size=(3, layout.sequence_length))
    positions = sample_positions(layout, 3, 5, seed=1)
    captured = capture_hidden_states(
        model, ids, positions, layers=[2], dtype="float32", progress=False, before_final_norm=True
    )
    after, before = captured[:1], captured[1:]
    assert before.shape == after.shape == (1, 3, 5, 32)
    torch.testing.assert_close(model.base_model.norm(before), after, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(before, after, atol=1e-2)  # the norm changes the states
    with pytest.raises(ValueError, match="no final LayerNorm"):
        capture_hidden_states(
            tiny_model(norm_placement="post"), ids, positions, progress=False, before_final_norm=True
        )


def test_a_model_that_is_not_an_hmm_roformer_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=7)).save_pretrained(
        tmp_path / "gpt2"
    )
    with pytest.raises(ValueError, match="not an HMMRoFormer"):
        load_hmm_roformer(str(tmp_path / "gpt2"))
    with pytest.raises(ValueError, match="config.json"):
        load_hmm_roformer(str(tmp_path / "missing"))


def test_an_unknown_hub_id_offline_says_so_and_not_to_import_the_plugin(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE=1 is set") as refused:
        load_hmm_roformer("someorg/no-such-model")
    assert "import modeling_hmmroformer" not in str(refused.value)
    assert "\n" not in str(refused.value)  # one line


def test_probing_loads_a_checkpoint_with_its_own_code_without_the_model_package(tiny_model, tmp_path):
    """probing sits below modeling_hmmroformer: with that package unimportable, a checkpoint loads
    from the code it carries (trust_remote_code), and without that the error says what to do."""
    tiny_model().save_pretrained(tmp_path / "model")
    source = f"""
        import sys
        sys.modules["modeling_hmmroformer"] = None  # the plugin cannot be imported
        from probing.capture import load_hmm_roformer
        try:
            load_hmm_roformer({str(tmp_path / "model")!r}, "cpu")
        except ValueError as error:
            print("refused:", "trust_remote_code=True" in str(error) and "does not know" in str(error))
        model = load_hmm_roformer({str(tmp_path / "model")!r}, "cpu", trust_remote_code=True)
        print(type(model).__name__, model.config.num_hidden_layers)
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["refused: True", "HMMRoFormerForCausalLM 2"]
