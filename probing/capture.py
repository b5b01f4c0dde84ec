"""Per-layer activations and attention logits of a causal LM, streamed in batches.

Hidden-state index 0 is the embedding output (the input of layer 1) and index i the
output of layer i, i = 1..num_hidden_layers (the last one after the final LayerNorm of a
pre-norm model, as transformers returns it; `before_final_norm=True` also reads it before).
Only the asked-for layers and positions are kept, on the CPU, in float16 unless asked otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForCausalLM, set_seed
from transformers.utils import CONFIG_NAME

from .architecture import HMM_ROFORMER, attention_of, check_causal_lm, decoder_layers, final_norm
from .recording import check_recorded, recording_attention, repeat_heads

MODEL_TYPE = HMM_ROFORMER  # the model this package was written for (any causal LM reads too)
STORAGE_DTYPES = {"float16": torch.float16, "float32": torch.float32}
FLOAT16_LIMIT = 60000.0


def load_hmm_roformer(
    model: str, device: str | torch.device | None = None, *, trust_remote_code: bool = False
):
    """An `HMMRoFormerForCausalLM` from a checkpoint folder or a Hub model id, in eval mode, through
    the Auto classes: with the plugin imported (`import modeling_hmmroformer`), or with
    `trust_remote_code=True` from the code a checkpoint carries (`load_causal_lm`).
    """
    return load_causal_lm(model, device, trust_remote_code=trust_remote_code, check=check_hmm_roformer)


def checkpoint_folder(model: str) -> Path | None:
    """The local checkpoint folder `model` names (it holds a config.json), or None for a Hub model
    id. A path that can only be local (`hmm_datasets.export.looks_local`: it exists, starts with
    `.`, `/` or `~`, or its folder exists) but holds no checkpoint is `ValueError` "no such
    checkpoint folder: PATH", never looked up on the Hub."""
    # imported here: the capture functions also run without the corpus package (a remote-code model)
    from hmm_datasets.export import looks_local, no_such_folder

    folder = Path(model).expanduser()
    if (folder / CONFIG_NAME).is_file():
        return folder
    if looks_local(model):
        raise ValueError(
            f"{no_such_folder(model, 'model')}; a checkpoint folder holds the config.json and "
            "model.safetensors that scripts/train.py writes."
        )
    return None


def load_causal_lm(
    model: str,
    device: str | torch.device | None = None,
    *,
    trust_remote_code: bool = False,
    check: Callable | None = None,
):
    """A causal LM from a checkpoint folder or a Hub model id, in eval mode on `device` (default:
    the GPU when there is one); `check(config)` runs before the weights are read. Every reason it
    cannot load (no such folder, an unreachable repo, an unknown model type, truncated or damaged
    weights) is a one-line `ValueError`."""
    checkpoint_folder(model)
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except OSError as error:  # no such folder, no such Hub repo, or the Hub out of reach
        reason = " ".join(str(error).split())
        raise ValueError(
            f"cannot read a model config from {model!r}: it is neither a checkpoint folder with a "
            "config.json (written by scripts/train.py) nor a Hub model id that can be reached"
            f"{' (HF_HUB_OFFLINE=1 is set: only cached Hub repos load)' if _offline() else ''} ({reason})."
        ) from error
    except ValueError as error:  # a config of a model type transformers does not know
        raise ValueError(
            f"{model!r} holds a model type transformers does not know: import modeling_hmmroformer first, or "
            f"pass trust_remote_code=True to use the code the checkpoint carries ({' '.join(str(error).split())})."
        ) from error
    if check is not None:
        check(config)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (SafetensorError, OSError) as error:  # a truncated or damaged model.safetensors, or none
        raise ValueError(
            f"cannot read the weights of {model!r} ({type(error).__name__}: {' '.join(str(error).split())}): "
            "the checkpoint needs a whole model.safetensors; copy it again, or train it again with "
            "scripts/train.py."
        ) from error
    return loaded.to(device).eval()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def untrained_twin(model, seed: int):
    """The same architecture freshly initialised from `seed`, on the model's device, in eval
    mode: with the training's seed, the weights training started from (the probes' untrained
    control)."""
    check_causal_lm(model)
    set_seed(seed)
    twin = type(model)(model.config)
    return twin.to(model_device(model)).eval()


