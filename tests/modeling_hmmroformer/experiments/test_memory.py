"""The model beside the memory-L Bayes predictors; the Lemma 1 figure."""

import json

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, SamplingTables, generate_rows, get_preset, sample_hmm_params
from hmm_datasets.memory import lemma1, memory_bayes_probs
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
from modeling_hmmroformer.experiments.analyses import memory as memory_module
from modeling_hmmroformer.experiments.analyses.memory import (
    likely_next_memory,
    memory_crossing,
    memory_of_predictions,
    model_memory,
)
from modeling_hmmroformer.experiments.figures.model import plot_lemma1, plot_model_memory

TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model

LENGTH = 52  # the tiny rows


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 6)
    return params, rows


def tiny_model(vocab_size=7) -> HMMRoFormerForCausalLM:
    """A seeded, untrained tiny HMMRoFormer (as tests/probing/conftest.py's `tiny_model`)."""
    torch.manual_seed(0)
    return HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=vocab_size)).eval()


def without_attention(model: HMMRoFormerForCausalLM) -> HMMRoFormerForCausalLM:
    """Zero every attention output: the prediction at i then depends on token i alone."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            if layer.self_attn.o_proj.bias is not None:
                layer.self_attn.o_proj.bias.zero_()
    return model


def run(model, tiny, memories, **kwargs):
    params, rows = tiny
    return model_memory(model, params, rows["input_ids"], rows["task_id"], memories, batch_size=64, **kwargs)


def test_keys_and_lengths_and_strict_json(tiny):
    memories = [1, 3, 8]
    result = run(tiny_model(), tiny, memories)
    per_memory = (
        "share_reaching_row_start",
        "tv_full_vs_bayes_memory",
        "agreement_full_vs_bayes_memory",
    )
    for key in per_memory:
        assert len(result[key]) == len(memories), key
    assert result["memories"] == memories and result["num_rows"] == 6
    assert set(result["full_vs_bayes"]) == set(result["full_vs_oracle"]) == {"tv", "agreement"}
    equivalent = result["memory_equivalent"]
    assert len(equivalent["memories"]) == len(equivalent["tv_bayes_memory_vs_full"])
    assert equivalent["tv_model_vs_full"] == result["full_vs_bayes"]["tv"]
    json.dumps(result, allow_nan=False)


@pytest.fixture(scope="module")
def rows64():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 64)
    return params, torch.as_tensor(np.asarray(rows["input_ids"])), rows["task_id"]


@pytest.mark.parametrize("memory", [3, 6])
def test_a_model_that_is_memory_L_bayes_has_memory_L(rows64, memory):
    # the grid skips L: the grid is bisected down to it
    params, ids, tasks = rows64
    probs = memory_bayes_probs(params, ids, [memory])[memory]
    equivalent = memory_of_predictions(probs, params, ids, tasks, [1, 2, 4, 8])["memory_equivalent"]
    assert equivalent["memory"] == memory
    assert equivalent["interpolated"] == pytest.approx(memory)
    assert memory in equivalent["memories"] and memory - 1 in equivalent["memories"]


def test_the_memory_computed_while_another_worker_computes_the_middle_changes_no_number(rows64, monkeypatch):
    # memory 6 Bayes as the model, bisected between 4 and 8: 6 (another worker's), then 7 or 5
    params, ids, tasks = rows64
    probs = memory_bayes_probs(params, ids, [6])[6]
    alone = memory_of_predictions(probs, params, ids, tasks, [1, 2, 4, 8])["memory_equivalent"]
    asked = []

    def held_elsewhere(params, ids, memories, meanwhile=None):  # as if another worker computed each
        asked.append(list(memories))
        if meanwhile is not None:
            meanwhile()
        return memory_bayes_probs(params, ids, memories)

    monkeypatch.setattr(memory_module, "memory_bayes_probs", held_elsewhere)
    beside = memory_of_predictions(probs, params, ids, tasks, [1, 2, 4, 8])["memory_equivalent"]
    assert beside == alone and alone["memories"] == [1, 2, 4, 5, 6, 8]
    assert asked[asked.index([6]) + 1] in ([5], [7])  # prepared while waiting for 6, by the crossing


EXPONENTIAL = {m: float(np.exp(-0.5 * m)) for m in (1, 2, 4, 8, 16)}  # log TV linear in L


@pytest.mark.parametrize(("above", "lower_half"), [(0.999, False), (1.001, True)])
def test_on_an_exponential_decay_the_guess_follows_the_crossing(above, lower_half):
    # the model's TV just below TV(6) (the crossing above 6: the upper half), or just above it
    target = above * float(np.exp(-3.0))
    assert likely_next_memory(4, 6, 8, EXPONENTIAL, target) == (5 if lower_half else 7)


def test_the_guess_reads_the_bend_of_the_curve():
    # log TV bending down between 4 and 8 (the K = 8192 models' curve): TV(6) is nearer TV(4) than
    # the line through 4 and 8 says, so a model between the line and the curve lies past 6
    bending = {2: 0.631, 4: 0.528, 8: 0.187, 16: 0.0155}
    target = 0.334  # the line through 4 and 8 crosses it before 6; the parabola after
    assert likely_next_memory(4, 6, 8, {4: 0.528, 8: 0.187}, target) == 5  # the line alone
    assert likely_next_memory(4, 6, 8, bending, target) == 7


def test_no_next_memory_where_the_half_holds_none():
    assert likely_next_memory(4, 5, 6, EXPONENTIAL | {6: float(np.exp(-3.0))}, 0.5) is None  # 5 is the last
    assert likely_next_memory(4, 5, 6, {4: 0.2, 6: 0.1, 8: 0.05}, 0.01) is None
    assert likely_next_memory(6, 7, 9, {6: 0.2, 9: 0.1}, 0.01) == 8  # the upper half 7..9: 8


def test_a_model_further_from_bayes_than_every_memory_of_the_grid_extends_it(rows64):
    # memory 24 Bayes as the model, a grid that stops at 4: the grid is doubled to 32, then bisected
    params, ids, tasks = rows64
    probs = memory_bayes_probs(params, ids, [24])[24]
    equivalent = memory_of_predictions(probs, params, ids, tasks, [1, 2, 4])["memory_equivalent"]
    assert equivalent["memory"] == 24 and {8, 16, 32} <= set(equivalent["memories"])


def test_the_full_bayes_predictor_exceeds_the_grid(rows64, tmp_path):
    params, ids, tasks = rows64
    full = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64).next_token_probs(ids)
    result = memory_of_predictions(full, params, ids, tasks, [1, 2, 4, 8])
    equivalent = result["memory_equivalent"]
    # rows of 52 tokens: 16 and 32 are searched, 64 would be the whole row (the full predictor)
    assert equivalent["memory"] is None and equivalent["interpolated"] is None
    assert equivalent["longest_searched"] == 32 and equivalent["interval"][1] is None
    json.dumps(result, allow_nan=False)
    assert plot_model_memory(result, tmp_path / "memory.png").stat().st_size > 10_000


def test_an_untrained_model_is_no_better_than_memory_one(tiny):
    equivalent = run(tiny_model(), tiny, [1, 2, 4])["memory_equivalent"]
    assert equivalent["memory"] == 1 and equivalent["interpolated"] == 1.0


def test_the_interpolation_is_monotone_and_log_linear():
    memories = [1, 2, 4, 8, 16]
    curve = [0.3, 0.1, 0.02, 1e-3, 1e-6]
    targets = np.geomspace(0.5, 1e-7, 400)
    first, interpolated = memory_crossing(memories, np.tile(curve, (len(targets), 1)), targets)
    assert np.all(interpolated[1:] >= interpolated[:-1]) and np.all(np.diff(first) >= 0)
    assert interpolated[0] == 1 and np.isinf(interpolated[-1])
    # at a grid point exactly that memory; between, log TV linear in L
    _, at = memory_crossing(memories, curve, 0.02)
    _, between = memory_crossing(memories, curve, np.sqrt(0.02 * 1e-3))
    assert at[0] == 4 and between[0] == pytest.approx(6)


def test_a_memory_as_long_as_the_row_is_the_full_bayes_predictor(tiny):
    result = run(tiny_model(), tiny, [LENGTH, LENGTH + 10])
    assert result["share_reaching_row_start"] == [1.0, 1.0]
    assert result["tv_full_vs_bayes_memory"][0] == pytest.approx(result["full_vs_bayes"]["tv"], abs=1e-12)
    # and a short memory is another predictor: the model's distance to it differs
    short = run(tiny_model(), tiny, [1])
    assert abs(short["tv_full_vs_bayes_memory"][0] - short["full_vs_bayes"]["tv"]) > 1e-3


@pytest.mark.parametrize(
    ("memories", "message"), [([], "memories is empty"), ([0], "contains 0"), ([2, 2], "twice")]
)
def test_bad_memories_raise(tiny, memories, message):
    with pytest.raises(ValueError, match=message):
        run(tiny_model(), tiny, memories)


def test_a_model_with_too_small_a_vocabulary_is_refused(tiny):
    with pytest.raises(ValueError, match="vocab_size=5 is smaller than the HMMs' 7 tokens"):
        run(tiny_model(vocab_size=5), tiny, [1])


def test_the_lemma1_figure_is_written(tiny, tmp_path):
    params, rows = tiny
    result = lemma1(params, rows["input_ids"], rows["task_id"], (1, 2, 4, 8, LENGTH))
    path = plot_lemma1(result, tmp_path / "lemma1.png")
    assert path.stat().st_size > 10_000
