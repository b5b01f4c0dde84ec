"""Next-token predictors of corpus rows, behind one registry: each maps rows to distributions.

    predictors = reference_predictors(params)                       # bayes, oracle, unigram, bigram
    probs = predictors["bayes"].next_token_probs(input_ids, task_ids)   # [B, L, V+1]

A predictor is given rows `input_ids [B, L]` and their tasks `task_ids [B]` (only the oracle
reads them) and returns, at position i, the distribution of token i + 1 over the V
observations and the delimiter (last). The model joins the same registry
(`modeling_hmmroformer.experiments.evaluation.model_predictor`), and `hmm_datasets.scoring` scores every
predictor the same way on the same rows:

- `bayes`: the exact Bayes-optimal predictor of the mixture (`bayes.py`), the yardstick;
- `oracle`: the same, told each row's task;
- `unigram`, `bigram`: counts of tokens / token pairs in the row's own context so far, with
  no knowledge of the HMMs (in-context baselines). Like the Bayes-optimal predictor they know
  the layout: a point mass on the delimiter where one comes next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
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


def reference_predictors(
    params: HMMParams, bayes: BayesOptimalPredictor | None = None
) -> dict[str, Predictor]:
    """The predictors every model is measured against, by name (`bayes` is the reference)."""
    bayes = bayes or BayesOptimalPredictor(params)
    vocab = params.vocab_size
    return {
        "bayes": Predictor("bayes", "Bayes-optimal", lambda ids, tasks: bayes.next_token_probs(ids)),
        "oracle": Predictor(
            "oracle", "oracle (knows the task)", lambda ids, tasks: bayes.oracle_next_token_probs(ids, tasks)
        ),
        "unigram": Predictor(
            "unigram", "unigram counts", lambda ids, tasks: unigram_next_token_probs(ids, vocab)
        ),
        "bigram": Predictor(
            "bigram", "bigram counts", lambda ids, tasks: bigram_next_token_probs(ids, vocab)
        ),
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


def bigram_next_token_probs(
    input_ids, vocab_size: int, backoff: float = 1.0, smoothing: float = 0.5
) -> torch.Tensor:
    """P(next = v | current = a) from counts of (a, v) pairs among tokens 0..i.

    The current token may be the delimiter: its pairs are the first tokens of earlier
    segments. Counts are shrunk towards the unigram baseline with weight `backoff`, which
    is all that is left where a context token has not been seen before.
    """
    ids = _as_ids(input_ids)
    batch, length = ids.shape
    width = vocab_size + 1  # the current token: observations or the delimiter
    nxt = ids[:, 1:]
    valid = nxt < vocab_size  # pairs end in an observation
    pair = ids[:, :-1] * vocab_size + nxt.clamp(max=vocab_size - 1)
    pair_counts = torch.zeros(batch, length, width * vocab_size, dtype=torch.float64)
    pair_counts[:, 1:] = torch.nn.functional.one_hot(pair, width * vocab_size).double() * valid[..., None]
    pair_counts = pair_counts.cumsum(1).view(batch, length, width, vocab_size)
    rows = pair_counts.gather(2, ids[:, :, None, None].expand(batch, length, 1, vocab_size))[:, :, 0]
    unigram = unigram_next_token_probs(ids, vocab_size, smoothing)[..., :vocab_size]
    probs = (rows + backoff * unigram) / (rows.sum(-1, keepdim=True) + backoff)
    return _with_delimiters(probs, ids, vocab_size)
