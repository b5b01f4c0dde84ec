"""Which fixed-memory predictor does the trained model behave like? Lemma 1, for the model.

The model is run on contexts cut to their last L tokens, kept at their original positions
(`position_ids`; `cut_model_probs` computes each window once for every L), beside the
memory-L Bayes predictor (`hmm_datasets.memory`). At each position i whose next token is an
observation, the cut model reads tokens i-L+1..i; where that window is the whole prefix
(i < L) it is the full model. Per L, over those positions:

- `tv_cut_vs_full`: how much the model's prediction uses tokens older than L;
- `tv_full_vs_bayes_memory`, `agreement_full_vs_bayes_memory`: the full model against the
  memory-L Bayes predictor; `best_memory` is the L where that TV is smallest, "the
  fixed-memory predictor the model behaves like";
- `tv_cut_vs_bayes_memory`: the cut model against the memory-L Bayes predictor (both see
  the same window).

`full_vs_bayes` and `full_vs_oracle` compare the full model with the full Bayes-optimal
predictor and the oracle once. Distances are total variation over the V + 1 tokens.

Shapes: B rows, L positions, V observation tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from hmm_datasets import BayesOptimalPredictor, HMMParams
from hmm_datasets.memory import (
    FIT_FLOOR,
    LOW_RANK,
    check_memories,
    lemma1,
    low_rank_lemma1,
    masked_mean,
    memory_bayes_probs,
    scored_positions,
    share_reaching_row_start,
    total_variation,
)
from hmm_datasets.scoring import next_token_scores
from probing.figures import pyplot, save_figure

from . import layout
from .evaluation import EvaluationData, model_next_token_probs


def window_runs(input_ids: torch.Tensor, longest: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(runs [B * L, longest], positions [B * L, longest])`: for every start s of every row, its
    tokens s..s+longest-1 at their positions (past the row end: padding, which a causal model's
    earlier positions never read)."""
    rows, length = input_ids.shape
    padded = torch.nn.functional.pad(input_ids, (0, longest - 1))
    runs = padded.unfold(1, longest, 1).reshape(rows * length, longest)
    positions = (torch.arange(length)[:, None] + torch.arange(longest)).clamp(max=length - 1)
    return runs, positions.repeat(rows, 1)


def cut_model_probs(
    model, input_ids: torch.Tensor, full: torch.Tensor, memories: Sequence[int], batch_size: int, bar
) -> dict[int, torch.Tensor]:
    """Per memory L, `[B, L_row, V+1]`: at every position i the model's prediction from tokens
    i-L+1..i alone, at their positions in the row (`full [B, L_row, V+1]`, the full model's,
    where that window is the whole prefix).

    One causal run per start s reading tokens s..s+max(memories)-1 gives, at its offset L-1,
    the window of memory L that ends at s+L-1: every window of every memory, each computed
    once (the windows of one start share the run; windows of different starts share nothing)."""
    rows, length = input_ids.shape
    cut = {memory: full for memory in memories if memory >= length}  # every window is the prefix
    inside = [memory for memory in memories if memory < length]
    if not inside:
        return cut
    runs, positions = window_runs(input_ids, max(inside))
    offsets = torch.tensor(inside) - 1
    by_start = []  # per run, at the offsets: [batch, len(inside), V+1]
    for start in range(0, runs.shape[0], batch_size):
        batch = slice(start, start + batch_size)
        probs = model_next_token_probs(model, runs[batch], full.shape[-1], batch_size, positions[batch])
        by_start.append(probs[:, offsets])
        bar.update(1)
    by_start = torch.cat(by_start).view(rows, length, len(inside), -1)
    for k, memory in enumerate(inside):  # the window ending at i >= L - 1 starts at i - L + 1
        cut[memory] = torch.cat([full[:, : memory - 1], by_start[:, : length - memory + 1, k]], 1)
    return cut


def compare(probs, reference, input_ids, scored) -> dict[str, float]:
    """Mean TV and argmax agreement of `probs` with `reference` (`[B, L, V+1]`) over `scored`."""
    return {
        "tv": masked_mean(total_variation(probs, reference), scored),
        "agreement": masked_mean(next_token_scores(probs, input_ids, reference)["agreement"], scored),
    }


def memory_scores(model_full, cut, bayes_memory, input_ids, scored) -> dict[str, float]:
    """One memory L: the full model, the model cut to L and the memory-L Bayes predictor
    (`[B, L, V+1]` each) compared over `scored` (module docstring)."""
    full_vs_memory = compare(model_full, bayes_memory, input_ids, scored)
    return {
        "tv_cut_vs_full": masked_mean(total_variation(cut, model_full), scored),
        "tv_full_vs_bayes_memory": full_vs_memory["tv"],
        "tv_cut_vs_bayes_memory": masked_mean(total_variation(cut, bayes_memory), scored),
        "agreement_full_vs_bayes_memory": full_vs_memory["agreement"],
    }


