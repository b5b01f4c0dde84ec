"""Why the `paper` preset draws sparse, low-rank HMMs: oracle accuracy of candidate draws.

    python benchmarks/preset_choice.py

The paper does not give its HMM distribution. For candidate Dirichlet concentrations at
the paper's sizes (K=8192, S=128, V=16, its layout), the top-1 accuracy on the test
sequence of the oracle that knows the task: the best any model can do. Chance is 1/16.
Writes results/preset_choice.json.
"""

from __future__ import annotations

import torch
from common import write_result

import hmm_datasets
from hmm_datasets.sampler import SamplingTables, generate_rows

CANDIDATES = {
    "dense, transitions Dir(0.1), emissions Dir(1)": {
        "transition_rank": None,
        "transition_concentration": 0.1,
        "emission_concentration": 1.0,
    },
    "dense, transitions Dir(0.01), emissions Dir(0.01)": {
        "transition_rank": None,
        "transition_concentration": 0.01,
        "emission_concentration": 0.01,
    },
    "rank 16, factors Dir(0.01), emissions Dir(0.01)": {
        "transition_rank": 16,
        "transition_concentration": 0.01,
        "emission_concentration": 0.01,
    },
    "rank 16, factors Dir(0.003), emissions Dir(0.01) (preset)": {},
    "rank 16, factors Dir(0.003), emissions Dir(0.03)": {"emission_concentration": 0.03},
}


def oracle_accuracy(config: hmm_datasets.HMMMixtureConfig, num_rows: int) -> float:
    params = hmm_datasets.sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, num_rows)
    probs = hmm_datasets.BayesOptimalPredictor(params).oracle_next_token_probs(
        rows["input_ids"], rows["task_id"]
    )
    layout = hmm_datasets.SampleLayout.from_config(config)
    positions = layout.test_prediction_positions()[1:]
    targets = rows["input_ids"][:, layout.test_start + 1 :]
    return float((probs[:, positions].argmax(-1).cpu().numpy() == targets).mean())


def main() -> None:
    torch.set_num_threads(2)
    num_rows = 256
    results = {}
    for name, overrides in CANDIDATES.items():
        config = hmm_datasets.get_preset("paper", num_test=num_rows, **overrides)
        results[name] = {"overrides": overrides, "oracle_test_accuracy": oracle_accuracy(config, num_rows)}
        print(f"{results[name]['oracle_test_accuracy']:.3f}  {name}")
    write_result("preset_choice", {"num_rows": num_rows, "chance": 1 / 16, "candidates": results})


if __name__ == "__main__":
    main()
