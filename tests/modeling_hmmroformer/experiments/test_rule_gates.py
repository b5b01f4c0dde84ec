"""The rule's gates and conditions at their boundaries: the in-context ladder, floors free of the
label, preconditions instead of one-sided statistics, seeds nested in corpus draws, and every
condition of a verdict one step either side (docs/study.md, the decision rule)."""

import dataclasses

import numpy as np
import pytest

from modeling_hmmroformer.experiments.analyses.claims import CLAIMS, TESTABLE_MARGIN, decide_report
from modeling_hmmroformer.experiments.analyses.ladder_gate import BELOW, learner, model_places, past_ladder
from modeling_hmmroformer.experiments.analyses.record import RECORD_VERSION, ModelRecord
from modeling_hmmroformer.experiments.decisions.aggregate import counted_statistics
from modeling_hmmroformer.experiments.decisions.verdicts import (
    ALPHA,
    capped_by_draws,
    claim_tests,
    cross_fitted_fall,
    decide_cell,
    t_quantile_975,
)
from tests.modeling_hmmroformer.experiments.test_claims import (
    FLOOR_FEATURES,
    measured,
    planted,
    previous,
    tokens,
    twin,
)
from tests.modeling_hmmroformer.experiments.test_patching_claim import FLAT, STATE_LOW

LAYERWISE = [claim.key for claim in CLAIMS if claim.figure != "1"]


def seeds(own, draws=None, **floors) -> list[dict]:
    draws = draws or [0] * len(own)
    return [
        {"own": v, "floors": {name: values[i] for name, values in floors.items()}, "missing": None, "draw": d}
        for i, (v, d) in enumerate(zip(own, draws))
    ]


# ---- the ladder gate --------------------------------------------------------------------------
def record(seed: int, model_kl: float, rung_kl: float, unseen_kl: float | None = None) -> ModelRecord:
    """A version-3 record of planted profiles and patching (every layerwise statistic on its claimed side), its
    model `model_kl` from mixture Bayes and the best in-context rung `rung_kl` on seen tasks, and
    optionally the model's KL from the oracle on unseen tasks (`unseen_kl`)."""
    rng = np.random.default_rng(seed)
    jitter = lambda curve: [v + rng.normal(0, 0.003) for v in curve]  # noqa: E731
    trained = planted(
        demo_gain=0.04 + rng.normal(0, 0.003),
        position_gain=0.06 + rng.normal(0, 0.003),
        shuffle_position_only=jitter([5.0, 0.75, 0.5, 0.25]),
        knockout_nll=jitter([3.0, 0.15, 0.125, 0.1]),
    )
    rungs = [
        {"name": "bigram", "label": "bigram counts", "kl_bayes": rung_kl + 0.05, "in_context": True},
        {"name": "ppm3", "label": "PPM-C blending, order 3", "kl_bayes": rung_kl, "in_context": True},
    ]
    return ModelRecord(
        version=RECORD_VERSION,
        fingerprint="planted",
        depth=4,
        seed=seed,
        model_vs_bayes={"kl_bayes_model": model_kl},
        ladder={"rungs": rungs},
        kl_bayes_by_num_demos={},
        profiles={"trained": trained, "twin": twin(), "tokens": tokens()},
        statistics={},
        layer_one={},
        yardsticks=None
        if unseen_kl is None
        else {"test_unseen": {"yardsticks": {"oracle": {"kl": unseen_kl}}}},
        patching={"model": STATE_LOW, "control": FLAT},
    )


def unseen_ladder(rung_kl: float) -> dict:
    """A corpus's ladder facts on unseen tasks: the best rung (PPM-C) `rung_kl` from the oracle."""
    return {
        "test_unseen": {
            "references": {"oracle": {"ppm3": rung_kl, "mixture": 2.0}},
            "best_in_context": {"oracle": "ppm3"},
        }
    }


