"""Shared plumbing for the benchmarks: machine description and result files."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"


def machine() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
    }


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **result}, indent=2) + "\n")
    return path


def timed(function, *args, repeats: int = 1, **kwargs):
    """(result, seconds): the fastest of `repeats` runs, which is the least disturbed by
    whatever else this shared machine runs (both sides of a ratio get the same treatment)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = function(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return out, best


def preset_test_rows(preset: str, num_rows: int):
    """`(config, params, ids [B, L], scored [B, L-1], segment [L-1])` of the first `num_rows` rows
    of a preset's test split, generated from its own HMMs: the rows the yardstick benchmarks
    score, with the positions scored (next token an observation) and each prediction's segment."""
    import numpy as np

    import hmm_datasets
    from hmm_datasets.memory import scored_positions
    from hmm_datasets.sampler import SamplingTables, generate_rows

    config = hmm_datasets.get_preset(preset)
    params = hmm_datasets.sample_hmm_params(config)
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, num_rows)["input_ids"]
    ids = torch.as_tensor(ids.astype(np.int64))
    scored = scored_positions(ids, config.delimiter)
    segment = torch.as_tensor(hmm_datasets.SampleLayout.from_config(config).segment_ids()[1:]).long()
    return config, params, ids, scored, segment
