"""The in-context metrics as an `evaluate.Metric` (usable offline).

    from hmm_datasets.icl_metric import InContextMetric
    metric = InContextMetric(keep_in_memory=True)
    metric.add_batch(predictions=model_log_probs, references=input_ids)
    scores = metric.compute(bayes_probs=..., oracle_probs=..., num_demos=N, demo_length=n, test_length=T)

Kept apart from `metrics.py` so that importing the scoring functions never imports
`evaluate` (whose name `scripts/evaluate.py` shadows when a script runs).
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from .layout import SampleLayout
from .metrics import in_context_scores


class InContextMetric(evaluate.Metric):
    """`evaluate` metric: model next-token log-probabilities against Bayes-optimal and oracle ones.

    predictions: `[L, W]` per row, the model's log-probabilities at each position;
    references: `[L]` per row, the input_ids. `compute` also takes `bayes_probs` and
    `oracle_probs` (`[B, L, V+1]`, from `BayesOptimalPredictor`) and the layout
    (`num_demos`, `demo_length`, `test_length`). Returns the nested dict of
    `in_context_scores`. Works offline: `InContextMetric(keep_in_memory=True)`.
    """

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=__doc__,
            citation="",
            inputs_description=self.__class__.__doc__,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Sequence(datasets.Value("float32"))),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }
            ),
        )

    def _compute(
        self, predictions, references, bayes_probs, oracle_probs, num_demos, demo_length, test_length
    ):
        layout = SampleLayout(num_demos, demo_length, test_length)
        return in_context_scores(
            np.asarray(predictions, dtype=np.float32),
            np.asarray(references),
            bayes_probs,
            oracle_probs,
            layout,
        )