def decided(records: list[ModelRecord], required_draws: int = 1) -> dict[str, dict]:
    from modeling_hmmroformer.experiments.analyses.claims import claim_rows
    from modeling_hmmroformer.experiments.decisions.verdicts import decide_cells

    per_seed = [counted_statistics(r, None) for r in records]
    rows = decide_cells(
        [[([s[c.key] for s in per_seed], c.direction) for c in CLAIMS]], required_draws=required_draws
    )[0]
    return {row["key"]: row for row in claim_rows(per_seed, rows)}


def test_models_below_the_ladder_leave_every_layerwise_claim_not_testable():
    below = decided([record(seed, model_kl=0.8, rung_kl=0.5) for seed in range(6)])
    for key in LAYERWISE:
        assert below[key]["label"] == "not testable (0 of 6 seeds above the in-context ladder)", key
        assert below[key]["p_holm"] is None  # out of Holm's family
    assert below["demonstrations"]["verdict"] == "holds"  # Figure 1 is decided on every model
    # the same records with the ladder moved below the models: decided on their statistics
    above = decided([record(seed, model_kl=0.3, rung_kl=0.5) for seed in range(6)])
    assert {above[key]["verdict"] for key in LAYERWISE} & {"holds"}
    assert all(
        not above[key]["label"].startswith("not testable (") or "ladder" not in above[key]["label"]
        for key in LAYERWISE
    )
    assert [above[k]["own"] for k in LAYERWISE] != [below[k]["own"] for k in LAYERWISE]


def test_five_of_six_seeds_past_the_ladder_is_not_enough_six_of_seven_is():
    five = [record(s, 0.3, 0.5) for s in range(5)] + [record(5, 0.8, 0.5)]
    assert decided(five)["task_rises"]["label"] == "not testable (5 of 6 seeds above the in-context ladder)"
    seven = [record(s, 0.3, 0.5) for s in range(6)] + [record(6, 0.8, 0.5)]
    assert decided(seven)["task_rises"]["n"] == 6  # the six past it are decided, the seventh left out


def test_the_gate_at_its_boundary_and_the_learner_it_names():
    at = model_places(record(0, model_kl=0.5, rung_kl=0.5), None)
    assert not past_ladder(at) and learner(at) == BELOW  # equal to the best rung is not past it
    just = model_places(record(0, model_kl=0.4999, rung_kl=0.5), None)
    assert past_ladder(just) and learner(just) == "retrieves"
    places = model_places(record(0, model_kl=0.8, rung_kl=0.5, unseen_kl=0.40), unseen_ladder(0.45))
    assert learner(places) == "infers" and places["test_unseen"].best_rung == "PPM-C blending, order 3"
    no_ladder = dataclasses.replace(record(0, 0.3, 0.5), ladder=None)
    assert not past_ladder(model_places(no_ladder, None))  # nothing shows it learned


# ---- floors free of the label -----------------------------------------------------------------
def test_a_token_floor_holding_the_previous_token_is_refused():
    old = tokens(
        near=1.0, far=0.5, features={"previous_tokens": ["current_token", "previous_token", "segment"]}
    )
    found = measured(planted(), token_floor=old)
    assert found["falls_with_distance"]["floors"]["tokens"] is None  # refused
    tests = claim_tests([{**found["falls_with_distance"], "draw": 0}] * 6, 1)
    assert tests["refused_floors"] == ["tokens"] and "tokens" not in tests["floors"]
    assert found["peak_moves_up"]["missing"]["why"] == "no token-only floor free of the probed token"
    bag = tokens(features={"previous_tokens": ["current_token", "segment_bag"]})  # holds it among others
    assert measured(planted(), token_floor=bag)["falls_with_distance"]["floors"]["tokens"] is None
    legacy = {k: v for k, v in tokens().items() if k != "features"}  # a version-2 record: every block
    assert measured(planted(), token_floor=legacy)["falls_with_distance"]["floors"]["tokens"] is None
    free = measured(planted(), token_floor=tokens(near=0.5, far=0.3))
    assert free["falls_with_distance"]["floors"]["tokens"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "floor_peak, testable", [(1.0 - TESTABLE_MARGIN - 1e-9, True), (1.0 - TESTABLE_MARGIN + 1e-9, False)]
)
def test_a_distance_is_testable_only_above_the_token_floor_by_the_margin(floor_peak, testable):
    # distance 1 peaks at 1.0 in the planted model: the margin either side of the token floor's peak
    found = measured(planted(), token_floor=tokens(near=floor_peak, far=0.3))
    assert (found["peak_moves_up"]["missing"] is None) == testable


