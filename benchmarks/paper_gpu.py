"""The paper's experiment at the paper's size on one GPU, measured: `scripts/reproduce.py --preset
paper` plus the numbers that say how fast it ran.

    python benchmarks/paper_gpu.py                      # on a GPU box (benchmarks/paper_gpu.sh installs first)
    python benchmarks/paper_gpu.py --preset tiny --out /tmp/tiny --results /tmp/tiny.json   # CPU, seconds

Runs every stage of the reproduction that is not complete yet in `--out` (default
runs/reproduce-<preset>; a rerun resumes), then measures in this process:
- the bf16 matrix-product rate of this device (an N x N x N product, the mean of timed runs
  after warm-ups), the yardstick of the model FLOPs utilisation (MFU);
- training throughput from the run's own `train_results.json` (token positions / training
  runtime, evaluations and compilation included) and its MFU: training FLOPs per token
  6 N + 12 L d T (N parameters, L layers, width d, row length T: matrix products of the
  forward and backward passes, attention scores included) times tokens/s, over the measured rate;
  the same at the steady pace (the median step, without start-up, evaluations and saves);
- the exact Bayes-optimal predictor on the whole test split, timed on its own;
- peak GPU memory of training (its own record) and of the whole pipeline (this process: training,
  evaluation and probes; a folder resumed after training holds the analyses' alone).
Writes the JSON (`--results`, default benchmarks/results/<preset>_gpu.json), copies REPORT.md,
results.json and the figures to results/<preset>/ (`--publish`), and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import machine  # noqa: E402

import hmm_datasets  # noqa: E402
from modeling_hmmroformer.experiments import names  # noqa: E402
from modeling_hmmroformer.experiments.analyses.evaluation import load_evaluation_data  # noqa: E402
from modeling_hmmroformer.experiments.running.engine import RunState  # noqa: E402
from modeling_hmmroformer.experiments.running.pipeline import run_pipeline  # noqa: E402
from modeling_hmmroformer.experiments.running.plan import make_pipeline  # noqa: E402
from modeling_hmmroformer.experiments.running.reproduction_plan import REPRODUCTION  # noqa: E402
from modeling_hmmroformer.experiments.settings import PIPELINES, REPRODUCTIONS  # noqa: E402

TARGETS = {"train_s": 300, "mfu": 0.40, "bayes_test_split_s": 30}  # issue 16, on one H100-class GPU
PUBLISHED = (
    names.REPORT_MD,
    names.RESULTS_JSON,
    names.state_file("reproduce"),
    names.FIGURE1,
    names.PROBES,
)


def matmul_tflops(device: str, size: int, repeats: int = 10, warmups: int = 3) -> float:
    """Measured bf16 N x N x N matrix-product rate of `device`, in TFLOP/s (random data)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(warmups):
        a @ b
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e12


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def training_flops_per_token(model_config: dict, num_parameters: int, sequence_length: int) -> float:
    """6 N + 12 L d T: forward and backward matrix products per token, attention scores included."""
    layers, width = model_config["num_hidden_layers"], model_config["hidden_size"]
    return 6 * num_parameters + 12 * layers * width * sequence_length


def time_bayes_on_test_split(corpus_folder: Path) -> dict:
    """Seconds of the Bayes-optimal predictor on every test row (its own timing, after one warm-up row)."""
    data = load_evaluation_data(str(corpus_folder))
    ids = data.input_ids
    bayes = hmm_datasets.BayesOptimalPredictor(data.params)
    bayes.next_token_probs(ids[:1])
    _synchronize(bayes.device.type)
    if bayes.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    probs = bayes.next_token_probs(ids)
    _synchronize(bayes.device.type)
    seconds = time.perf_counter() - started
    return {
        "rows": int(ids.shape[0]),
        "tokens": int(ids.size),
        "seconds": seconds,
        "tokens_per_s": ids.size / seconds,
        "device": str(bayes.device),
        "memory_budget_gib": bayes.memory_budget_bytes / 2**30,
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30
        if bayes.device.type == "cuda"
        else None,
        "max_normalisation_error": float((probs.double().sum(-1) - 1).abs().max()),  # NaN if any is
    }


