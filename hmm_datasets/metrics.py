"""In-context metrics of a model against the Bayes-optimal predictor and the oracle.

For every position whose next token is an observation (delimiters are fixed by the layout
and not scored): top-1 accuracy against the sampled token for the model, Bayes and the
oracle; agreement of the model's argmax with the Bayes argmax; KL(Bayes || model) and the
model's excess NLL over Bayes, in nats per token. Reported over the test sequence, by
number of demonstrations seen (the segment of the predicted token) and by position in the
test sequence.

    scores = in_context_scores(model_log_probs, input_ids, bayes_probs, oracle_probs, layout)

The same as an `evaluate.Metric`: `hmm_datasets.icl_metric.InContextMetric`.
"""

from __future__ import annotations

import numpy as np
import torch

from .layout import SampleLayout

METRICS = ("model_accuracy", "bayes_accuracy", "oracle_accuracy", "agreement", "kl_bayes_model", "excess_nll")


def per_position_scores(
    model_log_probs: torch.Tensor,
    input_ids: torch.Tensor,
    bayes_probs: torch.Tensor,
    oracle_probs: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Scores of the prediction made at each position for the next token, `[B, L-1]` each.

    model_log_probs [B, L, W] (W >= V+1, the model's vocabulary); input_ids [B, L];
    bayes_probs, oracle_probs [B, L, V+1].
    """
    vocab = bayes_probs.shape[-1]
    model = model_log_probs[:, :-1].double()
    bayes, oracle = bayes_probs[:, :-1].double(), oracle_probs[:, :-1].double()
    target = input_ids[:, 1:].long()[..., None]
    model_argmax, bayes_argmax = model.argmax(-1), bayes.argmax(-1)
    log_bayes = torch.log(bayes.clamp_min(1e-300))
    kl = torch.where(bayes > 0, bayes * (log_bayes - model[..., :vocab]), 0.0).sum(-1)
    return {
        "model_accuracy": (model_argmax == target[..., 0]).double(),
        "bayes_accuracy": (bayes_argmax == target[..., 0]).double(),
        "oracle_accuracy": (oracle.argmax(-1) == target[..., 0]).double(),
        "agreement": (model_argmax == bayes_argmax).double(),
        "kl_bayes_model": kl,
        "excess_nll": (log_bayes.gather(-1, target) - model.gather(-1, target))[..., 0],
    }


def in_context_scores(model_log_probs, input_ids, bayes_probs, oracle_probs, layout: SampleLayout) -> dict:
    """The metrics over the test sequence, by demonstrations seen and by test position.

    Returns `{"test": {metric: float}, "by_demos_seen": {metric: [N+1 floats]},
    "by_test_position": {metric: [T floats]}}` (NaN where nothing is scored).
    """
    ids = torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids).long()
    scores = per_position_scores(
        torch.as_tensor(model_log_probs).cpu(),
        ids.cpu(),
        torch.as_tensor(bayes_probs).cpu(),
        torch.as_tensor(oracle_probs).cpu(),
    )
    segment = torch.as_tensor(layout.segment_ids()[1:]).long()  # segment of each predicted token
    scored = torch.as_tensor(~layout.delimiter_mask()[1:])  # predicted token is an observation
    test_position = torch.as_tensor(layout.position_in_segment()[1:])
    in_test = scored & (segment == layout.num_demos)

    def mean(values: torch.Tensor, where: torch.Tensor) -> float:
        return float(values[:, where].mean()) if bool(where.any()) else float("nan")

    return {
        "test": {name: mean(values, in_test) for name, values in scores.items()},
        "by_demos_seen": {
            name: [mean(values, scored & (segment == m)) for m in range(layout.num_demos + 1)]
            for name, values in scores.items()
        },
        "by_test_position": {
            name: [mean(values, in_test & (test_position == j)) for j in range(layout.test_length)]
            for name, values in scores.items()
        },
    }


def flatten_scores(scores: dict, prefix: str = "icl") -> dict[str, float]:
    """Scalars for a logger: the test means, and model accuracy and agreement with Bayes by
    number of demonstrations seen (the full breakdown stays in the nested dict)."""
    flat = {f"{prefix}/test_{name}": value for name, value in scores["test"].items()}
    for name in ("model_accuracy", "agreement"):
        values = scores["by_demos_seen"][name]
        flat.update({f"{prefix}/demos_seen_{m}/{name}": value for m, value in enumerate(values)})
    return flat
