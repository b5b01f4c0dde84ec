"""Why the depth-and-seed study uses the `small` corpus: how uncertain the task is, and how
close a model gets to Bayes, for candidate corpora.

    python benchmarks/study_corpus.py            # the Bayes-optimal task posterior only (minutes)
    python benchmarks/study_corpus.py --train    # and an 8-layer model on each (about 5 min each)

For each candidate (the `small` preset with the changes named), on 256 rows drawn from its
own HMMs: the Bayes-optimal posterior of the true task after demonstrations 1..4, its mean
maximum over the positions of each demonstration, the same by token within the first
demonstration, and the top-1 accuracy of the Bayes-optimal predictor and the oracle on the
test sequence. With `--train`, an 8-layer width-64 model (configs/study.yaml, 65,536 rows,
1400 steps, seed 0) is trained on each and compared with Bayes on 512 test rows (KL,
argmax agreement, top-1 accuracy). Writes results/study_corpus.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from common import write_result

from hmm_datasets import BayesOptimalPredictor, SampleLayout, SamplingTables, get_preset, sample_hmm_params
from hmm_datasets.sampler import sample_rows

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = {  # name -> changes to the `small` corpus preset
    "small": {},
    "256 tasks, emissions Dir(0.1)": {"num_tasks": 256, "emission_concentration": 0.1},
    "256 tasks, emissions and transitions Dir(0.1)": {
        "num_tasks": 256,
        "emission_concentration": 0.1,
        "transition_concentration": 0.1,
    },
    "1024 tasks, emissions and transitions Dir(0.1)": {
        "num_tasks": 1024,
        "emission_concentration": 0.1,
        "transition_concentration": 0.1,
    },
}
ROWS = 256
SHOWN_DEMOS = 4


def task_posterior_statistics(changes: dict) -> dict:
    """The Bayes-optimal task posterior and accuracies of one candidate (module docstring)."""
    config = get_preset("small", **changes)
    params, layout = sample_hmm_params(config), SampleLayout.from_config(config)
    rng = np.random.default_rng(1)
    tasks = rng.integers(0, config.num_tasks, ROWS)
    ids = np.asarray(
        sample_rows(SamplingTables.from_params(params), layout, config.delimiter, tasks, rng)["input_ids"]
    )
    predictor = BayesOptimalPredictor(params)
    prediction = predictor.predict(ids, return_task_posterior=True)
    posterior = prediction.task_posterior.cpu().numpy()  # [B, L, K]
    maximum = posterior.max(-1)  # [B, L]
    span = layout.demo_length + 1
    demos = range(min(SHOWN_DEMOS, layout.num_demos))
    within = [slice(d * span, d * span + layout.demo_length) for d in demos]  # the demonstration's tokens
    probs = prediction.probs.cpu().numpy()[:, :-1]
    oracle = predictor.oracle_next_token_probs(ids, tasks).cpu().numpy()[:, :-1]
    targets, test = ids[:, 1:], slice(layout.test_start, None)
    return {
        "changes": changes,
        "true_task_posterior_after_demo": [
            float(posterior[np.arange(ROWS), (d + 1) * span - 1, tasks].mean()) for d in demos
        ],
        "mean_max_posterior_in_demo": [float(maximum[:, part].mean()) for part in within],
        "mean_max_posterior_by_token_of_demo1": [float(v) for v in maximum[:, within[0]].mean(0)],
        "bayes_test_top1": float((probs.argmax(-1) == targets)[:, test].mean()),
        "oracle_test_top1": float((oracle.argmax(-1) == targets)[:, test].mean()),
    }


def trained_model_vs_bayes(name: str, changes: dict) -> dict:
    """An 8-layer model of configs/study.yaml trained on the candidate; Figure 1's distance to Bayes."""
    sys.path.insert(0, str(ROOT))
    from modeling_hmmroformer.experiments.analyses.evaluation import figure1, load_evaluation_data
    from modeling_hmmroformer.experiments.running.training import train
    from modeling_hmmroformer.experiments.settings import load_run_config
    from probing import load_hmm_roformer

    folder = (
        ROOT
        / "runs"
        / "study_corpus"
        / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    )
    run = load_run_config(
        ROOT / "configs" / "study.yaml",
        {
            "corpus": changes,
            "model": {"num_hidden_layers": 8},
            "training": {"output_dir": str(folder), "disable_tqdm": True},
        },
    )
    started = time.perf_counter()
    train(run)
    seconds = time.perf_counter() - started
    model = load_hmm_roformer(str(folder))
    result = figure1(model, load_evaluation_data(run.corpus_config(), 512), progress=False)
    return {"train_seconds": seconds, **result.model_vs_bayes}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", action="store_true", help="also train an 8-layer model on each candidate")
    args = parser.parse_args()
    results = {}
    for name, changes in CANDIDATES.items():
        started = time.perf_counter()
        results[name] = task_posterior_statistics(changes)
        line = " / ".join(f"{v:.3f}" for v in results[name]["true_task_posterior_after_demo"])
        print(f"{name}: true-task posterior after demos 1..4 {line} ({time.perf_counter() - started:.0f} s)")
        if args.train:
            results[name]["model_8_layers"] = trained_model_vs_bayes(name, changes)
            print(f"  8 layers: {results[name]['model_8_layers']}")
    path = write_result("study_corpus", {"rows": ROWS, "candidates": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