# ---- preconditions instead of one-sided statistics --------------------------------------------
def beliefs(state: list[float], task: list[float]) -> dict:
    return {"state_filter_per_task": {"log_r2": state}, "task_posterior": {"log_r2": task}}


def test_state_before_task_needs_both_curves_to_gain():
    flat_state = measured(planted(beliefs=beliefs([0.5] * 9, [0.0] * 4 + [0.5] * 5), depth=8))
    assert flat_state["state_before_task"]["missing"] == {
        "kind": "not testable",
        "why": "the state filter gains nothing over the embeddings",
    }
    assert (
        decide_cell([([{**flat_state["state_before_task"], "draw": 0}] * 6, 1)])[0]["verdict"]
        == "not testable"
    )
    at_one, at_half = [0.0] + [0.5] * 8, [0.0] * 4 + [0.5] * 5
    before = measured(planted(beliefs=beliefs(at_one, at_half), depth=8))["state_before_task"]["own"]
    after = measured(planted(beliefs=beliefs(at_half, at_one), depth=8))["state_before_task"]["own"]
    assert before == pytest.approx(3.0) and after == pytest.approx(-3.0)  # layers either way
    just = measured(planted(beliefs=beliefs([0.0] + [0.02] * 4, [0.0, 0.0, 0.5, 0.5, 0.5])))
    assert just["state_before_task"]["missing"] is None  # a gain of exactly MIN_GAIN counts


def test_rises_then_falls_is_centred_when_halves_are_fitted_apart():
    # flat curves; each half's accuracy is its own probe's fit noise plus row noise. Fitted apart
    # the two probes' noise is independent and the cross-fitted fall is about 0; one probe shared
    # by both halves (the retired scheme) biases it upwards.
    rng = np.random.default_rng(0)
    apart, shared = [], []
    for _ in range(4000):
        probe_a, probe_b, rows_a, rows_b = rng.normal(0, 0.01, (4, 9))
        apart.append(cross_fitted_fall(0.5 + probe_a + rows_a, 0.5 + probe_b + rows_b))
        shared.append(cross_fitted_fall(0.5 + probe_a + rows_a, 0.5 + probe_a + rows_b))
    assert abs(np.mean(apart)) < 0.002 and np.mean(shared) > 0.004


def test_task_rises_reads_the_rise_after_layer_one():
    at_one = measured(planted(beliefs=beliefs([0.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.8, 0.8, 0.8, 0.8])))
    assert at_one["task_rises"]["own"] == pytest.approx(0.0)  # a bag of tokens read in layer 1
    later = measured(planted(beliefs=beliefs([0.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.2, 0.4, 0.6, 0.8])))
    assert later["task_rises"]["own"] == pytest.approx(0.6)


def test_a_record_whose_halves_share_one_probe_reads_n_a():
    one_probe = planted(
        previous_tokens={
            d: {"all": c["all"], "halves": c["halves_apart"]}
            for d, c in previous({"1": [0.2, 1.0, 0.9, 0.8, 0.6], "2": [0.2, 0.2, 0.5, 0.7, 0.5]}).items()
        }
    )
    found = measured(one_probe, token_floor=tokens(near=0.5, far=0.3))
    assert found["rises_then_falls"]["missing"]["kind"] == "n/a"


# ---- every condition of a verdict at its boundary ---------------------------------------------
def test_the_sign_count_one_seed_either_side():
    five = decide_cell([(seeds([0.3, 0.3, 0.3, 0.3, 0.3, -0.01]), 1)], required_draws=1)[0]
    four = decide_cell([(seeds([0.3, 0.3, 0.3, 0.3, -0.01, -0.01]), 1)], required_draws=1)[0]
    assert five["verdict"] == "holds" and four["verdict"] == "undecided" and four["p_holm"] < ALPHA
    five = decide_cell([(seeds([-0.3, -0.3, -0.3, -0.3, -0.3, 0.01]), 1)], required_draws=1)[0]
    four = decide_cell([(seeds([-0.3, -0.3, -0.3, -0.3, 0.01, 0.01]), 1)], required_draws=1)[0]
    assert five["verdict"] == "contradicted" and four["verdict"] == "undecided" and four["p_holm"] < ALPHA


