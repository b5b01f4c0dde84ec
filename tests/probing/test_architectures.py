"""The analyses on transformers' own causal LMs (Llama, Qwen2, GPT-2), built from configs: the
probes and the belief probes on every one, the shuffle test and the knock-out where positions
are rotary, and one line where they are not."""

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, set_seed

from hmm_datasets.corpus import open_corpus
from probing.architecture import DECLARED_PARTS, ModelParts, check_causal_lm, decoder_layers, final_norm
from probing.capture import capture_hidden_states, pre_rotary_queries_and_keys, untrained_twin
from probing.knockout import knocked_out_logits, rotary_knocked_out, rotary_knockout, scored_test_positions
from probing.plots import write_probe_results
from probing.recording import recording_attention
from probing.run import ProbeConfig, run_probing
from probing.shuffle import attention_geometry
from probing.summary import format_summary

FAST = {"num_probe_tasks": 4, "rows_per_task": 8, "positions_per_row": 12, "num_resamples": 20}
ROTARY = ("llama", "qwen2")


def causal_lm(model_type: str, seed: int = 0, vocab_size: int = 7, heads: int = 2, key_value_heads: int = 1):
    """A tiny untrained model of a transformers architecture, by default over the tiny corpus's 7
    tokens; Llama and Qwen2 with grouped-query attention (`heads` query heads on `key_value_heads`)."""
    grouped = {"num_key_value_heads": key_value_heads} if model_type in ROTARY else {}
    config = AutoConfig.for_model(
        model_type,
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=64,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        **grouped,
    )
    set_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def tiny_corpus():
    return open_corpus("tiny")


SHUFFLE_SKIPPED = {  # model type -> why it has no shuffle test
    "gpt2": "this 'gpt2' model has no rotary embedding",
    "gpt_neox": "this 'gpt_neox' model's attention has no q_proj and k_proj",  # fused per head
}


@pytest.mark.parametrize("model_type", ["llama", *SHUFFLE_SKIPPED])  # Qwen2 takes Llama's path
def test_every_analysis_that_applies_runs_and_says_which_does_not(model_type, tiny_corpus, tmp_path):
    model = causal_lm(model_type)
    result = run_probing(
        model,
        tiny_corpus,
        ProbeConfig(distances=(1, 2), **FAST),
        untrained_model=causal_lm(model_type, 1),
        progress=False,
    )
    results = result.results
    targets = {record["target"] for record in results.records}
    assert {"hidden_state", "task", "previous_token_1", "previous_token_2"} <= targets
    assert any((r["metric"], r["network"]) == ("accuracy", "twin") for r in results.records)
    assert results.model_type == model_type and results.layers == [0, 1, 2]
    summary = format_summary(results)
    paths = write_probe_results(result, tmp_path)
    if model_type in ROTARY:
        assert results.skipped == {} and "figure2" in results.patterns and "shuffle" in targets
        assert "figure2" in paths
    else:
        assert results.skipped["shuffle_test"].startswith(SHUFFLE_SKIPPED[model_type])
        assert f"Shuffle test: not run ({SHUFFLE_SKIPPED[model_type]}" in summary and "shuffle" not in targets
        assert "figure2" not in paths and not (tmp_path / "figure2_shuffle.png").exists()
    assert result.attention.shape[0] == 2  # Figure 7: the attention maps of both layers


