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

Beside the nearest learner, each network passes the report's gate (`NetworkPlace.learner`, the
function that gates the final models): infers, retrieves or below the ladder; and on each split
it has gone a share of the way from the best rung to the split's best learner (`gap_closed`:
mixture Bayes on seen tasks, prior-level Bayes on unseen ones).

Everything here takes predictions and returns plain values (`Development`);
`running.folders.place_networks` loads each kept network in turn and places it. The command
`hmm-development` and a study's `development` stage write the record
(`figures.model.write_development`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from hmm_datasets.layout import SampleLayout
from hmm_datasets.predictors import IN_CONTEXT
from hmm_datasets.scoring import next_token_scores

from .ladder_gate import REFERENCES, SEEN, UNSEEN, learner_from_past
from .yardsticks import test_token_mean

LEARNER_LABELS = {"mixture": "retrieval", "prior": "inference"}  # candidates beyond the ladder
TARGETS = {SEEN: "mixture", UNSEEN: "prior"}  # the best learner of each split: a share's 1


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

    @property
    def learner(self) -> str:
        """The report's gate (`ladder_gate.learner_from_past`): infers, retrieves or below the
        ladder, from whether the network is past the ladder on each split."""
        return learner_from_past({split: place.past_ladder for split, place in self.splits.items()})

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "splits": {s: p.to_dict() for s, p in self.splits.items()},
            "learner": self.learner,
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
        """The record, each network's split places with their `target` (`TARGETS`) and the share
        of the way to it the network has gone (`gap_closed` on this ladder), for the figures."""
        networks = [n.to_dict() for n in self.networks]
        for network in networks:
            for split, place in network["splits"].items():
                scale = self.ladder[split]["references"][place["reference"]]
                place["target"] = TARGETS[split]
                place["gap_closed"] = gap_closed(place, scale, TARGETS[split])
        return {**asdict(self), "networks": networks}


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


def gap_closed(place: dict, scale: dict[str, float], target: str) -> float | None:
    """The share of the way from the best rung to `target` that a network (`SplitPlace.to_dict`'s
    form) has gone on its split's scale (`scale`: each predictor's KL from the split's reference):
    0 at the best rung, 1 at the target, negative below the ladder. None where the target was
    not measured or sits no nearer the reference than the best rung."""
    if target not in scale:
        return None
    gap = place["best_rung_kl"] - scale[target]
    return (place["best_rung_kl"] - place["distances"][place["reference"]]) / gap if gap > 0 else None


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
    (`past_ladder`, `label`, `learner`) are recomputed, not read."""
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
