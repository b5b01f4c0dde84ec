"""The ceiling every model is judged against: the Bayes-optimal and oracle accuracy table of a
corpus (the dataset card shows it), the in-context ladder below it (predictors that read only
the row's own tokens), and how fast the Bayes-optimal predictor identifies the task.

Accuracy is top-1 agreement of a predictor's argmax with the sampled next token, scored by
`hmm_datasets.scoring`: "by number of demonstrations" keeps the last m demonstrations of each
row and scores the test sequence; "by test position" scores test token j given all
demonstrations.
"""

from __future__ import annotations

import numpy as np
import torch

from model_cards.render import ladder_text

from .bayes import BayesOptimalPredictor
from .layout import SampleLayout
from .predictors import IN_CONTEXT, reference_predictors
from .scoring import (
    EARLY_TOKENS,
    demo_counts_for,
    mean_over_tokens,
    predictor_ladder,
    scores_by_demo_count,
)


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
    everyone = reference_predictors(predictor.params, predictor)
    counts = demo_counts_for(layout.num_demos) if demo_counts is None else list(demo_counts)

    def score(names: tuple[str, ...], cuts: list[int], desc: str) -> dict:
        chosen = {name: everyone[name] for name in names}
        return scores_by_demo_count(
            chosen,
            input_ids,
            task_ids,
            layout,
            demo_counts=cuts,
            batch_size=batch_size,
            progress=progress,
            desc=desc,
        )

    # Bayes and the oracle at every cut; with all demonstrations, the in-context ladder beside them
    fewer = score(("bayes", "oracle"), [m for m in counts if m != layout.num_demos], "Bayes-optimal table")
    with_all = {}
    if layout.num_demos in counts:
        with_all = score(
            (*IN_CONTEXT, "bayes", "oracle"), [layout.num_demos], "Bayes-optimal table and ladder"
        )
    scores = {m: fewer.get(m) or with_all[m] for m in counts}
    full = scores.get(layout.num_demos)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    return {
        "num_rows": int(ids.shape[0]),
        "true_task_posterior_after_demo": task_identification(
            predictor, ids, np.asarray(task_ids), layout, batch_size
        ),
        "layout": {
            "num_demos": layout.num_demos,
            "demo_length": layout.demo_length,
            "test_length": layout.test_length,
        },
        "by_num_demos": [demo_count_row(m, scored) for m, scored in scores.items()],
        "by_test_position": None if full is None else by_test_position(full, layout.test_length),
        "ladder": None if full is None else ladder_with_every_demo(full, everyone),
    }


def demo_count_row(num_demos: int, scores: dict) -> dict:
    """One row of the table: Bayes and the oracle scored on rows of `num_demos` demonstrations."""
    bayes, oracle, early = scores["bayes"], scores["oracle"], slice(1, 1 + EARLY_TOKENS)
    return {
        "num_demos": num_demos,
        "bayes_accuracy": mean_over_tokens(bayes["correct"]),
        "oracle_accuracy": mean_over_tokens(oracle["correct"]),
        "bayes_early_accuracy": mean_over_tokens(bayes["correct"], early),
        "oracle_early_accuracy": mean_over_tokens(oracle["correct"], early),
        "bayes_oracle_argmax_agreement": mean_over_tokens(oracle["agreement"]),
        "bayes_nll": mean_over_tokens(bayes["nll"]),
        "oracle_nll": mean_over_tokens(oracle["nll"]),
    }


def by_test_position(scores: dict, test_length: int) -> dict:
    """Bayes's and the oracle's accuracy at each test position, with every demonstration."""
    return {
        "test_position": list(range(test_length)),
        "bayes_accuracy": scores["bayes"]["correct"].tolist(),
        "oracle_accuracy": scores["oracle"]["correct"].tolist(),
    }


def ladder_with_every_demo(scores: dict, predictors: dict) -> dict:
    """The in-context ladder below Bayes (`predictor_ladder`), scored with every demonstration."""
    return predictor_ladder(
        {name: mean_over_tokens(scores[name]["correct"]) for name in (*IN_CONTEXT, "bayes", "oracle")},
        {name: p.label for name, p in predictors.items()},
        list(IN_CONTEXT),
        {name: mean_over_tokens(scores[name]["kl"]) for name in IN_CONTEXT},
    )


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
    if table.get("ladder"):
        title = (
            f"the ladder, all {table['layout']['num_demos']} demonstrations, lowest first "
            "(in-context: the row's own tokens only; KL(Bayes || .) in nats/token):"
        )
        lines += ["", ladder_text(table["ladder"], title)]
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "   n/a" if value != value else f"{value:>6.3f}"
