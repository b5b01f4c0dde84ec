"""The decision rule's statistics against references computed another way: Student's t tables
and closed forms, binomial sums for the incomplete beta, Holm's procedure by its definition,
the across-seed interval by hand. No scipy: every reference is written out here."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from modeling_hmmroformer.experiments.decisions.verdicts import (
    across_seeds,
    holm,
    one_sample_p,
    regularized_beta,
    t_two_sided_p,
)

# ---- Student's t ----------------------------------------------------------------------------------
# Published two-sided p-values (to 4 significant digits): the 0.975 quantiles of the t table for
# df = 1..5 and 10, and a few off-quantile values.
T_TABLE = [
    (12.706, 1, 0.0500),
    (4.303, 2, 0.0500),
    (3.182, 3, 0.0500),
    (2.776, 4, 0.0500),
    (2.571, 5, 0.0500),
    (2.228, 10, 0.0500),
    (2.0, 5, 0.1019),
    (1.0, 10, 0.3409),
    (1.5, 3, 0.2306),
    (0.5, 7, 0.6324),
    (3.5, 12, 0.004382),
]


@pytest.mark.parametrize(("t", "df", "expected"), T_TABLE)
def test_t_two_sided_p_matches_the_t_table(t, df, expected):
    assert t_two_sided_p(t, df) == pytest.approx(expected, rel=1e-3)
    assert t_two_sided_p(-t, df) == pytest.approx(expected, rel=1e-3)  # two-sided: the sign is irrelevant


def _closed_form_p(t: float, df: int) -> float:
    """Two-sided p of Student's t from its closed-form CDF for df = 1..4."""
    t = abs(t)
    if df == 1:  # Cauchy
        return 1.0 - 2.0 / math.pi * math.atan(t)
    if df == 2:
        return 1.0 - t / math.sqrt(2.0 + t * t)
    if df == 3:
        u = t / math.sqrt(3.0)
        return 1.0 - 2.0 / math.pi * (math.atan(u) + u / (1.0 + u * u))
    if df == 4:
        x = t / math.sqrt(4.0 + t * t)
        return 1.0 - x * (1.5 - 0.5 * x * x)
    raise ValueError(df)


@pytest.mark.parametrize("df", [1, 2, 3, 4])
def test_t_two_sided_p_matches_the_closed_forms_on_both_sides_of_the_branch(df):
    # x = df / (df + t^2) sweeps (0, 1]: small t lies above the continued fraction's branch point
    # (a + 1) / (a + b + 2) of I_x(df/2, 1/2), large t below it
    for t in [0.0, 0.01, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 50.0, 300.0]:
        assert t_two_sided_p(t, df) == pytest.approx(_closed_form_p(t, df), rel=1e-9, abs=1e-13), t
    assert t_two_sided_p(0.0, df) == pytest.approx(1.0, abs=1e-15)


def test_t_two_sided_p_falls_with_t_and_with_the_degrees_of_freedom():
    ts = np.linspace(0.0, 8.0, 81)
    for df in (1, 2, 5, 9, 30):
        ps = [t_two_sided_p(float(t), df) for t in ts]
        assert all(0.0 <= p <= 1.0 + 1e-15 for p in ps)
        assert all(a > b for a, b in zip(ps, ps[1:])), df  # strictly falling in |t|
    for t in (1.0, 2.0, 3.0):  # heavier tails with fewer degrees of freedom
        ps = [t_two_sided_p(t, df) for df in (1, 2, 3, 5, 10, 30, 100)]
        assert all(a > b for a, b in zip(ps, ps[1:])), t
    normal = math.erfc(2.0 / math.sqrt(2.0))  # df -> infinity: the normal's 0.0455
    assert t_two_sided_p(2.0, 100000) == pytest.approx(normal, rel=1e-3)


def test_one_sample_p_of_a_sample_computed_by_hand():
    values = [0.3, -0.1, 0.5, 0.2, 0.6]
    # mean 0.3; deviations 0, -0.4, 0.2, -0.1, 0.3; sum of squares 0.30; variance (n - 1) 0.075;
    # standard error sqrt(0.075 / 5) = sqrt(0.015); t = 0.3 / sqrt(0.015) = sqrt(6), 4 df
    t = math.sqrt(6.0)
    expected = _closed_form_p(t, 4)
    assert expected == pytest.approx(0.07048, abs=1e-5)  # sqrt(6) = 2.449 lies below t(0.975, 4) = 2.776
    assert one_sample_p(values) == pytest.approx(expected, rel=1e-9)
    assert one_sample_p([-v for v in values]) == pytest.approx(expected, rel=1e-9)  # two-sided
    assert one_sample_p([100 * v for v in values]) == pytest.approx(expected, rel=1e-9)  # scale-free
    assert one_sample_p([*values, None, float("nan")]) == pytest.approx(expected, rel=1e-9)  # dropped


