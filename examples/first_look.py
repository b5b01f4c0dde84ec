# %% [markdown]
# # A first look at hmm-roformer
#
# The whole idea of arXiv 2506.01919 at toy size, offline, in well under a minute on 2 CPU cores:
#
# 1. a corpus of rows drawn from a mixture of hidden Markov models (HMMs),
# 2. the exact Bayes-optimal predictor of that mixture, the yardstick of every number,
# 3. a tiny HMMRoFormer trained for a few steps and placed on the in-context ladder,
# 4. one layerwise probe, and a figure saved to a file.
#
# Run it from the clone, with the environment active (`. .venv/bin/activate`):
# `python examples/first_look.py`. It is a percent-format script: VS Code shows "Run Cell"
# above each `# %%`, and `jupytext --to notebook examples/first_look.py` makes a `.ipynb` of it.
# See docs/notebook.md.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a name)
import json
import os

# Tiny tensors gain nothing from more threads, and threads that share their cores with another
# job wait for each other at every operation (10-30x slower training measured on 2 busy cores).
# Set before numpy and torch are imported; the training command inherits it.
THREADS = os.environ.setdefault("OMP_NUM_THREADS", "1")

import subprocess
import sys
import time
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # a script saves the figure; a notebook also shows it
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

PRESET = "tiny"  # corpus, model and training of configs/tiny.yaml
MAX_STEPS = int(os.environ.get("HMM_FIRST_LOOK_STEPS", "40"))  # the tiny preset's own 40 steps
ROWS = 8  # test rows the Bayes-optimal predictor reads in step 2


def clone_root() -> Path:
    """The clone's root: the folder with configs/ and scripts/ (this file's parent's parent)."""
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "configs" / f"{PRESET}.yaml").is_file() and (folder / "scripts" / "train.py").is_file():
            return folder
    raise SystemExit("run this from the hmm-roformer clone: it needs configs/tiny.yaml and scripts/train.py")


ROOT = clone_root()
OUT = Path(os.environ.get("HMM_FIRST_LOOK_OUT", ROOT / "runs" / "first-look"))  # runs/ is git-ignored
OUT.mkdir(parents=True, exist_ok=True)
numbers: dict = {
    "preset": PRESET,
    "max_steps": MAX_STEPS,
    "threads": int(THREADS),
}  # everything printed, kept in first_look.json
started = time.perf_counter()
print(f"Everything this notebook writes goes to {OUT} (torch threads: {THREADS}).")

# %% [markdown]
# ## 1. The corpus
#
# `import hmm_datasets` registers the `hmm_mixture` builder with `datasets`; the rows are
# generated on this machine (nothing is downloaded) and cached by `datasets`.

# %%
from datasets import load_dataset

import hmm_datasets  # registers load_dataset("hmm_mixture", ...) on import

corpus = load_dataset("hmm_mixture", PRESET)
config = hmm_datasets.get_preset(PRESET)
test = corpus["test"].with_format("numpy")
N, n, T, V = config.num_demos, config.demo_length, config.test_length, config.vocab_size
print(
    f"The {PRESET} corpus has {len(corpus['train'])} train, {len(corpus['validation'])} validation and "
    f"{len(test)} test rows of {N * (n + 1) + T} tokens, drawn from a mixture of {config.num_tasks} HMMs "
    f"with {config.num_states} hidden states and {V} observation tokens (token {V} is the delimiter)."
)

row = test[0]
print(f"\nRow 0 of the test split (task_id = {int(row['task_id'])}):")
for segment in range(N + 1):
    where = row["segment_ids"] == segment
    name = f"demo {segment + 1}" if segment < N else "test"
    print(f"  {name:7} tokens  " + " ".join(f"{t:2d}" for t in row["input_ids"][where]))
    print(f"  {'':7} states  " + " ".join(f"{s:2d}" for s in row["hidden_states"][where]))
