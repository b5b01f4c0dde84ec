"""Calibration runs of the next study's recipe (docs/study.md "The recipe"): the study's 4 x 64
HMMRoFormer trained on `diversity-512` and `diversity-8192` under a candidate recipe, each
keeping its network at 13 steps (step 0 and 12 log-spaced), then every kept network placed on
the yardsticks of its corpus (`hmm-development`: KL to the oracle, mixture Bayes, prior-level
Bayes and every rung of the in-context ladder, on seen- and unseen-task rows).

    python benchmarks/calibration.py                        # both corpora, seed 0, two runs side by side
    python benchmarks/calibration.py --corpora diversity-8192 --seeds 0 1
    python benchmarks/calibration.py --corpora diversity-8192 --recipes w256-lr2e-3 w256-lr1e-3 w256-lr5e-4 --jobs 3 --threads 4   # a GPU box (benchmarks/calibration_gpu.sh)

Each run is `scripts/train.py configs/study.yaml` with the recipe's overrides in
`runs/calibration/<corpus>-<recipe>-seed<s>/` (a stopped run resumes from its checkpoint), then
`scripts/development.py` over its kept networks (the yardsticks of each corpus, 16,384
particles, computed once, beside the trainings, in `runs/calibration/yardsticks-<corpus>/`). The results land in
`benchmarks/results/calibration.json` as each run finishes (each run's development figure in
`benchmarks/results/calibration/`); a run found there is not redone. Measured 2026-11-28 on 2 AMD
cores: the two runs side by side, one thread each, beside the yardsticks of both corpora (two
more processes for the first 70 minutes) and the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "calibration.json"
RUNS = ROOT / "runs" / "calibration"
CORPORA = ("diversity-512", "diversity-8192")
WSD12K = [
    "--training.max_steps", "12000",
    "--training.warmup_steps", "500",
    "--training.lr_scheduler_type", "warmup_stable_decay",
    "--training.lr_scheduler_kwargs", '{"num_decay_steps": 2000}',
]  # fmt: skip
# name -> (what it is, the overrides on top of configs/study.yaml)
RECIPES = {
    "wsd12k": (
        "lr 2e-3, 500 warm-up steps, constant, then a cosine decay over the last 2,000 of 12,000 steps",
        WSD12K,
    ),
    # Width 256 (4 heads of 64, the paper's head size), the GPU part of the inference study: the
    # 64-wide rate is not known to carry over (Adam's step per weight does not shrink with width),
    # so three rates bracket it, on the same schedule.
    **{
        f"w256-lr{rate}": (
            f"width 256 (4 heads of 64), lr {rate}, the wsd12k schedule",
            [*WSD12K, "--model.hidden_size", "256", "--training.learning_rate", rate],
        )
        for rate in ("2e-3", "1e-3", "5e-4")
    },
}


def train_command(folder: Path, corpus: str, recipe: str, seed: int) -> list[str]:
    """The `scripts/train.py` command of one run into `folder` (resuming where a checkpoint is)."""
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), str(ROOT / "configs" / "study.yaml")]
    command += ["--corpus.preset", corpus, "--model.num_hidden_layers", "4", "--training.seed", str(seed)]
    command += ["--training.eval_steps", "500", "--training.save_steps", "500"]
    command += ["--training.save_total_limit", "1", "--training.report_to", "none"]
    command += ["--run.eval_rows", "128", "--run.checkpoints", "13", "--run.first_checkpoint_step", "50"]
    command += ["--training.output_dir", str(folder), *RECIPES[recipe][1]]
    return command + (["--resume"] if any(folder.glob("checkpoint-*")) else [])


def compute_yardsticks(corpus: str, folder: Path, done: threading.Lock) -> None:
    """The corpus's yardsticks computed into `folder` as `scripts/development.py` would (its
    default rows and particles), in this process beside the trainings, then `done` released
    (where this fails, the first placement computes them)."""
    from hmm_datasets.corpus import open_corpus
    from modeling_hmmroformer.experiments.commands.development import yardsticks

    try:
        yardsticks(open_corpus(corpus), folder, rows=128, particles=16384)
    finally:
        done.release()


def development_command(folder: Path, corpus: str) -> list[str]:
    """The `scripts/development.py` command that places a run's kept networks on the yardsticks."""
    return [
        sys.executable,
        str(ROOT / "scripts" / "development.py"),
        "--checkpoints",
        str(folder / "development"),
        "--data",
        corpus,
        "--yardsticks",
        str(folder.parent / f"yardsticks-{corpus}"),
        "--out",
        str(folder / "development.json"),
        "--quiet",
    ]


