"""HMMRoFormer configuration.

This file imports only transformers (and is imported by its sibling modeling file):
`save_pretrained` copies both next to the weights so that anyone can load a checkpoint
with `trust_remote_code=True`.
"""

from huggingface_hub.dataclasses import strict
from transformers.activations import ACT2FN
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters

NORM_PLACEMENTS = ("pre", "post")
POSITION_EMBEDDINGS = ("rotary", "none")

# Written into every saved config.json: both Auto classes resolve to the copied code.
AUTO_MAP = {
    "AutoConfig": "configuration_hmm_roformer.HMMRoFormerConfig",
    "AutoModel": "modeling_hmm_roformer.HMMRoFormerModel",
    "AutoModelForCausalLM": "modeling_hmm_roformer.HMMRoFormerForCausalLM",
}


@strict
class HMMRoFormerConfig(PreTrainedConfig):
    r"""Configuration of a RoFormer-style causal Transformer (rotary position embeddings).

    Args:
        vocab_size: tokens the model knows; for an HMM corpus, its V observations + the delimiter.
        hidden_size, num_hidden_layers, num_attention_heads: the usual sizes; the head
            dimension `hidden_size // num_attention_heads` must be even (rotary pairs).
        intermediate_size: width of the feed-forward layer (default `4 * hidden_size`).
        hidden_act: activation of the feed-forward layer (a key of `transformers.activations.ACT2FN`).
        rope_parameters: the rotary embedding, in transformers' v5 form (`{"rope_type": "default",
            "rope_theta": 10000.0}`; the scaled types of `transformers.modeling_rope_utils` work as in
            Llama). A bare `rope_theta=...`, as in configs saved before v5, is moved into it.
        position_embedding: "rotary" (RoFormer) or "none" (no position information at all,
            for analyses that need a position-blind model).
        max_position_embeddings: longest sequence (positions) the model accepts.
        norm_placement: "post" (RoFormer/BERT: LayerNorm after each residual sum, and on the
            embeddings) or "pre" (LayerNorm before each block, and a final one).
        layer_norm_eps: LayerNorm epsilon.
        hidden_dropout_prob, attention_dropout: dropout on the residual branches / attention weights.
        initializer_range: standard deviation of the normal initialisation.
        tie_word_embeddings: share the input embedding and the output projection.
        attention_bias: biases in the attention projections (RoFormer has them).

    ```python
    >>> from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
    >>> config = HMMRoFormerConfig(vocab_size=17, hidden_size=128, num_hidden_layers=4, num_attention_heads=4)
    >>> model = HMMRoFormerForCausalLM(config)
    ```
    """

    model_type = "hmm_roformer"
    keys_to_ignore_at_inference = ["past_key_values"]
    # As Phi-3's fused projection: q, k and v are slices of one output, so a column shard would hand
    # each rank a wrong mix of them; the output is gathered and every rank runs all heads.
    base_model_tp_plan = {
        "layers.*.self_attn.qkv_proj": "colwise_gather_output",
        "layers.*.self_attn.o_proj": "rowwise_split_input",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }
    base_model_pp_plan = {
        "embed_tokens": (["input_ids"], ["inputs_embeds"]),
        "layers": (["hidden_states", "attention_mask"], ["hidden_states"]),
        "norm": (["hidden_states"], ["hidden_states"]),
    }

    vocab_size: int = 17
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int | None = None
    hidden_act: str = "gelu"
    rope_parameters: RopeParameters | dict | None = None
    position_embedding: str = "rotary"
    max_position_embeddings: int = 1024
    norm_placement: str = "post"
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.0
    attention_dropout: float = 0.0
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    attention_bias: bool = True
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        super().__post_init__(**kwargs)
        if getattr(self, "auto_map", None) is None:
            self.auto_map = dict(AUTO_MAP)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate_architecture(self):
        """Part of `@strict` validation: every size and choice, with the offending values named."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer.")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}: choose sizes with hidden_size = heads x head_dim."
            )
        if self.position_embedding == "rotary" and self.head_dim % 2 != 0:
            raise ValueError(
                f"the head dimension hidden_size/num_attention_heads = {self.hidden_size}/"
                f"{self.num_attention_heads} = {self.head_dim} is odd: rotary embeddings rotate pairs "
                "of dimensions, so it must be even."
            )
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(f"norm_placement={self.norm_placement!r} must be one of {NORM_PLACEMENTS}.")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"position_embedding={self.position_embedding!r} must be one of {POSITION_EMBEDDINGS}."
            )
        if self.hidden_act not in ACT2FN:
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is not a known activation; try 'gelu' or 'silu'."
            )
        for name in ("hidden_dropout_prob", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}={value} must lie in [0, 1).")
        theta = self.rope_parameters["rope_theta"]
        if not theta > 0:
            raise ValueError(f"rope_parameters['rope_theta']={theta} must be > 0.")
        for name in ("layer_norm_eps", "initializer_range"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0.")


HMMRoFormerConfig.register_for_auto_class()

__all__ = ["HMMRoFormerConfig"]
