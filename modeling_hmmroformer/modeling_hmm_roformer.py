"""HMMRoFormer: a RoFormer-style causal Transformer (rotary position embeddings), in the
structure of transformers' `modeling_llama.py`.

Read top to bottom: rotary helpers, attention (dispatched through
`ALL_ATTENTION_FUNCTIONS`: sdpa, eager, flex_attention, flash_attention_2), feed-forward,
decoder layer, `PreTrainedModel`, base model, `ForCausalLM`.

For analyses, the model returns per layer the hidden states (`output_hidden_states`) and
the attention weights (`output_attentions`), recorded by transformers' output-capture hooks.
A call that asks for weights computes attention explicitly (eager, with the eager mask of
`transformers.masking_utils`) for that call, whatever the configured implementation, so the
answer is never silently empty. The pre-softmax logits are read as for any model whose
attention goes through `ALL_ATTENTION_FUNCTIONS`: by an attention function registered there
(`probing.recording`).

`flex_attention` is refused on CPU tensors (see `HMMRoFormerModel._check_attention_implementation`): use it
on CUDA, and `sdpa` or `eager` on CPU.

This file imports only torch, transformers and its sibling config: `save_pretrained`
copies both next to the weights for `trust_remote_code=True`.
"""

import copy
from collections.abc import Callable

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.distributed.pipeline_parallel import PipelineIdentityLayer
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel, slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_hmm_roformer import HMMRoFormerConfig


