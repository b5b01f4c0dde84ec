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
accuracy, the share of those positions whose window reaches the row start (there both
variants are exact) and the share whose window reaches the start of the predicted token's
segment (there the oracle is exact: a delimiter resets the HMM), then fits
log TV = log C - rate L (`modeling_hmmroformer.experiments.figures.model.plot_lemma1` draws it).

**Lemma 1 as the paper states it** is about one HMM with its task known, and its rate depends on
that HMM's observability coefficient (Assumption 2, `hmm_datasets.observability`).
`oracle_per_task` measures it per task on the test sequence of each row: at the positions that
predict test tokens 1..T-1, the oracle's TV per memory L (exactly 0 where the window reaches the
test sequence's first token: a delimiter resets the HMM), its mean per task and L, the fitted
rate per task, and the task's observability coefficient. `low_rank_lemma1` measures the same on
the low-rank variant of a corpus config (Assumption 1: same config and seed, `transition_rank`
set; the emissions, hence the coefficients, are the same draws).

Shapes: B rows, L positions, V observation tokens, M memories, K tasks, T test tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
from .cache import cached
from .config import HMMMixtureConfig
from .observability import observability_coefficient
from .params import HMMParams, sample_hmm_params
from .sampler import SamplingTables, generate_rows
from .scoring import next_token_scores
from .windows import check_memories, position_in_segment

BOOTSTRAP_RESAMPLES = 200
FIT_FLOOR = 1e-12  # TV at or below this is exact agreement up to rounding: left out of the fit
LOW_RANK = 2  # transition rank of the low-rank variant `low_rank_lemma1` measures by default


def scored_positions(input_ids: torch.Tensor, delimiter: int) -> torch.Tensor:
    """`[B, L-1]` bool: the positions i whose next token i + 1 is an observation."""
    return input_ids[:, 1:] != delimiter


def share_reaching_row_start(scored: torch.Tensor, memory: int) -> float:
    """Share of the `scored [B, L-1]` positions i < memory, whose window of `memory` tokens is the whole prefix."""
    return masked_mean((torch.arange(scored.shape[1]) < memory).expand_as(scored), scored)


def share_reaching_segment_start(
    input_ids: torch.Tensor, scored: torch.Tensor, delimiter: int, memory: int
) -> float:
    """Share of the `scored [B, L-1]` positions i whose window of `memory` tokens reaches the first
    token of the segment of token i + 1 (its offset is at most `memory`): there the oracle is exact."""
    reaches = position_in_segment(input_ids, delimiter)[:, 1:] <= memory
    return masked_mean(reaches, scored)


def first_test_token(input_ids: torch.Tensor, delimiter: int) -> int:
    """Index of the first test token of rows `[B, L]`: one past the last delimiter (0 with none),
    the same in every row of a corpus; `ValueError` otherwise."""
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    starts = torch.where(input_ids == delimiter, positions + 1, 0).amax(dim=1).unique()
    if len(starts) > 1:
        raise ValueError(
            f"the rows' test sequences start at different positions {starts.tolist()}: give rows of "
            "one corpus layout (demo_1 <delim> ... demo_N <delim> test, the same N and lengths)."
        )
    return int(starts[0]) if len(starts) else 0


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


def memory_bayes_probs(
    params: HMMParams, input_ids, memories: Sequence[int], meanwhile: Callable[[], object] | None = None
) -> dict[int, torch.Tensor]:
    """`{L: [B, L, V+1]}` float64 on the CPU: the memory-L Bayes-optimal predictor on the rows
    (`BayesOptimalPredictor.truncated_by_memory`), computed once per process for the same
    parameters, rows and memory (`hmm_datasets.cache`). Lemma 1 and the memory of every model of
    a study read the same rows, and this is the costliest part of each. `meanwhile()` runs where
    another process of the study is computing one of them now, before waiting for it."""
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    memories = [int(memory) for memory in memories]
    computed = {}

    def compute(memory: int) -> torch.Tensor:
        if not computed:  # one run serves every memory asked for
            predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
            computed.update(predictor.truncated_by_memory(ids, memories))
        return computed[memory]

    return {
        memory: cached(
            f"bayes-memory-{memory}", params, ids, lambda m=memory: compute(m), meanwhile=meanwhile
        )
        for memory in memories
    }