@pytest.mark.parametrize("scale, verdict", [(1.001, "holds"), (0.999, "undecided")])
def test_the_p_value_either_side_of_alpha(scale, verdict):
    z = np.array([0.9, 0.5, 0.6, 0.7, 0.8, -1.0])  # standardised below: exactly t = scale x t(0.975, 5)
    z = (z - z.mean()) / z.std(ddof=1)
    own = list(scale * t_quantile_975(5) / np.sqrt(6) + z)  # mean / (sd / sqrt 6) = scale * t
    assert sum(v > 0 for v in own) >= 5
    assert decide_cell([(seeds(own), 1)], required_draws=1)[0]["verdict"] == verdict


def test_a_floor_effect_on_the_wrong_side_keeps_a_claim_from_holding():
    own = [0.30, 0.32, 0.29, 0.31, 0.33, 0.28]
    beaten = decide_cell([(seeds(own, twin=[0.35, 0.36, 0.33, 0.35, 0.37, 0.34]), 1)], required_draws=1)[0]
    assert beaten["p_own"] < ALPHA and beaten["floors"]["twin"]["mean"] < 0
    assert beaten["verdict"] == "undecided"


# ---- seeds nested in draws --------------------------------------------------------------------
def test_a_statistic_that_moves_with_the_draw_does_not_hold():
    rng = np.random.default_rng(0)
    first, second = 0.05 + rng.normal(0, 0.01, 6), 0.11 + rng.normal(0, 0.01, 6)  # 6 seed SDs apart
    for draw in (first, second):
        assert decide_cell([(seeds(list(draw)), 1)], required_draws=1)[0]["verdict"] == "holds"
    both = decide_cell([(seeds(list(first) + list(second), draws=[0] * 6 + [1] * 6), 1)])[0]
    assert both["verdict"] == "undecided" and both["num_draws"] == 2 and both["p_own"] > ALPHA
    steady = 0.08 + rng.normal(0, 0.005, 12)  # the same effect in both draws (t on 1 df: means must agree)
    held = decide_cell([(seeds(list(steady), draws=[0] * 6 + [1] * 6), 1)])[0]
    assert held["verdict"] == "holds"


def test_one_draw_caps_a_verdict_at_undecided_and_says_what_it_would_be():
    strong = [0.10, 0.12, 0.09, 0.11, 0.13, 0.08]
    row = decide_cell([(seeds(strong), 1)])[0]
    assert row["verdict"] == "undecided" and row["label"] == "undecided (1 HMM draw; holds within it)"
    assert capped_by_draws("not testable", {"num_draws": 1}) == "not testable"


def test_holm_runs_over_every_cell_of_the_report():
    own = [0.05, 0.30, 0.10, 0.25, 0.15, 0.20]
    noise = [0.1, -0.1, 0.05, -0.05, 0.2, -0.2]
    one = decide_cell([(seeds(own), 1)], required_draws=1)[0]
    from modeling_hmmroformer.experiments.decisions.verdicts import decide_cells

    cells = decide_cells([[(seeds(own), 1)], [(seeds(noise), 1)] * 8], required_draws=1)
    assert cells[0][0]["p_holm"] == pytest.approx(9 * one["claim_p"])  # the other cell's 8 claims count


def test_decide_report_decides_every_claim_of_every_cell():
    stats = counted_statistics(record(0, 0.3, 0.5), None)
    rows = decide_report([[stats] * 6, [stats] * 6])
    assert [len(cell) for cell in rows] == [len(CLAIMS)] * 2
    assert FLOOR_FEATURES["previous_tokens"] == ["current_token", "segment", "offset"]
