"""Rotary switched off in one layer at a time: the knockout touches that layer's rotation only,
is gone after its block (error or not), and its damage is zero where rotary does nothing."""

import json

import numpy as np
import pytest
import torch

import modeling_hmmroformer.modeling_hmm_roformer as modeling
from hmm_datasets import BayesOptimalPredictor, SamplingTables, generate_rows, get_preset, sample_hmm_params
from probing.knockout import (
    knocked_out_logits,
    rotary_knocked_out,
    rotary_knockout,
    scored_test_positions,
)
from probing.plots import plot_rotary_knockout


@pytest.fixture(scope="module")
def corpus_rows():
    """(input_ids [8, L], exact Bayes-optimal next-token probabilities [8, L, 7]) of the tiny corpus."""
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, 8)["input_ids"]
    bayes = BayesOptimalPredictor(params, dtype=torch.float64, device="cpu").next_token_probs(ids)
    return ids.astype(np.int64), bayes


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids)).logits


def knockout(model, corpus_rows, layout) -> dict:
    ids, bayes = corpus_rows
    scored = scored_test_positions(layout, len(ids))
    return rotary_knockout(model, ids, scored, bayes, batch_size=3, num_resamples=200, progress=False)


def attentive_model(tiny_model, **overrides):
    """A tiny model with weights large enough (std 0.2, not 0.02) that its attention is far from
    uniform: at the default scale, rotary moves its logits by 1e-5, near float32 rounding."""
    return tiny_model(initializer_range=0.2, **overrides)


def identity_rotary_model(tiny_model, how: str):
    """A model whose rotary rotates nothing: no rotary at all, or every angle 0 (inv_freq = 0)."""
    if how == "none":
        return attentive_model(tiny_model, position_embedding="none")
    model = attentive_model(tiny_model)
    model.model.rotary_emb.inv_freq.zero_()
    return model


@pytest.mark.parametrize("how", ["none", "zero angles"])
def test_a_model_whose_rotary_is_the_identity_loses_exactly_nothing(tiny_model, corpus_rows, layout, how):
    result = knockout(identity_rotary_model(tiny_model, how), corpus_rows, layout)
    assert result["delta_nll"]["value"] == [0.0, 0.0]
    assert result["delta_kl"]["value"] == [0.0, 0.0]
    assert result["delta_kl"]["ci_low"] == result["delta_kl"]["ci_high"] == [0.0, 0.0]


def test_a_rotary_model_changes_in_every_layer_and_the_result_is_json_ready(tiny_model, corpus_rows, layout):
    result = knockout(attentive_model(tiny_model), corpus_rows, layout)
    assert result["layers"] == [1, 2] and result["relative_depth"] == [0.5, 1.0]
    assert result["num_rows"] == 8 and result["num_tokens"] == 8 * layout.test_length
    assert all(value != 0.0 for value in result["delta_nll"]["value"] + result["delta_kl"]["value"])
    for summary in (result["delta_nll"], result["delta_kl"], result["intact"]["nll"], result["intact"]["kl"]):
        assert np.all(np.asarray(summary["ci_low"]) <= np.asarray(summary["value"]))
        assert np.all(np.asarray(summary["value"]) <= np.asarray(summary["ci_high"]))
    assert result["intact"]["kl"]["value"] > 0 and result["intact"]["nll"]["value"] > 0
    json.dumps(result)


def test_deltas_are_the_mean_change_over_scored_positions(tiny_model, corpus_rows, layout):
    """Recomputed by hand from the logits, over a custom scored set (one position per row)."""
    model = attentive_model(tiny_model)
    ids, bayes = corpus_rows
    scored = np.zeros(ids.shape, dtype=bool)
    scored[np.arange(len(ids)), layout.test_start + np.arange(len(ids))] = True
    result = rotary_knockout(model, ids, scored, bayes, progress=False)
    rows, positions = np.nonzero(scored)
    targets = torch.as_tensor(ids[rows, positions + 1])
    reference = bayes[rows, positions]

    def nll_and_kl(out: torch.Tensor) -> tuple[float, float]:
        log_probs = torch.log_softmax(out.double(), -1)[rows, positions]
        nll = -log_probs.gather(-1, targets[:, None]).mean()
        kl = (reference * (reference.log() - log_probs)).nan_to_num().sum(-1).mean()
        return float(nll), float(kl)

    intact = nll_and_kl(logits(model, ids))
    assert result["intact"]["nll"]["value"] == pytest.approx(intact[0], abs=1e-6)
    assert result["intact"]["kl"]["value"] == pytest.approx(intact[1], abs=1e-6)
    with rotary_knocked_out(model, 2):
        knocked = nll_and_kl(logits(model, ids))
    assert result["delta_nll"]["value"][1] == pytest.approx(knocked[0] - intact[0], abs=1e-6)
    assert result["delta_kl"]["value"][1] == pytest.approx(knocked[1] - intact[1], abs=1e-6)


