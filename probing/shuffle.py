"""The shuffle test of Figure 2: how much do attention logits depend on where demonstrations sit?

Each row's demonstrations are put in a random new order (a derangement: no demonstration
keeps its place; a demonstration moves whole, with its delimiter). Both orders go through
the model, once each. For a test-sequence query q and a demonstration token k (any position
before the test sequence, delimiters included), let a(q, k) be the pre-softmax logit in the
original row and a'(q, k) the logit from the same query to the same token, wherever it
moved. With every logit matrix centred over keys per query (softmax ignores a constant per
query), the statistics of a (row, layer, head), over test queries x demonstration keys, are

    total         = ||a' - a||_F / ||a||_F           (the paper's statistic)
    position_only = ||a_pos - a||_F / ||a||_F
    content       = ||a' - a_pos||_F / ||a||_F

where a_pos are the logits of the original run's pre-rotary queries and keys (the output of
each layer's `qkv_proj`) with the keys rotated to the positions the shuffle gives them (the
queries do not move: the test sequence stays put). position_only is what rotary position
alone changes (exactly 0 without rotary embeddings); content is what the reordered context
changes in the queries and keys (0 at layer 1, which reads token embeddings only, up to the
rounding of `qkv_proj`). The two are not additive parts of total, but share its denominator
so that they compare. In position_only and content, a and a' are recomputed from the
captured queries and keys (equal to the model's logits up to rounding), so that each part
vanishes where its cause is absent; total uses the model's logits, as it always did.

Two statistics of the softmax attention complete the picture: `attention_tv`, the
total-variation distance between a test query's attention over the demonstration tokens
(renormalised to sum to one over them) in the original and the shuffled row, averaged over
test queries; and `demo_mass`, the attention mass (softmax over every key the causal mask
allows) the test queries put on demonstration tokens in the original row. A layer's
`weighted_attention_tv` is sum_h mass_h tv_h / sum_h mass_h: heads that hardly look at the
demonstrations count little.

Layers are compared by the mean over rows (and heads), with a bootstrap interval over rows;
the paper's "upper layers change less" is compared on the layers `upper_layers` names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from hmm_datasets import SampleLayout

from .architecture import attention_of, check_causal_lm, decoder_layers, rotary_embedding, shuffle_unavailable
from .capture import model_device, pre_rotary_queries_and_keys
from .layerwise import record
from .probes import interval, resample_counts
from .recording import check_recorded, recording_attention

# The parts of `shuffle_test`'s answer and the metric name of each in the records
# (`relative_logit_change` is the name the total always had: older JSON readers keep working).
PART_METRICS = {
    "total": "relative_logit_change",
    "position_only": "position_only_change",
    "content": "content_change",
    "attention_tv": "attention_tv",
    "demo_mass": "demo_mass",
}
WEIGHTED_TV_METRIC = "weighted_attention_tv"
PART_LABELS = {  # the parts the cards and `hmm-probe` show beside the total, as they name them
    PART_METRICS["position_only"]: "position-only part",
    PART_METRICS["content"]: "content part",
    WEIGHTED_TV_METRIC: "weighted attention TV",
}
# The paper's model has 16 layers; its Figure 2 finds layers 9..15 change less than 1..8.
UPPER_DEPTHS = (8 / 16, 15 / 16)


def derangements(num_rows: int, num_demos: int, seed: int) -> np.ndarray:
    """`[B, N]`: per row, the original demonstration placed in each slot; no fixed points."""
    if num_demos < 2:
        raise ValueError(
            f"the shuffle test needs at least 2 demonstrations per row (the corpus has {num_demos})."
        )
    rng = np.random.default_rng(seed)
    orders = np.empty((num_rows, num_demos), dtype=np.int64)
    for row in range(num_rows):
        order = rng.permutation(num_demos)
        while np.any(order == np.arange(num_demos)):
            order = rng.permutation(num_demos)
        orders[row] = order
    return orders


def demo_positions(layout: SampleLayout, orders: np.ndarray) -> np.ndarray:
    """`[B, N*(n+1)]`: where each demonstration-segment position of the original row ends up."""
    span = layout.demo_length + 1
    slot_of = np.argsort(orders, axis=1)  # slot_of[b, d]: the slot demonstration d moved to
    original = np.arange(layout.num_demos * span)
    demo, offset = original // span, original % span
    return slot_of[:, demo] * span + offset


def shuffle_demos(input_ids: np.ndarray, layout: SampleLayout, orders: np.ndarray) -> np.ndarray:
    """Rows with their demonstrations in the given orders (the test sequence stays put)."""
    ids = np.asarray(input_ids)
    span = layout.demo_length + 1
    demos = ids[:, : layout.test_start].reshape(ids.shape[0], layout.num_demos, span)
    moved = np.take_along_axis(demos, orders[:, :, None], axis=1).reshape(ids.shape[0], -1)
    return np.concatenate([moved, ids[:, layout.test_start :]], axis=1)


def _centred(logits: torch.Tensor) -> torch.Tensor:
    return logits - logits.mean(-1, keepdim=True)


def relative_logit_change(original: torch.Tensor, shuffled: torch.Tensor) -> torch.Tensor:
    """`[...]`: ||centre(shuffled) - centre(original)||_F / ||centre(original)||_F over the
    last two dimensions (queries x keys), centring each query's logits over the keys."""
    a = _centred(original)
    change = torch.linalg.matrix_norm(_centred(shuffled) - a)
    return change / torch.linalg.matrix_norm(a).clamp_min(1e-12)


