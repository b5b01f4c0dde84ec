"""The decision rule on synthetic per-seed statistics, its p-values, and the curve statistics."""

import math

import numpy as np
import pytest

from modeling_hmmroformer.experiments.decisions.verdicts import (
    NA,
    NOT_TESTABLE,
    across_seeds,
    claim_tests,
    cross_fitted_fall,
    decide_cell,
    effect,
    gain_lead,
    holm,
    one_sample_p,
    shares_of_gain,
    slope,
    t_two_sided_p,
)


def decide_one_draw(claims: list) -> list[dict]:
    """`decide_cell` with the draw cap lifted: the seed-level conditions alone."""
    return decide_cell(claims, required_draws=1)


def seeds(own, **floors) -> list[dict]:
    """Per-seed statistics: `own` values and, per floor, its values."""
    return [
        {"own": value, "floors": {name: values[i] for name, values in floors.items()}, "missing": None}
        for i, value in enumerate(own)
    ]


def missing(kind: str, why: str, count: int) -> list[dict]:
    return [{"own": None, "floors": {}, "missing": {"kind": kind, "why": why}}] * count


def test_t_p_values_match_the_tables():
    assert t_two_sided_p(2.571, 5) == pytest.approx(0.05, abs=2e-4)  # the 97.5% quantile, 5 df
    assert t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=2e-4)
    assert t_two_sided_p(2.0, 30) == pytest.approx(0.0546, abs=2e-4)
    assert t_two_sided_p(0.0, 3) == 1.0 and t_two_sided_p(-2.571, 5) == t_two_sided_p(2.571, 5)
    assert one_sample_p([0.1]) is None and one_sample_p([0.0, 0.0]) == 1.0 and one_sample_p([0.2, 0.2]) == 0.0


def test_holm_adjusts_step_down_and_keeps_missing():
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06], abs=1e-12)
    assert holm([0.5, 0.001]) == [0.5, 0.002]
    assert holm([None, None]) == [None, None]


def test_the_four_verdicts_and_n_a_on_synthetic_records():
    strong = [0.10, 0.12, 0.09, 0.11, 0.13, 0.08]
    cell = decide_one_draw(
        [
            (seeds(strong, twin=[0.0] * 6), 1),  # holds: own and effect clearly positive
            (seeds([-v for v in strong], twin=[0.01] * 6), 1),  # contradicted: clearly negative
            (
                seeds(strong[:5])
                + missing(NOT_TESTABLE, "1 distance peaks 0.02 above the twin, 2 needed", 1),
                1,
            ),
            (seeds([0.10, -0.12, 0.09, -0.11, 0.13, -0.08]), 1),  # undecided: signs split
            (missing(NA, "no knock-out", 6), -1),
        ]
    )
    assert [c["verdict"] for c in cell] == ["holds", "contradicted", "not testable", "undecided", "n/a"]
    assert cell[2]["label"] == "not testable (1 distance peaks 0.02 above the twin, 2 needed)"
    assert cell[4]["label"] == "n/a (no knock-out)" and cell[4]["p_holm"] is None
    assert cell[2]["p_holm"] is None  # not testable leaves Holm's family: 3 claims adjusted
    assert sum(c["p_holm"] is not None for c in cell) == 3
    assert all(c["p_holm"] >= c["claim_p"] for c in cell if c["p_holm"] is not None)


def test_a_floor_the_model_does_not_beat_keeps_a_claim_from_holding():
    own = [0.30, 0.32, 0.29, 0.31, 0.33, 0.28]
    beaten = decide_one_draw([(seeds(own, twin=[0.0] * 6, tokens=[0.31, 0.30, 0.30, 0.32, 0.32, 0.29]), 1)])[
        0
    ]
    assert beaten["verdict"] == "undecided"  # the own test passes, the effect over tokens does not
    assert beaten["p_own"] < 1e-5 and beaten["claim_p"] == beaten["floors"]["tokens"]["p"] > 0.05
    above = decide_one_draw([(seeds(own, tokens=[0.1] * 6), 1)])[0]
    assert above["verdict"] == "holds"


def test_holm_across_a_cell_changes_a_verdict_the_raw_p_would_give():
    # p about 0.01 alone: holds at 0.05; beside eight claims with large p, Holm multiplies it by 9
    own = [0.05, 0.30, 0.10, 0.25, 0.15, 0.20]
    alone = decide_one_draw([(seeds(own), 1)])[0]
    assert 0.05 / 9 < alone["claim_p"] < 0.05 and alone["verdict"] == "holds"
    noise = [0.1, -0.1, 0.05, -0.05, 0.2, -0.2]
    cell = decide_one_draw([(seeds(own), 1)] + [(seeds(noise), 1)] * 8)
    assert cell[0]["p_holm"] == pytest.approx(9 * alone["claim_p"]) and cell[0]["verdict"] == "undecided"


def test_a_vacuous_floor_is_left_out_and_said_so():
    tests = claim_tests(
        seeds([-0.2, -0.3, -0.25, -0.2, -0.3, -0.22], twin=[0.0, 1e-8, 0.0, 0.0, -1e-9, 0.0]), -1
    )
    assert tests["vacuous_floors"] == ["twin"] and tests["floors"] == {}
    assert (
        decide_one_draw([(seeds([-0.2, -0.3, -0.25, -0.2, -0.3, -0.22], twin=[0.0] * 6), -1)])[0]["verdict"]
        == "holds"
    )


