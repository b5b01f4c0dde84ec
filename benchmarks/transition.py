"""When does a 4 x 64 network pass the in-context ladder on `diversity-8192`? HMMRoFormer as the
study configures it, each of its differences from a Llama of the same size changed alone, the
Llama itself, and the learning rate and warm-up: the step at which each passes the unigram and
the bigram rungs (KL(Bayes ‖ model) on the same validation rows below the rung's).

    python benchmarks/transition.py                              # every variant, seed 0, 3,000 steps
    python benchmarks/transition.py --schedule cosine --out benchmarks/results/transition_cosine.json
    python benchmarks/transition.py --variants hmm_roformer llama --seeds 0 1
    python benchmarks/transition.py --jobs 2                     # two runs side by side, one thread each

Each run is `scripts/train.py configs/study.yaml` with the variant's overrides (`--corpus.preset
diversity-8192 --model.num_hidden_layers 4`, evaluation every `--eval-steps` on the first
`--eval-rows` validation rows, one checkpoint kept), in `runs/transition/<variant>-seed<s>`. The
learning rate is constant after its warm-up by default: a cosine decay to 0 at `--steps` ties
the transition to the horizon (under cosine to 3,000 steps neither HMMRoFormer nor its untied
twin passed the bigram rung, while the study's 8,000-step cosine run passed it near step 3,000).
A finished run's curve lands in `benchmarks/results/transition.json` at once, and a run found
there is not trained again: the benchmark resumes where it stopped (a run stopped mid-training
resumes from its checkpoint). Writes the JSON and `transition.png` (KL against steps, the rungs
as lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "results" / "transition.json"
RUNS = ROOT / "runs" / "transition"
CORPUS = "diversity-8192"
RUNGS = ("unigram", "bigram", "ppm3")
# name -> (what it changes, the overrides on top of configs/study.yaml at 4 layers)
VARIANTS = {
    "hmm_roformer": (
        "the study's HMMRoFormer (pre-norm, tied embeddings, GELU, LayerNorm eps 1e-12, biases)",
        [],
    ),
    "untied": ("input and output embeddings untied, as Llama's", ["--model.tie_word_embeddings", "false"]),
    "norm_eps": ("LayerNorm eps 1e-6 (Llama's RMSNorm eps)", ["--model.layer_norm_eps", "1e-6"]),
    "silu": ("SiLU in the MLP instead of GELU (Llama's activation, ungated)", ["--model.hidden_act", "silu"]),
    "no_bias": ("no biases in the attention projections, as Llama's", ["--model.attention_bias", "false"]),
    "lr_1e-3": ("learning rate 1e-3 instead of 2e-3", ["--training.learning_rate", "1e-3"]),
    "warmup_500": ("500 warm-up steps instead of 100", ["--training.warmup_steps", "500"]),
    "llama": (
        "a Llama of the same size (RMSNorm, gated SiLU MLP, untied, no biases)",
        ["--model.model_type", "llama", "--model.norm_placement", "null"],
    ),
}


def train_command(
    folder: Path, variant: str, seed: int, steps: int, eval_steps: int, eval_rows: int, schedule: str
) -> list[str]:
    """The `scripts/train.py` command of one run into `folder` (resuming where a checkpoint is)."""
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), str(ROOT / "configs" / "study.yaml")]
    command += ["--corpus.preset", CORPUS, "--model.num_hidden_layers", "4", "--training.seed", str(seed)]
    command += ["--training.max_steps", str(steps), "--training.eval_steps", str(eval_steps)]
    command += ["--training.save_steps", str(eval_steps), "--training.save_total_limit", "1"]
    command += ["--run.eval_rows", str(eval_rows), "--training.output_dir", str(folder)]
    command += [
        "--training.report_to",
        "none",
        "--training.lr_scheduler_type",
        schedule,
        *VARIANTS[variant][1],
    ]
    return command + (["--resume"] if any(folder.glob("checkpoint-*")) else [])


def kl_curve(folder: Path) -> dict[str, list[float]]:
    """Step and KL(Bayes ‖ model) on the test sequence at every evaluation of a finished run."""
    states = sorted(
        folder.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1])
    )
    history = json.loads(states[-1].read_text())["log_history"]
    rows = [h for h in history if "eval_icl/test_kl_bayes_model" in h]
    return {"step": [h["step"] for h in rows], "kl": [h["eval_icl/test_kl_bayes_model"] for h in rows]}


def rung_kls(eval_rows: int) -> dict[str, float]:
    """KL(Bayes ‖ rung) of the ladder's rungs on the test sequence of the runs' validation rows,
    scored as the runs score the model (`hmm_datasets.scoring.in_context_scores`)."""
    import numpy as np
    import torch

    import hmm_datasets
    from hmm_datasets.corpus import open_corpus
    from hmm_datasets.predictors import in_context_predictor
    from hmm_datasets.scoring import in_context_scores

    corpus = open_corpus(CORPUS)
    rows = corpus.splits["validation"].select(range(eval_rows)).with_format("numpy")
    ids, tasks = np.stack(rows["input_ids"]), np.asarray(rows["task_id"])
    bayes = hmm_datasets.BayesOptimalPredictor(corpus.params)
    bayes_probs, oracle_probs = bayes.next_token_probs(ids), bayes.oracle_next_token_probs(ids, tasks)
    out = {}
    for name in RUNGS:
        probs = in_context_predictor(name, corpus.config.vocab_size).next_token_probs(
            torch.as_tensor(ids), tasks
        )
        scores = in_context_scores(
            probs.clamp_min(1e-30).log(), ids, bayes_probs, oracle_probs, corpus.layout
        )
        out[name] = scores["test"]["kl_bayes_model"]
    return out


def levels(rungs: dict[str, float]) -> dict[str, float]:
    """The KL levels a run is timed at: the rungs, and halfway from the unigram rung to the bigram
    rung (where the in-context bigram phase has begun; added after reading the first two runs, in
    which 3,000 steps ended mid-jump)."""
    return {**rungs, "halfway to bigram": (rungs["unigram"] + rungs["bigram"]) / 2}


def passing_step(curve: dict[str, list[float]], level: float) -> int | None:
    """The first evaluated step whose KL lies below `level` (None: not within the run)."""
    return next((step for step, kl in zip(curve["step"], curve["kl"]) if kl < level), None)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, (name, run) in enumerate(sorted(results["runs"].items())):
        ax.plot(run["curve"]["step"], run["curve"]["kl"], color=f"C{index % 10}", label=name, lw=1.2)
    for name, kl in results["rungs"].items():
        ax.axhline(kl, color="grey", ls=":", lw=0.8)
        ax.text(ax.get_xlim()[1], kl, f" {name}", va="center", fontsize=7)
    ax.set_xlabel("training step (32 rows of 136 tokens)")
    ax.set_ylabel("KL(Bayes ‖ model), test sequence, nats/token")
    ax.set_title(f"4 x 64 networks on {CORPUS}: when each passes the in-context ladder", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-steps", type=int, default=250)
    parser.add_argument("--eval-rows", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side, one thread each")
    parser.add_argument(
        "--schedule",
        default="constant_with_warmup",
        help="the learning rate's schedule (a Trainer lr_scheduler_type)",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="the results' JSON (the figure beside it)")
    parser.add_argument("--runs", type=Path, default=RUNS, help="where the runs' folders go")
    args = parser.parse_args()
    out, lock = args.out, threading.Lock()
    results = json.loads(out.read_text()) if out.is_file() else {}
    setup = {
        "corpus": CORPUS,
        "steps": args.steps,
        "eval_steps": args.eval_steps,
        "eval_rows": args.eval_rows,
    }
    if results.get("setup", setup) != setup:
        print(
            f"error: {out} holds runs of other settings ({results['setup']}); move it away first",
            file=sys.stderr,
        )
        return 2
    results.setdefault("setup", setup)
    results.setdefault("variants", {name: words for name, (words, _) in VARIANTS.items()})
    results.setdefault("runs", {})
    if "rungs" not in results:
        results["rungs"] = rung_kls(args.eval_rows)
    todo = [(v, s) for v in args.variants for s in args.seeds if f"{v}-seed{s}" not in results["runs"]]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def run(job: tuple[str, int]) -> None:
        variant, seed = job
        folder = args.runs / f"{variant}-seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "train.log", "a") as log:
            command = train_command(
                folder, variant, seed, args.steps, args.eval_steps, args.eval_rows, args.schedule
            )
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=environment, check=False)
        if done.returncode != 0:
            print(f"{variant} seed {seed} failed: see {folder / 'train.log'}", file=sys.stderr)
            return
        curve = kl_curve(folder)
        passes = {name: passing_step(curve, kl) for name, kl in results["rungs"].items()}
        with lock:  # the runs side by side write one file, each after its own run: resumable
            results["runs"][f"{variant}-seed{seed}"] = {
                "variant": variant,
                "seed": seed,
                "curve": curve,
                "passes": passes,
                "final_kl": curve["kl"][-1],
            }
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{variant} seed {seed}: passes {passes}", flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(run, todo))
    for run_result in results["runs"].values():  # every level, for runs recorded before it was
        run_result["passes"] = {
            name: passing_step(run_result["curve"], kl) for name, kl in levels(results["rungs"]).items()
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    if results["runs"]:
        plot(results, out.with_suffix(".png"))
    names = list(levels(results["rungs"]))
    print(f"{'run':<22} " + " ".join(f"{name[:8]:>8}" for name in names) + "  final KL")
    for name, run_result in sorted(results["runs"].items()):
        passes = " ".join(f"{str(run_result['passes'][level]):>8}" for level in names)
        print(f"{name:<22} {passes}  {run_result['final_kl']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
