"""The recording attention function (`probing.recording`): what it records is eager attention's
own logits and weights, on HMMRoFormer and on transformers' own architectures."""

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
from probing.recording import RECORDING, check_recorded, recording_attention
from tests.probing.test_architectures import causal_lm

VOCAB = 17


def tiny_causal_lm(model_type: str):
    """A tiny untrained model: 4 query heads, on 2 key/value heads where the architecture groups them."""
    if model_type == "hmm_roformer":
        torch.manual_seed(0)
        config = HMMRoFormerConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4
        )
        return HMMRoFormerForCausalLM(config).eval()
    return causal_lm(model_type, vocab_size=VOCAB, heads=4, key_value_heads=2)


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))


def test_the_logits_are_q_k_scale_plus_the_mask_on_a_tiny_llama(ids):
    model = tiny_causal_lm("llama")
    attention = model.model.layers[1].self_attn
    seen = {}

    def keep(module, args, kwargs):  # the layer's input and its rotary angles, as the layer gets them
        seen["hidden"], seen["rotary"] = kwargs["hidden_states"], kwargs["position_embeddings"]

    handle = attention.register_forward_pre_hook(keep, with_kwargs=True)
    with torch.no_grad(), recording_attention(model) as records:
        model(ids)
    handle.remove()
    batch, length, _ = seen["hidden"].shape
    shape = (batch, length, -1, attention.head_dim)
    query = attention.q_proj(seen["hidden"]).view(shape).transpose(1, 2)
    key = attention.k_proj(seen["hidden"]).view(shape).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, *seen["rotary"])
    key = key.repeat_interleave(attention.num_key_value_groups, dim=1)  # 2 key heads for 4 query heads
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = torch.zeros(length, length).masked_fill(~causal, torch.finfo(torch.float32).min)
    by_hand = torch.matmul(query, key.transpose(2, 3)) * attention.scaling + mask
    torch.testing.assert_close(records[1].logits, by_hand, rtol=1e-5, atol=1e-5)
    assert torch.all(records[1].weights[..., ~causal] == 0)


@pytest.mark.parametrize("model_type", ["hmm_roformer", "llama", "qwen2", "gpt2"])
def test_recording_leaves_the_outputs_and_the_implementation_as_they_were(model_type, ids):
    model = tiny_causal_lm(model_type)
    implementation = model.config._attn_implementation
    with torch.no_grad():
        plain = model(ids).logits
        with recording_attention(model) as records:
            recorded = model(ids).logits
            assert model.config._attn_implementation == RECORDING
    assert model.config._attn_implementation == implementation
    torch.testing.assert_close(recorded, plain, rtol=1e-5, atol=1e-5)  # sdpa's output, computed otherwise
    check_recorded(records, 2, model_type)
    for record in records:
        assert record.logits.shape == record.weights.shape == (2, 4, 12, 12)
        torch.testing.assert_close(record.logits.softmax(-1), record.weights, rtol=0, atol=1e-6)
    with torch.no_grad():
        model(ids)  # outside the block nothing is recorded
    assert len(records) == 2


def test_hmm_roformers_recorded_weights_are_its_own_eager_weights(ids):
    model = tiny_causal_lm("hmm_roformer")
    with torch.no_grad():
        eager = model(ids, output_attentions=True).attentions
        with recording_attention(model) as records:
            model(ids)
    for weights, record in zip(eager, records):
        assert torch.equal(weights, record.weights)  # the same operations in the same order


def test_a_model_whose_attention_bypasses_the_interface_is_refused_in_one_line():
    with pytest.raises(
        ValueError, match=r"recorded 0 attention calls for 2 layers: its attention does not go through"
    ):
        check_recorded([], 2, "mystery")
