"""Attention logits and weights of any causal LM whose attention goes through transformers'
`AttentionInterface`, recorded by a registered attention function.

    with recording_attention(model) as records:
        model(input_ids)
    records[0].logits   # [batch, heads, queries, keys]: layer 1's pre-softmax logits

Inside the block the model's attention implementation is `RECORDING`: attention computed step
by step, as transformers' eager attention computes it (logits = q·kᵀ·scaling plus the additive
mask, softmax in float32, keys and values repeated over grouped heads), each layer's logits and
weights kept in the order the layers run. The mask is the eager one
(`transformers.masking_utils.eager_mask`), registered under the same name. Outside the block
the model runs with its own implementation again.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

RECORDING = "hmm_recording"  # the attention implementation's registered name
_RECORDS: contextvars.ContextVar[list | None] = contextvars.ContextVar("attention_records", default=None)


@dataclass(frozen=True)
class AttentionRecord:
    """One attention layer's call: pre-softmax `logits` and softmax `weights`, `[b, h, q, k]`."""

    logits: torch.Tensor
    weights: torch.Tensor


def repeat_heads(states: torch.Tensor, groups: int) -> torch.Tensor:
    """`[b, kv_heads, s, d] -> [b, kv_heads * groups, s, d]`: each key/value head shared by
    `groups` query heads, as transformers' `repeat_kv` lays them out."""
    if groups == 1:
        return states
    batch, heads, length, dim = states.shape
    return (
        states[:, :, None]
        .expand(batch, heads, groups, length, dim)
        .reshape(batch, heads * groups, length, dim)
    )


def recording_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `RECORDING` entry of the attention interface: eager attention that keeps its logits
    and weights in the open `recording_attention` block. Returns (output `[b, q, h, d]`, weights)."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_heads(key, groups), repeat_heads(value, groups)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    logits = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # True to attend, as sdpa takes it
            zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
            attention_mask = torch.where(attention_mask, zero, torch.finfo(logits.dtype).min)
        logits = logits + attention_mask[:, :, :, : key.shape[-2]]
    weights = torch.nn.functional.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    dropped = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(dropped, value).transpose(1, 2).contiguous()
    records = _RECORDS.get()
    if records is not None:
        records.append(AttentionRecord(logits, weights))
    return output, weights


AttentionInterface.register(RECORDING, recording_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(RECORDING, eager_mask)


@contextmanager
def recording_attention(model) -> Iterator[list[AttentionRecord]]:
    """Within the block, every attention call of `model` appends an `AttentionRecord` to the
    yielded list (layer by layer, forward pass after forward pass). `ValueError` for a model whose
    attention implementation cannot be set (its attention does not go through the interface)."""
    previous = model.config._attn_implementation
    try:
        model.set_attn_implementation(RECORDING)
    except (ValueError, KeyError, ImportError) as error:
        raise ValueError(
            f"cannot record this model's attention logits: {' '.join(str(error).split())}"
        ) from error
    records: list[AttentionRecord] = []
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)
        model.set_attn_implementation(previous)


def check_recorded(records: list[AttentionRecord], num_layers: int, model_type: str) -> None:
    """`ValueError` unless a forward pass recorded one call per attention layer."""
    if len(records) != num_layers:
        raise ValueError(
            f"a {model_type!r} forward pass recorded {len(records)} attention calls for {num_layers} layers: "
            "its attention does not go through transformers' AttentionInterface, so its logits cannot be "
            "read (the probes of hidden states still run)."
        )
