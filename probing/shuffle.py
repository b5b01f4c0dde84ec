"""The shuffle test of Figure 2: how much do attention logits depend on where demonstrations sit?

Each row's demonstrations are put in a random new order (a derangement: no demonstration
keeps its place; a demonstration moves whole, with its delimiter). Both orders go through
the model. For a test-sequence query q and a demonstration token k, let a(q, k) be the
pre-softmax logit in the original row and a'(q, k) the logit from the same query to the
same token, wherever it moved. With both matrices centred over keys per query (softmax
ignores a constant per query), the statistic of a (row, layer, head) is

    relative change = ||a' - a||_F / ||a||_F        (over test queries x demonstration keys)

0 when attention to the demonstrations does not depend on their positions. Layers are
compared by the mean over rows (and heads), with a bootstrap interval over rows.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from hmm_datasets import SampleLayout

from .capture import capture_attention_logits


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


def relative_logit_change(original: torch.Tensor, shuffled: torch.Tensor) -> torch.Tensor:
    """`[...]`: ||centre(shuffled) - centre(original)||_F / ||centre(original)||_F over the
    last two dimensions (queries x keys), centring each query's logits over the keys."""
    a = original - original.mean(-1, keepdim=True)
    b = shuffled - shuffled.mean(-1, keepdim=True)
    change = torch.linalg.matrix_norm(b - a)
    return change / torch.linalg.matrix_norm(a).clamp_min(1e-12)


def shuffle_test(
    model,
    input_ids: np.ndarray,
    layout: SampleLayout,
    *,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = True,
) -> np.ndarray:
    """`[B, layers, heads]`: the relative change of each row's attention logits (module docstring)."""
    ids = np.asarray(input_ids)
    orders = derangements(ids.shape[0], layout.num_demos, seed)
    shuffled = shuffle_demos(ids, layout, orders)
    queries = np.arange(layout.test_start, layout.sequence_length)
    keys = np.broadcast_to(np.arange(layout.test_start), (ids.shape[0], layout.test_start))
    moved_keys = demo_positions(layout, orders)
    changes = []
    starts = range(0, ids.shape[0], batch_size)
    for start in tqdm(starts, desc="shuffle test", disable=not progress):
        rows = slice(start, start + batch_size)
        before = capture_attention_logits(
            model, ids[rows], queries, keys[rows], batch_size=batch_size, progress=False
        )
        after = capture_attention_logits(
            model, shuffled[rows], queries, moved_keys[rows], batch_size=batch_size, progress=False
        )
        changes.append(relative_logit_change(before, after).permute(1, 0, 2))  # [b, layers, heads]
    return torch.cat(changes).numpy()
