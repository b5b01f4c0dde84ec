"""One model's record: what its analyses say, small enough to commit (a study's records folder
holds one per model, `depth<D>-seed<S>.json`). Its fields and their JSON form are here;
`decisions.aggregate.model_record` makes one from a model folder's analyses (`ModelAnalyses`),
and every decision across models reads records only, so a study is reported again from
committed records without the models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hmm_datasets.json_form import check_fields
from probing.results import ProbeResults

from .evaluation import Figure1Result


@dataclass(frozen=True, kw_only=True)
class ModelAnalyses:
    """What the analyses of one model folder measured, as read back from its files
    (`running.folders.read_model_results`); `decisions.aggregate.model_record` condenses it into
    a `ModelRecord`. Every model has Figure 1, its probes and its memory (`model_memory`); the
    rotary knock-out, the place on the yardsticks, the development (the networks kept over
    training on the yardsticks) and the activation patching (`probing.patching.PatchingResult`'s
    JSON) are None where they were not made, and `development_probes`
    (step -> the probe results of that kept network) empty."""

    figure1: Figure1Result
    probes: ProbeResults
    model_memory: dict
    knockout: dict | None = None
    yardsticks: dict | None = None
    development: dict | None = None
    patching: dict | None = None
    development_probes: dict[int, ProbeResults] = field(default_factory=dict)


RECORD_VERSION = 3  # bumped when a record's statistics change: a study refuses older records
READABLE_VERSIONS = (2, 3)  # the committed reports across studies are decided from version 2 on


@dataclass(kw_only=True)
class ModelRecord:
    """One model's record; the JSON object keeps the fields in this order.

    `model_vs_bayes`: Figure 1 over the whole test sequence (accuracies, agreement,
    `kl_bayes_model`, excess NLL). `ladder`: the in-context ladder on the evaluation rows (None
    without one). `kl_bayes_by_num_demos` and `kl_bayes_by_test_position`: the model's and its
    twin's KL(Bayes ‖ ·) curves (the best in-context rung's beside the second). `profiles`: the
    first probe split's layerwise profiles of the trained network, its untrained twin and the
    token-only baseline; `other_splits` the other splits' (version 3 on). `statistics`: every
    claim's statistic, own and floors, averaged over the splits. `layer_one`: layer 1's
    position-only change and knock-out damage. `memory`: the model against fixed-memory Bayes.
    `yardsticks`: KL to each yardstick per split (None on a corpus without unseen tasks).
    `development` and `development_statistics`: the networks kept over training on the
    yardsticks, and the claims' statistics of those probed (None where none was kept).
    `patching`: the model's and its twin's activation patching (`probing.patching`; None where
    the study did not ask for it).
    `seconds`: the wall time of each of the model's stages. `settings`: every setting that
    shapes the results, one dotted name each (`settings.flat_settings`; None before version 3
    kept it), so that a refusal names the setting that differs."""

    version: int
    fingerprint: str
    depth: int
    seed: int
    model_vs_bayes: dict[str, float]
    ladder: dict | None = None
    kl_bayes_by_num_demos: dict[str, list]
    kl_bayes_by_test_position: dict | None = None
    profiles: dict[str, dict]
    other_splits: list[dict] = field(default_factory=list)
    statistics: dict[str, dict]
    layer_one: dict[str, dict]
    memory: dict | None = None
    yardsticks: dict | None = None
    development: dict | None = None
    development_statistics: dict[str, dict] | None = None
    patching: dict | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    settings: dict[str, object] | None = None

    @property
    def splits(self) -> list[dict]:
        """The per-split profiles the record keeps: every probe split from version 3, the first
        only before (version 2 kept one split's profiles and the statistics averaged over three)."""
        return [self.profiles, *self.other_splits]

    def to_dict(self) -> dict:
        """The JSON object (fields in order); `patching`, added later, only where a study made it,
        so that a record made before it writes back unchanged."""
        data = asdict(self)
        if data["patching"] is None:
            del data["patching"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelRecord:
        """A record from its JSON object; `ValueError` for a version this code does not read or a
        field it does not know."""
        version = data.get("version")
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"the record of depth {data.get('depth')} seed {data.get('seed')} has version {version}; "
                f"records of versions {READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]} are read: delete it "
                "(and its model folder's record.json) to analyse that model again."
            )
        check_fields(cls, data, f"the record of depth {data.get('depth')} seed {data.get('seed')}", "")
        return cls(**data)