print(
    f"Row 0 was drawn from HMM {int(row['task_id'])}: {N} demonstrations of {n} tokens, each closed by the "
    f"delimiter {V} (hidden state -1), then a test sequence of {T} tokens; every segment restarts the HMM."
)
numbers["corpus"] = {
    "rows": {split: len(corpus[split]) for split in corpus},
    "row_length": int(len(row["input_ids"])),
    "row0_task_id": int(row["task_id"]),
    "row0_delimiters": int((row["input_ids"] == V).sum()),
    "row0_states_at_delimiters": sorted({int(s) for s in row["hidden_states"][row["input_ids"] == V]}),
}

# %% [markdown]
# ## 2. The exact Bayes-optimal predictor
#
# It knows the HMM parameters of the whole mixture (they come with the corpus) and runs the
# forward algorithm over every task at once: P(next token | tokens so far). The oracle is told
# each row's task. Both come from the predictor registry, beside the in-context ladder
# (predictors that read only the row's own tokens).

# %%
from hmm_datasets.predictors import reference_predictors
from hmm_datasets.scoring import next_token_scores

params = hmm_datasets.load_hmm_params(corpus)
predictors = reference_predictors(params)  # unigram, bigram, ..., ppm8, bayes, oracle
ids = np.stack(test["input_ids"][:ROWS]).astype(np.int64)  # [ROWS, L]
tasks = np.asarray(test["task_id"][:ROWS])  # [ROWS]
bayes = predictors["bayes"].next_token_probs(ids, tasks)  # [ROWS, L, V + 1]
oracle = predictors["oracle"].next_token_probs(ids, tasks)
bigram = predictors["bigram"].next_token_probs(ids, tasks)
sum_error = float((bayes.double().sum(-1) - 1).abs().max())
print(
    f"The Bayes-optimal predictor gives {tuple(bayes.shape)} probabilities (rows, positions, tokens); "
    f"each distribution sums to one within {sum_error:.1e}."
)
last = bayes[0, -2].double()  # the prediction of row 0's last token
print(
    f"Before the last token of row 0 it says P(next) = {np.round(last.numpy(), 2).tolist()}; "
    f"the token that came was {int(ids[0, -1])}, given probability {float(last[ids[0, -1]]):.2f}."
)

# the task posterior P(task | tokens so far): how fast the rows give away their HMM
posterior = hmm_datasets.BayesOptimalPredictor(params).task_posterior(ids)  # [ROWS, L, K]
on_true = posterior[np.arange(ROWS), :, tasks].double()  # [ROWS, L]
after_demo1, at_end = float(on_true[:, n].mean()), float(on_true[:, -1].mean())
print(
    f"The posterior of each row's true HMM is {1 / config.num_tasks:.3f} before any token (the prior), "
    f"{after_demo1:.3f} after the first demonstration and {at_end:.3f} at the end of the row (mean of {ROWS} rows)."
)

# scored on the test sequence only: the predictions of tokens whose segment is the test's
on_test = np.stack(test["segment_ids"][:ROWS])[:, 1:] == N  # [ROWS, L - 1]
scores = {
    name: next_token_scores(probs, ids, reference_probs=bayes)
    for name, probs in (("bayes", bayes), ("oracle", oracle), ("bigram", bigram))
}
summary = {
    name: {key: float(s[key].numpy()[on_test].mean()) for key in ("correct", "kl", "agreement")}
    for name, s in scores.items()
}
print(
    f"On the test tokens of these {ROWS} rows, top-1 accuracy: Bayes {summary['bayes']['correct']:.3f}, "
    f"oracle {summary['oracle']['correct']:.3f}, bigram counts of the row {summary['bigram']['correct']:.3f}."
)
print(
    f"KL(Bayes || Bayes) = {summary['bayes']['kl']:.6f} nats/token (a predictor against itself), "
    f"KL(Bayes || oracle) = {summary['oracle']['kl']:.4f}, KL(Bayes || bigram) = {summary['bigram']['kl']:.4f}: "
    "how many nats per token a predictor loses to the yardstick."
)
numbers["bayes"] = {
    "rows": ROWS,
    "shape": list(bayes.shape),
    "max_sum_error": sum_error,
    "posterior_prior": 1 / config.num_tasks,
    "posterior_true_task_after_demo1": after_demo1,
    "posterior_true_task_at_end": at_end,
    "test_tokens": summary,
}

