"""Training throughput of HMMRoFormer vs stock `transformers.RoFormerForCausalLM` of the same size.

    python benchmarks/bench_model.py [--sizes small mid] [--lengths 136 400] [--rounds 4]

One training step = forward + backward + fused AdamW step on rows of a corpus: 136 tokens
(`small` preset rows) and 400 (`paper` rows), about 4,350 tokens per step. For each size,
row length and precision (float32; bfloat16 autocast, which uses the CPU's AMX units when
it has them) the models are timed round-robin in one process, so that a slow spell of
this shared machine hits all of them: tokens/s is each model's fastest window. Peak
memory is measured apart, one fresh subprocess per model: the process's peak resident set
(VmHWM) after a few float32 steps, imports included (the same for every model). Linux only.
Writes results/model_throughput.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import write_result

SIZES = {
    "small": {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4},
    "mid": {"hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 8},
}
TOKENS_PER_STEP = 4352  # 32 rows of 136 tokens
VOCAB = 17
MODELS = ("hmm_roformer_sdpa", "hmm_roformer_eager", "stock_roformer")
PRECISIONS = ("float32", "bfloat16")


def build(kind: str, size_name: str, max_positions: int) -> torch.nn.Module:
    sizes = SIZES[size_name]
    common = {
        "vocab_size": VOCAB,
        "intermediate_size": 4 * sizes["hidden_size"],
        "max_position_embeddings": max_positions,
    }
    if kind == "stock_roformer":
        from transformers import RoFormerConfig, RoFormerForCausalLM

        config = RoFormerConfig(
            **sizes, **common, is_decoder=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
        return RoFormerForCausalLM(config)
    from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM

    model = HMMRoFormerForCausalLM(HMMRoFormerConfig(**sizes, **common))
    model.set_attn_implementation("sdpa" if kind.endswith("sdpa") else "eager")
    return model


class Trainer:
    """One model, its fused AdamW and a fixed batch: `step()` is one training step."""

    def __init__(self, kind: str, size_name: str, length: int, precision: str):
        torch.manual_seed(0)
        self.model = build(kind, size_name, max(length, 512)).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.batch = torch.randint(0, VOCAB, (max(1, TOKENS_PER_STEP // length), length))
        self.precision = precision

    def step(self) -> None:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if self.precision == "bfloat16" else None
        with autocast or contextlib.nullcontext():
            loss = self.model(input_ids=self.batch, labels=self.batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def throughput(size_name: str, length: int, precision: str, rounds: int, steps: int) -> dict[str, float]:
    trainers = {kind: Trainer(kind, size_name, length, precision) for kind in MODELS}
    for trainer in trainers.values():
        for _ in range(2):
            trainer.step()  # warm-up
    best = dict.fromkeys(MODELS, float("inf"))
    for _ in range(rounds):
        for kind, trainer in trainers.items():
            start = time.perf_counter()
            for _ in range(steps):
                trainer.step()
            best[kind] = min(best[kind], time.perf_counter() - start)
    return {kind: steps * trainers[kind].batch.numel() / seconds for kind, seconds in best.items()}


def peak_memory_child(kind: str, size_name: str, length: int) -> float:
    """Peak resident memory (MiB) of a fresh process that trains `kind` for 3 steps.

    Read from VmHWM, which `exec` resets (`ru_maxrss` keeps the parent's peak across it).
    """
    torch.set_num_threads(2)
    trainer = Trainer(kind, size_name, length, "float32")
    for _ in range(3):
        trainer.step()
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--lengths", nargs="+", type=int, default=[136, 400])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        kind, size_name, length = args.memory_child
        print(json.dumps(peak_memory_child(kind, size_name, int(length))))
        return
    torch.set_num_threads(2)
    runs = []
    print(
        f"{'size':6}{'L':>5} {'precision':10}"
        + "".join(f"{kind:>22}" for kind in MODELS)
        + f"{'ours/stock':>12}"
    )
    for size_name in args.sizes:
        for length in args.lengths:
            memory = {}
            for kind in MODELS:
                command = [sys.executable, __file__, "--memory-child", kind, size_name, str(length)]
                result = subprocess.run(command, capture_output=True, text=True, check=True)
                memory[kind] = json.loads(result.stdout.strip().splitlines()[-1])
            for precision in PRECISIONS:
                rates = throughput(size_name, length, precision, args.rounds, args.steps)
                ratio = rates["hmm_roformer_sdpa"] / rates["stock_roformer"]
                runs.append(
                    {
                        "size": size_name,
                        "seq_len": length,
                        "precision": precision,
                        "tokens_per_s": rates,
                        "sdpa_vs_stock": ratio,
                        "best_ours_vs_stock": max(rates[k] for k in MODELS[:2]) / rates["stock_roformer"],
                        "peak_rss_mib_float32": memory,
                    }
                )
                print(
                    f"{size_name:6}{length:>5} {precision:10}"
                    + "".join(f"{rates[kind]:>16.0f} tok/s" for kind in MODELS)
                    + f"{ratio:>11.2f}x"
                )
            print(
                f"{'':22}peak RSS, float32: " + ", ".join(f"{kind} {memory[kind]:.0f} MiB" for kind in MODELS)
            )
    path = write_result(
        "model_throughput",
        {
            "tokens_per_step": TOKENS_PER_STEP,
            "vocab_size": VOCAB,
            "optimizer": "AdamW(fused=True)",
            "runs": runs,
        },
    )
    print(f"results in {path}")


if __name__ == "__main__":
    main()