def gap_closed(place: dict, ladder: dict) -> float | None:
    """The fraction of the gap from the best rung to prior-level Bayes that a network closes on
    the split's scale (KL from its reference; 0 at the rung, 1 at prior-level Bayes), None where
    the prior's KL was not measured."""
    references = ladder["references"][place["reference"]]
    if "prior" not in references:
        return None
    rung, prior = place["best_rung_kl"], references["prior"]
    return (rung - place["distances"][place["reference"]]) / (rung - prior)


def table(results: dict) -> str:
    """Per run and kept network: per split, KL from the reference beside the best rung's, the gap
    closed to prior-level Bayes, and the label."""
    lines = [f"{'run':<32} {'step':>6}  {'seen: KL  rung  gap  label':<40} unseen: KL  rung  gap  label"]
    for name, run in sorted(results["runs"].items()):
        development = run["development"]
        for network in development["networks"]:
            line = f"{name:<32} {network['step']:>6}"
            for split in ("test", "test_unseen"):
                place = network["splits"][split]
                gap = gap_closed(place, development["ladder"][split])
                kl = place["distances"][place["reference"]]
                gap_text = "  n/a" if gap is None else f"{gap:+5.2f}"
                line += f"  {kl:6.3f} {place['best_rung_kl']:6.3f} {gap_text} {place['label']:<18}"
            lines.append(line)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    parser.add_argument("--recipes", nargs="+", default=["wsd12k"], choices=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side")
    parser.add_argument("--threads", type=int, default=1, help="threads per run (OMP_NUM_THREADS)")
    parser.add_argument("--train-only", action="store_true", help="train, do not place the networks")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--runs", type=Path, default=RUNS)
    args = parser.parse_args()
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"recipes": {}, "runs": {}}
    results["recipes"].update({name: words for name, (words, _) in RECIPES.items()})
    lock = threading.Lock()
    # one run at a time places its networks on a corpus, once its yardsticks are computed
    placing = {corpus: threading.Lock() for corpus in args.corpora}
    threads = str(args.threads)
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "HF_HUB_OFFLINE": "1",
    }
    jobs = [(c, r, s) for c in args.corpora for r in args.recipes for s in args.seeds]
    todo = [job for job in jobs if "-".join(map(str, job)) not in results["runs"]]

    def run(job: tuple[str, str, int]) -> None:
        corpus, recipe, seed = job
        name = f"{corpus}-{recipe}-seed{seed}"
        folder = args.runs / name
        folder.mkdir(parents=True, exist_ok=True)
        commands = [(train_command(folder, corpus, recipe, seed), contextlib.nullcontext())]
        if not args.train_only:
            commands.append((development_command(folder, corpus), placing[corpus]))
        with open(folder / "run.log", "a") as log:
            for command, turn in commands:
                with turn:
                    done = subprocess.run(
                        command, stdout=log, stderr=subprocess.STDOUT, env=environment, check=False
                    )
                if done.returncode != 0:
                    print(f"{name} failed: see {folder / 'run.log'}", file=sys.stderr)
                    return
                print(f"{name}: {Path(command[1]).stem} done", flush=True)
        if args.train_only:
            return
        development = json.loads((folder / "development.json").read_text())
        trained = json.loads((folder / "train_results.json").read_text())
        figures = args.out.with_suffix("")
        figures.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "development.png", figures / f"development-{name}.png")
        with lock:
            results["runs"][f"{corpus}-{recipe}-{seed}"] = {
                "corpus": corpus,
                "recipe": recipe,
                "seed": seed,
                "train_seconds": trained["train_runtime"],
                "train_tokens": trained["train_tokens"],
                "development": development,
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{name}: placed", flush=True)

    for corpus in sorted({job[0] for job in todo} if not args.train_only else set()):
        placing[corpus].acquire()  # no placement on a corpus before its yardsticks are there
        folder = args.runs / f"yardsticks-{corpus}"
        threading.Thread(target=compute_yardsticks, args=(corpus, folder, placing[corpus])).start()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(run, todo))
    if results["runs"]:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
