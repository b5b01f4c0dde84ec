"""Shared by the probing tests: the row layout of the tiny corpus and an untrained tiny model."""

import pytest
import torch

from hmm_datasets import SampleLayout
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM

TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model


@pytest.fixture
def layout() -> SampleLayout:
    return SampleLayout(num_demos=4, demo_length=8, test_length=16)  # the tiny corpus's rows


@pytest.fixture
def tiny_model():
    """`tiny_model(**config_overrides)`: a seeded, untrained tiny HMMRoFormer over 7 tokens, in eval mode."""

    def make(**overrides) -> HMMRoFormerForCausalLM:
        torch.manual_seed(0)
        config = HMMRoFormerConfig(**TINY_SIZES, vocab_size=7, **overrides)
        return HMMRoFormerForCausalLM(config).eval()

    return make
