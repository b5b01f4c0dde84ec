"""How every predictor is scored: one function per position, one loop over demonstration counts.

`next_token_scores` scores the prediction each position makes for the next token: top-1
hit (`correct`), negative log-likelihood in nats (`nll`), and, against a reference
predictor (the Bayes-optimal one), argmax `agreement`, `kl` = KL(reference || predictor) and
`excess_nll` = NLL - reference NLL. Everything else chooses positions and averages:

- `scores_by_demo_count`: every predictor of a registry (`hmm_datasets.predictors`) on the
  same rows cut to their last m demonstrations, m = 0, 1, 2, 4, ..., N (demonstrations are
  i.i.d., so these are rows of an m-demonstration corpus), per test position. Figure 1
  (`modeling_hmmroformer.experiments.analyses.evaluation`) and the dataset card's table (`hmm_datasets.ceiling`)
  are two views of it. Accuracy there is over test tokens 1..T-1 (token 0 has no context
  without demonstrations); "early" is tokens 1..8.
- `in_context_scores`: a model against the Bayes-optimal predictor and the oracle on full
  rows, by number of demonstrations seen and by test position (training's evaluation). Every
  position whose next token is an observation is scored (delimiters are fixed by the layout).
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from .layout import SampleLayout, keep_last_demos
from .predictors import Predictor

EARLY_TOKENS = 8  # "early test positions": where the number of demonstrations shows most
_TINY = 1e-300


def demo_counts_for(num_demos: int) -> list[int]:
    """0, 1, 2, 4, ... up to N (N included)."""
    counts, m = [0], 1
    while m < num_demos:
        counts.append(m)
        m *= 2
    return counts + [num_demos] if num_demos else counts


def next_token_scores(probs, input_ids, reference_probs=None) -> dict[str, torch.Tensor]:
    """`[B, L-1]` scores of the prediction at each position i for token i + 1.

    probs, reference_probs `[B, L, V+1]` (on any device); input_ids `[B, L]`. Returns
    `correct`, `nll`, `argmax`, and with a reference `agreement`, `kl`, `excess_nll`.
    """
    log_probs = torch.log(torch.as_tensor(probs)[:, :-1].double().clamp_min(_TINY))
    target = torch.as_tensor(input_ids)[:, 1:].long().to(log_probs.device)[..., None]
    argmax = log_probs.argmax(-1)
    target_log_prob = log_probs.gather(-1, target)[..., 0]
    scores = {"correct": (argmax == target[..., 0]).double(), "nll": -target_log_prob, "argmax": argmax}
    if reference_probs is not None:
        reference = torch.as_tensor(reference_probs)[:, :-1].double().to(log_probs.device)
        log_reference = torch.log(reference.clamp_min(_TINY))
        scores["agreement"] = (argmax == log_reference.argmax(-1)).double()
        scores["kl"] = torch.where(reference > 0, reference * (log_reference - log_probs), 0.0).sum(-1)
        scores["excess_nll"] = log_reference.gather(-1, target)[..., 0] - target_log_prob
    return scores


def on_test_tokens(values: torch.Tensor, layout: SampleLayout) -> torch.Tensor:
    """`[B, T]`: the scores `[B, L-1]` of the predictions of test tokens 0..T-1 (NaN for test
    token 0 of a row without demonstrations: nothing predicts it)."""
    positions = torch.as_tensor(layout.test_prediction_positions(), device=values.device)
    picked = values[:, positions.clamp(min=0)].double()
    picked[:, positions < 0] = float("nan")
    return picked


def scores_by_demo_count(
    predictors: dict[str, Predictor],
    input_ids,
    task_ids,
    layout: SampleLayout,
    *,
    reference: str = "bayes",
    demo_counts: list[int] | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    desc: str = "scoring by number of demonstrations",
) -> dict[int, dict[str, dict[str, np.ndarray]]]:
    """`{m: {predictor: {score: [T]}}}`: each predictor's scores of test tokens 0..T-1, averaged
    over rows, on the rows cut to their last m demonstrations (module docstring).

    input_ids `[B, L]` with `layout`, task_ids `[B]`; `reference` names the predictor the others
    are compared with (`agreement`, `kl`, `excess_nll`); rows go `batch_size` at a time (None:
    all at once; the predictors batch inside).
    """
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    tasks = np.asarray(task_ids)
    if reference not in predictors:
        raise ValueError(f"reference={reference!r} is not among the predictors {sorted(predictors)}.")
    counts = demo_counts_for(layout.num_demos) if demo_counts is None else list(demo_counts)
    size = batch_size or max(1, ids.shape[0])
    steps = [(m, start) for m in counts for start in range(0, ids.shape[0], size)]
    sums: dict[int, dict[str, dict[str, np.ndarray]]] = {m: {name: {} for name in predictors} for m in counts}
    for m, start in tqdm(steps, desc=desc, disable=not progress):
        rows = keep_last_demos(ids[start : start + size], layout, m)
        chunk_tasks = tasks[start : start + size]
        probs = {
            name: predictor.next_token_probs(rows, chunk_tasks) for name, predictor in predictors.items()
        }
        for name, predicted in probs.items():
            scores = next_token_scores(predicted, rows, None if name == reference else probs[reference])
            for key, values in scores.items():
                if key != "argmax":
                    total = on_test_tokens(values, layout.with_demos(m)).sum(0).cpu().numpy()
                    sums[m][name][key] = sums[m][name].get(key, 0.0) + total
    return {
        m: {
            name: {key: total / ids.shape[0] for key, total in scores.items()}
            for name, scores in by_name.items()
        }
        for m, by_name in sums.items()
    }


def mean_over_tokens(per_position: np.ndarray, tokens: slice = slice(1, None)) -> float:
    """Mean of per-test-position means over `tokens` (default 1..T-1), NaN positions skipped."""
    return float(np.nanmean(per_position[tokens]))


def predictor_ladder(
    accuracy: dict[str, float],
    labels: dict[str, str],
    in_context: list[str],
    kl_bayes: dict[str, float] | None = None,
) -> dict:
    """The yardstick ladder of one set of scores (JSON-ready): every predictor's `accuracy`,
    ordered as measured (lowest first, so a model below a baseline is shown below it), the
    best of the `in_context` predictors, and for every other predictor but Bayes and the
    oracle (a model) the share of the gap from the best in-context predictor to Bayes that it
    closes: 0 at the baseline, 1 at Bayes, negative below the baseline."""
    baselines = [name for name in in_context if name in accuracy]
    best = max(baselines, key=lambda name: accuracy[name])
    gap = accuracy["bayes"] - accuracy[best]
    rungs = [
        {
            "name": name,
            "label": labels.get(name, name),
            "accuracy": accuracy[name],
            "kl_bayes": None if kl_bayes is None or name == "bayes" else kl_bayes.get(name),
            "in_context": name in baselines,
        }
        for name in sorted(accuracy, key=lambda name: accuracy[name])
    ]
    models = [name for name in accuracy if name not in baselines and name not in ("bayes", "oracle")]
    return {
        "rungs": rungs,
        "best_in_context": best,
        "gap_closed": {name: (accuracy[name] - accuracy[best]) / gap if gap > 0 else None for name in models},
        "below_in_context": {name: accuracy[name] < accuracy[best] for name in models},
    }


# ---- a model against the Bayes-optimal predictor and the oracle, on full rows ---------------------------
def in_context_scores(model_log_probs, input_ids, bayes_probs, oracle_probs, layout: SampleLayout) -> dict:
    """The in-context metrics over the test sequence, by demonstrations seen and by test position.

    model_log_probs `[B, L, W]` (W >= V+1, the model's vocabulary; scored over the corpus's V+1
    tokens); input_ids `[B, L]`; bayes_probs, oracle_probs `[B, L, V+1]`. Returns
    `{"test": {metric: float}, "by_demos_seen": {metric: [N+1 floats]}, "by_test_position":
    {metric: [T floats]}}` (NaN where nothing is scored); the metrics are `model_accuracy`,
    `bayes_accuracy`, `oracle_accuracy`, `agreement` (model argmax = Bayes argmax),
    `kl_bayes_model` and `excess_nll` (nats/token).
    """
    ids = torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids).long().cpu()
    for name, probs in (("bayes_probs", bayes_probs), ("oracle_probs", oracle_probs)):
        if not hasattr(probs, "shape"):
            raise TypeError(
                f"{name} must be next-token probabilities [B, L, V+1], not a {type(probs).__name__}: "
                f"pass bayes.next_token_probs(input_ids) (or bayes.oracle_next_token_probs(input_ids, task_ids))."
            )
    bayes_probs, oracle_probs = torch.as_tensor(bayes_probs).cpu(), torch.as_tensor(oracle_probs).cpu()
    num_tokens = bayes_probs.shape[-1]
    model_probs = torch.as_tensor(model_log_probs).cpu()[..., :num_tokens].double().exp()
    model = next_token_scores(model_probs, ids, bayes_probs)
    scores = {
        "model_accuracy": model["correct"],
        "bayes_accuracy": next_token_scores(bayes_probs, ids)["correct"],
        "oracle_accuracy": next_token_scores(oracle_probs, ids)["correct"],
        "agreement": model["agreement"],
        "kl_bayes_model": model["kl"],
        "excess_nll": model["excess_nll"],
    }
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
