"""The model beside the memory-L Bayes predictors; the Lemma 1 figure."""

import json

import pytest
import torch

from hmm_datasets import SamplingTables, generate_rows, get_preset, sample_hmm_params
from hmm_datasets.memory import lemma1
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
from modeling_hmmroformer.experiments.memory import model_memory, plot_lemma1

TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model

LENGTH = 52  # the tiny rows


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 6)
    return params, rows


def tiny_model(vocab_size=7) -> HMMRoFormerForCausalLM:
    """A seeded, untrained tiny HMMRoFormer (as tests/probing/conftest.py's `tiny_model`)."""
    torch.manual_seed(0)
    return HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=vocab_size)).eval()


def without_attention(model: HMMRoFormerForCausalLM) -> HMMRoFormerForCausalLM:
    """Zero every attention output: the prediction at i then depends on token i alone."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            if layer.self_attn.o_proj.bias is not None:
                layer.self_attn.o_proj.bias.zero_()
    return model


def run(model, tiny, memories, **kwargs):
    params, rows = tiny
    return model_memory(model, params, rows["input_ids"], rows["task_id"], memories, batch_size=64, **kwargs)


def test_keys_and_lengths_and_strict_json(tiny):
    memories = [1, 3, 8]
    result = run(tiny_model(), tiny, memories)
    per_memory = (
        "share_reaching_row_start",
        "tv_full_vs_bayes_memory",
        "agreement_full_vs_bayes_memory",
    )
    for key in per_memory:
        assert len(result[key]) == len(memories), key
    assert result["memories"] == memories and result["num_rows"] == 6
    assert set(result["full_vs_bayes"]) == set(result["full_vs_oracle"]) == {"tv", "agreement"}
    best = result["memories"].index(result["best_memory"])
    assert result["tv_full_vs_bayes_memory"][best] == min(result["tv_full_vs_bayes_memory"])
    json.dumps(result, allow_nan=False)


def test_a_memory_as_long_as_the_row_is_the_full_bayes_predictor(tiny):
    result = run(tiny_model(), tiny, [LENGTH, LENGTH + 10])
    assert result["share_reaching_row_start"] == [1.0, 1.0]
    assert result["tv_full_vs_bayes_memory"][0] == pytest.approx(result["full_vs_bayes"]["tv"], abs=1e-12)
    # and a short memory is another predictor: the model's distance to it differs
    short = run(tiny_model(), tiny, [1])
    assert abs(short["tv_full_vs_bayes_memory"][0] - short["full_vs_bayes"]["tv"]) > 1e-3


@pytest.mark.parametrize(
    ("memories", "message"), [([], "memories is empty"), ([0], "contains 0"), ([2, 2], "twice")]
)
def test_bad_memories_raise(tiny, memories, message):
    with pytest.raises(ValueError, match=message):
        run(tiny_model(), tiny, memories)


def test_a_model_with_too_small_a_vocabulary_is_refused(tiny):
    with pytest.raises(ValueError, match="vocab_size=5 is smaller than the HMMs' 7 tokens"):
        run(tiny_model(vocab_size=5), tiny, [1])


def test_the_lemma1_figure_is_written(tiny, tmp_path):
    params, rows = tiny
    result = lemma1(params, rows["input_ids"], rows["task_id"], (1, 2, 4, 8, LENGTH))
    path = plot_lemma1(result, tmp_path / "lemma1.png")
    assert path.stat().st_size > 10_000
