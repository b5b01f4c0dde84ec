"""The study's training, before and after: the same runs of `scripts/train.py` at a baseline
commit and at this tree, in one benchmark run.

    python benchmarks/training_before_after.py [--baseline 4f18a7e] [--depths 4 16]

Each side trains the study's network (`configs/study.yaml`, which both commits share: width 64,
4 heads, fp32, sdpa, fused AdamW, batch 32 rows of 136 tokens of the `small` corpus) through the
whole `Trainer` path as `scripts/study.py --jobs 2` lays it out on 2 cores: two processes
started together, one thread each (seeds 0 and 1), evaluation and checkpoints off. The
baseline (default 4f18a7e, the commit whose study speed the issue measured: 3.5-4 steps/s per
process at 4 layers) is extracted with `git archive` and imported alone, as in
`analysis_speed.py`. A side's rate is read by a callback added to its `Trainer` (the same for
both commits): steps per second from the end of step `SKIPPED_STEPS` to the last step, so the
start-up (corpus loading, the first optimizer steps) is left out. Before any timed run, each
side trains two steps alone, which generates its corpus. The sides alternate for `--rounds`
rounds (default 2) and each side's fastest round counts, as in the other benchmarks of this
shared machine.

FLOP/s counts as `training_speed.py` does (6 per parameter and token, plus the attention's
scores and mixing), against the nominal fp32 peak of the cores. Writes
results/training_before_after.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis_speed import baseline_tree, without_editable_install
from training_speed import FLOPS_PER_CYCLE, cpu_mhz, flops_per_token

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "4f18a7e"
ROWS, LENGTH = 32, 136  # configs/study.yaml's batch of the `small` corpus's rows
SKIPPED_STEPS = 10
STEPS = {4: 500, 16: 150}  # about two minutes of each network's training


# ---- one training process (imports whichever tree PYTHONPATH names) ------------------------
def side_main(argv: list[str]) -> int:
    """Trains the study's network as `scripts/train.py` does and prints its steady rate."""
    without_editable_install()
    depth, steps, seed, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    import runpy

    import transformers

    clock = {"params": 0}

    class StepClock(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            clock["params"] = sum(parameter.numel() for parameter in model.parameters())

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == SKIPPED_STEPS:
                clock["start"] = time.perf_counter()
            clock["end"], clock["steps"] = time.perf_counter(), state.global_step - SKIPPED_STEPS

    original_init = transformers.Trainer.__init__

    def with_clock(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.add_callback(StepClock())

    transformers.Trainer.__init__ = with_clock
    sys.argv = ["scripts/train.py", "configs/study.yaml", "--model.num_hidden_layers", str(depth)]
    sys.argv += ["--training.max_steps", str(steps), "--training.seed", str(seed)]
    sys.argv += ["--training.eval_strategy", "no", "--training.save_strategy", "no"]
    sys.argv += ["--training.output_dir", out, "--training.report_to", "none"]
    sys.argv += ["--training.logging_steps", "100000"]
    try:
        runpy.run_path("scripts/train.py", run_name="__main__")
    except SystemExit as stopped:
        if stopped.code:
            raise
    steps_per_s = clock["steps"] / (clock["end"] - clock["start"]) if "start" in clock else None
    print(json.dumps({"steps_per_s": steps_per_s, "parameters": clock["params"]}))
    return 0


# ---- the harness -----------------------------------------------------------------------------
def trainings(tree: Path, depth: int, steps: int, seeds: list[int], scratch: Path) -> list[dict]:
    """`len(seeds)` trainings of `tree`'s code started together, one thread each; their rates."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "OMP_NUM_THREADS": "1",
        "TQDM_DISABLE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    started = []
    for seed in seeds:
        out = scratch / f"depth{depth}-seed{seed}-{time.monotonic_ns()}"
        command = [sys.executable, __file__, "--side", str(depth), str(steps), str(seed), str(out)]
        log = (scratch / f"{out.name}.log").open("w")  # a file: a full pipe would stall the training
        started.append((subprocess.Popen(command, cwd=tree, env=env, stdout=log, stderr=log, text=True), log))
    results = []
    for process, log in started:
        process.wait()
        log.close()
        printed = Path(log.name).read_text()
        if process.returncode != 0:
            raise SystemExit(f"a training of the tree at {tree} failed:\n{printed[-3000:]}")
        results.append(json.loads(printed.strip().splitlines()[-1]))
    return results


def pair_rate(results: list[dict], depth: int, peak: float) -> dict:
    """The pair's tokens/s and its fraction of the cores' peak."""
    tokens_per_s = sum(result["steps_per_s"] for result in results) * ROWS * LENGTH
    flops = flops_per_token(results[0]["parameters"], depth)
    return {
        "steps_per_s_each": [result["steps_per_s"] for result in results],
        "tokens_per_s": tokens_per_s,
        "gflops_per_s": tokens_per_s * flops / 1e9,
        "fraction_of_peak": tokens_per_s * flops / peak,
        "parameters": results[0]["parameters"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", default=BASELINE, help="the commit to compare with (default: %(default)s)"
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 16], choices=sorted(STEPS))
    parser.add_argument(
        "--steps",
        type=int,
        help=f"steps of every training (default: {STEPS} by depth); more than {SKIPPED_STEPS}",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds of both sides; each side's fastest counts"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1.")
    if args.steps is not None and args.steps <= SKIPPED_STEPS:
        parser.error(
            f"--steps {args.steps}: give more than {SKIPPED_STEPS} (the steps left out as start-up)."
        )
    steps = {depth: args.steps or STEPS[depth] for depth in args.depths}
    from common import write_result

    peak = cpu_mhz() * 1e6 * FLOPS_PER_CYCLE * os.cpu_count()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"baseline": baseline_tree(Path(scratch), args.baseline), "current": ROOT}
        for tree in trees.values():
            trainings(tree, 4, 2, [0], Path(scratch))  # generates the side's corpus
        for depth in args.depths:
            for round_ in range(args.rounds):  # the sides alternate, so a slow spell hits both
                for name, tree in trees.items():
                    pair = trainings(tree, depth, steps[depth], [0, 1], Path(scratch))
                    rate = pair_rate(pair, depth, peak)
                    runs.append(
                        {"side": name, "layers": depth, "round": round_, "steps": steps[depth], **rate}
                    )
                    print(
                        f"{depth} layers, {name}, round {round_}: {rate['tokens_per_s']:,.0f} tokens/s "
                        f"({rate['fraction_of_peak']:.1%} of peak)",
                        flush=True,
                    )
    best = {}  # side -> depth -> its fastest round
    for run in runs:
        kept = best.setdefault(run["side"], {}).get(str(run["layers"]))
        if kept is None or run["tokens_per_s"] > kept["tokens_per_s"]:
            best[run["side"]][str(run["layers"])] = run
    ratios = {
        str(depth): best["current"][str(depth)]["tokens_per_s"] / best["baseline"][str(depth)]["tokens_per_s"]
        for depth in args.depths
    }
    result = {
        "baseline_commit": args.baseline,
        "batch": [ROWS, LENGTH],
        "cpu_mhz": cpu_mhz(),
        "peak_gflops_per_s": peak / 1e9,
        "skipped_steps": SKIPPED_STEPS,
        "rounds": args.rounds,
        "runs": runs,
        "best": best,
        "current_over_baseline": ratios,
    }
    print(f"current over baseline: {ratios}")
    print(f"wrote {write_result('training_before_after', result)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--side"]:
        sys.exit(side_main(sys.argv[2:]))
    sys.exit(main())