def _check_vocab(model, vocab_size: int) -> None:
    have = getattr(getattr(model, "config", None), "vocab_size", vocab_size + 1)
    if have < vocab_size + 1:
        raise ValueError(
            f"the model's vocab_size={have} is smaller than the HMMs' {vocab_size + 1} tokens "
            "(V observations and the delimiter): this model was not trained on this corpus."
        )


@torch.no_grad()
def model_memory(
    model,
    params: HMMParams,
    input_ids,
    task_ids,
    memories: Sequence[int],
    *,
    batch_size: int = 256,
    progress: bool = False,
) -> dict:
    """The model cut to its last L tokens beside the memory-L Bayes predictor (JSON-ready; module docstring).

    input_ids `[B, L]` rows of the mixture `params`, task_ids `[B]` (read by the oracle only);
    windows go through the model `batch_size` runs at a time, on its device, in eval mode.
    Returns `memories`, `num_rows`, `num_positions`, per memory `share_reaching_row_start`,
    `tv_cut_vs_full`, `tv_full_vs_bayes_memory`, `tv_cut_vs_bayes_memory` and
    `agreement_full_vs_bayes_memory`, and `full_vs_bayes`, `full_vs_oracle` (`tv`, `agreement`)
    and `best_memory`.
    """
    memories = check_memories(memories)
    _check_vocab(model, params.vocab_size)
    bayes = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    bayes_full = bayes.next_token_probs(input_ids)  # validates the ids
    oracle_full = bayes.oracle_next_token_probs(input_ids, task_ids)  # validates the tasks
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    scored = scored_positions(ids, bayes.delimiter)
    model_full = model_next_token_probs(model, ids, params.vocab_size + 1, batch_size)
    steps = -(-ids.numel() // batch_size)
    with tqdm(total=steps, desc="model memory: windows", disable=not progress) as bar:
        cut = cut_model_probs(model, ids, model_full, memories, batch_size, bar)
    bayes_memory = memory_bayes_probs(params, ids, memories)
    curves: dict[str, list[float]] = {}
    for memory in memories:
        values = memory_scores(model_full, cut[memory], bayes_memory[memory], ids, scored)
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
        "best_memory": memories[int(np.nanargmin(curves["tv_full_vs_bayes_memory"]))],
    }