@pytest.mark.parametrize("layer", [1, 2])
def test_knocking_out_a_layer_equals_not_rotating_its_queries_and_keys(
    tiny_model, layout, monkeypatch, layer
):
    """Reference: the modeling file's `apply_rotary_pos_emb` patched to pass the layer's queries
    and keys through unrotated (layers call it in order, once per forward pass each)."""
    model = attentive_model(tiny_model)
    ids = np.random.default_rng(0).integers(0, 7, size=(3, layout.sequence_length))
    with rotary_knocked_out(model, layer):
        hooked = logits(model, ids)
    rotate, calls = modeling.apply_rotary_pos_emb, []

    def rotate_except_layer(q, k, cos, sin, *args, **kwargs):
        calls.append(None)
        if len(calls) == layer:  # one forward pass below: call l is layer l's
            return q, k
        return rotate(q, k, cos, sin, *args, **kwargs)

    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", rotate_except_layer)
    reference = logits(model, ids)
    assert len(calls) == model.config.num_hidden_layers
    torch.testing.assert_close(hooked, reference, rtol=0, atol=1e-6)
    monkeypatch.undo()
    assert not torch.allclose(hooked, logits(model, ids))  # the knockout did change something


def test_the_hook_is_gone_after_the_block_even_when_it_raises(tiny_model, layout):
    model = attentive_model(tiny_model)
    ids = np.random.default_rng(1).integers(0, 7, size=(2, layout.sequence_length))
    intact = logits(model, ids)
    with rotary_knocked_out(model, 1):
        assert not torch.equal(logits(model, ids), intact)
    assert torch.equal(logits(model, ids), intact)
    with pytest.raises(KeyError, match="inside"), rotary_knocked_out(model, 2):
        raise KeyError("inside")
    assert torch.equal(logits(model, ids), intact)
    assert not model.model.layers[1]._forward_pre_hooks


def test_the_model_keeps_its_mode_and_its_config(tiny_model, corpus_rows, layout):
    model = attentive_model(tiny_model).train()
    before = model.config.to_dict()
    knockout(model, corpus_rows, layout)
    assert model.training and model.config.to_dict() == before


@pytest.mark.parametrize("layer", [0, 3, -1, 1.0, True])
def test_a_bad_layer_index_names_the_valid_range(tiny_model, layer):
    with (
        pytest.raises(ValueError, match=r"2 layers, numbered 1\.\.2"),
        rotary_knocked_out(tiny_model(), layer),
    ):
        pass


def test_inputs_that_do_not_fit_are_refused(tiny_model, corpus_rows, layout):
    ids, bayes = corpus_rows
    scored = scored_test_positions(layout, len(ids))
    model = attentive_model(tiny_model)
    with pytest.raises(ValueError, match="same rows"):
        rotary_knockout(model, ids[:4], scored, bayes, progress=False)
    last = scored.copy()
    last[:, -1] = True
    with pytest.raises(ValueError, match="last position"):
        rotary_knockout(model, ids, last, bayes, progress=False)
    with pytest.raises(ValueError, match="no position"):
        rotary_knockout(model, ids, np.zeros_like(scored), bayes, progress=False)


def test_scored_test_positions_predict_exactly_the_test_tokens(layout):
    scored = scored_test_positions(layout, 2)
    predicted = np.nonzero(scored[0])[0] + 1
    np.testing.assert_array_equal(predicted, np.arange(layout.test_start, layout.sequence_length))
    assert (scored[0] == scored[1]).all()


def test_the_plot_draws_a_trained_and_an_untrained_curve(tiny_model, corpus_rows, layout, tmp_path):
    trained = knockout(attentive_model(tiny_model), corpus_rows, layout)
    untrained = knockout(identity_rotary_model(tiny_model, "none"), corpus_rows, layout)
    path = plot_rotary_knockout(trained, tmp_path / "knockout.png", untrained=untrained)
    assert path.stat().st_size > 0
    assert plot_rotary_knockout(trained, tmp_path / "alone.png").stat().st_size > 0


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_runs_from_the_knocked_out_layer_up_equal_full_forward_passes_under_the_hook(
    tiny_model, layout, norm_placement
):
    """The fast path (each run starts from the intact pass's input to its layer) against the
    reference (the whole model under `rotary_knocked_out`): bitwise the same logits."""
    model = attentive_model(tiny_model, num_hidden_layers=3, norm_placement=norm_placement).eval()
    ids = torch.as_tensor(np.random.default_rng(2).integers(0, 7, size=(4, layout.sequence_length)))
    runs = list(knocked_out_logits(model, ids))
    assert len(runs) == 4
    assert torch.equal(runs[0], logits(model, ids))
    for layer in (1, 2, 3):
        with rotary_knocked_out(model, layer):
            assert torch.equal(runs[layer], logits(model, ids)), layer
    assert not any(layer._forward_pre_hooks for layer in model.model.layers)
