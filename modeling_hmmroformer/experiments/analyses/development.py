"""A model over training: each kept network placed on its corpus's yardsticks, and labelled by
the learner it is nearest.

Park et al. 2024 (arXiv 2412.01003) label each checkpoint of a network trained on a mixture of
Markov chains by the algorithm whose predictions it is nearest (in-context unigram or bigram,
retrieval of a training chain, inference of a new one). Here, on the yardstick rows of each
split (`yardsticks.SPLITS`: seen tasks, unseen tasks), a network's predictions are compared
with every candidate by KL(candidate ‖ network) in nats/token over test tokens 1..T-1:

- each rung of the in-context ladder (`hmm_datasets.predictors.IN_CONTEXT`), by its name;
- mixture Bayes over the K training HMMs: "retrieval";
- prior-level Bayes under the HMM prior (particle learning): "inference".

The label is the nearest candidate, with one condition (`phase_label`): "retrieval" and
"inference" name learners that do better than counting the row's own tokens, so a network
labelled by them must be past the ladder on that split, that is nearer the split's exact
reference than the best rung is (`ladder_gate`'s scale: mixture Bayes on seen tasks, the oracle
on unseen tasks). A network that is not is labelled by its nearest rung.

`place_networks` loads each kept network in turn and returns plain values (`Development`); the
rest takes predictions. The command `hmm-development` and a study's `development` stage write
the record (`plots.write_development`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import yaml

from hmm_datasets.corpus import Corpus
from hmm_datasets.export import load_corpus_config
from hmm_datasets.layout import SampleLayout
from hmm_datasets.predictors import IN_CONTEXT
from hmm_datasets.scoring import next_token_scores
from probing.architecture import check_causal_lm
from probing.capture import load_causal_lm

from .. import layout
from .evaluation import model_next_token_probs
from .ladder_gate import REFERENCES
from .yardsticks import SPLITS, ladder_predictions, test_token_mean

LEARNER_LABELS = {"mixture": "retrieval", "prior": "inference"}  # candidates beyond the ladder


@dataclass(frozen=True)
class SplitPlace:
    """A network on the rows of one split: KL(candidate ‖ network) for every candidate
    (`distances`: the rungs, `mixture`, `prior` where measured, `oracle`), its top-1 accuracy,
    and the split's scale: KL(reference ‖ network) beside the best rung's."""

    reference: str
    distances: dict[str, float]
    accuracy: float
    best_rung: str
    best_rung_kl: float

    @property
    def past_ladder(self) -> bool:
        """Nearer the split's exact reference than the best rung of the ladder is."""
        return self.distances[self.reference] < self.best_rung_kl

    @property
    def label(self) -> str:
        return phase_label(self.distances, self.past_ladder)

    def to_dict(self) -> dict:
        return {**asdict(self), "past_ladder": self.past_ladder, "label": self.label}


@dataclass(frozen=True)
class NetworkPlace:
    """One kept network: its training step, the tokens it had trained on (None where unknown),
    and its place on each split."""

    step: int
    tokens: int | None
    splits: dict[str, SplitPlace]

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "splits": {s: p.to_dict() for s, p in self.splits.items()},
        }


@dataclass(frozen=True)
class Development:
    """A model over training: where its networks came from, the corpus and rows they were read
    on, the ladder of those rows (`yardsticks.yardstick_ladder`'s facts) and each network's place,
    by step."""

    source: str
    corpus: str
    num_tasks: int
    rows: dict[str, int]
    ladder: dict
    networks: list[NetworkPlace] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**asdict(self), "networks": [n.to_dict() for n in self.networks]}


def phase_label(distances: dict[str, float], past_ladder: bool) -> str:
    """What a network is nearest (the smallest of `distances`, KL(candidate ‖ network), over
    the rungs of `IN_CONTEXT`, `mixture` and `prior`): a rung's name, "retrieval" (mixture Bayes)
    or "inference" (prior-level Bayes). Those two only for a network `past_ladder`; one that is
    not is labelled by its nearest rung."""
    candidates = [name for name in (*IN_CONTEXT, *LEARNER_LABELS) if name in distances]
    if not past_ladder:
        candidates = [name for name in candidates if name in IN_CONTEXT]
    nearest = min(candidates, key=lambda name: distances[name])
    return LEARNER_LABELS.get(nearest, nearest)


