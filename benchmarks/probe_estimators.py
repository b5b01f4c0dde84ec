"""What a closed-form probe would cost and change: the probe stage with today's estimator and with
a least-squares one, on the same checkpoint, rows and bootstrap resamples.

Today every classification probe is a multinomial logistic regression fitted by batched L-BFGS
(`probing.probes.fit_probes`, at most 100 steps). The analysis-speed issue asks for one
16-layer model analysed in 30 s on 2 cores with every deterministic number unchanged; the
probe fits of the model and its twin alone take about 80 s (benchmarks/analysis_speed.py). A
closed-form estimator would remove most of that, but it is a different estimator: its
accuracies are not the recorded ones. This benchmark measures by how much, so that the choice
can be made on numbers.

The alternative (`least_squares_probes`): ridge regression of the one-hot label on the same
standardised features, with the same L2 penalty, solved exactly (one linear solve per probe, all
probes of a layer at once), answering the largest output. Everything else (positions, splits,
baselines, bootstrap draws, patterns) is the same code.

    python benchmarks/probe_estimators.py --model runs/study-default/models/depth16-seed0/training

Writes results/probe_estimators.json: the seconds of the probe stage (captures, probes, belief
probes, shuffle test; no twin) with each estimator, the differences of every accuracy record
(largest and mean absolute, per target), and the numbers of Figure 3(a) and 3(b) under each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch


def least_squares_probes(features: torch.Tensor, labels: torch.Tensor, num_classes: torch.Tensor, settings):
    """`probing.probes.Probes` of B ridge regressions of the one-hot labels on standardised
    features (`fit_probes`' arguments): W = (correlation + l2 I)^-1 E[z (y - mean y)], bias the
    label frequencies. `features` `[N, D]` shared or `[B, N, D]`; `labels [B, N]`, -1 unlabelled."""
    from probing.probes import Probes, masked_moments

    valid = labels >= 0
    mean, scale, correlation = masked_moments(features, valid)
    classes = int(num_classes.max())
    weight = valid.to(features.dtype) / valid.sum(1, keepdim=True).clamp_min(1)  # [B, N]
    onehot = torch.nn.functional.one_hot(labels.clamp_min(0), classes).to(features.dtype)
    weighted = onehot * weight[..., None]  # [B, N, C]
    frequency = weighted.sum(1)  # [B, C]
    if features.dim() == 2:
        moment = torch.einsum("nd,bnc->bdc", features, weighted)
    else:
        moment = torch.bmm(features.transpose(1, 2), weighted)
    cross = (moment - mean[..., None] * frequency[:, None]) * scale[..., None]  # E[z y^T], z standardised
    eye = torch.eye(features.shape[-1], dtype=features.dtype, device=features.device)
    slopes = torch.linalg.solve(correlation + settings.l2 * eye, cross)
    allowed = torch.arange(classes, device=labels.device)[None] < num_classes[:, None]
    return Probes(torch.cat([slopes, frequency[:, None]], 1), mean, scale, allowed)


def probe_stage(model, corpus, estimator) -> tuple[dict, float]:
    """The probe stage's results with `probing.layerwise`'s fit replaced by `estimator`, and its seconds."""
    from probing import layerwise
    from probing.run import ProbeConfig, run_probing

    saved = layerwise.fit_probes
    layerwise.fit_probes = estimator
    try:
        started = time.perf_counter()
        result = run_probing(model, corpus, ProbeConfig(), progress=False)
        return result.results.to_dict(), time.perf_counter() - started
    finally:
        layerwise.fit_probes = saved


def accuracy_differences(reference: list[dict], other: list[dict]) -> dict:
    """Per target, the largest and mean |difference| of the probe accuracies (every layer and
    position group), and over all targets."""
    key = ("target", "metric", "layer", "head", "positions", "network")
    theirs = {tuple(r[k] for k in key): r["value"] for r in other}
    found: dict[str, list[float]] = {}
    for r in reference:
        accuracy = r["metric"] in ("accuracy", "accuracy_before_final_norm") and r["network"] == "trained"
        if accuracy and r["value"] is not None:
            found.setdefault(r["target"], []).append(abs(theirs[tuple(r[k] for k in key)] - r["value"]))
    every = [d for values in found.values() for d in values]
    summary = {t: {"max": max(v), "mean": float(np.mean(v)), "records": len(v)} for t, v in found.items()}
    return {"by_target": summary, "max": max(every), "mean": float(np.mean(every)), "records": len(every)}


def pattern_numbers(results: dict) -> dict:
    """The Figure 3(a) and 3(b) numbers `probing` reports (no verdicts: those are the claims
    module's)."""
    a, b = results["patterns"]["figure3a"], results["patterns"]["figure3b"]
    return {
        "mean_reach_difference": a["mean_reach_difference"],
        "task_first_layer_fraction": a["task_first_layer_fraction"],
        "task_last_layer_fraction": a["task_last_layer_fraction"],
        "accuracy_drop": b["accuracy_drop"],
        "peak_layer_shift": b["peak_layer_shift"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="a trained checkpoint (a study model's training folder)"
    )
    parser.add_argument("--corpus", help="the corpus (default: the checkpoint's own)")
    args = parser.parse_args(argv)

    from common import write_result

    import modeling_hmmroformer  # noqa: F401  (registers the model)
    from hmm_datasets.corpus import checkpoint_corpus, open_corpus
    from probing.capture import load_hmm_roformer
    from probing.probes import fit_probes

    model = load_hmm_roformer(args.model)
    corpus = open_corpus(args.corpus or checkpoint_corpus(args.model))
    lbfgs, lbfgs_s = probe_stage(model, corpus, fit_probes)
    exact, exact_s = probe_stage(model, corpus, least_squares_probes)
    result = {
        "model": str(Path(args.model)),
        "num_hidden_layers": model.config.num_hidden_layers,
        "probe_stage_s": {"lbfgs_logistic": lbfgs_s, "least_squares": exact_s},
        "probe_fits_s": {
            "lbfgs_logistic": lbfgs["timings_s"]["probes"],
            "least_squares": exact["timings_s"]["probes"],
        },
        "accuracy_difference": accuracy_differences(lbfgs["records"], exact["records"]),
        "patterns": {"lbfgs_logistic": pattern_numbers(lbfgs), "least_squares": pattern_numbers(exact)},
    }
    print(f"probe stage: L-BFGS {lbfgs_s:.1f} s, least squares {exact_s:.1f} s")
    print(f"largest accuracy difference {result['accuracy_difference']['max']:.3f}")
    print(f"wrote {write_result('probe_estimators', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
