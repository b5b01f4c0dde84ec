"""The decision rule on synthetic per-seed effects, and the continuous curve statistics."""

import math

import numpy as np
import pytest

from modeling_hmmroformer.experiments.verdicts import (
    centroid,
    crossing,
    decide,
    effect,
    slope,
)


def test_one_case_of_each_verdict():
    assert decide([0.10, 0.12, 0.09, 0.11, 0.13, 0.08], direction=1)["verdict"] == "holds"
    assert decide([0.10, 0.12, 0.09, 0.11, 0.13, 0.08], direction=-1)["verdict"] == "contradicted"
    assert decide([0.10, -0.12, 0.09, -0.11, 0.13, -0.08], direction=1)["verdict"] == "undecided"


def test_holds_needs_five_of_six_seeds_with_the_claimed_sign():
    # mean clearly positive and its interval above 0, but only 4 of 6 seeds positive
    four = decide([0.9, 0.8, 0.85, 0.95, -0.01, -0.02], direction=1)
    assert four["ci_low"] > 0 and four["agree"] == 4
    assert four["verdict"] == "undecided"
    five = decide([0.9, 0.8, 0.85, 0.95, 0.7, -0.02], direction=1)
    assert five["agree"] == 5 and five["verdict"] == "holds"


def test_an_interval_reaching_zero_is_undecided_even_when_every_seed_agrees():
    result = decide([0.01, 0.5, 0.02, 0.9, 0.01, 0.03], direction=1)
    assert result["agree"] == 6 and result["ci_low"] < 0
    assert result["verdict"] == "undecided"


def test_fewer_than_six_seeds_are_undecided_and_say_how_many():
    three = decide([0.1, 0.11, 0.12], direction=1)
    assert three["verdict"] == "undecided" and three["label"] == "undecided (3 seeds)"
    assert three["n"] == 3 and three["ci_low"] > 0  # the interval is still reported
    assert decide([0.1], direction=1)["label"] == "undecided (1 seed)"
    # missing effects (a statistic undefined for one seed) do not count as seeds
    missing = decide([0.1, 0.11, 0.12, 0.1, 0.1, None], direction=1)
    assert missing["label"] == "undecided (5 seeds)"


def test_the_direction_must_be_a_sign():
    with pytest.raises(ValueError, match="direction"):
        decide([0.1] * 6, direction=0)


def test_effect_of_a_model_on_itself_is_zero_and_missing_stays_missing():
    assert effect(0.37, 0.37) == 0.0
    assert effect(None, 0.2) is None and effect(0.2, float("nan")) is None


def test_slope_centroid_and_crossing_of_known_curves():
    depths = np.array([0.25, 0.5, 0.75, 1.0])
    assert slope(depths, 2 * depths + 1) == pytest.approx(2.0)
    assert slope([0.5], [1.0]) is None
    # all the mass above the minimum at depth 0.75
    assert centroid(depths, [0.0, 0.0, 1.0, 0.0]) == pytest.approx(0.75)
    assert centroid(depths, [1.0, 3.0, 3.0, 1.0]) == pytest.approx(0.625)
    assert centroid(depths, [0.4] * 4) is None
    # from 0 to 1: half the range is reached between 0.5 (0.2) and 0.75 (0.8): at 0.5 + 0.25 * 0.5
    assert crossing(depths, [0.0, 0.2, 0.8, 1.0]) == pytest.approx(0.625)
    assert crossing(depths, [1.0, 1.0, 1.0, 1.0]) is None
    assert crossing(depths, [0.9, 0.0, 1.0, 1.0]) == pytest.approx(0.25)  # already above at the start
    assert math.isclose(crossing(depths, [0.0, 1.0, 1.0, 1.0], share=0.25), 0.25 + 0.25 * 0.25)
