"""The shuffle test: derangements that move every demonstration, a statistic that is zero
exactly when attention ignores where a demonstration sits, and its parts: position-only
(zero without rotary), content (zero where a layer's input is a function of the token alone),
attention total variation and the attention mass on demonstrations."""

import numpy as np
import pytest
import torch

from probing import (
    derangements,
    lower_layers,
    pre_rotary_queries_and_keys,
    relative_logit_change,
    shuffle_demos,
    shuffle_patterns,
    shuffle_records,
    shuffle_test,
    upper_layers,
)
from probing.recording import recording_attention
from probing.shuffle import PART_METRICS, attention_geometry, demo_positions


def rows(layout, count: int = 12, seed: int = 4) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(0, 6, size=(count, layout.sequence_length))
    ids[:, layout.delimiter_mask()] = 6
    return ids


def token_only_model(tiny_model, position_embedding: str):
    """Attention outputs switched off (o_proj = 0): every layer's state at a position is a
    function of its token alone, so its attention logits depend on position only through rotary."""
    model = tiny_model(position_embedding=position_embedding)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.self_attn.o_proj.bias.zero_()
    return model


def test_derangements_move_every_demonstration_and_keys_follow_their_tokens(layout):
    orders = derangements(50, 4, seed=0)
    assert not (orders == np.arange(4)).any()
    assert (np.sort(orders, axis=1) == np.arange(4)).all()
    ids = np.random.default_rng(3).integers(0, 6, size=(50, layout.sequence_length))
    shuffled = shuffle_demos(ids, layout, orders)
    moved = demo_positions(layout, orders)
    np.testing.assert_array_equal(np.take_along_axis(shuffled, moved, axis=1), ids[:, : layout.test_start])
    np.testing.assert_array_equal(shuffled[:, layout.test_start :], ids[:, layout.test_start :])
    with pytest.raises(ValueError, match="at least 2"):
        derangements(3, 1, seed=0)


