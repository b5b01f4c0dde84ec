"""Lemma 1 of the paper, measured: a predictor with memory L approaches the full one exponentially in L.

The memory-L predictor conditions at position i on tokens i-L+1..i only (their positions
known; `BayesOptimalPredictor.truncated_by_memory`). Lemma 1 says its distance to
the full Bayes-optimal predictor decays like C exp(-rate L). Two variants are measured on
the same rows:

- `mixture`: the memory-L Bayes predictor against the full Bayes-optimal predictor (the
  window forgets both the hidden state and the evidence about the task);
- `oracle`: the memory-L oracle against the full oracle (both told the task: only the
  hidden state is forgotten).

`lemma1` scores every position whose next token is an observation (the last position has no
next token; delimiters are fixed by the layout), reports per L the mean total-variation
distance (with a bootstrap 95% interval over rows), top-1 agreement of the argmaxes, top-1
accuracy, and the share of those positions whose window already reaches the row start (there
the two predictors are equal), then fits log TV = log C - rate L (`modeling_hmmroformer.experiments.memory.plot_lemma1` draws it).

Shapes: B rows, L positions, V observation tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
from .cache import cached
from .params import HMMParams
from .scoring import next_token_scores

BOOTSTRAP_RESAMPLES = 200
FIT_FLOOR = 1e-12  # TV at or below this is exact agreement up to rounding: left out of the fit


def check_memories(memories: Sequence[int]) -> list[int]:
    """The memories as a list of ints; `ValueError` naming the bad value otherwise."""
    values = list(memories)
    if not values:
        raise ValueError("memories is empty: give at least one memory length L >= 1, e.g. (1, 2, 4, 8).")
    seen = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"memories contains {value!r}: every memory must be an integer >= 1 (tokens).")
        if int(value) in seen:
            raise ValueError(f"memories contains {value!r} twice: give each memory length once.")
        seen.add(int(value))
    return [int(value) for value in values]


def scored_positions(input_ids: torch.Tensor, delimiter: int) -> torch.Tensor:
    """`[B, L-1]` bool: the positions i whose next token i + 1 is an observation."""
    return input_ids[:, 1:] != delimiter


def share_reaching_row_start(scored: torch.Tensor, memory: int) -> float:
    """Share of the `scored [B, L-1]` positions i < memory, whose window of `memory` tokens is the whole prefix."""
    return masked_mean((torch.arange(scored.shape[1]) < memory).expand_as(scored), scored)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """`[B, L-1]`: TV between the predictions `p, q [B, L, V+1]` of tokens 1..L-1."""
    return 0.5 * (p[:, :-1].double() - q[:, :-1].double()).abs().sum(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of `values [B, P]` over the True entries of `mask [B, P]`."""
    return float(values[mask].double().mean()) if bool(mask.any()) else float("nan")