def plot_model_memory(result: dict, path: str | Path) -> Path:
    """Per memory L: the model's TV to the memory-L Bayes predictor (with its TV to the full one as a
    line) and the TV of the model cut to L tokens against the whole-context model."""
    plt = pyplot()
    memories = result["memories"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(memories, result["tv_full_vs_bayes_memory"], "o-", label="TV(model, memory-L Bayes)")
    ax.plot(memories, result["tv_cut_vs_full"], "s-", label="TV(model cut to L, model)")
    ax.axhline(result["full_vs_bayes"]["tv"], color="grey", ls="--", label="TV(model, full Bayes)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(memories, [str(m) for m in memories])
    ax.set_xlabel("memory L (tokens)")
    ax.set_ylabel("mean total variation")
    ax.set_title(f"the model's memory: closest memory-L Bayes at L = {result['best_memory']}")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


VARIANTS = {
    "mixture": ("C0", "Bayes-optimal, memory L vs full"),
    "oracle": ("C1", "oracle, memory L vs full"),
}


def _plot_tv(ax, memories: np.ndarray, curve: dict, color, label: str) -> float:
    """One variant's mean TV with its interval and fitted line on a log axis; returns the smallest TV shown."""
    tv = np.asarray(curve["tv"], dtype=float)
    shown = tv > FIT_FLOOR  # below: equal up to rounding, and a log axis cannot show zeros
    low, high = np.asarray(curve["tv_ci_low"]), np.asarray(curve["tv_ci_high"])
    yerr = [(tv - low)[shown], (high - tv)[shown]]
    ax.errorbar(memories[shown], tv[shown], yerr=yerr, fmt="o-", color=color, label=label, capsize=3)
    fit = curve["fit"]
    if fit["rate"] is not None:
        grid = np.linspace(min(fit["memories"]), max(fit["memories"]), 50)
        r2 = "" if fit["r2"] is None else f", R² {fit['r2']:.2f}"
        ax.plot(
            grid,
            fit["C"] * np.exp(-fit["rate"] * grid),
            "--",
            color=color,
            label=f"fit: rate {fit['rate']:.3f}/token{r2}",
        )
    return float(tv[shown].min(initial=np.inf))


PER_TASK = {
    "oracle_per_task": "C1",  # the corpus
    "low_rank_oracle_per_task": "C2",  # its low-rank variant
}


def _rank_label(block: dict) -> str:
    """`full rank` or `rank d`, with the Spearman correlation of rate and observability."""
    rank = "full rank" if block["transition_rank"] is None else f"rank {block['transition_rank']}"
    rho = block["rate_observability_spearman"]
    return f"{rank} (Spearman {'n/a' if rho is None else f'{rho:.2f}'})"


def _plot_rates(ax, result: dict) -> None:
    """Per task, the oracle's fitted decay rate against its observability coefficient, for the
    corpus and its low-rank variant (horizontal bars: lower to upper bound, where not exact)."""
    blocks = [(result[key], color) for key, color in PER_TASK.items() if result.get(key)]
    shown = []
    for block, color in blocks:
        records = [record for record in block["tasks"] if record["fit"]["rate"] is not None]
        if not records:
            continue
        x = np.array([record["observability"] for record in records])
        upper = np.array([record["observability_upper"] for record in records])
        rates = [record["fit"]["rate"] for record in records]
        ax.errorbar(
            x,
            rates,
            xerr=[np.zeros_like(x), upper - x],
            fmt="o",
            color=color,
            alpha=0.8,
            label=_rank_label(block),
        )
        shown.extend(x)
    if not shown:
        ax.text(0.5, 0.5, "no per-task decay rate to show", ha="center", va="center", transform=ax.transAxes)
    elif min(shown) > 0:
        ax.set_xscale("log")
    ax.set_xlabel("observability coefficient γ (Assumption 2)")
    ax.set_ylabel("fitted decay rate per token (oracle, one task)")
    ax.set_title("Lemma 1 per HMM: rate vs observability")
    if shown:
        ax.legend(fontsize=8)


def plot_lemma1(result: dict, path: str | Path) -> Path:
    """Mean TV vs L on a log axis with the fitted C exp(-rate L) lines (left), argmax agreement vs L
    (middle), and per task the oracle's decay rate vs the task's observability coefficient (right)."""
    plt = pyplot()
    memories = np.asarray(result["memories"])
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.2))
    smallest = np.inf
    for name, (color, label) in VARIANTS.items():
        smallest = min(smallest, _plot_tv(left, memories, result[name], color, label))
        middle.plot(memories, result[name]["agreement"], "o-", color=color, label=label)
    left.set_yscale("log")
    if np.isfinite(smallest):  # interval ends near zero would stretch the axis to the rounding floor
        left.set_ylim(bottom=smallest / 30)
    left.set_ylabel("mean total variation to the full predictor")
    left.set_title("Lemma 1: distance vs memory")
    middle.set_ylabel("top-1 agreement with the full predictor")
    middle.set_title("argmax agreement vs memory")
    for ax in (left, middle):
        ax.set_xlabel("memory L (tokens)")
        ax.legend(fontsize=8)
    _plot_rates(right, result)
    return save_figure(fig, path)


def write_json(result: dict, path: Path) -> Path:
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def write_lemma1(data: EvaluationData, memories: Sequence[int], folder: str | Path) -> dict:
    """Lemma 1 on the rows of `data`, and per task on as many rows of the low-rank variant of its
    corpus (`low_rank_lemma1` at rank `LOW_RANK`, or S - 1 when that is smaller; none with one
    state, then `low_rank_oracle_per_task` is None): `lemma1.json` and `lemma1.png` in `folder`;
    returns the result."""
    result = lemma1(data.params, data.input_ids, data.task_ids, memories)
    rank = min(LOW_RANK, data.config.num_states - 1)
    rows = len(data.input_ids)
    result["low_rank_oracle_per_task"] = (
        low_rank_lemma1(data.config, memories, rows, rank=rank) if rank >= 1 else None
    )
    write_json(result, Path(folder) / layout.LEMMA1_JSON)
    plot_lemma1(result, Path(folder) / layout.LEMMA1_PNG)
    return result


def write_model_memory(
    model, data: EvaluationData, memories: Sequence[int], folder: str | Path, progress: bool = False
) -> dict:
    """`model_memory` on the rows of `data`: `memory.json` and `memory.png` in `folder`; returns the result."""
    result = model_memory(model, data.params, data.input_ids, data.task_ids, memories, progress=progress)
    write_json(result, Path(folder) / layout.MEMORY_JSON)
    plot_model_memory(result, Path(folder) / layout.MEMORY_PNG)
    return result
