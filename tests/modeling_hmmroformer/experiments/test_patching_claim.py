"""The patching claim ("the state is carried below the task"): its statistic on planted readings,
each precondition at its boundary, the twin as its floor, and the report's family without it."""

import numpy as np
import pytest

from modeling_hmmroformer.experiments.analyses.claims import (
    ADDED_LATER,
    CLAIMS,
    MIN_PATCHED_PAIRS,
    SAME_DONOR_TOLERANCE,
    claims_before_added,
    decide_report,
    model_statistics,
    with_patching,
)
from probing.patching import DonorReading, PatchingReadings

CLAIM = next(claim for claim in CLAIMS if claim.key == "state_carried_lower")
SITES = ["embeddings", "layer 1", "layer 2", "layer 3", "layer 4"]


def readings(state, task, pairs=(64, 64), effects=(0.1, 0.2), same=0.0) -> dict:
    """Patching readings as a record keeps them (`PatchingReadings.to_dict`): shares per site of
    the task and the state donor, their pairs and whole effects, the same-donor control's move."""
    donors = {
        "task": DonorReading("task", pairs[0], list(task), effects[0], [0.0] * len(task)),
        "state": DonorReading("state", pairs[1], list(state), effects[1], []),
        "same": DonorReading("same", 256, [0.0] * len(task), 0.0, []),
    }
    return PatchingReadings(SITES, donors, same).to_dict()


STATE_LOW = readings(state=[1.0, 1.0, 1.0, 1.0, 1.0], task=[0.0, 0.0, 0.5, 1.0, 1.0])
FLAT = readings(state=[0.0, 0.5, 0.5, 0.5, 1.0], task=[0.0, 0.5, 0.5, 0.5, 1.0])


def nets(model: dict, control: dict | None = FLAT) -> dict:
    return {"trained": {"patching": model}, "twin": {"patching": control}}


def test_the_statistic_is_the_inner_sites_state_share_minus_the_task_share():
    found = CLAIM.measured(nets(STATE_LOW))
    assert found["missing"] is None
    assert found["own"] == pytest.approx(np.mean([1.0, 0.5, 0.0]))
    assert found["floors"] == {"twin": pytest.approx(0.0)}
    assert CLAIM.measured(nets(FLAT))["own"] == pytest.approx(0.0)  # alike: 0
    task_low = readings(state=[1.0, 0.0, 0.5, 1.0, 1.0], task=[0.0, 1.0, 1.0, 1.0, 1.0])
    assert CLAIM.measured(nets(task_low))["own"] < 0  # either sign possible
    assert CLAIM.direction == 1 and CLAIM.key in ADDED_LATER


@pytest.mark.parametrize(
    "model, why",
    [
        (
            readings([1.0] * 5, [0.0, 0.0, 0.5, 1.0, 1.0], pairs=(MIN_PATCHED_PAIRS - 1, 64)),
            "pairs of the task",
        ),
        (
            readings([1.0] * 5, [0.0, 0.0, 0.5, 1.0, 1.0], pairs=(64, MIN_PATCHED_PAIRS - 1)),
            "pairs of the state",
        ),
        (readings([1.0] * 5, [0.0, 0.0, 0.5, 1.0, 1.0], effects=(0.0, 0.2)), "task donor's whole effect"),
        (readings([1.0] * 5, [0.0, 0.0, 0.5, 1.0, 1.0], effects=(0.1, -0.01)), "state donor's whole effect"),
        (readings([1.0] * 5, [0.0, 0.0, 0.5, 1.0, 1.0], same=SAME_DONOR_TOLERANCE), "same-donor control"),
    ],
)
def test_each_precondition_fails_at_its_boundary(model, why):
    found = CLAIM.measured(nets(model))
    assert found["own"] is None and found["missing"]["kind"] == "not testable"
    assert why in found["missing"]["why"]


def test_each_precondition_passes_just_inside_its_boundary():
    model = readings(
        [1.0] * 5,
        [0.0, 0.0, 0.5, 1.0, 1.0],
        pairs=(MIN_PATCHED_PAIRS, MIN_PATCHED_PAIRS),
        effects=(1e-9, 1e-9),
        same=SAME_DONOR_TOLERANCE * 0.99,
    )
    assert CLAIM.measured(nets(model))["missing"] is None


