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
names the learner it is nearest (by KL) of `mixture` and `prior`. `yardstick_ladder` scores the
in-context ladder (`hmm_datasets.predictors.IN_CONTEXT`) and the yardsticks themselves the same
way on the same rows (KL to the oracle, the mixture and, where its predictions are at hand, the
prior), so a model's place on the ladder is decided where its yardsticks are.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.config import HMMMixtureConfig
from hmm_datasets.corpus import Corpus, CorpusRows
from hmm_datasets.layout import SampleLayout
from hmm_datasets.particle import ParticlePriorPredictor, convergence_report
from hmm_datasets.predictors import IN_CONTEXT, in_context_predictor, ppm_next_token_probs
from hmm_datasets.scoring import next_token_scores, on_test_tokens

SPLITS = {"test": "seen tasks", "test_unseen": "unseen tasks"}
YARDSTICKS = {
    "mixture": "mixture Bayes (retrieves a training HMM)",
    "prior": "prior-level Bayes (infers a new HMM; particle learning)",
    "oracle": "oracle (knows the row's HMM)",
    "in_context": "PPM-C blending, order 3 (in context)",
}
LEARNERS = ("mixture", "prior")  # the two learners a model is placed between
LADDER_REFERENCES = ("oracle", "mixture", "prior")  # what the ladder is scored against, where at hand


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
    K, the particles N, the prior-level estimate's convergence per split (two particle sets,
    `particle.convergence_report`), and the in-context ladder on the same rows (`ladder`:
    `yardstick_ladder`, the prior a reference and a predictor beside the oracle and the mixture)."""
    check_unseen_split(corpus)
    config, vocab = corpus.config, corpus.config.vocab_size
    mixture = BayesOptimalPredictor(corpus.params)
    tensors, convergence = {}, {}
    for split in SPLITS:
        data = corpus.rows(split, rows)
        ids = data.input_ids
        prior, second = (
            ParticlePriorPredictor(config, prior_particles, seed, **particle_device()).next_token_probs(ids)
            for seed in (0, 1)
        )
        exact = exact_yardsticks(data, mixture)
        found = {
            "mixture": exact["mixture"],
            "prior": prior,
            "oracle": exact["oracle"],
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
        "ladder": yardstick_ladder(corpus, rows, tensors),
    }
    return facts, tensors


def exact_yardsticks(data: CorpusRows, mixture: BayesOptimalPredictor) -> dict[str, torch.Tensor]:
    """The exact yardsticks of rows of one split: `mixture` (the Bayes predictor over the K
    training HMMs) and `oracle` (each row read with its own HMM: a mixture HMM on seen-task rows,
    the row's fresh HMM on test_unseen rows), float32 on the CPU as `corpus_yardsticks` keeps them."""
    own = mixture if data.params is mixture.params else BayesOptimalPredictor(data.params)
    found = {
        "mixture": mixture.next_token_probs(data.input_ids),
        "oracle": own.oracle_next_token_probs(data.input_ids, data.task_ids),
    }
    return {name: probs.float().cpu() for name, probs in found.items()}


def yardstick_ladder(
    corpus: Corpus,
    rows: int,
    tensors: dict[str, torch.Tensor] | None = None,
    *,
    log: Callable[[str], object] | None = None,
) -> dict:
    """The in-context ladder on the yardsticks' rows (`corpus.rows(split, rows)` of each split of
    `SPLITS`), JSON-ready: per split, `references`: {reference: {predictor: KL(reference ‖
    predictor)}} in nats/token over test tokens 1..T-1 (as `place_model` scores a model), for every
    rung of `IN_CONTEXT` and the yardsticks `mixture`, `prior` and `oracle`, against the
    references of `LADDER_REFERENCES`; and `best_in_context`: {reference: the rung nearest it}.

    The mixture's and the oracle's predictions are taken from `tensors` (`corpus_yardsticks`'
    `"<split>/<yardstick>"`, on the same rows) where it holds them, else computed; the prior's
    only come from `tensors` (particle learning is the expensive one): without them, `prior` is
    neither a reference nor a predictor. `log`, if given, is called with a line per split."""
    check_unseen_split(corpus)
    tensors = tensors or {}
    held = all(f"{split}/{name}" in tensors for split in SPLITS for name in ("mixture", "oracle"))
    mixture = None if held else BayesOptimalPredictor(corpus.params)
    out = {}
    for split in SPLITS:
        start = time.perf_counter()
        data = corpus.rows(split, rows)
        out[split] = ladder_scores(ladder_predictions(data, tensors, mixture), data.input_ids, corpus.layout)
        if log is not None:
            log(ladder_line(split, out[split], time.perf_counter() - start))
    return out


def ladder_predictions(
    data: CorpusRows, tensors: dict[str, torch.Tensor], mixture: BayesOptimalPredictor | None
) -> dict[str, torch.Tensor]:
    """Every predictor `yardstick_ladder` scores on rows of one split, by name: the rungs of
    `IN_CONTEXT`, then `mixture`, `prior` (only where `tensors` holds it) and `oracle`, from
    `tensors` where it holds them, else computed with `mixture` (`exact_yardsticks`)."""
    split, ids = data.split, torch.as_tensor(data.input_ids)
    kept = tensors.get(f"{split}/input_ids")
    if kept is not None and not torch.equal(kept.long(), ids):
        raise ValueError(f"the yardsticks' {split} rows are not the corpus's first {len(ids)} rows.")
    held = {name: tensors[f"{split}/{name}"] for name in LADDER_REFERENCES if f"{split}/{name}" in tensors}
    known = held if mixture is None else {**exact_yardsticks(data, mixture), **held}
    vocab = data.config.vocab_size
    return {
        **{
            name: in_context_predictor(name, vocab).next_token_probs(ids, data.task_ids)
            for name in IN_CONTEXT
        },
        **{name: known[name] for name in ("mixture", "prior", "oracle") if name in known},
    }


def ladder_scores(predictors: dict[str, torch.Tensor], input_ids, layout: SampleLayout) -> dict:
    """One split of `yardstick_ladder`: KL(reference ‖ predictor) for every reference of
    `LADDER_REFERENCES` among `predictors` and every predictor, and the rung of `IN_CONTEXT`
    nearest each reference."""
    references = {
        reference: {
            name: test_token_mean(
                next_token_scores(probs, input_ids, predictors[reference].double())["kl"], layout
            )
            for name, probs in predictors.items()
        }
        for reference in LADDER_REFERENCES
        if reference in predictors
    }
    best = {reference: min(IN_CONTEXT, key=lambda name: kl[name]) for reference, kl in references.items()}
    return {"references": references, "best_in_context": best}


def ladder_line(split: str, scores: dict, seconds: float) -> str:
    """`test (seen tasks): nearest rung to oracle trigram (KL 0.4812), to mixture ...; 12 s`."""
    nearest = ", ".join(
        f"to {reference} {name} (KL {scores['references'][reference][name]:.4f})"
        for reference, name in scores["best_in_context"].items()
    )
    return f"{split} ({SPLITS[split]}): nearest rung {nearest}; {seconds:.0f} s"


def check_same_corpus(facts: dict, config: HMMMixtureConfig) -> None:
    """`ValueError` unless the yardsticks' facts (`corpus_yardsticks`) were measured on a corpus
    like `config`: its K, and as many rows of each split as its first `rows` give."""
    try:
        num_tasks, rows = int(facts["num_tasks"]), {split: int(facts["rows"][split]) for split in SPLITS}
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the yardsticks' facts lack {error}: not a corpus_yardsticks file.") from None
    if num_tasks != config.num_tasks:
        raise ValueError(
            f"the yardsticks were measured on a corpus of K={num_tasks} HMMs; {config.name} has "
            f"K={config.num_tasks}: name the corpus their study used."
        )
    asked = max(rows.values())
    for split, count in rows.items():
        if count != min(asked, config.num_rows(split)):
            raise ValueError(
                f"the yardsticks hold {count} {split} rows; {config.name} gives "
                f"{min(asked, config.num_rows(split))} of its {config.num_rows(split)}: name the corpus "
                "their study used."
            )


def particle_device() -> dict:
    """Where the particles run: on a GPU when there is one (with 8 GiB of counts at once), else on
    the CPU with the predictor's default budget."""
    return {"device": "cuda", "memory_budget_bytes": 2**33} if torch.cuda.is_available() else {}


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
