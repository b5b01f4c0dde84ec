"""Next-token predictors of corpus rows, behind one registry: each maps rows to distributions.

    predictors = reference_predictors(params)        # the in-context ladder, bayes, oracle
    probs = predictors["bayes"].next_token_probs(input_ids, task_ids)   # [B, L, V+1]

A predictor is given rows `input_ids [B, L]` and their tasks `task_ids [B]` (only the oracle
reads them) and returns, at position i, the distribution of token i + 1 over the V
observations and the delimiter (last). The model joins the same registry
(`modeling_hmmroformer.experiments.analyses.evaluation.model_predictor`), and `hmm_datasets.scoring` scores every
predictor the same way on the same rows:

- `bayes`: the exact Bayes-optimal predictor of the mixture (`bayes.py`), the yardstick;
- `oracle`: the same, told each row's task;
- the in-context ladder (`IN_CONTEXT`): predictors that read only the row's own tokens so far,
  with no knowledge of the HMMs: variable-order n-grams (orders 1 to 8, longest-suffix
  backoff; order 1 is the unigram, 2 the bigram) and PPM-C blending (interpolated
  Witten-Bell) over contexts of up to 2 and up to 7 tokens. Like the Bayes-optimal predictor
  they know the layout: a point mass on the delimiter where one comes next.

Why PPM and not context-tree weighting: CTW is Bayes-optimal for tree sources, but an HMM's
output is not a tree source of bounded depth, and CTW keeps a tree per row that is updated
token by token, which does not batch over rows and positions. PPM-C's blending reuses the
n-gram's context counts (one sort per context length, batched), has no tuned parameter, and
its escape count gives an unseen or rarely seen context the shorter context's prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
from .cache import cached
from .params import HMMParams

NextTokenProbs = Callable[
    [torch.Tensor, np.ndarray], torch.Tensor
]  # (input_ids [B, L], task_ids [B]) -> [B, L, V+1]


@dataclass(frozen=True)
class Predictor:
    """A named next-token predictor (`label`: how plots and tables call it)."""

    name: str
    label: str
    next_token_probs: NextTokenProbs


# The in-context ladder: predictors that see only the row's own tokens so far (no knowledge of
# the HMMs), in the order of their definition: name -> (label, kind, order).
IN_CONTEXT = {
    "unigram": ("unigram counts", "ngram", 1),
    "bigram": ("bigram counts", "ngram", 2),
    "trigram": ("trigram (n-gram, order 3)", "ngram", 3),
    "ngram4": ("n-gram, order 4", "ngram", 4),
    "ngram8": ("n-gram, order 8", "ngram", 8),
    "ppm3": ("PPM-C blending, order 3", "ppm", 3),
    "ppm8": ("PPM-C blending, order 8", "ppm", 8),
}


def in_context_predictor(name: str, vocab_size: int) -> Predictor:
    """One predictor of the in-context ladder (`IN_CONTEXT`), by name."""
    label, kind, order = IN_CONTEXT[name]
    function = ngram_next_token_probs if kind == "ngram" else ppm_next_token_probs
    return Predictor(name, label, lambda ids, tasks: function(ids, vocab_size, order))


def reference_predictors(
    params: HMMParams, bayes: BayesOptimalPredictor | None = None
) -> dict[str, Predictor]:
    """The predictors every model is measured against, by name: the in-context ladder
    (`IN_CONTEXT`), then `bayes` (the reference) and `oracle`. The exact two are computed once
    per process for the same rows (`hmm_datasets.cache`: every model of a study is scored on
    the same test rows)."""
    bayes = bayes or BayesOptimalPredictor(params)

    def bayes_probs(ids, tasks):
        return cached(f"bayes-{bayes.dtype}-{bayes.device}", params, ids, lambda: bayes.next_token_probs(ids))

    def oracle_probs(ids, tasks):
        compute = lambda: bayes.oracle_next_token_probs(ids, tasks)  # noqa: E731
        return cached(f"oracle-{bayes.dtype}-{bayes.device}", params, ids, compute, keys=(tasks,))

    return {
        **{name: in_context_predictor(name, params.vocab_size) for name in IN_CONTEXT},
        "bayes": Predictor("bayes", "Bayes-optimal", bayes_probs),
        "oracle": Predictor("oracle", "oracle (knows the task)", oracle_probs),
    }


# ---- the in-context count baselines ------------------------------------------------------------
def _as_ids(input_ids) -> torch.Tensor:
    return (
        torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids).long().cpu()
    )


def _with_delimiters(observation_probs: torch.Tensor, ids: torch.Tensor, delimiter: int) -> torch.Tensor:
    """Append the delimiter column; where the next token is a delimiter, put all mass there."""
    out = torch.nn.functional.pad(observation_probs, (0, 1))
    next_is_delim = torch.zeros_like(ids, dtype=torch.bool)
    next_is_delim[:, :-1] = ids[:, 1:] == delimiter
    out[next_is_delim] = torch.nn.functional.one_hot(torch.tensor(delimiter), delimiter + 1).to(out.dtype)
    return out


def unigram_next_token_probs(input_ids, vocab_size: int, smoothing: float = 0.5) -> torch.Tensor:
    """P(next = v) proportional to count(v in tokens 0..i) + smoothing (delimiters not counted)."""
    ids = _as_ids(input_ids)
    observed = torch.nn.functional.one_hot(ids.clamp(max=vocab_size), vocab_size + 1)[..., :vocab_size]
    counts = observed.double().cumsum(1) + smoothing
    return _with_delimiters(counts / counts.sum(-1, keepdim=True), ids, vocab_size)


def bigram_next_token_probs(input_ids, vocab_size: int) -> torch.Tensor:
    """P(next = v | current = a) from counts of (a, v) pairs among tokens 0..i, shrunk towards
    the unigram baseline with weight 1 (all that is left where `a` has not been seen before):
    the n-gram of order 2. The current token may be the delimiter: its pairs are the first
    tokens of earlier segments."""
    return ngram_next_token_probs(input_ids, vocab_size, order=2)


# ---- the in-context n-gram ladder -------------------------------------------------------------
MAX_ORDER = 8  # n-grams up to 8 tokens: a context of at most 7
ROW_CHUNK = 256  # rows counted at once (memory: ROW_CHUNK x L x V counts per context length)


def context_counts(ids: torch.Tensor, vocab_size: int, length: int) -> torch.Tensor:
    """`[B, L, V]` int32: N[b, i, v] = how often, among tokens 0..i of row b, the `length`
    tokens ending at i were followed by observation v (occurrences ending at j < i). A context
    that would start before the row has no occurrences.

    Contexts are exact integer keys (base V + 1); a stable sort by key groups each context's
    occurrences in position order, and an exclusive cumulative sum within each group counts
    what followed the earlier ones: O(B L V) per length, no L x L comparison."""
    batch, seq = ids.shape
    base = vocab_size + 1
    if base ** (length) >= 2**62:
        raise ValueError(
            f"contexts of {length} tokens over {base} token ids do not fit a 64-bit key: "
            f"use an order of at most {int(62 / np.log2(base))} for this vocabulary."
        )
    positions = torch.arange(seq)
    key = torch.zeros(batch, seq, dtype=torch.long)
    for back in range(length):
        key = key * base + torch.nn.functional.pad(ids, (back, 0))[:, :seq]
    starts_before_row = positions < length - 1
    key[:, starts_before_row] = -1 - positions[starts_before_row]  # unique: never matches
    nxt = torch.full((batch, seq), vocab_size, dtype=torch.long)
    nxt[:, :-1] = ids[:, 1:]
    sorted_key, order = torch.sort(key, dim=1, stable=True)
    sorted_next = nxt.gather(1, order)
    following = torch.nn.functional.one_hot(sorted_next, vocab_size + 1)[..., :vocab_size].to(torch.int32)
    earlier = following.cumsum(1, dtype=torch.int32) - following  # exclusive: occurrences before
    group_start = torch.ones(batch, seq, dtype=torch.bool)
    group_start[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    start = torch.where(group_start, positions, 0).cummax(1).values
    sorted_counts = earlier - earlier.gather(1, start[..., None].expand(-1, -1, vocab_size))
    unsort = torch.empty_like(order).scatter_(1, order, positions.expand(batch, -1))
    return sorted_counts.gather(1, unsort[..., None].expand(-1, -1, vocab_size))


def _over_context_lengths(input_ids, vocab_size: int, order: int, blend: Callable) -> torch.Tensor:
    """Start from the unigram baseline U and, for each context length 1..order - 1, replace the
    prediction where the context has been followed by an observation before with
    `blend(counts [B, L, V], total [B, L, 1], shorter prediction, U)`; rows `ROW_CHUNK` at a time."""
    if not 1 <= order <= MAX_ORDER:
        raise ValueError(f"order={order}: an in-context n-gram has an order from 1 to {MAX_ORDER}.")
    ids = _as_ids(input_ids)
    out = []
    for rows in ids.split(ROW_CHUNK):
        unigram = unigram_next_token_probs(rows, vocab_size)[..., :vocab_size]
        probs = unigram
        for length in range(1, order):
            counts = context_counts(rows, vocab_size, length).double()
            total = counts.sum(-1, keepdim=True)
            probs = torch.where(total > 0, blend(counts, total, probs, unigram), probs)
        out.append(probs)
    return _with_delimiters(torch.cat(out), ids, vocab_size)


def ngram_next_token_probs(input_ids, vocab_size: int, order: int) -> torch.Tensor:
    """The variable-order n-gram with longest-suffix backoff, counts from the row's own prefix:
    at position i, the longest context of at most `order - 1` tokens ending at i that has been
    followed by an observation before; P(v) = (N(context, v) + U(v)) / (N(context) + 1), with U
    the unigram baseline (what is left where no context of length 1 or more has been seen:
    order 1 is the unigram, order 2 the bigram)."""

    def longest(counts, total, shorter, unigram):  # a longer seen context replaces the shorter
        return (counts + unigram) / (total + 1)

    return _over_context_lengths(input_ids, vocab_size, order, longest)


def ppm_next_token_probs(input_ids, vocab_size: int, order: int = MAX_ORDER) -> torch.Tensor:
    """PPM-C's blending (interpolated Witten-Bell) over contexts of 0 to `order - 1` tokens,
    counts from the row's own prefix: P_0 = U (the unigram baseline) and, for each longer
    context, P_m(v) = (N_m(v) + u_m P_(m-1)(v)) / (N_m + u_m), where u_m is the number of
    distinct tokens seen after the context (the escape count); an unseen context escapes
    entirely to the shorter one."""

    def blended(counts, total, shorter, unigram):
        escape = (counts > 0).sum(-1, keepdim=True).double()
        return (counts + escape * shorter) / (total + escape)

    return _over_context_lengths(input_ids, vocab_size, order, blended)