# %% [markdown]
# ## 3. Train a tiny HMMRoFormer, then place it on the in-context ladder
#
# Training is `scripts/train.py` (the `accelerate launch` target of docs/training.md) on
# configs/tiny.yaml: 2 layers of width 32, batches of 16 rows. Then Figure 1's scoring
# (docs/evaluation.md) puts the model between the in-context ladder (unigram, bigram, n-grams,
# PPM-C over the row's own tokens) and Bayes, on the 64 test rows.

# %%
model_dir = OUT / "model"
command = [sys.executable, str(ROOT / "scripts" / "train.py"), str(ROOT / "configs" / f"{PRESET}.yaml")]
command += ["--training.output_dir", str(model_dir), "--training.max_steps", str(MAX_STEPS)]
command += ["--training.save_strategy", "no", "--training.report_to", "[]"]  # the final model only
tic = time.perf_counter()
done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
train_seconds = time.perf_counter() - tic
if done.returncode != 0:
    raise SystemExit(f"training failed ({' '.join(command)}):\n{done.stderr[-3000:]}")
print("The training command's own summary, on the test sequences of 64 validation rows:")
print(done.stdout[done.stdout.rindex("trained ") :].rstrip())
print(
    f"Trained {MAX_STEPS} steps in {train_seconds:.1f} s (interpreter start-up included); "
    f"the checkpoint is {model_dir}."
)

# %%
from hmm_datasets import checkpoint_corpus
from modeling_hmmroformer.experiments.analyses.evaluation import figure1, load_evaluation_data
from probing import load_hmm_roformer

model = load_hmm_roformer(model_dir, trust_remote_code=True)
data = load_evaluation_data(checkpoint_corpus(model_dir), rows=64)  # the test rows it never saw
result = figure1(model, data, progress=False)
ladder = result.ladder
print(
    f"The ladder on {result.num_rows} test rows, all {N} demonstrations (test tokens 1..{T - 1}), lowest first:"
)
for rung in ladder["rungs"]:
    kl = "" if rung["kl_bayes"] is None else f"   KL(Bayes || it) {rung['kl_bayes']:.3f}"
    print(f"  {rung['label']:28} top-1 {rung['accuracy']:.3f}{kl}")
best = next(r for r in ladder["rungs"] if r["name"] == ladder["best_in_context"])
closed = ladder["gap_closed"]["model"]
where = "below" if ladder["below_in_context"]["model"] else "above"
print(
    f"The model is {where} the best in-context predictor ({best['label']}, {best['accuracy']:.3f}): it closes "
    f"{closed:.2f} of the gap from it to Bayes (0 at that rung, 1 at Bayes, negative below); "
    + (
        f"a model below the ladder is not yet doing HMM inference, as expected of {MAX_STEPS} steps at toy size "
        "(the small preset's model is above its ladder: docs/evaluation.md)."
        if closed < 0
        else "it does better than counting the row's tokens."
    )
)
vs = result.model_vs_bayes
print(
    f"Over the whole test sequence the model's argmax agrees with Bayes's on {vs['agreement']:.3f} of the "
    f"tokens, and it loses KL(Bayes || model) = {vs['kl_bayes_model']:.3f} nats/token to it."
)
numbers["ladder"] = {"rows": result.num_rows, **ladder, "model_vs_bayes": vs, "train_seconds": train_seconds}

