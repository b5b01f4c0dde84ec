"""The claims' statistics on planted curves, and a model as its own twin: every effect is 0."""

import numpy as np
import pytest

from hmm_datasets.corpus import open_corpus
from modeling_hmmroformer.experiments.claims import CLAIMS, claim_effects, layer_one, probes_profile
from probing.run import ProbeConfig, run_probing


def planted_profile(depth=4) -> dict:
    """A profile whose every statistic is known by construction."""
    probe_depth = [layer / depth for layer in range(depth + 1)]
    attention_depth = probe_depth[1:]
    return {
        "depth": depth,
        "probe_depth": probe_depth,
        "attention_depth": attention_depth,
        "demo_gain": 0.04,
        "position_gain": 0.06,
        # layer 1 far off the line the other layers lie on: left out of the slope
        "shuffle_position_only": [5.0] + [1.0 - 0.5 * d for d in attention_depth[1:]],
        "shuffle_total": [1.0] * depth,
        "knockout_nll": [3.0] + [0.2 - 0.1 * d for d in attention_depth[1:]],
        "knockout_kl": [1.0] * depth,
        "belief_r2": {
            "task_posterior": {"demo1": [0.0, 0.0, 0.2, 0.8, 1.0]},  # crosses 0.5 at depth 0.625
            "state_filter": {"demo1": [0.0, 0.5, 1.0, 1.0, 1.0]},  # crosses 0.5 at depth 0.25
        },
        "previous_tokens": {
            "1": [0.2, 1.0, 0.2, 0.2, 0.2],  # peak at depth 0.25: rises 0.8, falls 0.8
            "2": [0.2, 0.2, 0.2, 0.6, 0.2],  # peak at depth 0.75: rises 0.4, falls 0.4
        },
    }


def test_every_statistic_on_planted_curves():
    values = {claim.key: claim.compute(planted_profile()) for claim in CLAIMS}
    assert values["demonstrations"] == 0.04 and values["test_position"] == 0.06
    assert values["position_slope"] == pytest.approx(-0.5)
    assert values["rotary_knockout_slope"] == pytest.approx(-0.1)
    assert values["task_rises"] == pytest.approx(1.0)
    assert values["state_before_task"] == pytest.approx(0.625 - 0.25)
    assert values["falls_with_distance"] == pytest.approx(0.4)
    assert values["rises_then_falls"] == pytest.approx(0.6)
    assert values["peak_moves_up"] == pytest.approx(0.5)
    assert layer_one(planted_profile()) == {"shuffle_position_only": 5.0, "knockout_nll": 3.0}


def test_statistics_undefined_without_their_curves_are_none():
    profile = planted_profile()
    profile["knockout_nll"] = None
    profile["attention_depth"], profile["shuffle_position_only"] = [0.5, 1.0], [5.0, 1.0]  # two layers
    values = {claim.key: claim.compute(profile) for claim in CLAIMS}
    assert values["rotary_knockout_slope"] is None
    assert values["position_slope"] is None  # two layers: one point above layer 1, no slope
    flat = planted_profile()
    flat["belief_r2"]["task_posterior"]["demo1"] = [0.3] * 5
    assert claim_effects(flat, planted_profile())["state_before_task"]["effect"] is None


def test_a_statistic_of_a_model_against_itself_as_twin_is_zero(tiny_model):
    model = tiny_model()
    config = ProbeConfig(
        distances=(1, 2), num_probe_tasks=4, rows_per_task=12, positions_per_row=None, num_resamples=50
    )
    probes = run_probing(model, open_corpus("tiny"), config, untrained_model=model, progress=False).results
    trained, twin = probes_profile(probes, ""), probes_profile(probes, "untrained_")
    assert trained == twin
    base = planted_profile(depth=2)
    effects = claim_effects({**base, **trained}, {**base, **twin})
    defined = [value["effect"] for value in effects.values() if value["effect"] is not None]
    assert len(defined) >= 6 and np.allclose(defined, 0.0, atol=0.0)
    assert effects["task_rises"]["effect"] == 0.0 and effects["state_before_task"]["effect"] == 0.0
