"""The ceiling every model is judged against: Bayes-optimal and oracle accuracy tables.

Accuracy is top-1 agreement of a predictor's argmax with the sampled next token.
"By number of demonstrations" keeps the last m demonstrations of each row (they are
i.i.d., so this is a row of an m-demonstration corpus) and scores the test sequence;
"by test position" scores test token j given all demonstrations.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from .bayes import BayesOptimalPredictor
from .layout import SampleLayout, keep_last_demos

EARLY_TOKENS = 8  # "early test positions": where the number of demonstrations shows most


def demo_counts_for(num_demos: int) -> list[int]:
    """0, 1, 2, 4, ... up to N (N included)."""
    counts, m = [0], 1
    while m < num_demos:
        counts.append(m)
        m *= 2
    return counts + [num_demos] if num_demos else counts


def score_test_tokens(
    probs: torch.Tensor, input_ids: torch.Tensor, layout: SampleLayout
) -> dict[str, np.ndarray]:
    """Per-test-token scores `[B, T]` of next-token distributions `probs [B, L, V+1]`.

    Returns `correct` (argmax == token), `nll` (nats) and `argmax`; test token 0 has no
    prediction without demonstrations and is NaN there (-1 for argmax).
    """
    positions = torch.as_tensor(layout.test_prediction_positions(), device=probs.device)
    targets = input_ids[:, layout.test_start :].to(probs.device)
    valid = positions >= 0
    picked = probs[:, positions.clamp(min=0)]  # [B, T, V+1]
    argmax = picked.argmax(-1)
    token_prob = picked.gather(-1, targets[..., None])[..., 0]
    correct = (argmax == targets).double()
    nll = -torch.log(token_prob.double().clamp_min(1e-300))
    correct[:, ~valid] = float("nan")
    nll[:, ~valid] = float("nan")
    argmax[:, ~valid] = -1
    return {"correct": correct.cpu().numpy(), "nll": nll.cpu().numpy(), "argmax": argmax.cpu().numpy()}


def accuracy_table(
    predictor: BayesOptimalPredictor,
    input_ids,
    task_ids,
    layout: SampleLayout,
    *,
    demo_counts: list[int] | None = None,
    batch_size: int = 256,
    progress: bool = True,
) -> dict:
    """Bayes-optimal and oracle accuracy by number of demonstrations and by test position.

    Args:
        input_ids: rows `[B, L]` of a corpus with `layout`; task_ids: `[B]`.
    Returns a JSON-ready dict (see `format_accuracy_table`). Means over test tokens
    1..T-1 (test token 0 has no context without demonstrations); "early" means test
    tokens 1..8.
    """
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    tasks = np.asarray(task_ids)
    counts = demo_counts_for(layout.num_demos) if demo_counts is None else demo_counts
    by_demos, per_position = [], None
    steps = [(m, start) for m in counts for start in range(0, ids.shape[0], batch_size)]
    scores = {m: {"bayes": [], "oracle": []} for m in counts}
    for m, start in tqdm(steps, desc="Bayes-optimal table", disable=not progress):
        rows = keep_last_demos(ids[start : start + batch_size], layout, m)
        layout_m = layout.with_demos(m)
        bayes = predictor.next_token_probs(rows)
        oracle = predictor.oracle_next_token_probs(rows, tasks[start : start + batch_size])
        scores[m]["bayes"].append(score_test_tokens(bayes, rows, layout_m))
        scores[m]["oracle"].append(score_test_tokens(oracle, rows, layout_m))
    for m in counts:
        bayes = {
            key: np.concatenate([s[key] for s in scores[m]["bayes"]]) for key in ("correct", "nll", "argmax")
        }
        oracle = {
            key: np.concatenate([s[key] for s in scores[m]["oracle"]]) for key in ("correct", "nll", "argmax")
        }
        scored = slice(1, None)
        early = slice(1, 1 + EARLY_TOKENS)
        by_demos.append(
            {
                "num_demos": m,
                "bayes_accuracy": float(np.mean(bayes["correct"][:, scored])),
                "oracle_accuracy": float(np.mean(oracle["correct"][:, scored])),
                "bayes_early_accuracy": float(np.mean(bayes["correct"][:, early])),
                "oracle_early_accuracy": float(np.mean(oracle["correct"][:, early])),
                "bayes_oracle_argmax_agreement": float(
                    np.mean(bayes["argmax"][:, scored] == oracle["argmax"][:, scored])
                ),
                "bayes_nll": float(np.mean(bayes["nll"][:, scored])),
                "oracle_nll": float(np.mean(oracle["nll"][:, scored])),
            }
        )
        if m == layout.num_demos:
            per_position = {
                "test_position": list(range(layout.test_length)),
                "bayes_accuracy": np.mean(bayes["correct"], axis=0).tolist(),
                "oracle_accuracy": np.mean(oracle["correct"], axis=0).tolist(),
            }
    return {
        "num_rows": int(ids.shape[0]),
        "true_task_posterior_after_demo": task_identification(predictor, ids, tasks, layout, batch_size),
        "layout": {
            "num_demos": layout.num_demos,
            "demo_length": layout.demo_length,
            "test_length": layout.test_length,
        },
        "by_num_demos": by_demos,
        "by_test_position": per_position,
    }


def task_identification(
    predictor: BayesOptimalPredictor, input_ids, task_ids, layout: SampleLayout, batch_size: int = 256
) -> list[float]:
    """Mean posterior probability of the true task after each demonstration (at its delimiter)."""
    if layout.num_demos == 0:
        return []
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)[:, : layout.test_start]
    tasks = torch.as_tensor(np.asarray(task_ids), dtype=torch.long)
    delimiters = torch.as_tensor(np.nonzero(layout.delimiter_mask()[: layout.test_start])[0])
    total = torch.zeros(layout.num_demos, dtype=torch.float64)
    for start in range(0, ids.shape[0], batch_size):
        posterior = predictor.task_posterior(ids[start : start + batch_size]).cpu()  # [b, L, K]
        rows = torch.arange(posterior.shape[0])
        picked = posterior[:, delimiters][rows, :, tasks[start : start + batch_size]]  # [b, N]
        total += picked.double().sum(0)
    return (total / ids.shape[0]).tolist()


def format_accuracy_table(table: dict) -> str:
    """Plain-text tables: by number of demonstrations, then by (selected) test position."""
    lines = [
        f"Bayes-optimal vs oracle top-1 accuracy on {table['num_rows']} rows "
        f"(test tokens 1..{table['layout']['test_length'] - 1}; early = tokens 1..{EARLY_TOKENS})",
        "",
        f"{'demos':>5}  {'bayes':>6}  {'oracle':>6}  {'bayes early':>11}  {'oracle early':>12}  "
        f"{'agree':>6}  {'bayes nll':>9}  {'oracle nll':>10}",
    ]
    for row in table["by_num_demos"]:
        lines.append(
            f"{row['num_demos']:>5}  {row['bayes_accuracy']:>6.3f}  {row['oracle_accuracy']:>6.3f}  "
            f"{row['bayes_early_accuracy']:>11.3f}  {row['oracle_early_accuracy']:>12.3f}  "
            f"{row['bayes_oracle_argmax_agreement']:>6.3f}  {row['bayes_nll']:>9.3f}  {row['oracle_nll']:>10.3f}"
        )
    identified = table.get("true_task_posterior_after_demo") or []
    if identified:
        shown = ", ".join(f"{p:.2f}" for p in identified[:8]) + (", ..." if len(identified) > 8 else "")
        lines += ["", f"posterior of the true task after demonstration 1, 2, ...: {shown}"]
    per_position = table["by_test_position"]
    if per_position:
        shown = demo_counts_for(len(per_position["test_position"]) - 1)[1:]
        shown = [0] + [j for j in shown if j < len(per_position["test_position"])]
        lines += ["", f"by test position, all {table['layout']['num_demos']} demonstrations:"]
        lines.append(f"{'position':>8}  {'bayes':>6}  {'oracle':>6}")
        for j in shown:
            lines.append(
                f"{j:>8}  {_fmt(per_position['bayes_accuracy'][j])}  {_fmt(per_position['oracle_accuracy'][j])}"
            )
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "   n/a" if value != value else f"{value:>6.3f}"