def test_fewer_seeds_are_undecided_with_their_number():
    assert decide_one_draw([(seeds([0.1, 0.11, 0.12]), 1)])[0]["label"] == "undecided (3 seeds)"
    assert decide_one_draw([(seeds([0.1]), 1)])[0]["label"] == "undecided (1 seed)"
    assert decide_one_draw([(missing(NOT_TESTABLE, "no gain", 1), 1)])[0]["label"] == "not testable (no gain)"
    with pytest.raises(ValueError, match="direction"):
        claim_tests(seeds([0.1] * 6), direction=0)


def test_effect_and_across_seeds():
    assert effect(0.37, 0.37) == 0.0
    assert effect(None, 0.2) is None and effect(0.2, float("nan")) is None
    summary = across_seeds([1.0, 2.0, 3.0, None])
    assert summary["mean"] == 2.0 and summary["n"] == 3
    assert summary["ci_high"] - 2.0 == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)


# ---- the curve statistics ----------------------------------------------------------------------
def test_slope_and_shares_of_gain_on_known_curves():
    depths = np.array([0.25, 0.5, 0.75, 1.0])
    assert slope(depths, 2 * depths + 1) == pytest.approx(2.0)
    assert slope([0.5], [1.0]) is None
    assert shares_of_gain([0.0, 0.5, 1.0, 0.5]).tolist() == [0.5, 1.0, 1.0]  # a reached level stays reached
    assert shares_of_gain([0.3, 0.2, 0.1]).tolist() == [1.0, 1.0]  # best at the embeddings: reached there
    assert shares_of_gain([0.3, 0.31, 0.3]).tolist() == [1.0, 1.0]  # a gain below 0.02 counts as none


def test_gain_lead_decides_which_curve_rises_first():
    layers = 8
    at_one = [0.0] + [1.0] * layers  # rises inside layer 1
    at_half = [0.0] * (layers // 2) + [1.0] * (layers // 2 + 1)  # rises at layer L/2
    assert gain_lead(at_one, at_half) == pytest.approx(3.0)  # three layers earlier
    assert gain_lead(at_half, at_one) == pytest.approx(-3.0)
    assert gain_lead(at_one, [0.0] + [0.4] * layers) == 0.0  # both inside layer 1: no lead
    rng = np.random.default_rng(0)
    flat = [gain_lead(rng.normal(0, 0.01, layers + 1), rng.normal(0, 0.01, layers + 1)) for _ in range(4000)]
    assert abs(np.mean(flat)) < 0.02 * layers  # flat noisy curves: centred on 0 (in layers)


def test_gain_lead_of_noisy_flat_curves_that_pass_the_gain_precondition_is_centred():
    # the precondition of "state before task" (both curves gain MIN_GAIN over the embeddings)
    # selects noisy flat curves without favouring either: the lead stays centred on 0
    rng = np.random.default_rng(0)
    leads = []
    for _ in range(20000):
        a, b = 0.5 + rng.normal(0, 0.01, (2, 5))
        if a.max() - a[0] >= 0.02 and b.max() - b[0] >= 0.02:
            leads.append(gain_lead(a, b))
    assert len(leads) > 500 and abs(np.mean(leads)) < 0.15  # layers, of 4 (SE about 0.035)


@pytest.mark.parametrize("rise_at", [1, 2, 3])
def test_gain_lead_counts_layers_whatever_the_depth(rise_at):
    # the same pattern in absolute layers (the near curve at layer 1, the far one `rise_at` layers
    # later) at 4 and at 16 layers: one statistic, within 10% (a mean over layers shrank as 1/L)
    def leads(depth: int) -> float:
        near = [0.0] + [0.5] * depth
        far = [0.0] * (rise_at + 1) + [0.5] * (depth - rise_at)
        return gain_lead(near, far)

    assert leads(4) == pytest.approx(rise_at) and leads(16) == pytest.approx(leads(4), rel=0.1)


def test_cross_fitted_fall_is_about_zero_on_flat_noise_unlike_the_old_statistic():
    rng = np.random.default_rng(1)
    falls, old = [], []
    for _ in range(4000):
        a, b = rng.normal(0.5, 0.01, (2, 9))
        falls.append(cross_fitted_fall(a, b))
        pooled = (a + b) / 2
        old.append(min(pooled.max() - pooled[0], pooled.max() - pooled[-1]))
    assert (
        abs(np.mean(falls)) < 5e-4 and np.mean(old) > 0.003
    )  # the retired min() is positive by construction
    peaked = np.array([0.2, 0.9, 0.6, 0.4])
    assert cross_fitted_fall(peaked, peaked) == pytest.approx(0.5)  # rises then falls
    rising = np.array([0.2, 0.4, 0.6, 0.8])
    assert cross_fitted_fall(rising, rising) == 0.0
    decaying = np.array([0.9, 0.6, 0.4, 0.2])  # an untrained network's monotone decay: no rise
    assert cross_fitted_fall(decaying, decaying) == 0.0