def test_one_sample_p_on_a_two_value_sample_is_the_cauchy_tail():
    # [1, 3]: mean 2, sd sqrt(2), se 1, t = 2 with 1 df: p = 1 - (2 / pi) atan(2)
    assert one_sample_p([1.0, 3.0]) == pytest.approx(1.0 - 2.0 / math.pi * math.atan(2.0), rel=1e-9)
    # a sample centred on 0 has t = 0: p = 1
    assert one_sample_p([-1.0, 1.0, -2.0, 2.0]) == pytest.approx(1.0, abs=1e-12)


# ---- the regularized incomplete beta ------------------------------------------------------------
def _binomial_tail(x: float, a: int, b: int) -> float:
    """I_x(a, b) for integers: P(Binomial(a + b - 1, x) >= a)."""
    n = a + b - 1
    return sum(math.comb(n, j) * x**j * (1 - x) ** (n - j) for j in range(a, n + 1))


XS = [0.001, 0.02, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.98, 0.999]


@pytest.mark.parametrize(
    ("a", "b"), [(1, 1), (1, 4), (4, 1), (2, 3), (3, 2), (5, 5), (7, 2), (2, 9), (12, 15)]
)
def test_regularized_beta_equals_the_binomial_tail_for_integer_shapes(a, b):
    branch = (a + 1) / (a + b + 2)
    assert any(x < branch for x in XS) and any(x > branch for x in XS)  # both sides are checked
    for x in XS:
        assert regularized_beta(x, a, b) == pytest.approx(_binomial_tail(x, a, b), rel=1e-10, abs=1e-14), x


def test_regularized_beta_special_cases_and_symmetry():
    for x in XS:
        assert regularized_beta(x, 1, 1) == pytest.approx(x, rel=1e-12)  # uniform
        assert regularized_beta(x, 3.5, 1) == pytest.approx(x**3.5, rel=1e-10)
        assert regularized_beta(x, 1, 2.5) == pytest.approx(1 - (1 - x) ** 2.5, rel=1e-10)
        arcsine = 2 / math.pi * math.asin(math.sqrt(x))
        assert regularized_beta(x, 0.5, 0.5) == pytest.approx(arcsine, rel=1e-10)
        for a, b in [(0.5, 3.0), (2.5, 0.5), (4.0, 1.5), (10.0, 0.5)]:
            assert regularized_beta(x, a, b) == pytest.approx(1.0 - regularized_beta(1 - x, b, a), abs=1e-13)
    assert regularized_beta(0.0, 2, 3) == 0.0 and regularized_beta(-0.5, 2, 3) == 0.0
    assert regularized_beta(1.0, 2, 3) == 1.0 and regularized_beta(1.5, 2, 3) == 1.0


def test_regularized_beta_is_continuous_and_increasing_across_its_branch_point():
    for a, b in [(2.5, 0.5), (0.5, 0.5), (3.0, 4.0), (6.0, 0.5)]:
        branch = (a + 1) / (a + b + 2)
        below, above = regularized_beta(branch - 1e-9, a, b), regularized_beta(branch + 1e-9, a, b)
        assert 0.0 < below < above and above - below < 1e-7, (a, b)
        grid = [regularized_beta(float(x), a, b) for x in np.linspace(0.0, 1.0, 201)]
        assert all(p < q for p, q in zip(grid, grid[1:])), (a, b)


