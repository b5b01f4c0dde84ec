"""The power simulation: it decides through the rule's own code, at the rate an independent
computation gives for a planted effect, never above the rule's false-positive rate for a zero
effect, nothing from one draw; and its spread estimates recover planted spreads."""

import math

import numpy as np
import pytest

from modeling_hmmroformer.experiments.decisions import power
from modeling_hmmroformer.experiments.decisions.verdicts import ALPHA, nested_test

CELL = (8192, 4)


def planted(mean: float, between: float, within: float, testable: float = 1.0) -> power.ClaimSpread:
    """One claim with no floor: own = mean + draw effect (SD `between`) + seed noise (`within`)."""
    return power.ClaimSpread(
        key="planted",
        direction=1,
        parts=("own",),
        mean=np.array([mean]),
        between=np.array([[between**2]]),
        within=np.array([[within**2]]),
        testable=testable,
        missing={"kind": "not testable", "why": "a precondition"},
    )


def design(*seeds_per_draw: int) -> power.Design:
    return power.Design("test", {CELL: tuple(seeds_per_draw)})


def independent_holds_rate(mean, between, within, draws, seeds, reports, rng) -> float:
    """The share of reports that hold, computed apart from the rule's code for one claim alone
    with 3 draws: the two-sided t across the draws' means with 2 degrees of freedom has the
    closed form p = 1 - |t| / sqrt(2 + t^2); holds needs p < ALPHA, a positive mean and 5/6 of
    the seeds positive."""
    assert draws == 3
    shifts = mean + between * rng.standard_normal((reports, draws, 1))
    values = shifts + within * rng.standard_normal((reports, draws, seeds))
    means = values.mean(axis=2)
    t = means.mean(axis=1) / (means.std(axis=1, ddof=1) / math.sqrt(draws))
    p = 1 - np.abs(t) / np.sqrt(2 + t**2)
    agree = (values > 0).reshape(reports, -1).sum(axis=1)
    needed = math.ceil(5 / 6 * draws * seeds - 1e-9)
    return float(np.mean((p < ALPHA) & (means.mean(axis=1) > 0) & (agree >= needed)))


@pytest.mark.parametrize("mean", [0.02, 0.04])
def test_a_planted_effect_is_decided_at_the_independently_computed_rate(mean):
    spread = planted(mean, between=0.01, within=0.005)
    reports = 2000
    rates = power.decision_rates({CELL: [spread]}, design(2, 2, 2), reports, seed=3)[CELL]["planted"]
    expected = independent_holds_rate(mean, 0.01, 0.005, 3, 2, 20000, np.random.default_rng(4))
    assert 0.05 < expected < 0.95  # a rate the check can tell apart from 0 and 1
    assert rates["contradicted"] == 0
    error = math.sqrt(expected * (1 - expected) / reports) + math.sqrt(expected * (1 - expected) / 20000)
    assert abs(rates["holds"] - expected) < 4 * error


@pytest.mark.parametrize("seeds_per_draw", [(1,) * 8, (2, 2, 2), (2, 2, 2, 1, 1, 1, 1, 1)])
def test_a_zero_effect_is_decided_at_most_at_the_false_positive_rate(seeds_per_draw):
    reports = 1500
    rates = power.decision_rates({CELL: [planted(0.0, 0.02, 0.01)]}, design(*seeds_per_draw), reports)
    decided = rates[CELL]["planted"]["decided"]
    assert decided <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reports)


def test_one_draw_decides_nothing_however_large_the_effect():
    rates = power.decision_rates({CELL: [planted(1.0, 0.01, 0.01)]}, design(12), 200)
    assert rates[CELL]["planted"]["decided"] == 0
    more = power.decision_rates({CELL: [planted(1.0, 0.01, 0.01)]}, design(6, 6), 200)
    assert more[CELL]["planted"]["holds"] == 1


@pytest.mark.parametrize("seeds", [1, 2, 5])
def test_d_draws_give_d_minus_one_degrees_of_freedom_whatever_the_seeds(seeds):
    rng = np.random.default_rng(seeds)
    for draws, closed_form in ((2, lambda t: 1 - 2 / math.pi * math.atan(abs(t))), (3, None)):
        values = rng.normal(0.3, 0.2, size=(draws, seeds))
        means = values.mean(axis=1)
        t = means.mean() / (means.std(ddof=1) / math.sqrt(draws))
        expected = closed_form(t) if closed_form else 1 - abs(t) / math.sqrt(2 + t * t)
        labels = [d for d in range(draws) for _ in range(seeds)]
        found = nested_test(list(values.ravel()), labels)
        assert found["num_draws"] == draws
        assert found["p"] == pytest.approx(expected, rel=1e-9)