def test_llamas_logits_are_rebuilt_from_its_pre_rotary_queries_and_keys(tiny_corpus):
    """As for HMMRoFormer: split into heads, grouped keys repeated, rotation and scaling must give
    the recorded logits back (the shuffle test's decomposition stands on it)."""
    model = causal_lm("llama")
    ids = torch.as_tensor(np.stack(tiny_corpus.split("test")["input_ids"][:3]))
    length = ids.shape[1]
    with (
        torch.no_grad(),
        pre_rotary_queries_and_keys(model) as captured,
        recording_attention(model) as records,
    ):
        model(ids)
    geometry = attention_geometry(model, length)
    allowed = torch.ones(length, length, dtype=torch.bool).tril()
    for (queries, keys), record in zip(captured, records, strict=True):
        assert queries.shape == keys.shape == (3, 2, length, 16)
        rebuilt = geometry.logits(*geometry.rotate(queries, keys, torch.arange(length).expand(3, -1)))
        torch.testing.assert_close(rebuilt[..., allowed], record.logits[..., allowed], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox"])
def test_the_knockout_runs_where_positions_are_rotary_and_is_refused_on_gpt2(model_type, tiny_corpus):
    model = causal_lm(model_type)
    ids = torch.as_tensor(np.stack(tiny_corpus.split("test")["input_ids"][:4]))
    with torch.no_grad():
        runs = list(knocked_out_logits(model, ids))
        with rotary_knocked_out(model, 2):
            full = model(ids).logits
    torch.testing.assert_close(runs[2], full, rtol=1e-5, atol=1e-5)  # the shortcut is the full pass
    assert not torch.allclose(runs[0], runs[2], atol=1e-4)  # rotary off changed something
    uniform = torch.full((*ids.shape, 7), 1 / 7, dtype=torch.float64)  # the 6 tokens and the delimiter
    result = rotary_knockout(
        model, ids, scored_test_positions(tiny_corpus.layout, 4), uniform, progress=False
    )
    assert result["layers"] == [1, 2] and len(result["delta_nll"]["value"]) == 2
    with pytest.raises(
        ValueError, match=r"the rotary knock-out needs rotary position embeddings: this 'gpt2' model"
    ):
        rotary_knockout(causal_lm("gpt2"), ids, scored_test_positions(tiny_corpus.layout, 4), uniform)


@pytest.mark.parametrize("model_type", [*ROTARY, "gpt2"])
def test_the_final_norm_is_found_and_read_before(model_type, tiny_corpus):
    model = causal_lm(model_type)
    norm = final_norm(model)
    assert norm is (model.model.norm if model_type in ROTARY else model.transformer.ln_f)
    ids = np.stack(tiny_corpus.split("test")["input_ids"][:2])
    positions = np.tile(np.arange(5), (2, 1))
    states = capture_hidden_states(
        model, ids, positions, dtype="float32", progress=False, before_final_norm=True
    )
    with torch.no_grad():  # the last hidden state is the final norm of the entry before it
        torch.testing.assert_close(norm(states[-1]), states[-2], rtol=1e-5, atol=1e-5)


def tiny_opt():
    """A tiny untrained OPT: its layers and final norm lie one level down, in `decoder`."""
    config = AutoConfig.for_model(
        "opt", vocab_size=7, hidden_size=32, word_embed_proj_dim=32, num_hidden_layers=2, ffn_dim=64,
        num_attention_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    set_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def test_an_architecture_with_other_names_declares_where_its_parts_lie(tiny_corpus, monkeypatch):
    model = tiny_opt()
    with pytest.raises(ValueError, match=r"declare_parts\('opt', layers='...'\)"):
        decoder_layers(model)
    assert final_norm(model) is None  # not found: it would be read as post-norm
    parts = ModelParts(layers="decoder.layers", final_norm="decoder.final_layer_norm")
    monkeypatch.setitem(DECLARED_PARTS, "opt", parts)
    assert decoder_layers(model) == list(model.model.decoder.layers)
    norm = final_norm(model)
    assert norm is model.model.decoder.final_layer_norm
    ids = np.stack(tiny_corpus.split("test")["input_ids"][:2])
    states = capture_hidden_states(
        model, ids, np.tile(np.arange(5), (2, 1)), dtype="float32", progress=False, before_final_norm=True
    )
    with torch.no_grad():  # the declared norm is the one the last hidden state went through
        torch.testing.assert_close(norm(states[-1]), states[-2], rtol=1e-5, atol=1e-5)
    monkeypatch.setitem(DECLARED_PARTS, "opt", ModelParts(layers="decoder.blocks"))
    with pytest.raises(ValueError, match=r"the decoder layers declared for 'opt' models \('decoder.blocks'"):
        decoder_layers(model)


def test_the_twin_is_the_initialisation_of_its_seed():
    model = causal_lm("llama", seed=3)
    twin = untrained_twin(model, 3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))


def test_a_model_without_a_causal_lm_head_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"this checkpoint is a 't5' model, which has no causal-LM head"):
        check_causal_lm(AutoConfig.for_model("t5"))


def test_the_model_probing_was_written_for_is_hmmroformers_own_type():
    from modeling_hmmroformer import HMMRoFormerConfig
    from probing.architecture import HMM_ROFORMER

    assert HMMRoFormerConfig.model_type == HMM_ROFORMER
