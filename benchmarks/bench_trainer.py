"""The whole `Trainer` loop against the raw model step: does the data path starve the model?

    python benchmarks/bench_trainer.py [--config configs/small.yaml] [--steps 40] [--rounds 3]

The raw step is the model benchmark's (`bench_model.py`): forward + backward + fused AdamW
on one fixed batch already in memory. The Trainer loop is `modeling_hmmroformer.experiments.running.training`
as `scripts/train.py` runs it: the config's corpus through the datasets -> collator ->
dataloader path, gradient clipping, the learning-rate schedule and logging (evaluation and
checkpoints off: they are not training steps). Both train the same model config on the same
batch size, in this process, in alternating windows of `--steps` steps, so a slow spell of
this shared machine hits both; each side's fastest window counts, and the first steps of
every Trainer window (dataloader start-up) are left out. Writes results/trainer_throughput.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import write_result
from transformers import TrainerCallback

from modeling_hmmroformer.experiments.running.training import build_model, prepare
from modeling_hmmroformer.experiments.settings import load_run_config

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_STEPS = 3  # per Trainer window: dataloader and optimizer start-up


class StepClock(TrainerCallback):
    """Seconds from the end of step `SKIPPED_STEPS` to the end of the last step."""

    def __init__(self):
        self.start = self.seconds = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == SKIPPED_STEPS:  # every train() call counts from 0
            self.start = time.perf_counter()
        elif state.global_step == args.max_steps:
            self.seconds = time.perf_counter() - self.start
        return control


def raw_window(model, optimizer, batch: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "configs" / "small.yaml"))
    parser.add_argument("--steps", type=int, default=40, help="steps per window")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    output_dir = tempfile.mkdtemp(prefix="bench_trainer_")
    training = {
        "output_dir": output_dir,
        "max_steps": args.steps,
        "eval_strategy": "no",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    run = load_run_config(args.config, {"training": training})
    prepared = prepare(run, resume=False)
    trainer, corpus = prepared.trainer, prepared.corpus
    clock = StepClock()
    trainer.add_callback(clock)
    batch_size = run.training["per_device_train_batch_size"]
    tokens_per_step = batch_size * corpus.config.sequence_length

    torch.manual_seed(0)
    raw_model = build_model(run, corpus.config).train()
    raw_optimizer = torch.optim.AdamW(raw_model.parameters(), lr=1e-4, fused=True)
    rows = corpus.splits["train"].select(range(batch_size)).with_format("numpy")["input_ids"]
    batch = torch.as_tensor(np.stack(rows), dtype=torch.long)
    raw_window(raw_model, raw_optimizer, batch, 2)  # warm-up

    raw_best = trainer_best = float("inf")
    for round_index in range(args.rounds):
        raw_best = min(raw_best, raw_window(raw_model, raw_optimizer, batch, args.steps) / args.steps)
        trainer.train()
        trainer_best = min(trainer_best, clock.seconds / (args.steps - SKIPPED_STEPS))
        print(
            f"round {round_index + 1}: raw {tokens_per_step / raw_best:,.0f} tok/s, "
            f"Trainer {tokens_per_step / trainer_best:,.0f} tok/s"
        )
    fraction = raw_best / trainer_best
    print(f"Trainer loop / raw model step: {fraction:.1%}")
    path = write_result(
        "trainer_throughput",
        {
            "config": str(Path(args.config).relative_to(ROOT))
            if Path(args.config).is_relative_to(ROOT)
            else args.config,
            "tokens_per_step": tokens_per_step,
            "steps_per_window": args.steps,
            "rounds": args.rounds,
            "raw_step_tokens_per_s": tokens_per_step / raw_best,
            "trainer_tokens_per_s": tokens_per_step / trainer_best,
            "trainer_fraction_of_raw": fraction,
            "target_fraction": 0.85,
        },
    )
    print(f"results in {path}")


if __name__ == "__main__":
    main()