def test_the_spread_estimates_recover_a_planted_spread():
    rng = np.random.default_rng(0)
    draws, seeds = 600, 3
    mean = np.array([0.5, 0.3])
    between = np.array([[0.04, 0.01], [0.01, 0.02]])
    within = np.array([[0.01, 0.0], [0.0, 0.03]])
    shifts = rng.multivariate_normal(np.zeros(2), between, size=draws)
    values = (
        mean + np.repeat(shifts, seeds, axis=0) + rng.multivariate_normal(np.zeros(2), within, draws * seeds)
    )
    labels = [d for d in range(draws) for _ in range(seeds)]
    found_mean, found_between, found_within = power.nested_moments(values, labels)
    assert found_mean == pytest.approx(mean, abs=0.03)
    assert found_between == pytest.approx(between, abs=0.006)
    assert found_within == pytest.approx(within, abs=0.003)


def test_spreads_are_positive_semi_definite_and_zero_below_two_draws():
    values = np.array([[1.0, 2.0], [1.5, 2.5], [1.1, 2.2]])
    _, between, within = power.nested_moments(values, [0, 0, 0])
    assert np.all(between == 0)
    assert np.all(np.linalg.eigvalsh(within) >= -1e-12)
    _, between, _ = power.nested_moments(np.array([[0.0], [10.0], [0.1], [10.1]]), [0, 0, 1, 1])
    assert between[0, 0] == 0  # draw means equal within the seeds' noise: no draw effect


def test_a_floors_effect_is_what_the_simulated_seeds_carry():
    seeds = [
        {
            "own": 0.5 + 0.01 * i,
            "floors": {"twin": 0.1, "tokens": None, "zero": 0.0},
            "missing": None,
            "draw": i // 2,
        }
        for i in range(6)
    ]
    seeds.append({"own": None, "floors": {}, "missing": {"kind": "not testable", "why": "x"}, "draw": 3})
    spread = power.estimate_spread("k", 1, seeds)
    assert spread.parts == ("own", "over twin")
    assert spread.refused == ("tokens",) and spread.vacuous == ("zero",)
    assert spread.testable == pytest.approx(6 / 7)
    simulated = power.simulated_seeds(spread, [2, 2, 2], np.random.default_rng(0))
    for seed in simulated:
        if seed["missing"] is None:
            assert seed["floors"]["tokens"] is None and seed["floors"]["zero"] == 0.0
            assert seed["own"] - seed["floors"]["twin"] == pytest.approx(0.4 + 0.025, abs=0.05)


def test_a_precondition_failing_in_most_seeds_leaves_the_claim_not_testable():
    rates = power.decision_rates({CELL: [planted(1.0, 0.01, 0.01, testable=0.0)]}, design(2, 2, 2, 2), 50)
    assert rates[CELL]["planted"]["decided"] == 0


def test_grown_designs_keep_the_committed_draws():
    committed = {CELL: (2, 2, 2), (32, 4): (2, 2, 2)}
    grown = power.extended(committed, {CELL: 5}, 1)
    assert grown.seeds_per_draw == {CELL: (2, 2, 2, 1, 1), (32, 4): (2, 2, 2)}
    assert power.extended(committed, {CELL: 2}, 1).seeds_per_draw[CELL] == (2, 2, 2)
    assert power.fresh(committed, [CELL], 4, 2).seeds_per_draw[CELL] == (2, 2, 2, 2)


def test_the_smallest_deciding_draws_must_stay_above_the_target():
    assert power.smallest_deciding({3: 0.1, 4: 0.85, 5: 0.7, 6: 0.9, 7: 0.95}, 0.8) == 6
    assert power.smallest_deciding({3: 0.1, 4: 0.5}, 0.8) is None


def test_the_upper_bound_factor_is_the_chi_square_bound():
    # chi2 with 2 degrees of freedom: the 0.2 quantile is -2 ln 0.8 in closed form
    assert power.upper_bound_factor(3) == pytest.approx(2 / (-2 * math.log(0.8)), rel=1e-6)
    assert power.upper_bound_factor(50) < power.upper_bound_factor(10) < power.upper_bound_factor(3)