def place_network(
    network_probs: torch.Tensor,
    candidates: dict[str, torch.Tensor],
    input_ids: torch.Tensor,
    split: str,
    ladder: dict,
    layout: SampleLayout,
) -> SplitPlace:
    """A network's place on one split: `network_probs` `[B, L, V+1]` on the split's yardstick rows,
    against every candidate on the same rows (`yardsticks.ladder_predictions`); the best rung and its KL
    from the ladder of those rows (`yardsticks.yardstick_ladder`'s facts)."""
    distances = {
        name: test_token_mean(next_token_scores(network_probs, input_ids, probs.double())["kl"], layout)
        for name, probs in candidates.items()
    }
    reference = REFERENCES[split]
    best = ladder[split]["best_in_context"][reference]
    return SplitPlace(
        reference=reference,
        distances=distances,
        accuracy=test_token_mean(next_token_scores(network_probs, input_ids)["correct"], layout),
        best_rung=best,
        best_rung_kl=ladder[split]["references"][reference][best],
    )


def development_from_dict(data: dict) -> Development:
    """A development record read back (`Development.to_dict`'s form); the derived fields
    (`past_ladder`, `label`) are recomputed, not read."""
    networks = [
        NetworkPlace(
            step=int(n["step"]),
            tokens=n["tokens"],
            splits={
                split: SplitPlace(
                    reference=p["reference"],
                    distances=dict(p["distances"]),
                    accuracy=p["accuracy"],
                    best_rung=p["best_rung"],
                    best_rung_kl=p["best_rung_kl"],
                )
                for split, p in n["splits"].items()
            },
        )
        for n in data["networks"]
    ]
    fields = ("source", "corpus", "num_tasks", "rows", "ladder")
    return Development(**{name: data[name] for name in fields}, networks=networks)


_STEP = re.compile(r"(?:^|[-_])(\d+)$")


def step_of(name: str) -> int | None:
    """The training step a checkpoint's folder name carries (`step-0000500`, `checkpoint-500`),
    or None."""
    found = _STEP.search(name)
    return int(found.group(1)) if found else None


def kept_networks(folder: Path) -> list[tuple[int, Path]]:
    """The checkpoints in `folder` (sub-folders holding a config.json whose name ends in a step),
    by step; `folder` itself where it is one checkpoint."""
    config = layout.MODEL_CONFIG_JSON
    inside = [(step_of(p.name), p) for p in folder.iterdir() if p.is_dir() and (p / config).is_file()]
    found = sorted((step, path) for step, path in inside if step is not None)
    if not found and (folder / config).is_file():
        step = step_of(folder.name)
        return [(0 if step is None else step, folder)]
    return found


def tokens_at(folder: Path, step: int) -> int | None:
    """Training tokens at `step`, from the run config and corpus config a checkpoint of
    `scripts/train.py` carries (one process: the world size is not recorded); None elsewhere."""
    run_config, corpus_config = folder / layout.RUN_CONFIG_YAML, folder / layout.CORPUS_CONFIG_JSON
    if not (run_config.is_file() and corpus_config.is_file()):
        return None
    training = (yaml.safe_load(run_config.read_text()) or {}).get("training", {})
    rows = int(training.get("per_device_train_batch_size", 8)) * int(
        training.get("gradient_accumulation_steps", 1)
    )
    return step * rows * load_corpus_config(folder).sequence_length


def place_networks(
    networks: Iterable[tuple[int, Path]],
    corpus: Corpus,
    facts: dict,
    tensors: dict[str, torch.Tensor],
    source: str,
) -> Development:
    """Every network of `networks` (step, checkpoint folder) placed on the yardsticks of
    `corpus` (`facts` and `tensors`: `yardsticks.corpus_yardsticks`' on the same corpus), each
    loaded in turn on the GPU when there is one."""
    development = Development(
        source=source,
        corpus=corpus.config.name,
        num_tasks=corpus.config.num_tasks,
        rows={split: int(count) for split, count in facts["rows"].items()},
        ladder=facts["ladder"],
    )
    vocab = corpus.config.vocab_size
    candidates = {  # the rungs, and mixture, prior and oracle as the yardsticks hold them
        split: ladder_predictions(corpus.rows(split, count), tensors, None)
        for split, count in development.rows.items()
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for step, folder in networks:
        model = load_causal_lm(str(folder), device, check=check_causal_lm)
        places = {}
        for split in SPLITS:
            ids = tensors[f"{split}/input_ids"].long()
            probs = model_next_token_probs(model, ids, vocab + 1)
            places[split] = place_network(
                probs, candidates[split], ids, split, facts["ladder"], corpus.layout
            )
        development.networks.append(NetworkPlace(step, tokens_at(folder, step), places))
    return development