def check_hmm_roformer(model_or_config) -> None:
    """Raise `ValueError` unless this is an HMMRoFormer model or config."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type != MODEL_TYPE:
        raise ValueError(
            f"this checkpoint is a {model_type or type(model_or_config).__name__!r} model, not an HMMRoFormer "
            f"(model_type {MODEL_TYPE!r}): the probes read its rotary attention logits and per-layer states. "
            "Train one with scripts/train.py."
        )


def num_hidden_state_indices(model) -> int:
    return model.config.num_hidden_layers + 1


def resolve_layers(model, layers) -> list[int]:
    """Hidden-state indices to keep (all when `layers` is None), checked against the model."""
    count = num_hidden_state_indices(model)
    if layers is None:
        return list(range(count))
    chosen = sorted({int(layer) for layer in layers})
    bad = [layer for layer in chosen if not 0 <= layer < count]
    if bad or not chosen:
        raise ValueError(
            f"layer index {bad or layers} is out of range: this model has {count - 1} layers, so hidden-state "
            f"indices run 0 (embeddings) .. {count - 1}."
        )
    return chosen


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def capture_hidden_states(
    model,
    input_ids: np.ndarray,
    positions: np.ndarray,
    *,
    layers=None,
    dtype: str = "float16",
    batch_size: int = 64,
    progress: bool = True,
    before_final_norm: bool = False,
) -> torch.Tensor:
    """`[layers, B, P, D]` on the CPU: the hidden states at `positions [B, P]` of each row.

    With `before_final_norm`, one more entry at the end: the last layer's output before the
    final LayerNorm (what `final_norm` reads), from the same forward pass; `ValueError` for a
    model without one.
    """
    check_causal_lm(model)
    kept = resolve_layers(model, layers)
    norm = final_norm(model) if before_final_norm else None
    if before_final_norm and norm is None:
        raise ValueError(_NO_FINAL_NORM)
    storage = _storage_dtype(dtype)
    device, chunks = model_device(model), []
    batches = _row_batches(input_ids, positions, batch_size)
    for chunk, chunk_positions in tqdm(batches, desc="capture: hidden states", disable=not progress):
        with _inputs_of(norm) as seen:
            out = model.base_model(input_ids=chunk.to(device), output_hidden_states=True)
        at = chunk_positions.to(device)
        states = [out.hidden_states[layer] for layer in kept] + seen[:1]
        stacked = torch.stack([_at_positions(state, at) for state in states])
        chunks.append(_to_storage(stacked.float(), storage))
    return torch.cat(chunks, dim=1)


def _row_batches(input_ids, positions, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rows `[B, L]` and their positions `[B, P]`, cut into batches of `batch_size` rows."""
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    where = torch.as_tensor(np.asarray(positions), dtype=torch.long)
    return list(zip(ids.split(batch_size), where.split(batch_size)))


