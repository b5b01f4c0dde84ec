"""How long a memory does the trained model's prediction match? Lemma 1, for the model.

The model reads each row whole, as in training, and is compared at every position i whose
next token is an observation with the memory-L Bayes predictor (`hmm_datasets.memory`), which
conditions on tokens i-L+1..i only. Per L, over those positions:

- `tv_full_vs_bayes_memory`, `agreement_full_vs_bayes_memory`: the model against the memory-L
  Bayes predictor.

`full_vs_bayes` and `full_vs_oracle` compare the model with the full Bayes-optimal predictor
and the oracle once. Distances are total variation over the V + 1 tokens.

`memory_equivalent` is the model's memory: the shortest L whose memory-L Bayes predictor is as
close to the full Bayes predictor as the model is, TV(memory-L Bayes, full) <= TV(model, full),
both mean TVs over the same positions: "the model predicts as well as a Bayes predictor that
remembers L tokens". The grid of memories is doubled past its top until such an L is found,
while the doubled memory is shorter than the row (a window as long as the row is the full
predictor); between the last memory above and the first at or below the model, integer memories
are bisected, so `memory` is the integer L (TV(memory-L, full) falls with L). A study's models
side by side share these predictors; one whose next memory another is computing computes the one
it will likely need after that meanwhile (`likely_next_memory`), which changes no number.
`interpolated` places the model between L - 1 and L with log TV linear in L (Lemma 1's
exponential decay), and `interval` is its 95% bootstrap interval over rows on the memories
evaluated. None of both where even the longest memory searched is further from the full
predictor than the model.

The model itself is not cut to its last L tokens: a window that starts inside a row is an input
it never saw in training (rows start at a segment start, at position 0), so what a cut model
predicts says more about that shift than about the context the trained model uses.

Shapes: B rows, L positions, V observation tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hmm_datasets import BayesOptimalPredictor, HMMParams
from hmm_datasets.corpus import CorpusRows
from hmm_datasets.memory import (
    BOOTSTRAP_RESAMPLES,
    FIT_FLOOR,
    LOW_RANK,
    lemma1,
    low_rank_lemma1,
    masked_mean,
    memory_bayes_probs,
    scored_positions,
    share_reaching_row_start,
    total_variation,
)
from hmm_datasets.scoring import next_token_scores
from hmm_datasets.windows import check_memories

from .evaluation import model_next_token_probs


def compare(probs, reference, input_ids, scored) -> dict[str, float]:
    """Mean TV and argmax agreement of `probs` with `reference` (`[B, L, V+1]`) over `scored`."""
    return {
        "tv": masked_mean(total_variation(probs, reference), scored),
        "agreement": masked_mean(next_token_scores(probs, input_ids, reference)["agreement"], scored),
    }


def memory_scores(model_full, bayes_memory, input_ids, scored) -> dict[str, float]:
    """One memory L: the model and the memory-L Bayes predictor (`[B, L, V+1]` each) compared
    over `scored` (module docstring)."""
    full_vs_memory = compare(model_full, bayes_memory, input_ids, scored)
    return {
        "tv_full_vs_bayes_memory": full_vs_memory["tv"],
        "agreement_full_vs_bayes_memory": full_vs_memory["agreement"],
    }


def _check_vocab(model, vocab_size: int) -> None:
    have = getattr(getattr(model, "config", None), "vocab_size", vocab_size + 1)
    if have < vocab_size + 1:
        raise ValueError(
            f"the model's vocab_size={have} is smaller than the HMMs' {vocab_size + 1} tokens "
            "(V observations and the delimiter): this model was not trained on this corpus."
        )


SAME_TV = 1e-9  # relative: a memory-L TV this close to the model's is as close (rounding)


def memory_crossing(memories, tv_memory, tv_model) -> tuple[np.ndarray, np.ndarray]:
    """The shortest memory as close to the full predictor as the model, and its interpolation.

    memories `[M]` ascending; tv_memory `[R, M]` (or `[M]`): mean TV(memory-L Bayes, full Bayes);
    tv_model `[R]` (or a number): mean TV(model, full Bayes). Returns `first [R]`, the index of
    the first memory with tv_memory <= tv_model (M where none is), and `interpolated [R]`: L
    between that memory and the one before, log TV linear in L (the first memory itself at the
    grid's start, inf where none is).
    """
    memories = np.asarray(memories, dtype=float)
    tv_memory = np.atleast_2d(np.asarray(tv_memory, dtype=float))
    tv_model = np.broadcast_to(np.asarray(tv_model, dtype=float), tv_memory.shape[:1])
    within = tv_memory <= tv_model[:, None] * (1 + SAME_TV)
    first = np.where(within.any(1), within.argmax(1), len(memories))
    interpolated = np.full(len(first), np.inf)
    interpolated[first == 0] = memories[0]
    rows = np.flatnonzero((first > 0) & (first < len(memories)))
    j = first[rows]
    log = lambda x: np.log(np.maximum(x, FIT_FLOOR))  # noqa: E731  (exact zeros: the rounding floor)
    above, below, target = log(tv_memory[rows, j - 1]), log(tv_memory[rows, j]), log(tv_model[rows])
    span = above - below
    share = np.clip(np.divide(above - target, span, out=np.ones_like(span), where=span > 0), 0, 1)
    interpolated[rows] = memories[j - 1] + share * (memories[j] - memories[j - 1])
    return first, interpolated


def memory_equivalent_from_curve(memories, tv_memory, tv_model: float) -> dict:
    """`memory_equivalent` (module docstring) from mean TVs alone: memories `[M]`, tv_memory `[M]`
    TV(memory-L Bayes, full), tv_model TV(model, full); no interval, no bisection (a record
    written before the statistic, read with Lemma 1's curve on the same rows)."""
    first, interpolated = memory_crossing(memories, tv_memory, tv_model)
    found = int(first[0]) < len(memories)
    return {
        "memory": int(memories[int(first[0])]) if found else None,
        "bisected": False,
        "interpolated": float(interpolated[0]) if found else None,
        "interval": [None, None],
        "longest_searched": int(max(memories)),
        "tv_model_vs_full": float(tv_model),
        "memories": [int(m) for m in memories],
        "tv_bayes_memory_vs_full": [float(v) for v in tv_memory],
    }


def memory_equivalent(
    params: HMMParams, ids, scored, model_full, bayes_full, memories, *, seed: int = 0
) -> dict:
    """The model's memory (module docstring): ids `[B, L]`, scored `[B, L-1]`, model_full and
    bayes_full `[B, L, V+1]`, memories the grid. Returns `memory`, `bisected` (True),
    `interpolated`, `interval` (bootstrap over rows, `BOOTSTRAP_RESAMPLES` times),
    `longest_searched`, `tv_model_vs_full`, and every memory evaluated with its
    `tv_bayes_memory_vs_full`."""
    per_row: dict[int, torch.Tensor] = {}  # L -> [B, L-1] TV(memory-L Bayes, full)

    def evaluate(memory: int, meanwhile=None) -> float:
        if memory not in per_row:
            probs = memory_bayes_probs(params, ids, [memory], meanwhile)[memory]
            per_row[memory] = total_variation(probs, bayes_full)
        return masked_mean(per_row[memory], scored)

    model_tv = total_variation(model_full, bayes_full)
    target = masked_mean(model_tv, scored) * (1 + SAME_TV)
    grid = sorted(memories)
    curve = [evaluate(memory) for memory in grid]
    while min(curve) > target and 2 * grid[-1] < ids.shape[1] - 1:  # longer: as long as the row
        grid.append(2 * grid[-1])
        curve.append(evaluate(grid[-1]))
    first = next((j for j, tv in enumerate(curve) if tv <= target), None)
    if first:  # bisect the integer memories between the last above and the first at or below
        low, high = grid[first - 1], grid[first]
        while high - low > 1:
            middle = (low + high) // 2
            curve = {memory: evaluate(memory) for memory in per_row}  # every memory evaluated so far
            following = likely_next_memory(low, middle, high, curve, target)
            meanwhile = (
                None if following is None else lambda m=following: memory_bayes_probs(params, ids, [m])
            )
            low, high = (low, middle) if evaluate(middle, meanwhile) <= target else (middle, high)
    evaluated = sorted(per_row)
    counts = scored.sum(1).double().numpy()
    sums = np.stack([torch.where(scored, per_row[m], 0.0).sum(1).numpy() for m in evaluated], 1)  # [B, M]
    model_sums = torch.where(scored, model_tv.double(), 0.0).sum(1).numpy()
    picks = np.random.default_rng(seed).integers(0, len(counts), size=(BOOTSTRAP_RESAMPLES, len(counts)))
    total = np.maximum(counts[picks].sum(1), 1)
    _, resampled = memory_crossing(
        evaluated, sums[picks].sum(1) / total[:, None], model_sums[picks].sum(1) / total
    )
    low, high = np.quantile(resampled, [0.025, 0.975], method="inverted_cdf")
    result = memory_equivalent_from_curve(
        evaluated, [masked_mean(per_row[m], scored) for m in evaluated], target / (1 + SAME_TV)
    )
    result["interval"] = [float(v) if np.isfinite(v) else None for v in (low, high)]
    result["bisected"] = True
    return result


def likely_next_memory(low: int, middle: int, high: int, curve: dict[int, float], target: float):
    """The memory the bisection between `low` and `high` evaluates after `middle`, guessed from
    `curve` (memory -> mean TV(memory-L Bayes, full), the memories evaluated so far, `low` and
    `high` among them): log TV at `middle` is read off the parabola in L through the bracket's
    ends and the evaluated memory nearest them (the line through the ends where there is no
    other); at or below `target` the bisection goes on in the lower half, else in the upper one,
    and the guess is that half's middle (None where it holds no integer memory left). Lemma 1's
    decay is not exactly exponential: at K = 8192 log TV bends down between 4 and 8, where a line
    would guess the wrong half. A process whose `middle` another one is computing computes the
    guess meanwhile instead of waiting (only cached: it enters the record when the bisection
    evaluates it)."""
    nearest = min(
        (m for m in curve if m not in (low, high)),
        key=lambda m: min(abs(m - low), abs(m - high)),
        default=None,
    )
    memories = [low, high] + ([] if nearest is None else [nearest])
    log_tv = np.log(np.maximum([curve[m] for m in memories], FIT_FLOOR))
    at_middle = np.polyval(np.polyfit(memories, log_tv, len(memories) - 1), middle)
    lower, upper = (low, middle) if at_middle <= np.log(max(target, FIT_FLOOR)) else (middle, high)
    return (lower + upper) // 2 if upper - lower > 1 else None


def memory_of_predictions(
    model_full, params: HMMParams, input_ids, task_ids, memories: Sequence[int], *, bayes_full=None
) -> dict:
    """`model_memory` of a model's predictions `model_full [B, L, V+1]` on rows `input_ids [B, L]`
    (`bayes_full`: the full Bayes predictor's `[B, L, V+1]` on them, if already computed)."""
    memories = check_memories(memories)
    bayes = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    if bayes_full is None:
        bayes_full = bayes.next_token_probs(input_ids)  # validates the ids
    oracle_full = bayes.oracle_next_token_probs(input_ids, task_ids)  # validates the tasks
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    scored = scored_positions(ids, bayes.delimiter)
    model_full = torch.as_tensor(model_full).double().cpu()
    bayes_memory = memory_bayes_probs(params, ids, memories)
    curves: dict[str, list[float]] = {}
    for memory in memories:
        values = memory_scores(model_full, bayes_memory[memory], ids, scored)
        values["share_reaching_row_start"] = share_reaching_row_start(scored, memory)
        for key, value in values.items():
            curves.setdefault(key, []).append(value)
    return {
        "memories": memories,
        "num_rows": int(ids.shape[0]),
        "num_positions": int(scored.sum()),
        **curves,
        "full_vs_bayes": compare(model_full, bayes_full, ids, scored),
        "full_vs_oracle": compare(model_full, oracle_full, ids, scored),
        "memory_equivalent": memory_equivalent(params, ids, scored, model_full, bayes_full, memories),
    }


@torch.no_grad()
def model_memory(
    model,
    params: HMMParams,
    input_ids,
    task_ids,
    memories: Sequence[int],
    *,
    batch_size: int = 256,
) -> dict:
    """The model beside the memory-L Bayes predictors (JSON-ready; module docstring).

    input_ids `[B, L]` rows of the mixture `params`, task_ids `[B]` (read by the oracle only);
    rows go through the model `batch_size` at a time, on its device, in eval mode. Returns
    `memories`, `num_rows`, `num_positions`, per memory `share_reaching_row_start`,
    `tv_full_vs_bayes_memory` and `agreement_full_vs_bayes_memory`, and `full_vs_bayes`,
    `full_vs_oracle` (`tv`, `agreement`) and `memory_equivalent` (`memory_equivalent`).
    """
    memories = check_memories(memories)
    _check_vocab(model, params.vocab_size)
    bayes = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    bayes_full = bayes.next_token_probs(input_ids)  # validates the ids before the model runs
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    model_full = model_next_token_probs(model, ids, params.vocab_size + 1, batch_size)
    return memory_of_predictions(model_full, params, ids, task_ids, memories, bayes_full=bayes_full)


def recorded_memory_equivalent(model_memory: dict, lemma1: dict | None) -> dict | None:
    """A `memory.json`'s `memory_equivalent`; for one written before it, the same from the grid
    of Lemma 1's mixture curve on the same rows (`memory_equivalent_from_curve`, no interval),
    None where there is none on the model's grid."""
    if "memory_equivalent" in model_memory:
        return model_memory["memory_equivalent"]
    if lemma1 is None or lemma1["memories"] != model_memory["memories"]:
        return None
    return memory_equivalent_from_curve(
        lemma1["memories"], lemma1["mixture"]["tv"], model_memory["full_vs_bayes"]["tv"]
    )


def corpus_lemma1(data: CorpusRows, memories: Sequence[int]) -> dict:
    """Lemma 1 on the rows of `data`, and per task on as many rows of the low-rank variant of its
    corpus (`low_rank_lemma1` at rank `LOW_RANK`, or S - 1 when that is smaller; none with one
    state, then `low_rank_oracle_per_task` is None)."""
    result = lemma1(data.params, data.input_ids, data.task_ids, memories)
    rank = min(LOW_RANK, data.config.num_states - 1)
    rows = len(data.input_ids)
    result["low_rank_oracle_per_task"] = (
        low_rank_lemma1(data.config, memories, rows, rank=rank) if rank >= 1 else None
    )
    return result


def corpus_model_memory(model, data: CorpusRows, memories: Sequence[int]) -> dict:
    """`model_memory` on the rows of `data`."""
    return model_memory(model, data.params, data.input_ids, data.task_ids, memories)
