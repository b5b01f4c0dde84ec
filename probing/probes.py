"""Linear probes: multinomial logistic regression in torch, majority baselines, bootstrap intervals.

A probe reads one layer's activations at a set of positions and predicts a label. It is
fitted on the probe-train rows and scored on the probe-test rows (disjoint samples); its
accuracy carries a bootstrap confidence interval over test rows (positions of one row are
not independent, so rows are what is resampled).

Baselines: the majority label (chance) and the majority label of each current token (what
a probe that only sees the token knows). The Hewitt-Liang control task (random labels per
token type) is gone: a linear probe memorises any token -> label map from the embeddings, so
its accuracy was 0.994-1.000 at every layer of the `small` model, a constant that carried no
layer information.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class ProbeSettings:
    """How a probe is fitted: L2 penalty on the weights, L-BFGS iterations, device."""

    l2: float = 1e-3
    max_iter: int = 100
    device: str = "cpu"


def standardize(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero mean, unit variance per feature, with the train statistics."""
    mean = train.mean(0, keepdim=True)
    std = train.std(0, keepdim=True).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def fit_linear_probe(features: torch.Tensor, labels: torch.Tensor, num_classes: int, settings: ProbeSettings):
    """A `nn.Linear` fitted by L-BFGS to minimise cross-entropy + l2/2 |W|^2 (full batch)."""
    torch.manual_seed(0)
    probe = nn.Linear(features.shape[1], num_classes).to(features.device)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    optimizer = torch.optim.LBFGS(
        probe.parameters(), lr=1.0, max_iter=settings.max_iter, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(probe(features), labels)
        loss = loss + 0.5 * settings.l2 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return probe.requires_grad_(False)


def probe_hits(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    test_y: np.ndarray,
    settings: ProbeSettings,
) -> np.ndarray:
    """`[N_test]` bool: which test positions a probe fitted on the train positions gets right.

    Labels are any integers; a test label never seen in training counts as wrong.
    """
    classes, train_classes = np.unique(train_y, return_inverse=True)
    if classes.size == 1:
        return test_y == classes[0]
    device = torch.device(settings.device)
    x_train, x_test = standardize(train_x.to(device).float(), test_x.to(device).float())
    target = torch.as_tensor(train_classes, device=device)
    probe = fit_linear_probe(x_train, target, classes.size, settings)
    predicted = classes[probe(x_test).argmax(-1).cpu().numpy()]
    return predicted == test_y


def token_majority_hits(
    train_tokens: np.ndarray, train_y: np.ndarray, test_tokens: np.ndarray, test_y: np.ndarray
) -> np.ndarray:
    """`[N_test]` bool: the most frequent train label of each test position's token (the
    overall majority for a token never seen in training): what the token alone tells."""
    classes, labels = np.unique(train_y, return_inverse=True)
    tokens, token_index = np.unique(train_tokens, return_inverse=True)
    counts = np.zeros((tokens.size, classes.size), dtype=np.int64)
    np.add.at(counts, (token_index, labels), 1)
    overall = classes[np.argmax(counts.sum(0))]
    answer = np.full(test_y.shape, overall)
    seen = np.isin(test_tokens, tokens)
    answer[seen] = classes[np.argmax(counts[np.searchsorted(tokens, test_tokens[seen])], axis=1)]
    return answer == test_y


def majority_hits(train_y: np.ndarray, test_y: np.ndarray) -> np.ndarray:
    """`[N_test]` bool: the chance baseline, always answering the most frequent train label."""
    values, counts = np.unique(train_y, return_counts=True)
    return test_y == values[np.argmax(counts)]


def per_row_counts(hits: np.ndarray, rows: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Correct answers and scored positions per row, `[num_rows]` each."""
    correct = np.bincount(rows, weights=hits.astype(np.float64), minlength=num_rows)
    total = np.bincount(rows, minlength=num_rows).astype(np.float64)
    return correct, total


def bootstrap_accuracies(correct: np.ndarray, total: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    """`[num_resamples, M]`: accuracies of M scores `correct, total [R, M]` on row resamples
    (the same resampled rows for every score, so differences of scores are paired)."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, correct.shape[0], size=(num_resamples, correct.shape[0]))
    return correct[index].sum(1) / np.maximum(total[index].sum(1), 1.0)


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)