def lemma1(params: HMMParams, input_ids, task_ids, memories: Sequence[int]) -> dict:
    """Lemma 1 on rows `input_ids [B, L]` of tasks `task_ids [B]` (JSON-ready; module docstring).

    Returns `memories`, `num_rows`, `num_positions` (scored), `share_reaching_row_start` (per
    memory: scored positions i < L, whose window is the whole prefix), `share_reaching_segment_start`
    (per memory: scored positions whose window reaches the first token of the predicted token's
    segment), for `mixture` and `oracle`: per memory `tv`, `tv_ci_low`, `tv_ci_high`,
    `agreement`, `accuracy`, and once `full_accuracy` and `fit` (`rate`, `C`, `r2`, `memories`
    fitted), and `oracle_per_task` (see `oracle_per_task`). Runs in float64 on the CPU.
    """
    memories = check_memories(memories)
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    full = predictor.next_token_probs(input_ids)  # validates the ids
    oracle = predictor.oracle_next_token_probs(input_ids, task_ids)  # validates the tasks
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    tasks = (
        torch.as_tensor(task_ids if torch.is_tensor(task_ids) else np.asarray(task_ids)).long().reshape(-1)
    )
    scored = scored_positions(ids, predictor.delimiter)
    oracle_windows = predictor.truncated_oracle_by_memory(ids, tasks, memories)
    return {
        "memories": memories,
        "num_rows": int(ids.shape[0]),
        "num_positions": int(scored.sum()),
        "share_reaching_row_start": [share_reaching_row_start(scored, m) for m in memories],
        "share_reaching_segment_start": [
            share_reaching_segment_start(ids, scored, predictor.delimiter, m) for m in memories
        ],
        "mixture": decay_curve(memory_bayes_probs(params, ids, memories), full, ids, scored, memories),
        "oracle": decay_curve(oracle_windows, oracle, ids, scored, memories),
        "oracle_per_task": oracle_per_task(
            params, oracle_windows, oracle, first_test_token(ids, predictor.delimiter), tasks, memories
        ),
    }


# ---- Lemma 1 as stated: one HMM, its task known ----------------------------------------------
def oracle_tv_on_test(
    truncated: dict[int, torch.Tensor], full: torch.Tensor, start: int, memories
) -> torch.Tensor:
    """`[M, B, T-1]`: TV of the memory-L oracle `truncated[L] [B, L_row, V+1]` to the full oracle
    `full` at the positions start..L_row-2, which predict test tokens 1..T-1 (`start`: the first
    test token's index; 0 for rows that are test sequences alone).

    Where the window reaches the first test token (position offset p < L) the oracle is exact, as
    the delimiter resets the HMM, and the TV is exactly 0: verified, not set
    (tests/hmm_datasets/test_memory.py). On test sequences alone `truncated_oracle_by_memory`
    returns the full oracle itself there; on whole rows a window that opens at or before the
    first test token restarts from the same initial distribution with the same arithmetic."""
    return torch.stack([total_variation(truncated[memory], full)[:, start:] for memory in memories])


