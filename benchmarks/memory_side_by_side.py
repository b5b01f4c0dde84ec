"""Two models' memory stages side by side: the waiting worker idle, or computing the next memory.

    python benchmarks/memory_side_by_side.py --tasks 8192 --rows 16

A study's `--jobs 2` analyses its two models at once, and both bisect their memory between the
same grid points of the memory-L Bayes predictors, which the workers share through a folder
(`hmm_datasets.cache`): the first to ask for an L computes it, the other waits. Here two spawned
processes (one thread each, as a study's workers) run `memory_equivalent` for two stand-in
models on the test rows of a `diversity-<tasks>` mixture, from a shared folder that already
holds Lemma 1's grid (1, 2, 4, 8; the study's Lemma 1 stage computes it before), twice: with
the waiting worker idle (`likely_next_memory` answering none, the code before), and with
it computing the memory its bisection will likely need next (the code now). The stand-in models
are the memory-7 Bayes predictor and its mixture with the memory-6 one (99:1), so that both
bisect 6, then 7, as the first K = 8192 models of the inference study did. Both sides start
from copies of the same folder and must give the same records. Writes
results/memory_side_by_side.json: per side each worker's seconds (the stage: the longer one; the
speed-up is theirs) and the pair's wall time with the workers' start.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import preset_test_rows, write_result

from hmm_datasets import BayesOptimalPredictor, cache
from hmm_datasets.memory import memory_bayes_probs
from modeling_hmmroformer.experiments.analyses import memory as memory_module

GRID = (1, 2, 4, 8)


def worker(folder: str, params, ids, scored, model_full, bayes_full, waits: bool) -> tuple[dict, float]:
    """One model's `memory_equivalent` in a worker sharing `folder`; (record, seconds)."""
    torch.set_num_threads(1)
    os.environ[cache.CACHE_ENV] = folder
    if waits:  # the code before: nothing to do meanwhile, a worker waits for the other's memory
        memory_module.likely_next_memory = lambda *bracket: None
    started = time.perf_counter()
    record = memory_module.memory_equivalent(params, ids, scored, model_full, bayes_full, list(GRID))
    return record, time.perf_counter() - started


def side(template: Path, models: list, params, ids, scored, bayes_full, waits: bool) -> dict:
    """Both models at once from a copy of the shared folder `template`."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "shared"
        shutil.copytree(template, folder)
        context = multiprocessing.get_context("spawn")
        started = time.perf_counter()
        with concurrent.futures.ProcessPoolExecutor(len(models), mp_context=context) as pool:
            futures = [
                pool.submit(worker, str(folder), params, ids, scored, model, bayes_full, waits)
                for model in models
            ]
            done = [future.result() for future in futures]
        return {
            "wall_seconds": time.perf_counter() - started,
            "worker_seconds": [seconds for _, seconds in done],
            "records": [record for record, _ in done],
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=8192, choices=(32, 512, 8192), help="mixture size K")
    parser.add_argument("--rows", type=int, default=16, help="test rows (a study uses 128)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, params, ids, scored, _ = preset_test_rows(f"diversity-{args.tasks}", args.rows)
    started = time.perf_counter()
    bayes_full = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64).next_token_probs(ids)
    memory_6, memory_7 = (memory_bayes_probs(params, ids, [m])[m] for m in (6, 7))  # not shared: the models
    models = [memory_7, 0.99 * memory_7 + 0.01 * memory_6]
    with tempfile.TemporaryDirectory() as scratch:
        template = Path(scratch) / "shared"
        os.environ[cache.CACHE_ENV] = str(template)
        cache.clear()
        memory_bayes_probs(params, ids, list(GRID))  # Lemma 1's grid, as the study's stage leaves it
        del os.environ[cache.CACHE_ENV]
        setup = time.perf_counter() - started
        print(f"setup (full Bayes, the models, the grid): {setup:.1f} s", flush=True)
        sides = {}
        for name, waits in (("waiting", True), ("computing the next", False)):
            sides[name] = side(template, models, params, ids, scored, bayes_full, waits)
            print(
                f"{name:20} pair {sides[name]['wall_seconds']:6.1f} s  workers "
                f"{', '.join(f'{s:.1f}' for s in sides[name]['worker_seconds'])} s",
                flush=True,
            )
    same = json.dumps(sides["waiting"]["records"]) == json.dumps(sides["computing the next"]["records"])
    print(f"same records: {same}; memories evaluated {sides['waiting']['records'][0]['memories']}")
    path = write_result(
        "memory_side_by_side",
        {
            "tasks": args.tasks,
            "rows": args.rows,
            "setup_seconds": setup,
            "same_records": same,
            "speed_up": max(sides["waiting"]["worker_seconds"])
            / max(sides["computing the next"]["worker_seconds"]),
            "sides": sides,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
