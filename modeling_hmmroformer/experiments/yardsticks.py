"""Where a model sits between retrieving a training HMM and inferring a new one in context.

For a corpus with an unseen-task split (`num_test_unseen`), on the first rows of its `test`
split (tasks of the mixture: seen in training) and of `test_unseen` (HMMs drawn fresh from the
same prior, none in the mixture), every yardstick predicts the rows once per corpus
(`corpus_yardsticks`, a pipeline stage):

- `mixture`: the Bayes predictor over the K training HMMs, the learner that retrieves one;
- `prior`: the Bayes predictor under the HMM prior itself, the learner that infers a new HMM in
  context, estimated by particle learning (`hmm_datasets.particle`: N state paths per row, the
  HMM's parameters integrated out); a second independent particle set measures its Monte Carlo
  spread, and an estimate that has not converged is labelled so;
- `oracle`: the row's own HMM;
- `in_context`: PPM-C blending of order 3, the best rung of the in-context ladder on `small`.

`place_model` scores a model against each on test tokens 1..T-1 with all demonstrations:
KL(yardstick ‖ model) in nats/token and the model's top-1 accuracy beside each yardstick's, and
names the learner it is nearest (by KL) of `mixture` and `prior`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.corpus import Corpus
from hmm_datasets.layout import SampleLayout
from hmm_datasets.particle import ParticlePriorPredictor, convergence_report
from hmm_datasets.predictors import ppm_next_token_probs
from hmm_datasets.scoring import next_token_scores, on_test_tokens

from . import layout

SPLITS = {"test": "seen tasks", "test_unseen": "unseen tasks"}
YARDSTICKS = {
    "mixture": "mixture Bayes (retrieves a training HMM)",
    "prior": "prior-level Bayes (infers a new HMM; particle learning)",
    "oracle": "oracle (knows the row's HMM)",
    "in_context": "PPM-C blending, order 3 (in context)",
}
LEARNERS = ("mixture", "prior")  # the two learners a model is placed between
YARDSTICKS_JSON = "yardsticks.json"
YARDSTICKS_TENSORS = "yardsticks.safetensors"


def check_unseen_split(corpus: Corpus) -> None:
    """`ValueError` unless the corpus has an unseen-task split and its HMMs."""
    if corpus.unseen_params is None or corpus.config.num_test_unseen < 1:
        raise ValueError(
            f"the corpus {corpus.source} has no test_unseen split: the yardsticks need one; set "
            "--corpus.num_test_unseen (e.g. 1024), or use a diversity-* preset."
        )


def corpus_yardsticks(
    corpus: Corpus, rows: int, prior_particles: int
) -> tuple[dict, dict[str, torch.Tensor]]:
    """Every yardstick's next-token probabilities on `rows` rows of each split (float32 tensors
    `"<split>/<yardstick>"` and `"<split>/input_ids"`), and what they are (JSON-ready): the rows,
    K, the particles N, and the prior-level estimate's convergence per split (two particle sets,
    `particle.convergence_report`)."""
    check_unseen_split(corpus)
    config, vocab = corpus.config, corpus.config.vocab_size
    mixture = BayesOptimalPredictor(corpus.params)
    tensors, convergence = {}, {}
    for split in SPLITS:
        data = corpus.rows(split, rows)
        ids, tasks = data.input_ids, data.task_ids
        own = mixture if split == "test" else BayesOptimalPredictor(data.params)  # the rows' own HMMs
        prior, second = (
            ParticlePriorPredictor(config, prior_particles, seed, **particle_device()).next_token_probs(ids)
            for seed in (0, 1)
        )
        found = {
            "mixture": mixture.next_token_probs(ids),
            "prior": prior,
            "oracle": own.oracle_next_token_probs(ids, tasks),
            "in_context": ppm_next_token_probs(ids, vocab, 3),
        }
        tensors[f"{split}/input_ids"] = torch.as_tensor(ids)
        tensors.update({f"{split}/{name}": probs.float().cpu() for name, probs in found.items()})
        convergence[split] = convergence_report(config, ids, prior_particles, (0, 1), prior, second)
    facts = {
        "rows": {split: int(tensors[f"{split}/input_ids"].shape[0]) for split in SPLITS},
        "num_tasks": config.num_tasks,
        "prior_particles": int(prior_particles),
        "prior_device": particle_device().get("device", "cpu"),
        "convergence": convergence,
        "labels": YARDSTICKS,
    }
    return facts, tensors


def particle_device() -> dict:
    """Where the particles run: on a GPU when there is one (with 8 GiB of counts at once), else on
    the CPU with the predictor's default budget."""
    return {"device": "cuda", "memory_budget_bytes": 2**33} if torch.cuda.is_available() else {}


def write_yardsticks(folder: Path, facts: dict, tensors: dict[str, torch.Tensor]) -> None:
    """The yardsticks' predictions and facts into `folder`, each file whole or not at all."""
    contiguous = {name: t.contiguous() for name, t in tensors.items()}
    layout.write_atomically(folder / YARDSTICKS_TENSORS, lambda staging: save_file(contiguous, str(staging)))
    layout.write_json(folder / YARDSTICKS_JSON, facts)


def read_yardsticks(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    return json.loads((folder / YARDSTICKS_JSON).read_text()), load_file(str(folder / YARDSTICKS_TENSORS))


def test_token_mean(values: torch.Tensor, layout: SampleLayout) -> float:
    """The mean of per-position scores `[B, L-1]` over test tokens 1..T-1 of every row."""
    return float(on_test_tokens(values, layout)[:, 1:].mean())


def nearest_learner(kl: dict[str, float], spread: float) -> str:
    """The learner of `LEARNERS` a model is nearest, from its KL to each, when its lead is larger
    than the prior-level estimate's Monte Carlo `spread` on the split (the symmetric KL between two
    particle sets, `corpus_yardsticks`' convergence); else "tied": within the estimate's own error,
    the yardstick decides nothing."""
    near, far = sorted(LEARNERS, key=lambda name: kl[name])
    return near if kl[far] - kl[near] > spread else "tied"


def place_model(
    model_probs: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], layout: SampleLayout
) -> dict:
    """A model against every yardstick, per split (`model_probs`: split -> `[B, L, V+1]` on the
    split's yardstick rows): `kl` = KL(yardstick ‖ model) and `accuracy` (top-1, the model's and
    the yardstick's), on test tokens 1..T-1, and `nearest`, the learner of `LEARNERS` with the
    smaller KL (JSON-ready)."""
    out = {}
    for split in SPLITS:
        ids, model = tensors[f"{split}/input_ids"], model_probs[split]
        entry = {"model_accuracy": None, "yardsticks": {}}
        for name in YARDSTICKS:
            reference = tensors[f"{split}/{name}"].double()
            scores = next_token_scores(model, ids, reference)
            entry["model_accuracy"] = test_token_mean(scores["correct"], layout)
            entry["yardsticks"][name] = {
                "kl": test_token_mean(scores["kl"], layout),
                "accuracy": test_token_mean(next_token_scores(reference, ids)["correct"], layout),
            }
        entry["nearest"] = min(LEARNERS, key=lambda name: entry["yardsticks"][name]["kl"])
        out[split] = entry
    return out