def test_no_floor_no_test_and_no_patching_is_na():
    no_effect = readings([1.0] * 5, [0.0] * 5, effects=(0.0, 0.1))
    no_effect["state_carried_lower"] = None  # what a twin whose task donor moves nothing records
    found = CLAIM.measured(nets(STATE_LOW, no_effect))
    assert found["missing"]["kind"] == "not testable" and "no floor" in found["missing"]["why"]
    assert CLAIM.measured(nets(STATE_LOW, None))["missing"]["kind"] == "n/a"
    assert CLAIM.measured({"trained": {}, "twin": {}})["missing"] == {
        "kind": "n/a",
        "why": "no activation patching",
    }


def test_patching_joins_every_probe_split_and_leaves_the_splits_untouched():
    splits = [{"trained": {"depth": 4}, "twin": {"depth": 4}, "tokens": {}} for _ in range(3)]
    joined = with_patching(splits, {"model": STATE_LOW, "control": FLAT})
    assert all("patching" not in nets["trained"] for nets in splits)
    assert all(
        nets["trained"]["patching"] is STATE_LOW and "patching" not in nets["tokens"] for nets in joined
    )
    assert with_patching(splits, None) is splits


def seed(own: float | None, draw: int, twin: float = 0.0) -> dict:
    """A seed's statistics where every claim is n/a but the patching claim (own None: n/a too)."""
    absent = {"own": None, "floors": {}, "missing": {"kind": "n/a", "why": "absent"}, "own_by_split": []}
    statistics = {claim.key: {**absent, "draw": draw} for claim in CLAIMS}
    statistics["demonstrations"] = {
        "own": 0.05 + 0.001 * draw,
        "floors": {},
        "missing": None,
        "own_by_split": [],
        "draw": draw,
    }
    if own is not None:
        statistics[CLAIM.key] = {
            "own": own,
            "floors": {"twin": twin},
            "missing": None,
            "own_by_split": [own] * 3,
            "draw": draw,
        }
    return statistics


def test_the_family_before_the_added_claim_gives_the_same_verdicts_where_it_is_absent():
    cell = [seed(None, draw) for draw in range(4) for _ in range(2)]
    now, before = decide_report([cell])[0], decide_report([cell], claims_before_added())[0]
    assert [row["key"] for row in before] == [c.key for c in claims_before_added()]
    assert {r["key"]: r["label"] for r in now if r["key"] != CLAIM.key} == {
        r["key"]: r["label"] for r in before
    }


def test_the_added_claim_with_a_p_value_enlarges_the_family():
    cell = [seed(0.3 + 0.01 * draw, draw) for draw in range(4) for _ in range(2)]
    now, before = decide_report([cell])[0], decide_report([cell], claims_before_added())[0]
    first = {r["key"]: r for r in now}
    assert first[CLAIM.key]["p_holm"] is not None
    assert first["demonstrations"]["p_holm"] >= before[0]["p_holm"]
    assert first[CLAIM.key]["split_spread"]["n"] == 0  # read on its own rows: no spread across splits


def test_model_statistics_reads_the_patching_of_the_record():
    splits = [{"trained": {"depth": 4}, "twin": {"depth": 4}} for _ in range(2)]
    statistic = model_statistics(splits, {"model": STATE_LOW, "control": FLAT})[CLAIM.key]
    assert statistic["own"] == pytest.approx(0.5) and statistic["floors"]["twin"] == pytest.approx(0.0)
    assert model_statistics(splits)[CLAIM.key]["missing"]["kind"] == "n/a"


def test_a_cell_with_one_seed_patched_and_failing_reads_not_testable_not_na():
    untestable = {
        "own": None,
        "floors": {},
        "missing": {"kind": "not testable", "why": "no floor"},
        "own_by_split": [],
    }
    cell = [seed(None, draw) for draw in range(5)]
    cell.append({**seed(None, 5), CLAIM.key: {**untestable, "draw": 5}})
    rows = {row["key"]: row for row in decide_report([cell])[0]}
    assert rows[CLAIM.key]["label"] == "not testable (no floor)"
    assert {row["key"]: row for row in decide_report([cell[:5]])[0]}[CLAIM.key]["verdict"] == "n/a"
