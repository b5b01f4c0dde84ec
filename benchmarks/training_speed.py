"""Training speed of the study's networks on this machine's cores, and its fraction of the peak.

    python benchmarks/training_speed.py [--depths 4 16] [--steps 30] [--rounds 3]

The step is the study's without its data path: forward + backward + fused AdamW on a fixed
batch of 32 rows of 136 tokens (`configs/inference.yaml`'s network: width 64, 4 heads, float32,
sdpa; vocabulary 11 as in the diversity corpora). Three layouts of the same math on the whole
machine, each in fresh processes started together, so that they share nothing but the cores:

- `two_processes`: what `scripts/study.py --jobs 2` does on 2 cores, two models side by side,
  one thread each (the throughput of the pair);
- `one_process`: one model with every core's thread;
- `two_processes_compiled`: as `two_processes`, each model `torch.compile`d (its compile time
  left out: the first steps are warm-up).

tokens/s is the fastest window of `--steps` steps over `--rounds` windows; FLOP/s counts 6
flops per parameter and token for the matrices (embeddings and the tied head included) plus
the attention's scores and mixing (6 x 2 x layers x positions x width per token, causal half
not subtracted), against the peak of the cores in use: `cpu MHz` of /proc/cpuinfo x 32 fp32
flops per cycle (two 8-wide FMA units, AVX2) x cores. Writes results/training_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS, LENGTH, VOCAB, WIDTH, HEADS = 32, 136, 11, 64, 4
LAYOUTS = {  # name -> (processes, threads each, compiled)
    "two_processes": (2, 1, False),
    "one_process": (1, 2, False),
    "two_processes_compiled": (2, 1, True),
}
FLOPS_PER_CYCLE = 32  # fp32, two 8-wide FMA units


def child(depth: int, threads: int, compiled: bool, steps: int, rounds: int) -> dict:
    """In a fresh process: the fastest window's tokens/s of one model's training steps."""
    import torch

    from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = HMMRoFormerConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        num_hidden_layers=depth,
        num_attention_heads=HEADS,
        intermediate_size=4 * WIDTH,
        max_position_embeddings=512,
    )
    model = HMMRoFormerForCausalLM(config).train()
    model.set_attn_implementation("sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batch = torch.randint(0, VOCAB, (ROWS, LENGTH))
    forward = torch.compile(model) if compiled else model

    def step() -> None:
        forward(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(5):
        step()  # warm-up (and compilation)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, time.perf_counter() - start)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    return {"tokens_per_s": steps * ROWS * LENGTH / best, "parameters": parameters}


def flops_per_token(parameters: int, depth: int) -> float:
    return 6 * parameters + 6 * 2 * depth * LENGTH * WIDTH


def cpu_mhz() -> float:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    return max(float(line.split(":")[1]) for line in lines if line.startswith("cpu MHz"))


def measure(depth: int, layout: str, steps: int, rounds: int) -> dict:
    """The layout's processes started together; their tokens/s summed."""
    processes, threads, compiled = LAYOUTS[layout]
    command = [sys.executable, __file__, "--child", str(depth), str(threads), str(int(compiled))]
    command += ["--steps", str(steps), "--rounds", str(rounds)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    started = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(processes)
    ]
    results = [json.loads(process.communicate()[0].strip().splitlines()[-1]) for process in started]
    if any(process.returncode for process in started):
        raise SystemExit(f"error: a {layout} process failed at depth {depth}")
    return {
        "tokens_per_s": sum(result["tokens_per_s"] for result in results),
        "parameters": results[0]["parameters"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        depth, threads, compiled = args.child
        print(json.dumps(child(depth, threads, bool(compiled), args.steps, args.rounds)))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_result

    cores = os.cpu_count()
    peak = cpu_mhz() * 1e6 * FLOPS_PER_CYCLE * cores
    runs = []
    print(f"{'layers':>6} {'layout':24}{'tokens/s':>10}{'GFLOP/s':>9}{'of peak':>9}{'vs today':>9}")
    for depth in args.depths:
        rates = {layout: measure(depth, layout, args.steps, args.rounds) for layout in LAYOUTS}
        today = rates["two_processes"]["tokens_per_s"]
        for layout, rate in rates.items():
            flops = rate["tokens_per_s"] * flops_per_token(rate["parameters"], depth)
            run = {
                "layers": depth,
                "layout": layout,
                "tokens_per_s": rate["tokens_per_s"],
                "gflops_per_s": flops / 1e9,
                "fraction_of_peak": flops / peak,
                "vs_two_processes": rate["tokens_per_s"] / today,
                "parameters": rate["parameters"],
            }
            runs.append(run)
            print(
                f"{depth:>6} {layout:24}{run['tokens_per_s']:>10.0f}{run['gflops_per_s']:>9.1f}"
                f"{run['fraction_of_peak']:>9.1%}{run['vs_two_processes']:>8.2f}x"
            )
    path = write_result(
        "training_speed",
        {
            "batch": [ROWS, LENGTH],
            "cores": cores,
            "cpu_mhz": cpu_mhz(),
            "peak_gflops_per_s": peak / 1e9,
            "steps": args.steps,
            "rounds": args.rounds,
            "runs": runs,
        },
    )
    print(f"results in {path}")


if __name__ == "__main__":
    main()
