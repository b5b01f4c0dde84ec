"""The predictors of this checkout against another checkout's, in pairs, in one process.

    python benchmarks/filter_before.py --before DIR [--pairs 30] [--shapes ...]

The shapes are `peer_filter.py`'s (no JAX needed), and Lemma 1's fixed-memory predictors
(memories 1 to 32) on a few rows of two of them (`window_512`: the mixture of 512 HMMs, 8 rows;
`window_oracle`: `small`'s oracle, 64 rows), and prior-level Bayes by particle learning
(`particles`: N = 4,096 state paths on 8 rows of `small`, as the yardsticks run it), and the
exact task posterior in float64 as the probes' beliefs compute it (`posterior_8192`: 64 rows, a
chunk of the beliefs, of the mixture of 8,192 HMMs of `diversity-8192`). Each pair times this checkout's call and the
other's back to back, in alternating order; the ratio of a pair (before / ours) is taken within
it, so a machine that changes speed between pairs (these machines do, by up to 2.5x) moves both
sides of a pair alike. Reported per shape: the median and the quartiles of the pairs' ratios,
and each side's median call time. Writes results/filter_before.json (or results/NAME.json).
"""

from __future__ import annotations

import argparse
import importlib
import time

import numpy as np
import torch
from common import write_result
from peer_filter import SHAPES, build_shape, load_checkout, ours

import hmm_datasets


def paired_seconds(first, second, pairs: int) -> np.ndarray:
    """`[pairs, 2]`: seconds of `first` and of `second` in each pair, their order alternating."""
    seconds = np.empty((pairs, 2))
    for pair in range(pairs):
        order = (0, 1) if pair % 2 == 0 else (1, 0)
        for side in order:
            call = (first, second)[side]
            start = time.perf_counter()
            call()
            seconds[pair, side] = time.perf_counter() - start
    return seconds


MEMORIES = (1, 2, 4, 8, 16, 32)  # Lemma 1's, as a study measures it
WINDOW_SHAPES = {"window_512": ("mixture_512", 8), "window_oracle": ("oracle_small", 64)}  # shape, rows


def windows(module, name: str):
    """The fixed-memory predictors of every memory on a window shape's rows, stacked."""
    shape_name, rows = WINDOW_SHAPES[name]
    shape = build_shape(shape_name)
    ids = shape.ids[:rows]
    predictor = module.BayesOptimalPredictor(shape.params, device="cpu")
    if shape.tasks is None:
        return lambda: torch.stack(list(predictor.truncated_by_memory(ids, MEMORIES).values()))
    tasks = shape.tasks[:rows]
    return lambda: torch.stack(list(predictor.truncated_oracle_by_memory(ids, tasks, MEMORIES).values()))


def particles(module, rows: int = 8, num_particles: int = 4096):
    """Prior-level Bayes by particle learning on `rows` rows of `small`'s test split."""
    config = module.get_preset("small")
    params = module.sample_hmm_params(config)
    ids = module.generate_rows(config, module.SamplingTables.from_params(params), "test", 0, rows)[
        "input_ids"
    ]
    predictor = importlib.import_module(f"{module.__name__}.particle").ParticlePriorPredictor(
        config, num_particles
    )
    return lambda: predictor.next_token_probs(ids)


def posterior(module, rows: int = 64):
    """The float64 task posterior of the 8,192-HMM mixture on `rows` rows of its test split."""
    config = module.get_preset("diversity-8192")
    params = module.sample_hmm_params(config)
    tables = module.SamplingTables.from_params(params)
    ids = module.generate_rows(config, tables, "test", 0, rows)["input_ids"]
    predictor = module.BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    return lambda: predictor.task_posterior(ids)


def calls(name: str, before):
    """This checkout's call and the other's, for one shape."""
    if name == "posterior_8192":
        return posterior(hmm_datasets), posterior(before)
    if name == "particles":
        return particles(hmm_datasets), particles(before)
    if name in WINDOW_SHAPES:
        return windows(hmm_datasets, name), windows(before, name)
    shape = build_shape(name)
    return ours(hmm_datasets, shape), ours(before, shape)


def bench(name: str, before, pairs: int) -> dict:
    new, old = calls(name, before)
    difference = float((new() - old()).abs().max())  # also the warm-up
    seconds = paired_seconds(new, old, pairs)
    ratio = seconds[:, 1] / seconds[:, 0]
    return {
        "max_abs_difference": difference,
        "pairs": pairs,
        "before_over_ours": {
            q: float(np.quantile(ratio, p)) for q, p in (("q25", 0.25), ("median", 0.5), ("q75", 0.75))
        },
        "median_seconds": {
            "ours": float(np.median(seconds[:, 0])),
            "before": float(np.median(seconds[:, 1])),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="another checkout whose hmm_datasets to time")
    parser.add_argument(
        "--shapes",
        nargs="+",
        default=list(SHAPES),
        choices=[*SHAPES, *WINDOW_SHAPES, "particles", "posterior_8192"],
    )
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1: as a study's workers)")
    parser.add_argument(
        "--result", default="filter_before", help="name of the results file (results/NAME.json)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    before = load_checkout(args.before)
    results = {}
    for name in args.shapes:
        slow = ("mixture_512", "mixture_paper", "window_512", "posterior_8192")
        pairs = max(3, args.pairs // 10) if name in slow else args.pairs
        results[name] = r = bench(name, before, pairs)
        ratio, ms = r["before_over_ours"], r["median_seconds"]
        print(
            f"{name:15} ours {ms['ours'] * 1e3:9.1f} ms  before {ms['before'] * 1e3:9.1f} ms  "
            f"ours faster by {ratio['median']:.2f}x [{ratio['q25']:.2f}, {ratio['q75']:.2f}]",
            flush=True,
        )
    record = {"before": args.before, "threads": args.threads, "shapes": results}
    print(f"results in {write_result(args.result, record)}")


if __name__ == "__main__":
    main()
