"""Where a model sits on its in-context ladder, and whether its layerwise claims count.

A network below the best rung of the in-context ladder (n-grams and PPM: predictors that count
the row's own tokens and know nothing of the HMMs) has not learned the task, and its layers are
not read (docs/study.md). A model is placed on one scale per split, the KL from a reference
predictor that is exact on that split, in nats per token on test tokens 1..T-1:

- seen tasks (`test`, the regime of retrieval): KL(mixture Bayes ‖ ·) on the evaluation rows,
  the ladder of the model's own record (`hmm_datasets.scoring.predictor_ladder`);
- unseen tasks (`test_unseen`, the regime of inference): KL(oracle ‖ ·) on the yardstick rows,
  the corpus's ladder there (`yardsticks.yardstick_ladder`; the oracle knows each row's HMM).

For two predictors q and r, KL(B ‖ q) − KL(B ‖ r) averaged over rows is their expected excess
NLL whenever B is the predictive distribution of the process that made the rows given the
context (mixture Bayes on seen tasks, prior-level Bayes on unseen ones) or a finer one (the
oracle, by the tower property). So "below the best rung's KL to the oracle" on unseen rows is
"below its KL to prior-level Bayes" in expectation, without the particle estimate's Monte
Carlo error (and for committed studies, whose prior-level predictions were not kept).

A model past the ladder on unseen tasks infers; past it on seen tasks only, it retrieves;
otherwise it is below the ladder, and only Figure 1's behavioural claims count for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hmm_datasets.predictors import IN_CONTEXT

from ..decisions.verdicts import across_seeds
from .record import ModelRecord

SEEN, UNSEEN = "test", "test_unseen"
REFERENCES = {SEEN: "mixture", UNSEEN: "oracle"}  # the exact reference of each split's scale
BELOW = "below the ladder"
LEARNERS = ("infers", "retrieves", BELOW)
RUNG_LABELS = {name: label for name, (label, _, _) in IN_CONTEXT.items()}


@dataclass(frozen=True)
class LadderPlace:
    """A model on one split's scale (KL from `reference`, nats/token): the model, the best
    in-context rung (the one nearest the reference), and mixture and prior-level Bayes where
    measured on the same rows."""

    split: str
    reference: str
    model: float
    best_rung: str
    best_rung_kl: float
    mixture: float | None = None
    prior: float | None = None

    @property
    def past(self) -> bool:
        """Whether the model is nearer the reference than the best rung."""
        return self.model < self.best_rung_kl

    def to_dict(self) -> dict:
        return {**asdict(self), "past": self.past}


def seen_place(record: ModelRecord) -> LadderPlace | None:
    """A model record's place on seen tasks, from its own ladder (KL to mixture Bayes of every
    rung on the evaluation rows); None for a record without one."""
    ladder = record.ladder
    if not ladder or any(rung.get("kl_bayes") is None for rung in ladder["rungs"] if rung["in_context"]):
        return None
    rungs = {rung["label"]: rung["kl_bayes"] for rung in ladder["rungs"] if rung["in_context"]}
    best = min(rungs, key=rungs.get)
    model = record.model_vs_bayes["kl_bayes_model"]
    return LadderPlace(SEEN, REFERENCES[SEEN], model, best, rungs[best], mixture=0.0)


def unseen_place(
    record: ModelRecord, ladder: dict | None, labels: dict[str, str] = RUNG_LABELS
) -> LadderPlace | None:
    """A model record's place on unseen tasks: its KL to the oracle on the yardstick rows
    against the corpus's `ladder` there (`yardsticks.yardstick_ladder`'s facts, which name the
    rung nearest the oracle; `labels`: rung name -> label); None where either is missing."""
    placed = (record.yardsticks or {}).get(UNSEEN)
    if placed is None or not ladder or UNSEEN not in ladder:
        return None
    reference = REFERENCES[UNSEEN]
    kls, best = ladder[UNSEEN]["references"][reference], ladder[UNSEEN]["best_in_context"][reference]
    model = placed["yardsticks"][reference]["kl"]
    return LadderPlace(
        UNSEEN, reference, model, labels[best], kls[best], kls.get("mixture"), kls.get("prior")
    )


def model_places(
    record: ModelRecord, ladder: dict | None, labels: dict[str, str] = RUNG_LABELS
) -> dict[str, LadderPlace]:
    """A model's places on the splits it was measured on (`seen_place`, `unseen_place`)."""
    places = {SEEN: seen_place(record), UNSEEN: unseen_place(record, ladder, labels)}
    return {split: place for split, place in places.items() if place is not None}


def learner(places: dict[str, LadderPlace]) -> str:
    """ "infers" past the ladder on unseen tasks, "retrieves" past it on seen tasks only, else
    `BELOW` (`learner_from_past`)."""
    return learner_from_past({split: place.past for split, place in places.items()})


def learner_from_past(past: dict[str, bool]) -> str:
    """The gate from whether a model is past the ladder on each split it was measured on
    (`past`: split -> past there): "infers" past it on unseen tasks, "retrieves" past it on seen
    tasks only, else `BELOW`. The one gate of final models and of networks over training."""
    if past.get(UNSEEN):
        return "infers"
    if past.get(SEEN):
        return "retrieves"
    return BELOW


def past_ladder(places: dict[str, LadderPlace]) -> bool:
    """Whether a model's layerwise claims count: past the ladder on seen or unseen tasks. A
    model with no ladder at all (a record without one) is below: nothing shows it learned."""
    return learner(places) != BELOW


def places_across_seeds(places: list[dict[str, LadderPlace]]) -> dict:
    """A cell's models on the ladder (JSON-ready): per split the model's KL across seeds beside
    the best rung's (its label; its KL across seeds, the rows being the same for every seed of
    one draw) and mixture and prior-level Bayes's where measured, and how many seeds are past
    it; the count of seeds per learner (`learner`)."""
    out = {"learners": {name: sum(learner(p) == name for p in places) for name in LEARNERS}, "splits": {}}
    for split in (SEEN, UNSEEN):
        found = [p[split] for p in places if split in p]
        if len(found) < len(places) or not found:
            continue
        out["splits"][split] = {
            "reference": found[0].reference,
            "model": across_seeds([f.model for f in found]),
            "best_rung": ", ".join(sorted({f.best_rung for f in found})),
            "best_rung_kl": across_seeds([f.best_rung_kl for f in found]),
            "mixture": across_seeds([f.mixture for f in found]),
            "prior": across_seeds([f.prior for f in found]),
            "past": sum(f.past for f in found),
        }
    return out
