"""Training curves (loss, gradient norm, evaluation loss) and pace of runs, read from what
`Trainer` printed.

    python benchmarks/training_curves.py post-LN=runs/gpu_postln.log pre-LN=runs/gpu_preln.log \\
        --steps-per-epoch 4096 --out benchmarks/results/paper_gpu_training

For runs whose checkpoints are gone (a lent GPU machine keeps nothing): the console log is
all that comes back. `Trainer` prints a dict per logging interval (`{'loss': ..., 'grad_norm':
..., 'epoch': ...}`) and per evaluation (`{'eval_loss': ..., 'epoch': ...}`); the step is the
epoch times the steps per epoch (rows / global batch). The pace comes from the progress bar
(`377/4096 [01:12<...]`: steps done, seconds elapsed): when the first step ended (start-up,
compilation) and the pace between evaluations. Writes <out>.json and <out>.png.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LOGGED_DICT = re.compile(r"\{'(?:loss|eval_loss)': [^\n]*?\}")
PROGRESS = re.compile(r"(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d+)<")


def parse_trainer_log(text: str, steps_per_epoch: int) -> dict[str, list[float]]:
    """Steps, training loss and gradient norm per logging interval, evaluation loss per evaluation."""
    curves = {"step": [], "loss": [], "grad_norm": [], "eval_step": [], "eval_loss": []}
    for match in LOGGED_DICT.finditer(text.replace("\r", "\n")):
        logged = {key: float(value) for key, value in ast.literal_eval(match.group(0)).items()}
        step = round(logged["epoch"] * steps_per_epoch)
        if "loss" in logged:
            curves["step"].append(step)
            curves["loss"].append(logged["loss"])
            curves["grad_norm"].append(logged.get("grad_norm", float("nan")))
        else:
            curves["eval_step"].append(step)
            curves["eval_loss"].append(logged["eval_loss"])
    if not curves["step"]:
        raise ValueError("no training-loss lines ({'loss': ...}) found: is this the output of a Trainer run?")
    return curves


def parse_pace(text: str) -> dict[str, float]:
    """When the first step ended (s), and steps/s between evaluations, from the progress bars.

    The training bar's samples are cut into spans at every evaluation (an evaluation draws a
    bar of its own; checkpoints are saved at evaluation steps here); the pace is the steps over
    the seconds within spans, so neither start-up nor evaluations and saves count.
    """
    bars = [(int(m.group(1)), int(m.group(2)), _seconds(*m.group(3, 4, 5))) for m in PROGRESS.finditer(text)]
    total = max((bar_total for _, bar_total, _ in bars), default=0)
    spans, first_step_s = [[]], None
    for step, bar_total, seconds in bars:
        if bar_total != total:  # an evaluation's bar: the next training sample opens a span
            if spans[-1]:
                spans.append([])
        elif step >= 1:
            first_step_s = seconds if first_step_s is None else first_step_s
            spans[-1].append((step, seconds))
    steps = sum(span[-1][0] - span[0][0] for span in spans if span)
    seconds = sum(span[-1][1] - span[0][1] for span in spans if span)
    if first_step_s is None or seconds == 0:
        raise ValueError("no training progress bar (`step/total [mm:ss<...]`) found")
    return {"first_step_s": float(first_step_s), "steady_steps_per_s": steps / seconds, "total_steps": total}


def _seconds(hours: str | None, minutes: str, seconds: str) -> int:
    return 3600 * int(hours or 0) + 60 * int(minutes) + int(seconds)


def plot_curves(runs: dict[str, dict], path: Path) -> Path:
    fig, (loss_ax, norm_ax) = plt.subplots(1, 2, figsize=(11, 3.8))
    for label, curves in runs.items():
        (line,) = loss_ax.plot(curves["step"], curves["loss"], label=f"{label}: training")
        loss_ax.plot(
            curves["eval_step"], curves["eval_loss"], "o--", color=line.get_color(), label=f"{label}: eval"
        )
        norm_ax.plot(curves["step"], curves["grad_norm"], color=line.get_color(), label=label)
    loss_ax.set(xlabel="step", ylabel="loss, nats/token", title="loss")
    norm_ax.set(xlabel="step", ylabel="gradient norm (before clipping)", yscale="log", title="gradient norm")
    loss_ax.legend(fontsize=8)
    norm_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", metavar="LABEL=LOG", help="a name for the run and its console log")
    parser.add_argument("--steps-per-epoch", type=int, required=True, help="training rows / global batch")
    parser.add_argument("--out", required=True, help="path without suffix: writes <out>.json and <out>.png")
    args = parser.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, separator, log = item.partition("=")
        if not separator:
            parser.error(f"{item!r}: write each run as LABEL=LOG, for example post-LN=runs/gpu.log")
        text = Path(log).read_text()
        runs[label] = {**parse_trainer_log(text, args.steps_per_epoch), "pace": parse_pace(text)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    plot_curves(runs, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