def bootstrap_interval(values: torch.Tensor, mask: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """95% interval of the masked mean of `values [B, P]`, resampling rows (`BOOTSTRAP_RESAMPLES` times)."""
    sums = torch.where(mask, values.double(), 0.0).sum(1).cpu().numpy()
    counts = mask.sum(1).cpu().numpy()
    picks = np.random.default_rng(seed).integers(0, len(sums), size=(BOOTSTRAP_RESAMPLES, len(sums)))
    means = sums[picks].sum(1) / np.maximum(counts[picks].sum(1), 1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def fit_exponential_decay(memories: Sequence[int], tv: Sequence[float]) -> dict:
    """Least squares of log TV on L over the L with TV > `FIT_FLOOR`: TV ~ C exp(-rate L).

    Returns `rate`, `C`, `r2` (None where fewer than two points, or R^2 of a flat line) and
    the `memories` fitted.
    """
    x = np.asarray(memories, dtype=np.float64)
    y = np.asarray(tv, dtype=np.float64)
    keep = np.isfinite(y) & (y > FIT_FLOOR)
    fitted = [int(m) for m in x[keep]]
    if keep.sum() < 2:
        return {"rate": None, "C": None, "r2": None, "memories": fitted}
    slope, intercept = np.polyfit(x[keep], np.log(y[keep]), 1)
    residual = np.log(y[keep]) - (intercept + slope * x[keep])
    spread = np.log(y[keep]) - np.log(y[keep]).mean()
    total = float((spread**2).sum())
    r2 = 1.0 - float((residual**2).sum()) / total if total > 0 else None
    return {"rate": float(-slope), "C": float(np.exp(intercept)), "r2": r2, "memories": fitted}


def compare_to_full(truncated, full, input_ids, scored) -> dict[str, float]:
    """One memory: mean TV (and its interval), argmax agreement and accuracy of `truncated`
    against `full` (both `[B, L, V+1]`) over the `scored [B, L-1]` positions."""
    tv = total_variation(truncated, full)
    scores = next_token_scores(truncated, input_ids, full)
    low, high = bootstrap_interval(tv, scored)
    return {
        "tv": masked_mean(tv, scored),
        "tv_ci_low": low,
        "tv_ci_high": high,
        "agreement": masked_mean(scores["agreement"], scored),
        "accuracy": masked_mean(scores["correct"], scored),
    }


def decay_curve(truncated: dict[int, torch.Tensor], full, input_ids, scored, memories: list[int]) -> dict:
    """Per-memory comparisons of `truncated[L] [B, L, V+1]` with `full`, as lists over
    `memories`, with the full predictor's accuracy and the exponential fit of the TV."""
    rows = [compare_to_full(truncated[memory], full, input_ids, scored) for memory in memories]
    curve = {key: [row[key] for row in rows] for key in rows[0]}
    curve["full_accuracy"] = masked_mean(next_token_scores(full, input_ids)["correct"], scored)
    curve["fit"] = fit_exponential_decay(memories, curve["tv"])
    return curve


def memory_bayes_probs(params: HMMParams, input_ids, memories: Sequence[int]) -> dict[int, torch.Tensor]:
    """`{L: [B, L, V+1]}` float64 on the CPU: the memory-L Bayes-optimal predictor on the rows
    (`BayesOptimalPredictor.truncated_by_memory`), computed once per process for the same
    parameters, rows and memory (`hmm_datasets.cache`). Lemma 1 and the memory of every model of
    a study read the same rows, and this is the costliest part of each."""
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    memories = [int(memory) for memory in memories]
    computed = {}

    def compute(memory: int) -> torch.Tensor:
        if not computed:  # one run serves every memory asked for
            predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
            computed.update(predictor.truncated_by_memory(ids, memories))
        return computed[memory]

    return {
        memory: cached(f"bayes-memory-{memory}", params, ids, lambda m=memory: compute(m))
        for memory in memories
    }


def lemma1(params: HMMParams, input_ids, task_ids, memories: Sequence[int]) -> dict:
    """Lemma 1 on rows `input_ids [B, L]` of tasks `task_ids [B]` (JSON-ready; module docstring).

    Returns `memories`, `num_rows`, `num_positions` (scored), `share_reaching_row_start` (per
    memory: scored positions i < L, whose window is the whole prefix), and for `mixture` and
    `oracle`: per memory `tv`, `tv_ci_low`, `tv_ci_high`, `agreement`, `accuracy`, and once
    `full_accuracy` and `fit` (`rate`, `C`, `r2`, `memories` fitted). Runs in float64 on the CPU.
    """
    memories = check_memories(memories)
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    full = predictor.next_token_probs(input_ids)  # validates the ids
    oracle = predictor.oracle_next_token_probs(input_ids, task_ids)  # validates the tasks
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    scored = scored_positions(ids, predictor.delimiter)
    return {
        "memories": memories,
        "num_rows": int(ids.shape[0]),
        "num_positions": int(scored.sum()),
        "share_reaching_row_start": [share_reaching_row_start(scored, m) for m in memories],
        "mixture": decay_curve(memory_bayes_probs(params, ids, memories), full, ids, scored, memories),
        "oracle": decay_curve(
            predictor.truncated_oracle_by_memory(ids, task_ids, memories),
            oracle,
            ids,
            scored,
            memories,
        ),
    }