@pytest.mark.parametrize("position_embedding", ["none", "rotary"])
def test_logits_rebuilt_from_pre_rotary_queries_and_keys_are_the_models(
    tiny_model, layout, position_embedding
):
    """The decomposition re-rotates captured queries and keys: split, rotation and scaling must
    reproduce the model's own logits (a wrong head split or a missing scale would not)."""
    model = tiny_model(position_embedding=position_embedding)
    ids = torch.as_tensor(rows(layout, 3))
    with pre_rotary_queries_and_keys(model) as captured, recording_attention(model) as records:
        model(input_ids=ids)
    geometry = attention_geometry(model, layout.sequence_length)
    positions = torch.arange(layout.sequence_length).expand(3, -1)
    allowed = torch.ones(layout.sequence_length, layout.sequence_length, dtype=torch.bool).tril()
    assert len(captured) == len(records) == 2
    for (queries, keys), logits in zip(captured, [record.logits for record in records]):
        rebuilt = geometry.logits(*geometry.rotate(queries, keys, positions))
        torch.testing.assert_close(rebuilt[..., allowed], logits[..., allowed], rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the hooks are gone once the block closes
        model(input_ids=ids)
    assert all(pair[0].shape == (3, 2, layout.sequence_length, 16) for pair in captured)


def test_token_only_model_changes_by_position_only(tiny_model, layout):
    ids = rows(layout)
    without = shuffle_test(token_only_model(tiny_model, "none"), ids, layout, batch_size=5, progress=False)
    assert set(without) == set(PART_METRICS)
    assert all(values.shape == (12, 2, 2) for values in without.values())
    for part in ("total", "position_only"):
        assert np.abs(without[part]).max() == 0.0
    assert np.abs(without["content"]).max() < 1e-5
    assert np.abs(without["attention_tv"]).max() < 1e-6  # the same attention, keys followed
    rotary = shuffle_test(token_only_model(tiny_model, "rotary"), ids, layout, batch_size=5, progress=False)
    assert (rotary["total"].mean(0) > 0.05).all()
    assert (rotary["position_only"].mean(0) > 0.05).all()
    assert np.abs(rotary["content"]).max() < 1e-5  # every layer: queries and keys are the tokens'
    np.testing.assert_allclose(rotary["total"], rotary["position_only"], atol=1e-5)
    assert (rotary["attention_tv"].mean(0) > 0.0).all()


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
@pytest.mark.parametrize("position_embedding", ["none", "rotary"])
def test_content_is_zero_at_layer_one_and_positive_above(
    tiny_model, layout, position_embedding, norm_placement
):
    model = tiny_model(position_embedding=position_embedding, norm_placement=norm_placement)
    parts = shuffle_test(model, rows(layout), layout, batch_size=5, progress=False)
    assert np.abs(parts["content"][:, 0]).max() < 1e-5  # layer 1 reads token embeddings only
    assert (parts["content"][:, 1].mean(0) > 1e-3).all()  # layer 2 reads a reordered context
    if position_embedding == "none":
        assert np.abs(parts["position_only"]).max() == 0.0
        assert np.abs(parts["total"][:, 0]).max() == 0.0
    else:
        assert (parts["position_only"].mean(0) > 0.05).all()
    for part in ("attention_tv", "demo_mass"):
        assert parts[part].min() >= 0.0 and parts[part].max() <= 1.0 + 1e-6


def test_demo_mass_is_the_models_attention_on_demonstrations(tiny_model, layout):
    model = tiny_model()
    ids = rows(layout, 4)
    parts = shuffle_test(model, ids, layout, batch_size=3, progress=False)
    with torch.no_grad():
        weights = torch.stack(model(input_ids=torch.as_tensor(ids), output_attentions=True).attentions)
    mass = weights[:, :, :, layout.test_start :, : layout.test_start].sum(-1).mean(-1)  # [layers, B, heads]
    np.testing.assert_allclose(parts["demo_mass"], mass.permute(1, 0, 2).numpy(), atol=1e-5)


def test_relative_change_ignores_a_constant_per_query():
    logits = torch.randn(3, 5, 7)
    shifted = logits + torch.randn(3, 5, 1)
    assert relative_logit_change(logits, shifted).abs().max() < 1e-5
    assert (relative_logit_change(logits, logits.flip(-1)) > 0.1).all()


def test_upper_and_lower_layers_follow_the_papers_relative_depths():
    assert upper_layers(16) == list(range(9, 16)) and lower_layers(16) == list(range(1, 9))
    assert upper_layers(8) == [5, 6, 7] and lower_layers(8) == [1, 2, 3, 4]
    assert upper_layers(4) == [3] and lower_layers(4) == [1, 2]
    assert upper_layers(3) == [2] and lower_layers(3) == [1]
    assert upper_layers(2) == [2] and lower_layers(2) == [1]  # fallback: the upper half
    for bad in (1, 0):
        with pytest.raises(ValueError, match="num_layers"):
            upper_layers(bad)


def synthetic_changes(per_layer: np.ndarray, num_rows: int = 40, num_heads: int = 3, seed: int = 0) -> dict:
    """Every part `per_layer [layers]` plus row noise, as `shuffle_test` returns them."""
    rng = np.random.default_rng(seed)
    shape = (num_rows, per_layer.size, num_heads)
    total = per_layer[None, :, None] + 0.05 * rng.standard_normal(shape)
    return {
        "total": total,
        "position_only": 0.5 * total,
        "content": 0.2 * total,
        "attention_tv": np.clip(total / 2, 0, 1),
        "demo_mass": rng.uniform(0.1, 0.9, shape),
    }


def test_shuffle_patterns_measure_upper_minus_lower_layers():
    falling = np.linspace(1.0, 0.2, 8)
    patterns = shuffle_patterns(synthetic_changes(falling), num_resamples=200, seed=0)
    assert patterns["upper_layers"] == [5, 6, 7] and patterns["lower_layers"] == [1, 2, 3, 4]
    assert patterns["relative_depth"] == [layer / 8 for layer in range(1, 9)]
    low, high = patterns["upper_minus_lower_ci"]
    assert low <= patterns["upper_minus_lower"] <= high < 0
    assert patterns["layer_of_largest_change"] == 1 and patterns["layer_of_smallest_change"] == 8
    assert set(patterns["by_part"]) == {"total", "position_only", "content", "weighted_attention_tv"}
    for part in patterns["by_part"].values():
        assert part["upper_minus_lower_ci"][1] < 0 and len(part["per_layer_mean"]) == 8
    rising = shuffle_patterns(synthetic_changes(falling[::-1].copy()), num_resamples=200, seed=0)
    assert all(part["upper_minus_lower_ci"][0] > 0 for part in rising["by_part"].values())
    with pytest.raises(ValueError, match="shuffle_test"):
        shuffle_patterns(synthetic_changes(falling)["total"], num_resamples=10, seed=0)


def test_shuffle_records_cover_every_part_layer_and_head():
    changes = synthetic_changes(np.array([0.9, 0.5, 0.1]), num_heads=2)
    records = shuffle_records(changes, num_resamples=100, seed=0)
    for metric in (*PART_METRICS.values(), "weighted_attention_tv"):
        per_layer = [r for r in records if r["metric"] == metric and r["head"] is None]
        assert [r["layer"] for r in per_layer] == [1, 2, 3]
        assert all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in per_layer)
    per_head = [r for r in records if r["metric"] == "content_change" and r["head"] is not None]
    assert len(per_head) == 6
    first = next(r for r in records if r["metric"] == "relative_logit_change" and r["head"] is None)
    assert first["value"] == pytest.approx(changes["total"][:, 0].mean())
    weighted = next(r for r in records if r["metric"] == "weighted_attention_tv" and r["layer"] == 1)
    mass, tv = changes["demo_mass"][:, 0], changes["attention_tv"][:, 0]
    assert weighted["value"] == pytest.approx(((mass * tv).sum(-1) / mass.sum(-1)).mean())