@dataclass
class AttentionGeometry:
    """How a layer turns pre-rotary queries and keys into logits: rotate each by its position's
    angles (the model's own `apply_rotary_pos_emb`, with cos/sin `[max_positions, head_dim]`
    from its rotary embedding; None without rotary), then `q.k * scaling`."""

    scaling: float
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    apply_rotary: Callable | None = None

    def rotate(
        self, first: torch.Tensor, second: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two sets of vectors `[..., B, heads, n, d]` rotated to `positions [B, n]` (as they are
        without rotary embeddings)."""
        if self.cos is None:
            return first, second
        cos, sin = self.cos[positions], self.sin[positions]  # [B, n, d]: broadcast over heads
        return self.apply_rotary(first, second, cos, sin)

    def logits(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """`[..., Q, K]` from rotated queries `[..., Q, d]` and keys `[..., K, d]`."""
        return torch.matmul(queries, keys.transpose(-1, -2)) * self.scaling


def check_shuffle_available(model) -> None:
    """`ValueError` naming why the shuffle test cannot run on `model` (`shuffle_unavailable`)."""
    check_causal_lm(model)
    reason = shuffle_unavailable(model)
    if reason is not None:
        raise ValueError(f"the shuffle test cannot run: {reason}. The other analyses run.")


def attention_geometry(model, length: int) -> AttentionGeometry:
    """The `AttentionGeometry` of a causal LM for positions `0..length-1` (float32, on the
    model's device): its attention scaling, and its rotary embedding's cos/sin, if it has one."""
    check_shuffle_available(model)
    attention = attention_of(decoder_layers(model)[0], model.config.model_type)
    rotary = rotary_embedding(model)
    if rotary is None:
        return AttentionGeometry(float(attention.scaling))
    apply_rotary = getattr(sys.modules[type(attention).__module__], "apply_rotary_pos_emb", None)
    if apply_rotary is None:
        raise ValueError(
            f"{type(attention).__module__} has no apply_rotary_pos_emb: the shuffle test re-rotates keys "
            "with the model's own rotary function; load the checkpoint with the HMMRoFormer code it was saved with."
        )
    device = model_device(model)
    probe = torch.zeros(1, dtype=torch.float32, device=device)
    cos, sin = rotary(probe, torch.arange(length, device=device)[None])
    return AttentionGeometry(float(attention.scaling), cos[0].float(), sin[0].float(), apply_rotary)


@dataclass
class _Run:
    """One forward pass's view of test queries x demonstration keys, per layer (stacked first)."""

    logits: torch.Tensor  # [layers, b, heads, Q, K]: the model's pre-softmax logits
    queries: torch.Tensor  # [layers, b, heads, Q, d]: pre-rotary queries at the test positions
    keys: torch.Tensor  # [layers, b, heads, K, d]: pre-rotary keys at the followed positions
    demo_mass: torch.Tensor | None  # [layers, b, heads]: test queries' mean softmax mass on demos


@torch.no_grad()
def _attention_run(
    model, ids: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, test_start: int | None = None
) -> _Run:
    """One forward of rows `ids [b, L]`; `queries [Q]` positions, `keys [b, K]` positions per row;
    the attention mass on the first `test_start` positions when asked for (else None)."""
    with pre_rotary_queries_and_keys(model) as pre_rotary, recording_attention(model) as records:
        model(input_ids=ids)
    check_recorded(records, len(pre_rotary), model.config.model_type)
    logits, query_vectors, key_vectors, mass = [], [], [], []
    for (query, key), recorded in zip(pre_rotary, records):
        rows = recorded.logits[:, :, queries, :].float()  # [b, h, Q, L]; masked keys at the dtype's minimum
        heads, dim = key.shape[1], key.shape[-1]
        logits.append(torch.gather(rows, 3, keys[:, None, None, :].expand(-1, heads, rows.shape[2], -1)))
        if test_start is not None:
            mass.append(torch.softmax(rows, -1)[..., :test_start].sum(-1).mean(-1))
        query_vectors.append(query[:, :, queries].float())
        key_vectors.append(torch.gather(key, 2, keys[:, None, :, None].expand(-1, heads, -1, dim)).float())
    stacked = [torch.stack(values) for values in (logits, query_vectors, key_vectors)]
    return _Run(*stacked, torch.stack(mass) if mass else None)


def _decompose(
    before: _Run,
    after: _Run,
    geometry: AttentionGeometry,
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    moved_positions: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """`[layers, b, heads]` per part (module docstring) for one batch: `before` the original rows
    with keys at `key_positions [b, K]`, `after` the shuffled rows with the same tokens' keys at
    `moved_positions [b, K]`; queries at `query_positions [b, Q]` in both."""
    denominator = torch.linalg.matrix_norm(_centred(before.logits)).clamp_min(1e-12)
    queries, shuffled_queries = geometry.rotate(before.queries, after.queries, query_positions)
    keys_moved, shuffled_keys = geometry.rotate(before.keys, after.keys, moved_positions)
    keys = geometry.rotate(before.keys, before.keys, key_positions)[0]
    original = geometry.logits(queries, keys)
    moved = geometry.logits(queries, keys_moved)
    shuffled = geometry.logits(shuffled_queries, shuffled_keys)

    def change(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_norm(_centred(new) - _centred(old)) / denominator

    weights = torch.softmax(before.logits, -1), torch.softmax(after.logits, -1)
    return {
        "total": relative_logit_change(before.logits, after.logits),
        "position_only": change(moved, original),
        "content": change(shuffled, moved),
        "attention_tv": 0.5 * (weights[1] - weights[0]).abs().sum(-1).mean(-1),
        "demo_mass": before.demo_mass,
    }


def shuffle_test(
    model,
    input_ids: np.ndarray,
    layout: SampleLayout,
    *,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """`{part: [B, layers, heads]}` float32 for the parts `total`, `position_only`, `content`,
    `attention_tv` and `demo_mass` of each row's shuffle test (module docstring); one forward
    pass of each order per batch of `batch_size` rows."""
    check_shuffle_available(model)
    ids = np.asarray(input_ids)
    orders = derangements(ids.shape[0], layout.num_demos, seed)
    shuffled = shuffle_demos(ids, layout, orders)
    device = model_device(model)
    geometry = attention_geometry(model, layout.sequence_length)
    queries = torch.arange(layout.test_start, layout.sequence_length, device=device)
    keys = torch.arange(layout.test_start, device=device).expand(ids.shape[0], -1)
    moved_keys = torch.as_tensor(demo_positions(layout, orders), device=device)
    ids, shuffled = (torch.as_tensor(rows, dtype=torch.long, device=device) for rows in (ids, shuffled))
    parts: dict[str, list] = {part: [] for part in PART_METRICS}
    starts = range(0, ids.shape[0], batch_size)
    for start in tqdm(starts, desc="shuffle test", disable=not progress):
        rows = slice(start, start + batch_size)
        before = _attention_run(model, ids[rows], queries, keys[rows], layout.test_start)
        after = _attention_run(model, shuffled[rows], queries, moved_keys[rows])
        query_positions = queries.expand(before.logits.shape[1], -1)
        batch = _decompose(before, after, geometry, query_positions, keys[rows], moved_keys[rows])
        for part, values in batch.items():
            parts[part].append(values.permute(1, 0, 2).cpu())  # [b, layers, heads]
    return {part: torch.cat(values).numpy() for part, values in parts.items()}


# ---- layers the paper compares ----------------------------------------------------------
def _depth_split(num_layers: int) -> tuple[list[int], list[int], str]:
    """(upper, lower, the rule that chose upper) for layers numbered 1..num_layers."""
    if not isinstance(num_layers, int | np.integer) or num_layers < 2:
        raise ValueError(
            f"num_layers={num_layers!r}: comparing upper with lower layers needs an integer number of "
            "attention layers >= 2."
        )
    low, high = UPPER_DEPTHS
    depth = {layer: layer / num_layers for layer in range(1, num_layers + 1)}
    lower = [layer for layer, d in depth.items() if d <= low]
    upper = [layer for layer, d in depth.items() if low < d <= high]
    rule = "relative depth l/L in (8/16, 15/16]"
    if not upper:
        upper = [layer for layer, d in depth.items() if d > low]
        rule = "relative depth l/L > 1/2 (no layer lies in (8/16, 15/16])"
    return upper, lower, rule


def upper_layers(num_layers: int) -> list[int]:
    """The layers (numbered 1..L) whose attention the paper finds changes less under shuffling,
    by relative depth: l with 8/16 < l/L <= 15/16, i.e. 9..15 of the paper's 16 layers (its
    Figure 2); 5, 6, 7 of 8; 3 of 4; 2 of 3. Where no layer lies in that range (L = 2: 2/2 = 1 >
    15/16), the layers with l/L > 1/2 (the upper half, the last layer included): 2 of 2.
    `lower_layers` gives the other side (l/L <= 1/2); the last layer of L >= 3 is in neither,
    as layer 16 is in neither in the paper. Raises `ValueError` for L < 2."""
    return _depth_split(num_layers)[0]


def lower_layers(num_layers: int) -> list[int]:
    """The layers l (numbered 1..L) with l/L <= 1/2: 1..8 of 16, 1..4 of 8, 1, 2 of 4, 1 of 2 and 3."""
    return _depth_split(num_layers)[1]


# ---- records and patterns ------------------------------------------------------------------
def _check_changes(changes) -> tuple[int, int, int]:
    if not isinstance(changes, dict) or set(PART_METRICS) - set(changes):
        raise ValueError(
            f"expected the dict shuffle_test returns, with parts {sorted(PART_METRICS)}; got "
            f"{sorted(changes) if isinstance(changes, dict) else type(changes).__name__}: rerun shuffle_test."
        )
    shapes = {part: np.shape(changes[part]) for part in PART_METRICS}
    if len(set(shapes.values())) != 1 or len(shapes["total"]) != 3:
        raise ValueError(f"every part must be one [rows, layers, heads] array; got shapes {shapes}.")
    return shapes["total"]


def weighted_attention_tv(changes: dict[str, np.ndarray]) -> np.ndarray:
    """`[B, layers]`: sum_h demo_mass_h * attention_tv_h / sum_h demo_mass_h per row and layer
    (0 where no head puts any mass on the demonstrations)."""
    mass = np.asarray(changes["demo_mass"], dtype=np.float64)
    weighted = (mass * np.asarray(changes["attention_tv"], dtype=np.float64)).sum(-1)
    return weighted / np.maximum(mass.sum(-1), 1e-12)


def bootstrap_means(values: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    """`[num_resamples, M]`: column means of `values [rows, M]` on row resamples (the same rows
    `probes.bootstrap_accuracies` draws with this seed; every column on the same resamples)."""
    values = np.asarray(values, dtype=np.float64)
    return resample_counts(values.shape[0], num_resamples, seed) @ values / values.shape[0]


def shuffle_records(changes: dict[str, np.ndarray], num_resamples: int, seed: int) -> list[dict]:
    """Per part (metric names in `PART_METRICS`), per layer (mean over heads) and per (layer,
    head): mean over rows with a bootstrap interval over rows; and per layer the
    `weighted_attention_tv`. Target "shuffle"; layers numbered 1..num_hidden_layers (the
    attention of layer i). Every column is bootstrapped on the same row resamples."""
    num_rows, num_layers, num_heads = _check_changes(changes)
    out = []
    for part, metric in PART_METRICS.items():
        values = np.asarray(changes[part], dtype=np.float64)
        # [rows, layers * (1 + heads)]: layer means first, then every (layer, head).
        columns = np.concatenate([values.mean(-1), values.reshape(num_rows, -1)], axis=1)
        draws, means = bootstrap_means(columns, num_resamples, seed), columns.mean(0)
        for layer in range(num_layers):
            out.append(record("shuffle", layer + 1, metric, means[layer], draws[:, layer]))
            for head in range(num_heads):
                column = num_layers + layer * num_heads + head
                out.append(record("shuffle", layer + 1, metric, means[column], draws[:, column], head=head))
    weighted = weighted_attention_tv(changes)
    draws, means = bootstrap_means(weighted, num_resamples, seed), weighted.mean(0)
    out += [
        record("shuffle", layer + 1, WEIGHTED_TV_METRIC, means[layer], draws[:, layer])
        for layer in range(num_layers)
    ]
    return out


def _upper_minus_lower(
    per_layer: np.ndarray, upper: list[int], lower: list[int], num_resamples: int, seed: int
) -> dict:
    """Upper minus lower layers' mean of `per_layer [rows, layers]`, with a bootstrap interval."""
    difference = per_layer[:, np.array(upper) - 1].mean(1) - per_layer[:, np.array(lower) - 1].mean(1)
    low, high = interval(bootstrap_means(difference[:, None], num_resamples, seed)[:, 0])
    return {
        "upper_minus_lower": float(difference.mean()),
        "upper_minus_lower_ci": [low, high],
        "per_layer_mean": [float(value) for value in per_layer.mean(0)],
    }


def shuffle_patterns(changes: dict[str, np.ndarray], num_resamples: int, seed: int) -> dict:
    """Figure 2 as numbers: per-layer means, and upper (`upper_layers`) minus lower layers' mean.

    On the total (the paper's statistic, mean over heads): upper minus lower layers' mean per
    row, with a bootstrap interval over rows. `by_part` repeats it for `total`, `position_only`,
    `content` and `weighted_attention_tv`, on the same row resamples. No verdict: the claims are
    decided by the study's rule (`modeling_hmmroformer.experiments.analyses.claims`).
    """
    _, num_layers, _ = _check_changes(changes)
    upper, lower, rule = _depth_split(num_layers)
    per_part = {
        "total": changes["total"].mean(-1),
        "position_only": changes["position_only"].mean(-1),
        "content": changes["content"].mean(-1),
        WEIGHTED_TV_METRIC: weighted_attention_tv(changes),
    }
    by_part = {
        part: _upper_minus_lower(np.asarray(values, dtype=np.float64), upper, lower, num_resamples, seed)
        for part, values in per_part.items()
    }
    total, mean = by_part["total"], np.array(by_part["total"]["per_layer_mean"])
    return {
        "lower_layers": lower,
        "upper_layers": upper,
        "upper_layers_rule": rule,
        "relative_depth": [layer / num_layers for layer in range(1, num_layers + 1)],
        "upper_minus_lower": total["upper_minus_lower"],
        "upper_minus_lower_ci": total["upper_minus_lower_ci"],
        "layer_of_largest_change": int(np.argmax(mean)) + 1,
        "layer_of_smallest_change": int(np.argmin(mean)) + 1,
        "by_part": by_part,
    }
