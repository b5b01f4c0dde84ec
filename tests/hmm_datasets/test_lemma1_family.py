"""The Lemma 1 family and its measurement: the built γ is the computed γ, and on a two-state HMM
whose filter contracts in closed form the measured TV and rate are the closed form's."""

import numpy as np
import pytest

from hmm_datasets.lemma1_family import (
    FamilyHMMs,
    ObservabilityFamily,
    build_family,
    decay_record,
    measure_member,
    memory_tv,
    sample_sequences,
    window_reaches_start,
)


def test_gamma_one_and_zero_exactly():
    """γ = 1 (λ = 0: rows on disjoint tokens) and γ = 0 (λ = 1: every row the shared one)."""
    family = build_family(ObservabilityFamily(levels=(1.0, 0.0, 0.3), hmms_per_level=2, seed=3))
    identity_like, identical, middle = family.emissions[:2], family.emissions[2:4], family.emissions[4:]
    assert np.all(
        (identity_like[:, :, None, :] * identity_like[:, None, :, :]).sum(-1)[:, ~np.eye(6, dtype=bool)] == 0
    )
    assert np.array_equal(identical[:, 0], identical[:, 1])
    np.testing.assert_allclose(family.observability[:2], 1.0, atol=1e-12)  # 1 up to rounding
    assert family.observability[2:4].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(family.observability[4:], 0.3, atol=1e-12)
    assert not np.allclose(middle[0], middle[1])  # members of a level differ


def test_slow_and_low_rank_transitions():
    family = build_family(ObservabilityFamily(mixing=0.05, hmms_per_level=2))
    np.testing.assert_allclose(family.second_eigenvalue, 0.95, atol=1e-9)
    low = build_family(ObservabilityFamily(rank=2, hmms_per_level=2))
    assert all(np.linalg.matrix_rank(t) == 2 for t in low.transitions)
    for hmms in (family, low):
        np.testing.assert_allclose(hmms.transitions.sum(-1), 1.0)
        stationary = np.einsum("ks,kst->kt", hmms.initial, hmms.transitions)
        np.testing.assert_allclose(stationary, hmms.initial, atol=1e-12)


@pytest.mark.parametrize(
    "field, value", [("num_states", 1), ("vocab_size", 3), ("mixing", 0.0), ("levels", (1.5,)), ("rank", 6)]
)
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ObservabilityFamily(**{field: value})


def two_state(gamma: float, swap: float) -> FamilyHMMs:
    """Two states swapping with probability swap/2; each emits its own token with probability γ
    and a blank token otherwise. γ is its observability coefficient; the filter after a blank only
    mixes (by 1 - swap), after an own token it knows the state."""
    emissions = np.array([[gamma, 0.0, 1 - gamma], [0.0, gamma, 1 - gamma]])
    transitions = np.array([[1 - swap / 2, swap / 2], [swap / 2, 1 - swap / 2]])
    return FamilyHMMs(
        level=np.array([gamma]),
        initial=np.array([[0.5, 0.5]]),
        transitions=transitions[None],
        emissions=emissions[None],
        observability=np.array([gamma]),
        second_eigenvalue=np.array([1 - swap]),
        rank=2,
    )


def closed_form_tv(gamma: float, swap: float, memories, positions) -> np.ndarray:
    """`[M]`: the expected TV at memory L averaged over `positions` i: the last own token is k back
    with probability γ(1-γ)^k, and for L <= k <= i the memory-L prediction differs from the full one
    by γ(1-swap)^(k+1)/2, so E TV_i(L) = γ²(1-swap)/2 (r^L - r^(i+1)) / (1-r), r = (1-γ)(1-swap)."""
    r = (1 - gamma) * (1 - swap)
    memories, positions = np.asarray(memories)[:, None], np.asarray(positions)[None, :]
    per_position = gamma**2 * (1 - swap) / 2 * (r**memories - r ** (positions + 1)) / (1 - r)
    return per_position.mean(1)


GAMMA, SWAP = 0.3, 0.3


def test_log_tv_linear_in_memory_with_the_closed_form_rate():
    hmms, memories = two_state(GAMMA, SWAP), list(range(1, 9))
    tokens = sample_sequences(hmms.initial[0], hmms.transitions[0], hmms.emissions[0], 3000, 60, seed=1)
    tv = memory_tv(hmms, tokens, 0, memories)["known"]
    record = decay_record(tv, memories, first_position=40, seed=0)  # r^41 ~ 1e-13: the closed form is exp
    expected = closed_form_tv(GAMMA, SWAP, memories, range(40, 59))
    np.testing.assert_allclose(record["tv"], expected, rtol=0.05)
    rate = -np.log((1 - GAMMA) * (1 - SWAP))  # 0.713 per token
    assert record["fit"]["r2"] > 0.999
    assert record["fit"]["rate"] == pytest.approx(rate, rel=0.02)
    low, high = record["rate_ci"]
    assert low < rate < high


def test_positions_whose_window_reaches_the_start_are_not_scored():
    """Short sequences: counting the exact zeros at i < L would pull the TV at L = 12 down by a third."""
    hmms, memories = two_state(GAMMA, SWAP), list(range(1, 13))
    record = measure_member(hmms, 0, memories, rows=12000, length=30, seed=2)["known"]
    expected = closed_form_tv(GAMMA, SWAP, memories, range(12, 29))
    np.testing.assert_allclose(record["tv"], expected, rtol=0.05)
    counted = closed_form_tv(GAMMA, SWAP, [12], range(12, 29))[0] * 17 / 29  # the zeros at i < 12 counted
    assert record["tv"][-1] > 1.3 * counted
    reaches = window_reaches_start(29, memories)
    assert reaches[-1].sum() == 12 and not reaches[:, 12:].any()
