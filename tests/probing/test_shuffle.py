"""The shuffle test: derangements that move every demonstration, and a statistic that is zero
exactly when attention ignores where a demonstration sits."""

import numpy as np
import pytest
import torch

from probing import derangements, relative_logit_change, shuffle_demos, shuffle_test
from probing.shuffle import demo_positions


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


def test_shuffle_statistic_is_zero_without_position_dependence_and_positive_with_it(tiny_model, layout):
    def token_only_model(position_embedding: str):
        """Attention outputs switched off (o_proj = 0): every layer's state at a position is a
        function of its token alone, so its attention logits depend on position only through rotary."""
        model = tiny_model(position_embedding=position_embedding)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.self_attn.o_proj.bias.zero_()
        return model

    ids = np.random.default_rng(4).integers(0, 6, size=(12, layout.sequence_length))
    ids[:, layout.delimiter_mask()] = 6
    without = shuffle_test(token_only_model("none"), ids, layout, batch_size=5, progress=False)
    assert without.shape == (12, 2, 2)
    assert np.abs(without).max() == 0.0
    rotary = shuffle_test(token_only_model("rotary"), ids, layout, batch_size=5, progress=False)
    assert (rotary.mean(0) > 0.05).all()
    # A real model without positions: its first layer reads tokens only, so it cannot change.
    first_layer = shuffle_test(tiny_model(position_embedding="none"), ids, layout, progress=False)[:, 0]
    assert np.abs(first_layer).max() == 0.0


def test_relative_change_ignores_a_constant_per_query():
    logits = torch.randn(3, 5, 7)
    shifted = logits + torch.randn(3, 5, 1)
    assert relative_logit_change(logits, shifted).abs().max() < 1e-5
    assert (relative_logit_change(logits, logits.flip(-1)) > 0.1).all()