def tv_by_task(tv: torch.Tensor, task_ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(tasks [K'], rows [K'], mean [K', M])`: the tasks present in `task_ids [B]`, their number of
    rows, and the mean of `tv [M, B, P]` over their rows and positions."""
    tasks, inverse, rows = torch.unique(task_ids, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(tasks), tv.shape[0], dtype=torch.float64).index_add_(0, inverse, tv.sum(2).T)
    mean = sums / (rows[:, None] * tv.shape[2])
    return tasks.numpy(), rows.numpy(), mean.numpy()


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation of `x` and `y` (ties share their mean rank); None with fewer
    than 3 pairs or a constant side."""

    def ranks(values: np.ndarray) -> np.ndarray:
        _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        ends = np.cumsum(counts)
        return ((ends - (counts - 1) / 2.0)[inverse]).astype(np.float64)

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 3:
        return None
    rx, ry = ranks(x) - ranks(x).mean(), ranks(y) - ranks(y).mean()
    spread = float(np.sqrt((rx**2).sum() * (ry**2).sum()))
    return float((rx * ry).sum() / spread) if spread > 0 else None


def oracle_per_task(
    params: HMMParams,
    truncated: dict[int, torch.Tensor],
    full: torch.Tensor,
    start: int,
    task_ids: torch.Tensor,
    memories: list[int],
) -> dict:
    """Lemma 1 per HMM with its task known, on the test sequences (JSON-ready; module docstring).

    `truncated[L]`, `full [B, L_row, V+1]`: the memory-L and the full oracle on rows whose test
    sequence starts at `start`, of tasks `task_ids [B]`. Returns `transition_rank` (None: full
    rank), `num_positions_per_row` (T - 1), `share_reaching_segment_start` (per memory: positions
    whose window reaches the first test token, where the TV is 0), `observability_exact` (False:
    the coefficients are bounds), `rate_observability_spearman` (over the tasks with a fitted
    rate), and `tasks`: per task present, `task_id`, `num_rows`, `tv` (mean per memory), `fit`
    (`fit_exponential_decay`), `observability` (the coefficient, or its lower bound) and
    `observability_upper`.
    """
    tv = oracle_tv_on_test(truncated, full, start, memories)
    positions = tv.shape[2]
    tasks, rows, mean = tv_by_task(tv, task_ids) if positions else ([], [], [])
    lower, upper = observability_coefficient(params.emissions)
    records = [
        {
            "task_id": int(task),
            "num_rows": int(count),
            "tv": [float(v) for v in curve],
            "fit": fit_exponential_decay(memories, curve),
            "observability": float(lower[task]),
            "observability_upper": float(upper[task]),
        }
        for task, count, curve in zip(tasks, rows, mean)
    ]
    fitted = [record for record in records if record["fit"]["rate"] is not None]
    return {
        "transition_rank": params.transition_rank,
        "num_positions_per_row": positions,
        "share_reaching_segment_start": [
            min(m, positions) / positions if positions else 1.0 for m in memories
        ],
        "observability_exact": bool(np.array_equal(lower, upper)),
        "rate_observability_spearman": rank_correlation(
            [record["observability"] for record in fitted], [record["fit"]["rate"] for record in fitted]
        ),
        "tasks": records,
    }


def check_low_rank(rank, num_states: int) -> int:
    """The rank of a low-rank variant: an integer in 1..S-1; `ValueError` naming the fix otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank < num_states:
        raise ValueError(
            f"rank={rank!r}: a low-rank variant needs an integer transition rank between 1 and "
            f"num_states - 1 = {num_states - 1} (e.g. {LOW_RANK})."
        )
    return int(rank)


def low_rank_lemma1(
    config: HMMMixtureConfig, memories: Sequence[int], num_rows: int, rank: int = LOW_RANK
) -> dict:
    """`oracle_per_task` on the first `num_rows` test rows of the low-rank variant of `config`: the
    same config and seed with `transition_rank=rank` (the paper's Assumption 1). Same seed, so
    the initial distributions and emissions are the same draws as `config`'s; only the
    transitions differ. The oracle runs on the test sequences alone (a delimiter resets the
    HMM and the task is known: the demonstrations say nothing). Returns `num_rows` and the
    fields of `oracle_per_task` (its `transition_rank` is `rank`)."""
    memories = check_memories(memories)
    rank = check_low_rank(rank, config.num_states)
    variant = config.replace(transition_rank=rank)
    if isinstance(num_rows, bool) or not isinstance(num_rows, (int, np.integer)) or num_rows < 1:
        raise ValueError(f"num_rows={num_rows!r} must be an integer >= 1 (test rows to measure).")
    if variant.num_test == 0:
        raise ValueError(f"config {config.name!r} has num_test=0: give a config with test rows.")
    params = sample_hmm_params(variant)
    rows = generate_rows(
        variant, SamplingTables.from_params(params), "test", 0, min(num_rows, variant.num_test)
    )
    ids = torch.as_tensor(rows["input_ids"]).long()
    tests = ids[:, first_test_token(ids, variant.delimiter) :]
    tasks = torch.as_tensor(rows["task_id"]).long()
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    full = predictor.oracle_next_token_probs(tests, tasks)
    truncated = predictor.truncated_oracle_by_memory(tests, tasks, memories)
    return {"num_rows": int(ids.shape[0]), **oracle_per_task(params, truncated, full, 0, tasks, memories)}
