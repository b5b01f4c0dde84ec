"""HMMRoFormer: the RoFormer-style causal language model of arXiv 2506.01919.

This package's root holds what travels with a checkpoint (the configuration and the modeling
file, which `save_pretrained` copies next to the weights) and this registration; the
experiment around the model (training, the pipeline, analyses, publishing) is in
`modeling_hmmroformer.experiments`.

import modeling_hmmroformer  # registers the classes with the Auto classes
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("path/or/hub-id")  # no trust_remote_code needed
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_hmm_roformer import HMMRoFormerConfig
from .modeling_hmm_roformer import (
    HMMRoFormerForCausalLM,
    HMMRoFormerModel,
    HMMRoFormerPreTrainedModel,
)

AutoConfig.register(HMMRoFormerConfig.model_type, HMMRoFormerConfig, exist_ok=True)
AutoModel.register(HMMRoFormerConfig, HMMRoFormerModel, exist_ok=True)
AutoModelForCausalLM.register(HMMRoFormerConfig, HMMRoFormerForCausalLM, exist_ok=True)

__all__ = [
    "HMMRoFormerConfig",
    "HMMRoFormerForCausalLM",
    "HMMRoFormerModel",
    "HMMRoFormerPreTrainedModel",
]