def summarize(out: Path, matmul: float, bayes: dict, pipeline_peak_gib: float | None) -> dict:
    """The measured numbers of a finished reproduction folder."""
    state = RunState.from_dict(json.loads((out / REPRODUCTION.state_file).read_text()))
    results = json.loads((out / "results.json").read_text())
    trained = json.loads((out / "model" / "train_results.json").read_text())
    model_config = json.loads((out / "model" / "config.json").read_text())
    corpus = results["corpus"]
    sequence_length = corpus["num_demos"] * (corpus["demo_length"] + 1) + corpus["test_length"]
    tokens_per_s = trained["train_tokens"] / trained["train_runtime"]
    flops = training_flops_per_token(model_config, results["model"]["num_parameters"], sequence_length)
    mfu = flops * tokens_per_s / (matmul * 1e12)
    pace = steady_pace(trained, flops, matmul)
    measured = {
        "stage_seconds": state.seconds(),
        "train_runtime_s": trained["train_runtime"],
        "train_tokens": trained["train_tokens"],
        "train_tokens_per_s": tokens_per_s,
        "training_flops_per_token": flops,
        "bf16_matmul_tflops": matmul,
        "mfu": mfu,
        **pace,
        "bayes_test_split": bayes,
        "peak_gpu_memory_gib": {
            "training": trained.get("peak_gpu_memory_gib"),
            "pipeline": pipeline_peak_gib,
        },
        "in_context": results["in_context"]["headline"] if results["in_context"] else None,
        "claims": results["claims"],
    }
    measured["targets"] = TARGETS
    measured["targets_met"] = {
        "train_s": trained["train_runtime"] <= TARGETS["train_s"],
        "mfu": mfu >= TARGETS["mfu"],
        "bayes_test_split_s": bayes["seconds"] <= TARGETS["bayes_test_split_s"],
    }
    return measured


def steady_pace(trained: dict, flops_per_token: float, matmul: float) -> dict:
    """Start-up, the steady step and its MFU, from the step times training recorded."""
    if "steady_step_s" not in trained:
        return {}
    tokens_per_s = trained["train_tokens"] / trained["train_steps"] / trained["steady_step_s"]
    return {
        "first_step_s": trained["first_step_s"],
        "steady_step_s": trained["steady_step_s"],
        "beyond_steady_s": trained["beyond_steady_s"],
        "steady_tokens_per_s": tokens_per_s,
        "steady_mfu": flops_per_token * tokens_per_s / (matmul * 1e12),
    }


def format_table(measured: dict) -> str:
    rows = [
        ("training", f"{measured['train_runtime_s']:.0f} s for {measured['train_tokens']:,} token positions"),
        ("training throughput", f"{measured['train_tokens_per_s']:,.0f} tokens/s"),
        ("bf16 matmul rate (measured)", f"{measured['bf16_matmul_tflops']:.3g} TFLOP/s"),
        ("MFU", f"{measured['mfu']:.1%} (target {TARGETS['mfu']:.0%})"),
        *(
            [
                ("start-up (first step: compilation)", f"{measured['first_step_s']:.1f} s"),
                ("steady step", f"{measured['steady_step_s'] * 1e3:.1f} ms"),
                ("evaluations, saves, stalls", f"{measured['beyond_steady_s']:.1f} s"),
                ("MFU at the steady pace", f"{measured['steady_mfu']:.1%}"),
            ]
            if "steady_mfu" in measured
            else []
        ),
        (
            "Bayes-optimal, whole test split",
            f"{measured['bayes_test_split']['seconds']:.1f} s for {measured['bayes_test_split']['rows']} rows",
        ),
        *((f"stage {stage}", f"{seconds:.1f} s") for stage, seconds in measured["stage_seconds"].items()),
    ]
    memory = measured["peak_gpu_memory_gib"]
    if memory["training"] is not None:
        rows.append(("peak GPU memory, training", f"{memory['training']:.1f} GiB"))
    if memory["pipeline"] is not None:
        rows.append(("peak GPU memory, whole pipeline", f"{memory['pipeline']:.1f} GiB"))
    rows += [(f"Fig {c['figure']}: {c['claim']}", c["label"]) for c in measured["claims"]]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def publish(out: Path, destination: Path) -> None:
    """Copy the report, the JSON and the figures (not the corpus or checkpoints) to `destination`."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED:
        source = out / name
        if source.is_dir():
            shutil.copytree(source, destination / name, dirs_exist_ok=True)
        else:
            shutil.copy2(source, destination / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="paper", choices=REPRODUCTIONS)
    parser.add_argument("--out", help="reproduction folder (default runs/reproduce-<preset>)")
    parser.add_argument("--results", help="JSON to write (default benchmarks/results/<preset>_gpu.json)")
    parser.add_argument("--publish", help="copy REPORT.md, JSON and figures here (default results/<preset>)")
    parser.add_argument(
        "--matmul-size", type=int, help="N of the bf16 rate probe (default 8192 on a GPU, 512 on CPU)"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out or ROOT / "runs" / f"reproduce-{args.preset}")
    run_pipeline(make_pipeline(PIPELINES[args.preset], out, plan=REPRODUCTION, progress=not args.quiet))
    pipeline_peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    bayes = time_bayes_on_test_split(out / "corpus")
    matmul = matmul_tflops(device, args.matmul_size or (8192 if device == "cuda" else 512))
    measured = {"machine": machine(), "preset": args.preset, **summarize(out, matmul, bayes, pipeline_peak)}
    results_path = Path(args.results or ROOT / "benchmarks" / "results" / f"{args.preset}_gpu.json")
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(measured, indent=2) + "\n")
    publish(out, Path(args.publish or ROOT / "results" / args.preset))
    print(f"\nwrote {results_path}\n")
    print(format_table(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