# %% [markdown]
# ## 4. A layerwise probe
#
# `probing.run.run_probing` (docs/probing.md) fits linear probes on each layer's hidden states
# (layer 0 is the token embedding) for fresh rows of the mixture's tasks. Here, the task probe:
# can a linear map read which HMM produced the row? Beside it its floor (the majority task of
# the current token) and its ceiling (the exact Bayes task posterior at the same positions).

# %%
from hmm_datasets import open_corpus
from probing.run import ProbeConfig, run_probing

probe_config = ProbeConfig(  # configs/tiny.yaml's analysis sizes, one probe split
    num_probe_tasks=8,
    rows_per_task=16,
    positions_per_row=16,
    distances=[1, 2, 3],
    num_resamples=100,
    shuffle_rows=32,
    max_iter=50,
    num_splits=1,
)
probed = run_probing(model, open_corpus(checkpoint_corpus(model_dir)), probe_config, progress=False)
records = probed.results.record_set()
task = records.curve("task", "accuracy")
state = records.curve("hidden_state", "accuracy")
floor = records.find("task", "token_baseline", network="floor").value
chance = records.find("task", "chance", network="floor").value
ceiling = records.find("task", "bayes_optimal_accuracy", network="ceiling").value
for layer, task_value, state_value in zip(task["layer"], task["value"], state["value"]):
    name = "embeddings" if layer == 0 else f"layer {int(layer)}"
    print(f"  {name:10}  task probe {task_value:.3f}   hidden-state probe {state_value:.3f}")
print(
    f"A linear probe reads the row's HMM (of {probe_config.num_probe_tasks}) at {task['value'][0]:.3f} from the "
    f"embeddings and {task['value'][-1]:.3f} from the last layer; the current token alone gives {floor:.3f}, "
    f"chance {chance:.3f}, and the exact Bayes posterior {ceiling:.3f}."
)
numbers["probe"] = {
    "layers": task["layer"].astype(int).tolist(),
    "task_accuracy": task["value"].tolist(),
    "hidden_state_accuracy": state["value"].tolist(),
    "task_token_baseline": floor,
    "task_chance": chance,
    "task_bayes_ceiling": ceiling,
}

# %% [markdown]
# ## 5. One figure

# %%
figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for name in ("bayes", "oracle", "model", "bigram", "unigram"):
    left.plot(result.demo_counts, result.by_num_demos[name]["accuracy"], marker="o", label=result.label(name))
left.set_xticks(result.demo_counts)
left.set(xlabel="demonstrations in the row", ylabel="top-1 accuracy, test tokens 1..T-1", title="Figure 1")
left.legend(fontsize=8)
right.fill_between(task["layer"], task["ci_low"], task["ci_high"], alpha=0.2)
right.plot(task["layer"], task["value"], marker="o", label="task probe")
right.plot(state["layer"], state["value"], marker="s", label="hidden-state probe (within task)")
right.axhline(floor, color="gray", linestyle="--", label="task: current token only")
right.axhline(ceiling, color="black", linestyle=":", label="task: Bayes posterior")
right.set(xlabel="layer (0 = embeddings)", ylabel="probe accuracy", title="Layerwise probes", ylim=(0, 1))
right.set_xticks(task["layer"])
right.legend(fontsize=8, loc="center right")
figure.tight_layout()
figure_path = OUT / "first_look.png"
figure.savefig(figure_path, dpi=100)
if "ipykernel" in sys.modules:
    plt.show()
else:
    plt.close(figure)
print(f"The figure (accuracy against demonstrations, and the probes per layer) is {figure_path}.")

numbers["figure"] = str(figure_path)
numbers["seconds"] = time.perf_counter() - started
(OUT / "first_look.json").write_text(json.dumps(numbers, indent=1) + "\n")
print(f"Done in {numbers['seconds']:.0f} s; every number printed above is in {OUT / 'first_look.json'}.")