# ---- Holm -----------------------------------------------------------------------------------------
def _holm_rejections(pvalues: list[float], alpha: float) -> set[int]:
    """Holm's step-down procedure by its definition: test the sorted p-values against
    alpha / m, alpha / (m - 1), ... and stop at the first that fails."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = set()
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        rejected.add(i)
    return rejected


def test_holm_of_a_worked_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max
    # 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-12)
    assert holm([0.3, 0.02]) == pytest.approx([0.3, 0.04], abs=1e-12)
    assert holm([0.01, 0.01]) == pytest.approx([0.02, 0.02], abs=1e-12)  # ties share the value
    assert holm([0.2]) == [0.2] and holm([]) == []


def test_holm_leaves_missing_p_values_out_of_the_family():
    with_missing = holm([None, 0.01, None, 0.04, 0.03, None, 0.005])
    assert with_missing[0] is None and with_missing[2] is None and with_missing[5] is None
    # the family has 4 members, not 7: the same adjustment as without the Nones
    assert [with_missing[i] for i in (1, 3, 4, 6)] == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-12)
    assert holm([None, None]) == [None, None]


def test_holm_caps_at_one():
    assert holm([0.5, 0.6, 0.9]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([0.4, 0.001, 0.45]) == pytest.approx([0.8, 0.003, 0.8])


def test_holm_is_monotone_bounded_and_rejects_as_the_step_down_procedure():
    rng = np.random.default_rng(0)
    for trial in range(200):
        size = int(rng.integers(1, 9))
        raw = [float(p) for p in rng.choice([1e-4, 0.003, 0.01, 0.02, 0.04, 0.2, 0.7], size)]
        if trial % 2:
            raw = [float(p) for p in rng.uniform(0, 0.1, size)]
        adjusted = holm(raw)
        for p, q in zip(raw, adjusted):
            assert p <= q + 1e-15 and q <= min(1.0, size * p) + 1e-15  # between raw and Bonferroni
        for i, j in itertools.permutations(range(size), 2):
            if raw[i] <= raw[j]:
                assert adjusted[i] <= adjusted[j] + 1e-15  # order preserved
        for alpha in (0.01, 0.05, 0.1):
            assert {i for i, q in enumerate(adjusted) if q <= alpha} == _holm_rejections(raw, alpha), (
                raw,
                alpha,
            )


# ---- the across-seed interval ---------------------------------------------------------------------
# the published 0.975 quantiles of Student's t, by degrees of freedom
T_975_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def test_across_seeds_interval_by_hand():
    # [1, 2, 4, 7]: mean 3.5; squared deviations 6.25 + 2.25 + 0.25 + 12.25 = 21; variance 21 / 3
    # = 7; half width t(0.975, 3) sqrt(7) / sqrt(4)
    half = 3.182446 * math.sqrt(7.0) / 2.0  # t(0.975, 3) = 3.1824463
    out = across_seeds([1.0, 2.0, None, 4.0, float("nan"), 7.0])
    assert out["n"] == 4 and out["mean"] == pytest.approx(3.5)
    assert out["ci_low"] == pytest.approx(3.5 - half, abs=1e-6)
    assert out["ci_high"] == pytest.approx(3.5 + half, abs=1e-6)


@pytest.mark.parametrize("n", range(2, 11))
def test_across_seeds_half_width_uses_the_t_quantile_with_n_minus_1_df(n):
    values = [float(v) for v in np.random.default_rng(n).normal(0.3, 1.0, n)]
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T_975_TABLE[n - 1] * sd / math.sqrt(n)
    out = across_seeds(values)
    assert out["n"] == n and out["mean"] == pytest.approx(mean, rel=1e-12)
    assert out["ci_high"] - out["mean"] == pytest.approx(half, rel=1e-3)
    assert out["mean"] - out["ci_low"] == pytest.approx(half, rel=1e-3)
    # the quantile is the t's: the interval's end is where the two-sided p is 0.05
    assert t_two_sided_p((out["ci_high"] - mean) / (sd / math.sqrt(n)), n - 1) == pytest.approx(
        0.05, abs=2e-4
    )


@pytest.mark.parametrize(("n", "quantile"), [(11, 2.228), (21, 2.086)])
def test_across_seeds_uses_the_t_quantile_beyond_the_table(n, quantile):
    values = [float(v) for v in np.random.default_rng(n).normal(0.3, 1.0, n)]
    out = across_seeds(values)
    sd = float(np.std(values, ddof=1))
    assert out["ci_high"] - out["mean"] == pytest.approx(quantile * sd / math.sqrt(n), rel=1e-3)


def test_across_seeds_without_an_interval():
    assert across_seeds([]) == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    assert across_seeds([None, float("nan")])["n"] == 0
    assert across_seeds([2.5, None]) == {"mean": 2.5, "ci_low": None, "ci_high": None, "n": 1}
    same = across_seeds([0.4, 0.4, 0.4])  # no spread: a zero-width interval at the mean
    assert same["ci_low"] == pytest.approx(0.4) and same["ci_high"] == pytest.approx(0.4)
