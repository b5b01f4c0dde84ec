"""A model's kept networks read against its twin: the twin's readings reused, and computed anew.

    python benchmarks/probe_readings.py --model runs/inference-512-draw0/models/depth4-seed1

`--model` is a study's model folder whose training kept networks (`run.checkpoints`); its
corpus is the study's (`<study>/corpus`). As a study's development probes do, each network of
`--steps` is read (`probing.run.run_probing`, the default `ProbeConfig`) against the network
the training started from (step 0), one after another in this process, twice: with the twin's
probes and the split curves of the twin and the token floor kept from one reading to the next
(`probing.reuse`, what a study does), and with them forgotten before every reading (what it did
before). Both sides read the same networks, the reused side first after one warm-up reading
(the model itself, as the probe stage reads it before the development probes), and each
reading's records, split curves and patterns are compared across the sides. Writes
results/probe_readings.json: per side and step the seconds and the run's own timings.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from common import write_result

import modeling_hmmroformer  # noqa: F401  (registers the model)
from hmm_datasets.corpus import open_corpus
from probing import reuse
from probing.capture import load_causal_lm
from probing.config import ProbeConfig
from probing.run import run_probing

COMPARED = ("records", "splits", "patterns")


def read(network, corpus, twin) -> tuple[dict, float]:
    started = time.perf_counter()
    results = run_probing(
        network, corpus, ProbeConfig(), untrained_model=twin, progress=False
    ).results.to_dict()
    return results, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a study's model folder (models/depth<L>-seed<s>)")
    parser.add_argument("--steps", type=int, nargs="+", default=[604, 12000], help="kept networks read")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: as a study's workers)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = Path(args.model)
    development = model / "training" / "development"
    corpus = open_corpus(str(model.parents[1] / "corpus"))
    twin = load_causal_lm(str(development / "step-0000000"))
    networks = {step: load_causal_lm(str(development / f"step-{step:07d}")) for step in args.steps}
    _, warm_up = read(load_causal_lm(str(model / "training")), corpus, twin)
    sides: dict[str, dict] = {}
    for side in ("reused", "computed"):
        sides[side] = {}
        for step, network in networks.items():
            if side == "computed":
                reuse.clear()
            results, seconds = read(network, corpus, twin)
            sides[side][step] = {"seconds": seconds, "timings_s": results["timings_s"], "results": results}
            print(f"{side:9} step {step:6}: {seconds:6.1f} s  {results['timings_s']}", flush=True)
    same = {
        step: all(
            json.dumps(sides["reused"][step]["results"][key])
            == json.dumps(sides["computed"][step]["results"][key])
            for key in COMPARED
        )
        for step in args.steps
    }
    record = {
        "model": str(model),
        "steps": args.steps,
        "warm_up_seconds": warm_up,
        "same_records": same,
        "sides": {
            side: {
                str(step): {k: v for k, v in reading.items() if k != "results"}
                for step, reading in by_step.items()
            }
            for side, by_step in sides.items()
        },
    }
    print(f"same records, splits and patterns: {same}")
    print(f"results in {write_result('probe_readings', record)}")


if __name__ == "__main__":
    main()
