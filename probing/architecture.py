"""Where the analyses find the parts of a causal LM.

Every analysis reads a checkpoint through the Auto classes and finds what it needs where
transformers' own models keep it:

    model.base_model.layers[i] (GPT-2: .h[i])          the decoder layers
    layer.self_attn (GPT-2: .attn)                      its attention, called through
                                                        `ALL_ATTENTION_FUNCTIONS` (`probing.recording`)
    attention.q_proj / k_proj (HMMRoFormer: qkv_proj)   the projections before the rotary embedding
    model.base_model.rotary_emb                         cos/sin, passed to every decoder layer
                                                        as `position_embeddings`
    model.base_model.norm (GPT-2: ln_f)                 the final norm (none: post-norm)

HMMRoFormer, Llama, Qwen2, GPT-2 and GPT-NeoX are tested. An architecture that keeps its parts
under other names declares where, once, before the analyses run (`declare_parts`: OPT keeps its
layers and final norm one level down, in `decoder`). The hidden-state analyses (Figure 1, the probes,
the belief probes) need only `output_hidden_states`; the shuffle test's position-only part and
the rotary knock-out need positions to enter through a rotary embedding of the queries and
keys alone (or not at all), and refuse a model whose positions are added to the residual
stream (GPT-2's learned positions) in one line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

HMM_ROFORMER = (
    "hmm_roformer"  # HMMRoFormerConfig.model_type (a test checks): the model this package was written for
)
LAYER_LISTS = ("layers", "h")  # where a base model keeps its decoder layers
ATTENTIONS = ("self_attn", "attn", "self_attention", "attention")  # where a decoder layer keeps its attention
FINAL_NORMS = ("norm", "ln_f", "final_layernorm", "final_layer_norm")


@dataclass(frozen=True)
class ModelParts:
    """Where a model type keeps its parts, as dotted attribute paths: `layers` and `final_norm`
    from the base model, `attention` from a decoder layer; None: looked for under the usual names."""

    layers: str | None = None
    attention: str | None = None
    final_norm: str | None = None


DECLARED_PARTS: dict[str, ModelParts] = {}  # model type -> its declared parts


def declare_parts(
    model_type: str, *, layers: str | None = None, attention: str | None = None, final_norm: str | None = None
) -> None:
    """Declare where a `model_type` model keeps the parts the analyses read, for an architecture
    outside transformers' usual names, e.g. OPT:
    `declare_parts("opt", layers="decoder.layers", final_norm="decoder.final_layer_norm")`."""
    DECLARED_PARTS[model_type] = ModelParts(layers, attention, final_norm)


def declared_part(root, path: str, what: str, model_type: str):
    """The module at the dotted `path` below `root`; `ValueError` naming the declaration when a
    name on the way is missing."""
    try:
        return functools.reduce(getattr, path.split("."), root)
    except AttributeError:
        raise ValueError(
            f"the {what} declared for {model_type!r} models ({path!r}, declare_parts) is not in this "
            f"{type(root).__name__}: declare the path where it lies"
        ) from None


HOW_TO_DECLARE = "declare where it lies: probing.architecture.declare_parts({model_type!r}, {field}='...')"


def check_causal_lm(model_or_config) -> None:
    """`ValueError` unless this is a causal LM (model or config) with layers, heads and a width."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None) or type(model_or_config).__name__
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING and model_type != HMM_ROFORMER:
        raise ValueError(
            f"this checkpoint is a {model_type!r} model, which has no causal-LM head in transformers "
            "(AutoModelForCausalLM): the analyses read next-token predictions. Give a causal LM checkpoint."
        )
    missing = [
        name
        for name in ("num_hidden_layers", "hidden_size", "num_attention_heads")
        if not hasattr(config, name)
    ]
    if missing:
        raise ValueError(f"the {model_type!r} config has no {', '.join(missing)}: the analyses read them.")


def decoder_layers(model) -> list:
    """The decoder layers of `model`, first to last."""
    check_causal_lm(model)
    model_type = model.config.model_type
    declared = DECLARED_PARTS.get(model_type, ModelParts()).layers
    if declared is not None:
        return list(declared_part(model.base_model, declared, "decoder layers", model_type))
    for name in LAYER_LISTS:
        layers = getattr(model.base_model, name, None)
        if layers is not None:
            return list(layers)
    raise ValueError(
        f"cannot find the decoder layers of this {model_type!r} model: its base model has none of "
        f"{', '.join(LAYER_LISTS)}; " + HOW_TO_DECLARE.format(model_type=model_type, field="layers")
    )


def attention_of(layer, model_type: str | None = None):
    """The attention module of a decoder layer (of a `model_type` model: its declared name first)."""
    declared = DECLARED_PARTS.get(model_type, ModelParts()).attention
    if declared is not None:
        return declared_part(layer, declared, "attention", model_type)
    for name in ATTENTIONS:
        attention = getattr(layer, name, None)
        if attention is not None:
            return attention
    raise ValueError(
        f"cannot find the attention of {type(layer).__name__}: it has none of {', '.join(ATTENTIONS)}; "
        + HOW_TO_DECLARE.format(model_type=model_type, field="attention")
    )


def final_norm(model):
    """The norm after the last layer (pre-norm models), None where there is none (post-norm)."""
    check_causal_lm(model)
    model_type = model.config.model_type
    declared = DECLARED_PARTS.get(model_type, ModelParts()).final_norm
    if declared is not None:
        return declared_part(model.base_model, declared, "final norm", model_type)
    for name in FINAL_NORMS:
        if hasattr(model.base_model, name):
            return getattr(model.base_model, name)  # None: HMMRoFormer's post-norm
    return None


def rotary_embedding(model):
    """The model's rotary embedding (cos/sin for the decoder layers), None without one."""
    return getattr(model.base_model, "rotary_emb", None)


def positions_outside_attention(model) -> str | None:
    """Why positions reach this model other than through a rotary embedding of its queries and
    keys (None: they do not, or the model has no positions at all)."""
    if model.config.model_type == HMM_ROFORMER or rotary_embedding(model) is not None:
        return None
    return (
        f"this {model.config.model_type!r} model has no rotary embedding: its positions are added to the residual "
        "stream (learned or absolute position embeddings), so attention cannot be split into what position "
        "alone changes"
    )


def shuffle_unavailable(model) -> str | None:
    """Why the shuffle test cannot split this model's attention logits (None: it can): positions
    that are not rotary, or queries and keys that cannot be read before the rotary embedding (it
    reads `q_proj` and `k_proj`, or HMMRoFormer's fused `qkv_proj`; GPT-NeoX and Falcon fuse them
    per head in `query_key_value`)."""
    reason = positions_outside_attention(model)
    if reason is not None:
        return reason
    attention = attention_of(decoder_layers(model)[0], model.config.model_type)
    if hasattr(attention, "qkv_proj") or (hasattr(attention, "q_proj") and hasattr(attention, "k_proj")):
        return None
    return (
        f"this {model.config.model_type!r} model's attention has no q_proj and k_proj (nor HMMRoFormer's qkv_proj): "
        "its queries and keys cannot be read before the rotary embedding"
    )


def check_positions_in_attention(model, analysis: str) -> None:
    """`ValueError` naming why `analysis` cannot run on a model whose positions are not rotary."""
    check_causal_lm(model)
    reason = positions_outside_attention(model)
    if reason is not None:
        raise ValueError(f"{analysis} needs rotary position embeddings: {reason}. The other analyses run.")