class HMMRoFormerRotaryEmbedding(nn.Module):
    """cos/sin of the rotary angles `position * theta^(-2i/d)` for given `position_ids`, as Llama's
    (`config.rope_parameters`; the scaled RoPE types of `transformers.modeling_rope_utils` too)."""

    inv_freq: torch.Tensor  # fix linting for `register_buffer`

    def __init__(self, config: HMMRoFormerConfig):
        super().__init__()
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        self.config = config

        self.rope_type = self.config.rope_parameters["rope_type"]
        rope_init_fn: Callable = self.compute_default_rope_parameters
        if self.rope_type != "default":
            rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = rope_init_fn(self.config)

        # Non-persistent: `PreTrainedModel._init_weights` recomputes both after loading from the meta device.
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: HMMRoFormerConfig, **kwargs) -> tuple[torch.Tensor, float]:
        """`theta^(-2i/d)` for `i < d/2` (`[head_dim // 2]`), and the cos/sin scaling (1: unused here)."""
        base = config.rope_parameters["rope_theta"]
        dim = config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, 1.0

    @torch.no_grad()
    @dynamic_rope_update  # power user: used with advanced RoPE types (e.g. dynamic rope)
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
    """Rotate queries and keys `[batch, heads, seq, head_dim]` by their positions' angles."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `eager` entry of the attention interface: (output `[b, s, h, d]`, weights `[b, h, s, s]`).

    `attention_mask` is additive (`[b or 1, 1, s, kv]`, 0 to attend, the dtype's minimum to mask,
    as `masking_utils` builds it for eager), or a boolean 4-D mask (True to attend) as sdpa takes.
    """
    attn_logits = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            zero = torch.zeros((), dtype=attn_logits.dtype, device=attn_logits.device)
            attention_mask = torch.where(attention_mask, zero, torch.finfo(attn_logits.dtype).min)
        attn_logits = attn_logits + attention_mask
    attn_weights = nn.functional.softmax(attn_logits, dim=-1, dtype=torch.float32).to(query.dtype)
    dropped = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(dropped, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class HMMRoFormerAttention(nn.Module):
    """Multi-head causal self-attention with rotary queries and keys (one fused q/k/v projection)."""

    def __init__(self, config: HMMRoFormerConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = 1
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None = None,
        eager: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, 3, -1, self.head_dim)
        qkv = self.qkv_proj(hidden_states).view(hidden_shape)
        query_states, key_states, value_states = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # [b, h, s, d] each

        if position_embeddings is not None:
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)

        # weights asked for (`eager`): computed explicitly, whatever the configured backend
        attention_interface: Callable = (
            eager_attention_forward
            if eager
            else ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class HMMRoFormerMLP(nn.Module):
    def __init__(self, config: HMMRoFormerConfig):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


class HMMRoFormerDecoderLayer(GradientCheckpointingLayer):
    """Attention and feed-forward blocks with residual connections, LayerNorm before ("pre") or
    after ("post", RoFormer) each residual sum."""

    def __init__(self, config: HMMRoFormerConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.self_attn = HMMRoFormerAttention(config=config, layer_idx=layer_idx)
        self.mlp = HMMRoFormerMLP(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        eager: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attention_input = self.attention_norm(hidden_states) if self.pre_norm else hidden_states
        attention_output, _ = self.self_attn(
            hidden_states=attention_input,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            eager=eager,
            **kwargs,
        )
        hidden_states = hidden_states + self.dropout(attention_output)
        if not self.pre_norm:
            hidden_states = self.attention_norm(hidden_states)

        mlp_input = self.mlp_norm(hidden_states) if self.pre_norm else hidden_states
        hidden_states = hidden_states + self.dropout(self.mlp(mlp_input))
        if not self.pre_norm:
            hidden_states = self.mlp_norm(hidden_states)
        return hidden_states


class HMMRoFormerPreTrainedModel(PreTrainedModel):
    config: HMMRoFormerConfig
    config_class = HMMRoFormerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["HMMRoFormerDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": HMMRoFormerDecoderLayer,
        "attentions": OutputRecorder(HMMRoFormerAttention, index=1),
    }


class HMMRoFormerModel(HMMRoFormerPreTrainedModel):
    def __init__(self, config: HMMRoFormerConfig):
        super().__init__(config)
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        post_norm = config.norm_placement == "post"
        self.embedding_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if post_norm else None
        )
        self.embedding_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layers = nn.ModuleList(
            [HMMRoFormerDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = None if post_norm else nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.rotary_emb = (
            HMMRoFormerRotaryEmbedding(config) if config.position_embedding == "rotary" else None
        )
        self.gradient_checkpointing = False
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPast:
        r"""
        attention_mask (`torch.Tensor`, *optional*):
            A padding mask `[batch, past + seq]` (1 for tokens, 0 for padding), or a custom 4-D mask
            `[batch, 1, seq, past + seq]` used as given: additive (0 to attend, the dtype's minimum to
            mask) as transformers' eager and sdpa take it, or boolean (True to attend).
        position_ids (`torch.LongTensor` of shape `[batch, seq]`, *optional*):
            Position of each token (default `0..seq-1` after any cached tokens); rotary
            attention depends only on differences of positions.

        Inputs are checked where that costs no host synchronisation: on CPU, token ids outside
        `0..vocab_size-1` and positions at or beyond `max_position_embeddings` raise a `ValueError`;
        on an accelerator only the sequence length (a host integer) is checked against
        `max_position_embeddings`, since reading ids or positions would stall every forward pass.
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        self._check_attention_implementation(input_ids if input_ids is not None else inputs_embeds)
        if input_ids is not None:
            self._check_token_ids(input_ids)
            inputs_embeds = self.embed_tokens(input_ids)

        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)

        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = (
                torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
            )
            position_ids = position_ids.unsqueeze(0)
        self._check_positions(position_ids, past_seen_tokens + inputs_embeds.shape[1])

        # Weights asked for: every layer computes eager attention, which takes the eager mask.
        eager = self._eager_for_weights(kwargs)
        mask_config = self.config
        if eager:
            mask_config = copy.copy(self.config)
            mask_config._attn_implementation = "eager"
        causal_mask = create_causal_mask(
            config=mask_config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )

        hidden_states = inputs_embeds
        # Under transformers' pipeline parallelism a later stage gets the previous stage's hidden
        # states as `inputs_embeds`: the embedding block runs only on the stage that runs layer 0.
        if not isinstance(self.layers[0], PipelineIdentityLayer):
            if self.embedding_norm is not None:
                hidden_states = self.embedding_norm(hidden_states)
            hidden_states = self.embedding_dropout(hidden_states)
        position_embeddings = (
            self.rotary_emb(hidden_states, position_ids) if self.rotary_emb is not None else None
        )

        for decoder_layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states = decoder_layer(
                hidden_states,
                attention_mask=causal_mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
                eager=eager,
                **kwargs,
            )

        if self.norm is not None:
            hidden_states = self.norm(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, past_key_values=past_key_values)

    def _check_attention_implementation(self, inputs: torch.Tensor) -> None:
        """Refuses `flex_attention` on CPU tensors.

        torch's CPU flex_attention (an inductor C++ template) returns wrong values or NaN where
        inductor generates AVX2 code (AVX2-only x86 CPUs such as many AMD EPYC), for example at
        head_dim 16 and sequence lengths of 8 mod 16, without any mask; and it has no backward
        pass on CPU, so it cannot train either.
        """
        if self.config._attn_implementation == "flex_attention" and inputs.device.type == "cpu":
            raise ValueError(
                "attn_implementation='flex_attention' is refused on CPU: torch's CPU flex_attention kernel "
                "returns wrong values or NaN on some CPUs (AVX2 code, e.g. AMD EPYC) and has no backward pass "
                "on CPU, so it cannot train either. On CPU use model.set_attn_implementation('sdpa') (or "
                "'eager'); use flex_attention on CUDA."
            )

    def _eager_for_weights(self, kwargs: dict) -> bool:
        """Whether this call asks for attention weights (as an argument or in the config) from an
        implementation that may not compute them (anything but eager and the probes' recorder)."""
        asked = kwargs.get("output_attentions", self.config.output_attentions)
        return bool(asked) and self.config._attn_implementation not in ("eager", "hmm_recording")

    def _check_token_ids(self, input_ids: torch.Tensor) -> None:
        """On CPU only: reading the ids' range from an accelerator would synchronise the host."""
        if torch.compiler.is_compiling() or input_ids.device.type != "cpu" or input_ids.numel() == 0:
            return
        low, high = (int(value) for value in torch.aminmax(input_ids))
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"input_ids range over {low}..{high}, but the model's vocabulary is 0..{self.config.vocab_size - 1} "
                f"(vocab_size={self.config.vocab_size}). An HMM corpus with V observation tokens needs "
                "vocab_size >= V + 1 (the delimiter is token V)."
            )

    def _check_positions(self, position_ids: torch.Tensor, total_length: int) -> None:
        """The sequence length (a host integer) everywhere; the largest position id on CPU only."""
        if torch.compiler.is_compiling():
            return
        limit = self.config.max_position_embeddings
        longest = total_length
        if position_ids.device.type == "cpu" and position_ids.numel():
            longest = max(longest, int(position_ids.max()) + 1)
        if longest > limit:
            raise ValueError(
                f"a sequence needs {longest} positions but max_position_embeddings={limit}: shorten the "
                "input, or build the model with a larger max_position_embeddings."
            )


class HMMRoFormerForCausalLM(HMMRoFormerPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}
    _pp_plan = {"lm_head": (["hidden_states"], ["logits"])}

    def __init__(self, config: HMMRoFormerConfig):
        super().__init__(config)
        self.model = HMMRoFormerModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        r"""
        labels (`torch.LongTensor` of shape `[batch, seq]`, *optional*):
            Next-token targets, aligned with `input_ids` (shifted inside the loss); -100 is ignored.

        ```python
        >>> model = HMMRoFormerForCausalLM(HMMRoFormerConfig(vocab_size=7, hidden_size=32, num_hidden_layers=2, num_attention_heads=2))
        >>> out = model(input_ids, labels=input_ids, output_attentions=True)
        >>> out.loss, out.logits.shape, len(out.attentions)
        ```"""
        outputs: BaseModelOutputWithPast = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )

        hidden_states = slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)
        logits = self.lm_head(hidden_states)

        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs
            )

        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


HMMRoFormerModel.register_for_auto_class("AutoModel")
HMMRoFormerForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = ["HMMRoFormerForCausalLM", "HMMRoFormerModel", "HMMRoFormerPreTrainedModel"]