def _at_positions(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """`states [B, L, D]` at `positions [B, P]`: `[B, P, D]`."""
    return torch.gather(states, 1, positions[..., None].expand(-1, -1, states.shape[-1]))


_NO_FINAL_NORM = (
    "this model has no final LayerNorm (norm_placement='post'): its last hidden state is "
    "already the last layer's output."
)


@contextmanager
def _inputs_of(module: torch.nn.Module | None) -> Iterator[list[torch.Tensor]]:
    """The first input of each call of `module` while the block runs (nothing for None)."""
    seen: list[torch.Tensor] = []
    if module is None:
        yield seen
        return
    handle = module.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    try:
        yield seen
    finally:
        handle.remove()


@torch.no_grad()
def capture_attention_logits(
    model,
    input_ids: np.ndarray,
    queries: np.ndarray,
    keys: np.ndarray,
    *,
    batch_size: int = 16,
    progress: bool = True,
    desc: str = "capture: attention logits",
) -> torch.Tensor:
    """`[layers, B, heads, Q, K]` float32 on the CPU: pre-softmax logits from the query
    positions `queries [Q]` to the key positions `keys [B, K]` (per row, so that a key can
    be followed to wherever it moved)."""
    check_causal_lm(model)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    key_index = torch.as_tensor(np.array(keys), dtype=torch.long)
    query_index = torch.as_tensor(np.asarray(queries), dtype=torch.long)
    device, chunks = model_device(model), []
    batches = list(zip(ids.split(batch_size), key_index.split(batch_size)))
    for chunk, chunk_keys in tqdm(batches, desc=desc, disable=not progress):
        with recording_attention(model) as records:
            model(input_ids=chunk.to(device))
        check_recorded(records, model.config.num_hidden_layers, model.config.model_type)
        per_layer = []
        for record in records:  # [b, h, L, L] each
            rows = record.logits[:, :, query_index.to(device), :]
            gather = chunk_keys.to(device)[:, None, None, :].expand(-1, rows.shape[1], rows.shape[2], -1)
            per_layer.append(torch.gather(rows, 3, gather).float().cpu())
        chunks.append(torch.stack(per_layer))
    return torch.cat(chunks, dim=1)


@contextmanager
def pre_rotary_queries_and_keys(model) -> Iterator[list]:
    """Within the block, each forward pass of `model` stores in the yielded list, at index i for
    attention layer i + 1, the pair `(queries, keys)`, each `[batch, heads, seq, head_dim]`: the
    outputs of the layer's query and key projections (HMMRoFormer: its fused `qkv_proj`) split
    into heads exactly as the attention module splits them, before the rotary embedding, the
    keys repeated over the query heads that share them (grouped-query attention). Tensors of the
    last forward, on the model's device."""
    layers = decoder_layers(model)
    captured: list = [None] * len(layers)
    handles = []
    try:  # a layer whose projections cannot be found leaves no hook of the layers before it
        for index, layer in enumerate(layers):
            attention = attention_of(layer, model.config.model_type)
            handles += _projection_hooks(
                attention, lambda pair, index=index: captured.__setitem__(index, pair)
            )
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _projection_hooks(attention, store) -> list:
    """Forward hooks that call `store((queries, keys))` once an attention module's query and key
    projections have run (`[b, heads, s, d]` each, keys repeated over grouped heads)."""
    head_dim = attention.head_dim

    def heads(output):
        return output.view(*output.shape[:-1], -1, head_dim).transpose(1, 2)

    if hasattr(attention, "qkv_proj"):  # HMMRoFormer: q, k and v are thirds of one output

        def fused(module, args, output):
            split = output.view(*output.shape[:-1], 3, -1, head_dim).permute(2, 0, 3, 1, 4)
            store((split[0], split[1]))

        return [attention.qkv_proj.register_forward_hook(fused)]
    if not (hasattr(attention, "q_proj") and hasattr(attention, "k_proj")):
        raise ValueError(
            f"{type(attention).__name__} has neither qkv_proj nor q_proj and k_proj: the shuffle test cannot read "
            "its queries and keys before the rotary embedding."
        )
    queries: list = []
    groups = getattr(attention, "num_key_value_groups", 1)
    query_hook = attention.q_proj.register_forward_hook(
        lambda module, args, output: queries.append(heads(output))
    )

    def keys(module, args, output):
        store((queries.pop(), repeat_heads(heads(output), groups)))

    return [query_hook, attention.k_proj.register_forward_hook(keys)]


@torch.no_grad()
def attention_weights(model, input_ids: np.ndarray) -> torch.Tensor:
    """`[layers, B, heads, L, L]` float32 on the CPU: softmax attention of a few rows."""
    check_causal_lm(model)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).to(model_device(model))
    with recording_attention(model) as records:
        model(input_ids=ids)
    check_recorded(records, model.config.num_hidden_layers, model.config.model_type)
    return torch.stack([record.weights.float().cpu() for record in records])


def _storage_dtype(name: str) -> torch.dtype:
    if name not in STORAGE_DTYPES:
        raise ValueError(f"dtype={name!r}: choose one of {sorted(STORAGE_DTYPES)}.")
    return STORAGE_DTYPES[name]


def _to_storage(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float16 and values.abs().max() > FLOAT16_LIMIT:
        raise ValueError(
            f"activations reach {float(values.abs().max()):.3g}, beyond float16's range: capture with dtype='float32'."
        )
    return values.to(dtype).cpu()
