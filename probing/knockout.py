"""The causal form of Figure 2: switch rotary off in one layer at a time and measure the damage.

The paper reads Figure 2 as "upper layers depend less on position than lower ones". The shuffle
test measures how attention logits move; this asks what the model loses. For each layer l, the
model runs with that layer's queries and keys not rotated (rotary angle 0 at every position:
cos = the rotary's scaling, 1 for the default type, and sin = 0; every other layer unchanged),
and on the scored positions (by default the test sequence's) we compare with the intact model:

    delta_nll[l] = mean NLL of the actual next token, layer l knocked out - intact
    delta_kl[l]  = mean KL(Bayes || model), layer l knocked out - intact

in nats per token, with a bootstrap interval over rows (the same row resamples for every
layer, so layers compare paired). The paper predicts smaller deltas in upper layers.

    bayes = reference_predictors(corpus.params)["bayes"].next_token_probs(ids, tasks)  # [B, L, V+1]
    result = rotary_knockout(model, ids, scored_test_positions(corpus.layout, len(ids)), bayes)

The knockout is a forward pre-hook on the decoder layer (`rotary_knocked_out`): checkpoints and
configs are untouched, and the hook is gone when the block exits, error or not. `rotary_knockout`
does not run the whole model once per layer: the layers below the knocked-out one see what they
see intact, so each run starts from the intact pass's input to that layer
(`knocked_out_logits`: L(L+1)/2 layer passes for L runs, not L^2, and the same logits as a full
forward pass under the hook). Like the rest of `probing`, it needs no import of the model
package: it reads the decoder layers, the rotary embedding and the final norm where
`probing.architecture` finds them, and the output embeddings, so a checkpoint loaded with
`trust_remote_code=True` works too, and so does any causal LM whose decoder layers receive the
rotary cos/sin as `position_embeddings` (Llama, Qwen2); a model whose positions are not rotary
(GPT-2) is refused in one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from tqdm.auto import tqdm

from hmm_datasets import SampleLayout
from hmm_datasets.scoring import next_token_scores

from .architecture import check_positions_in_attention, decoder_layers, final_norm, rotary_embedding
from .capture import model_device
from .probes import bootstrap_accuracies, interval

METRICS = ("nll", "kl")  # per-token scores of `hmm_datasets.scoring.next_token_scores`


def check_layer(model, layer: int) -> int:
    """`layer` (1..num_hidden_layers, as the shuffle test numbers attention layers), checked."""
    num_layers = model.config.num_hidden_layers
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 1 <= layer <= num_layers:
        raise ValueError(
            f"layer={layer!r} is out of range: this model has {num_layers} layers, numbered 1..{num_layers} "
            "(layer l is the l-th decoder layer)."
        )
    return int(layer)


def unrotated(position_embeddings, scaling: float):
    """`(cos, sin)` of angle 0 at every position, shapes and dtypes of the given pair (`[batch,
    seq, head_dim]` each): cos = `scaling` (the rotary's magnitude, 1 for the default type),
    sin = 0. None (a model without rotary) stays None."""
    if position_embeddings is None:
        return None
    cos, sin = position_embeddings
    return torch.full_like(cos, scaling), torch.zeros_like(sin)


@contextmanager
def rotary_knocked_out(model, layer: int) -> Iterator[None]:
    """Within the block, decoder layer `layer` (1..L) of `model` gets unrotated position
    embeddings (`unrotated`): its queries and keys are not rotated; every other layer is
    unchanged. The hook is removed on exit, also when the block raises."""
    check_positions_in_attention(model, "the rotary knock-out")
    index = check_layer(model, layer) - 1
    scaling = rotary_scaling(model)

    def knock_out(module, args, kwargs):
        return args, knocked_out_kwargs(kwargs, layer, scaling)

    handle = decoder_layers(model)[index].register_forward_pre_hook(knock_out, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def rotary_scaling(model) -> float:
    """The magnitude of the model's rotary cos/sin (1 for the default type, or without rotary)."""
    return float(getattr(rotary_embedding(model), "attention_scaling", 1.0))


def knocked_out_kwargs(kwargs: dict, layer: int, scaling: float) -> dict:
    """The keyword arguments of decoder layer `layer`'s call with its position embeddings
    unrotated (`unrotated`)."""
    if "position_embeddings" not in kwargs:
        raise RuntimeError(
            f"decoder layer {layer} was called without a position_embeddings keyword: this model passes "
            "rotary cos/sin otherwise than HMMRoFormer does, so the knockout cannot reach them."
        )
    return {**kwargs, "position_embeddings": unrotated(kwargs["position_embeddings"], scaling)}


@contextmanager
def layer_calls(model) -> Iterator[list]:
    """Within the block, `(args, kwargs)` of each decoder layer's latest call (index l - 1 for
    layer l; None until called). The hooks are removed on exit, also when the block raises."""
    layers = decoder_layers(model)
    calls: list = [None] * len(layers)

    def hook(index: int):
        def record(module, args, kwargs):
            calls[index] = (args, kwargs)

        return record

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def knocked_out_logits(model, ids: torch.Tensor) -> Iterator[torch.Tensor]:
    """Logits `[b, L, W]` of `ids` `[b, L]`: of the intact model, then with rotary off in layer
    1, 2, ..., L in turn (`rotary_knocked_out`). Run l starts from the input the intact pass gave
    layer l and runs layers l..L, the final norm and the output embeddings: the same operations
    on the same tensors as a full forward pass under the hook, without the layers below l."""
    layers, num_layers = decoder_layers(model), model.config.num_hidden_layers
    with layer_calls(model) as calls:
        yield model(input_ids=ids, use_cache=False).logits
    norm, head, scaling = final_norm(model), model.get_output_embeddings(), rotary_scaling(model)
    for knocked in range(num_layers):
        hidden = calls[knocked][0][0]
        for index in range(knocked, num_layers):
            args, kwargs = calls[index]
            if index == knocked:
                kwargs = knocked_out_kwargs(kwargs, index + 1, scaling)
            hidden = layers[index](hidden, *args[1:], **kwargs)
        yield head(hidden if norm is None else norm(hidden))


def scored_test_positions(layout: SampleLayout, num_rows: int) -> np.ndarray:
    """`[num_rows, L]` bool: True at the positions whose next token is a test token (the last
    delimiter, predicting test token 0, and test tokens 0..T-2), the positions
    `hmm_datasets.scoring.in_context_scores` averages its test metrics over."""
    positions = layout.test_prediction_positions()
    scored = np.zeros((num_rows, layout.sequence_length), dtype=bool)
    scored[:, positions[positions >= 0]] = True
    return scored


def _check_inputs(model, ids: torch.Tensor, scored: torch.Tensor, bayes: torch.Tensor) -> None:
    if ids.ndim != 2 or scored.shape != ids.shape or bayes.shape[:2] != ids.shape:
        raise ValueError(
            f"input_ids {tuple(ids.shape)}, scored {tuple(scored.shape)} and bayes_probs {tuple(bayes.shape)} "
            "must be [B, L], [B, L] and [B, L, V+1] for the same rows B and length L."
        )
    if not bool(scored.any()):
        raise ValueError("scored marks no position: nothing to measure (see scored_test_positions).")
    if bool(scored[:, -1].any()):
        raise ValueError("scored marks the last position, which has no next token to score: unmark it.")
    if model.config.vocab_size < bayes.shape[-1]:
        raise ValueError(
            f"the model's vocab_size={model.config.vocab_size} is smaller than the corpus's "
            f"{bayes.shape[-1]} tokens (bayes_probs' last axis): this model was not trained on this corpus."
        )


def per_row_sums(logits: torch.Tensor, ids: torch.Tensor, scored: torch.Tensor, bayes: torch.Tensor):
    """`[b, 2]` float64: per row, the sums over its scored positions of the next token's NLL and
    of KL(Bayes || model), in nats, of a model's `logits` `[b, L, W]` (any device). ids, scored
    `[b, L]`; bayes `[b, L, V+1]` (all on the CPU)."""
    probs = torch.log_softmax(logits.float(), dim=-1)[..., : bayes.shape[-1]].double().exp().cpu()
    scores = next_token_scores(probs, ids, bayes)
    where = scored[:, :-1]  # [b, L-1]: the prediction at i, of token i + 1
    return torch.stack([torch.where(where, scores[m], 0.0).sum(1) for m in METRICS], dim=1)


def _summary(values: np.ndarray, draws: np.ndarray, level: float) -> dict:
    """`{"value", "ci_low", "ci_high"}`, lists over the M columns of `values [M]` and `draws
    [resamples, M]`."""
    bounds = [interval(draws[:, column], level) for column in range(draws.shape[1])]
    return {
        "value": [float(value) for value in values],
        "ci_low": [low for low, _ in bounds],
        "ci_high": [high for _, high in bounds],
    }


def rotary_knockout(
    model,
    input_ids,
    scored,
    bayes_probs,
    *,
    batch_size: int = 64,
    num_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    progress: bool = True,
) -> dict:
    """The damage of switching rotary off in each layer (module docstring), JSON-ready.

    input_ids `[B, L]`; scored `[B, L]` bool, True at the positions i whose prediction of token
    i + 1 counts (`scored_test_positions`: the test sequence); bayes_probs `[B, L, V+1]`, the exact
    Bayes-optimal next-token distributions of these rows (`hmm_datasets.predictors`). One intact
    forward pass and, per layer, that layer and those above it (`knocked_out_logits`), in eval
    mode under no_grad on the model's device (the mode it was in is restored). Returns `layers`
    (1..L), `relative_depth` (l / L), `num_rows`, `num_tokens` (scored), `intact` (`{"nll",
    "kl"}`: the intact model's means, nats/token), and `delta_nll`, `delta_kl` (knocked out -
    intact per layer); every number as `{"value", "ci_low", "ci_high"}` (lists per layer), the
    interval a `level` bootstrap over rows (`num_resamples` resamples of `seed`, shared by every
    number).
    """
    check_positions_in_attention(model, "the rotary knock-out")
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long).cpu()
    mask = torch.as_tensor(np.asarray(scored), dtype=torch.bool).cpu()
    bayes = torch.as_tensor(bayes_probs).double().cpu()
    _check_inputs(model, ids, mask, bayes)
    runs = knockout_sums(model, ids, mask, bayes, batch_size, progress)
    intact = runs[:, 0]
    deltas = runs[:, 1:] - intact[:, None, :]  # [B, layers, 2]
    # columns: intact nll, intact kl, then delta nll per layer, then delta kl per layer
    sums = np.concatenate([intact, deltas[..., 0], deltas[..., 1]], axis=1)
    tokens = mask[:, :-1].sum(1).double().numpy()[:, None].repeat(sums.shape[1], axis=1)
    means = sums.sum(0) / tokens[:, 0].sum()
    # a ratio of sums on resampled rows: the per-token mean of each column, every column paired
    draws = bootstrap_accuracies(sums, tokens, num_resamples, seed)
    summary = _summary(means, draws, level)
    layers = list(range(1, model.config.num_hidden_layers + 1))
    count = len(layers)

    def columns(which) -> dict:
        return {key: values[which] for key, values in summary.items()}

    return {
        "layers": layers,
        "relative_depth": [layer / count for layer in layers],
        "num_rows": int(ids.shape[0]),
        "num_tokens": int(tokens[:, 0].sum()),
        "intact": {"nll": columns(0), "kl": columns(1)},
        "delta_nll": columns(slice(2, 2 + count)),
        "delta_kl": columns(slice(2 + count, None)),
    }


def knockout_sums(
    model, ids: torch.Tensor, mask: torch.Tensor, bayes: torch.Tensor, batch_size: int, progress: bool
) -> np.ndarray:
    """`[B, 1 + layers, 2]`: each row's summed NLL and KL(Bayes || model) over its scored tokens,
    intact, then with rotary off from layer 1..L on (`knocked_out_logits`), in eval mode under
    no_grad on the model's device (the mode it was in is restored)."""
    was_training = model.training
    model.eval()
    device, batches = model_device(model), range(0, ids.shape[0], batch_size)
    runs = []  # per batch, [b, 1 + layers, 2]
    bar = tqdm(
        total=len(batches) * (1 + model.config.num_hidden_layers),
        desc="rotary knockout",
        disable=not progress,
    )
    try:
        for start in batches:
            rows = slice(start, start + batch_size)
            sums = []
            for logits in knocked_out_logits(model, ids[rows].to(device)):
                sums.append(per_row_sums(logits, ids[rows], mask[rows], bayes[rows]))
                bar.update()
            runs.append(torch.stack(sums, dim=1))
    finally:
        model.train(was_training)
        bar.close()
    return torch.cat(runs).numpy()
