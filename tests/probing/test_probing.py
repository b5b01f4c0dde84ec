"""Probing: probes that can tell signal from noise, labels aligned with positions, a shuffle
statistic that is zero exactly when attention ignores positions, and clear errors."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import hmm_datasets
from hmm_datasets import SampleLayout
from hmm_datasets.bayes import oracle_state_estimates
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
from hmm_datasets.corpus import open_corpus
from probing import (
    capture_hidden_states,
    derangements,
    load_hmm_roformer,
    position_labels,
    previous_token_labels,
    relative_logit_change,
    sample_positions,
    shuffle_demos,
    shuffle_test,
)
from probing.layerwise import curve, find, layerwise_probes
from probing.plots import write_probe_results
from probing.probes import ProbeSettings
from probing.run import ProbeConfig, format_summary, run_probing
from probing.shuffle import demo_positions

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = SampleLayout(num_demos=4, demo_length=8, test_length=16)


def tiny_model(**overrides) -> HMMRoFormerForCausalLM:
    torch.manual_seed(0)
    config = HMMRoFormerConfig.from_preset("tiny", vocab_size=7, **overrides)
    return HMMRoFormerForCausalLM(config).eval()


# ---- probes on synthetic activations ---------------------------------------------------------
def synthetic(signal: bool, rows: int = 80, positions: int = 20, dim: int = 16, classes: int = 5):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, size=(rows, positions))
    tokens = rng.integers(0, 8, size=(rows, positions))
    if signal:
        directions = rng.normal(size=(classes, dim))
        features = directions[labels] + 0.1 * rng.normal(size=(rows, positions, dim))
    else:
        features = rng.normal(size=(rows, positions, dim))
    split = (np.arange(0, rows, 2), np.arange(1, rows, 2))
    return torch.as_tensor(features, dtype=torch.float32)[None], {"target": labels, "token": tokens}, split


@pytest.mark.parametrize("signal", [True, False])
def test_probe_decodes_a_linear_label_and_not_noise_and_control_selectivity_is_chance(signal):
    features, labels, split = synthetic(signal)
    records = layerwise_probes(
        features,
        [0],
        labels,
        ["target"],
        {"target": np.zeros(80, dtype=np.int64)},
        split,
        num_types=8,
        settings=ProbeSettings(),
        num_resamples=200,
        progress=False,
    )
    accuracy = find(records, "target", "accuracy", 0)
    chance = find(records, "target", "chance")["value"]
    if signal:
        assert accuracy["value"] > 0.98
        assert accuracy["ci_low"] <= accuracy["value"] <= accuracy["ci_high"]
    else:
        assert accuracy["value"] < chance + 0.08
        assert abs(find(records, "target", "selectivity", 0)["value"]) < 0.08
        control_chance = find(records, "target", "control_chance")["value"]
        assert find(records, "target", "control_accuracy", 0)["value"] < control_chance + 0.08


# ---- labels line up with positions ---------------------------------------------------------
@pytest.mark.parametrize("distance", [1, 3, 7])
def test_distance_k_labels_are_the_input_shifted_by_k_inside_segments(distance):
    ids = np.random.default_rng(1).integers(0, 6, size=(3, LAYOUT.sequence_length))
    labels = previous_token_labels(ids, LAYOUT, distance)
    valid = labels >= 0
    rows, columns = np.nonzero(valid)
    np.testing.assert_array_equal(labels[rows, columns], ids[rows, columns - distance])
    in_segment = LAYOUT.position_in_segment()
    observation = ~LAYOUT.delimiter_mask()
    np.testing.assert_array_equal(valid[0], (in_segment >= distance) & observation)
    per_row = LAYOUT.num_demos * (LAYOUT.demo_length - distance) + LAYOUT.test_length - distance
    assert valid.sum(1).tolist() == [per_row] * 3


@pytest.mark.parametrize("distance", [0, 8, 9])
def test_distances_outside_a_demonstration_are_refused(distance):
    with pytest.raises(ValueError, match="distance"):
        previous_token_labels(np.zeros((1, LAYOUT.sequence_length), dtype=int), LAYOUT, distance)


def test_captured_states_are_the_models_states_at_the_chosen_positions():
    model = tiny_model()
    ids = np.random.default_rng(2).integers(0, 6, size=(5, LAYOUT.sequence_length))
    positions = sample_positions(LAYOUT, 5, 7, seed=0)
    assert not LAYOUT.delimiter_mask()[positions].any()
    captured = capture_hidden_states(model, ids, positions, layers=[0, 2], batch_size=2, progress=False)
    assert captured.shape == (2, 5, 7, 32) and captured.dtype == torch.float16
    with torch.no_grad():
        states = model(torch.as_tensor(ids), output_hidden_states=True).hidden_states
    for index, layer in enumerate([0, 2]):
        expected = torch.stack([states[layer][row, positions[row]] for row in range(5)])
        torch.testing.assert_close(captured[index].float(), expected, atol=2e-3, rtol=2e-3)


def test_labels_need_the_corpus_columns_and_align_with_the_rows():
    corpus = open_corpus("tiny")
    rows = corpus.splits["test"].select(range(4)).with_format("numpy")[:]
    labels = position_labels(rows, corpus.layout, [1, 2])
    np.testing.assert_array_equal(labels["hidden_state"], rows["hidden_states"])
    assert (labels["task"][:, ~corpus.layout.delimiter_mask()] == rows["task_id"][:, None]).all()
    assert (labels["task"][:, corpus.layout.delimiter_mask()] == -1).all()
    with pytest.raises(ValueError, match="hidden_states"):
        position_labels({"input_ids": rows["input_ids"], "task_id": rows["task_id"]}, corpus.layout, [1])


def test_oracle_state_estimates_match_a_direct_forward_pass():
    params = hmm_datasets.load_hmm_params(hmm_datasets.get_preset("tiny"))
    corpus = open_corpus("tiny")
    rows = corpus.splits["test"].select(range(3)).with_format("numpy")[:]
    estimates = oracle_state_estimates(params, rows["input_ids"], rows["task_id"], device="cpu")
    delimiter = params.vocab_size
    for row, task in enumerate(rows["task_id"]):
        belief = params.initial[task]
        for t, token in enumerate(rows["input_ids"][row]):
            if token == delimiter:
                assert estimates[row, t] == -1
                belief = params.initial[task]
                continue
            posterior = belief * params.emissions[task][:, token]
            assert estimates[row, t] == np.argmax(posterior)
            belief = (posterior / posterior.sum()) @ params.transitions[task]


# ---- the shuffle test ---------------------------------------------------------------------
def test_derangements_move_every_demonstration_and_keys_follow_their_tokens():
    orders = derangements(50, 4, seed=0)
    assert not (orders == np.arange(4)).any()
    assert (np.sort(orders, axis=1) == np.arange(4)).all()
    ids = np.random.default_rng(3).integers(0, 6, size=(50, LAYOUT.sequence_length))
    shuffled = shuffle_demos(ids, LAYOUT, orders)
    moved = demo_positions(LAYOUT, orders)
    np.testing.assert_array_equal(np.take_along_axis(shuffled, moved, axis=1), ids[:, : LAYOUT.test_start])
    np.testing.assert_array_equal(shuffled[:, LAYOUT.test_start :], ids[:, LAYOUT.test_start :])
    with pytest.raises(ValueError, match="at least 2"):
        derangements(3, 1, seed=0)


def token_only_model(position_embedding: str) -> HMMRoFormerForCausalLM:
    """Attention outputs switched off (o_proj = 0): every layer's state at a position is a
    function of its token alone, so its attention logits depend on position only through rotary."""
    model = tiny_model(position_embedding=position_embedding)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.self_attn.o_proj.bias.zero_()
    return model


def test_shuffle_statistic_is_zero_without_position_dependence_and_positive_with_it():
    ids = np.random.default_rng(4).integers(0, 6, size=(12, LAYOUT.sequence_length))
    ids[:, LAYOUT.delimiter_mask()] = 6
    without = shuffle_test(token_only_model("none"), ids, LAYOUT, batch_size=5, progress=False)
    assert without.shape == (12, 2, 2)
    assert np.abs(without).max() == 0.0
    rotary = shuffle_test(token_only_model("rotary"), ids, LAYOUT, batch_size=5, progress=False)
    assert (rotary.mean(0) > 0.05).all()
    # A real model without positions: its first layer reads tokens only, so it cannot change.
    first_layer = shuffle_test(tiny_model(position_embedding="none"), ids, LAYOUT, progress=False)[:, 0]
    assert np.abs(first_layer).max() == 0.0


def test_relative_change_ignores_a_constant_per_query():
    logits = torch.randn(3, 5, 7)
    shifted = logits + torch.randn(3, 5, 1)
    assert relative_logit_change(logits, shifted).abs().max() < 1e-5
    assert (relative_logit_change(logits, logits.flip(-1)) > 0.1).all()


# ---- the whole run ------------------------------------------------------------------------
FAST = {
    "num_probe_tasks": 4,
    "rows_per_task": 12,
    "positions_per_row": 12,
    "shuffle_rows": 16,
    "num_resamples": 100,
}


def test_a_probing_run_reports_every_layer_target_and_pattern(tmp_path):
    model = tiny_model()
    result = run_probing(model, open_corpus("tiny"), ProbeConfig(distances=(1, 2), **FAST), progress=False)
    results = result.results
    targets = ["hidden_state", "task", "previous_token_1", "previous_token_2"]
    for target in targets:
        for metric in ("accuracy", "control_accuracy", "selectivity"):
            assert curve(results["records"], target, metric)["layer"].tolist() == [0, 1, 2]
        assert find(results["records"], target, "chance") is not None
    assert find(results["records"], "task", "bayes_optimal_accuracy")["value"] > 0.5
    assert find(results["records"], "hidden_state", "oracle_accuracy")["value"] > 0.5
    assert curve(results["records"], "shuffle", "relative_logit_change")["layer"].tolist() == [1, 2]
    assert set(results["patterns"]) == {"figure2", "figure3a", "figure3b"}
    assert result.attention.shape == (2, 1, 2, 52, 52)  # tiny rows: 4 x (8 + 1) + 16 tokens
    np.testing.assert_allclose(result.attention.sum(-1), 1.0, atol=1e-5)
    paths = write_probe_results(result, tmp_path)
    assert all(path.is_file() and path.stat().st_size > 0 for path in paths.values())
    assert json.loads(paths["json"].read_text())["records"] == json.loads(json.dumps(results["records"]))
    summary = format_summary(results)
    assert "Fig 3b" in summary and "Shuffle test" in summary


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"distances": (8,)}, "distance"),
        ({"layers": (0, 3)}, "out of range"),
        ({"shuffle_rows": 1000}, "shuffle_rows"),
        ({"probe_train_fraction": 1.0}, "probe_train_fraction"),
    ],
)
def test_bad_probe_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        run_probing(tiny_model(), open_corpus("tiny"), ProbeConfig(**{**FAST, **settings}), progress=False)


def test_a_model_that_is_not_an_hmm_roformer_is_refused(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=7)).save_pretrained(
        tmp_path / "gpt2"
    )
    with pytest.raises(ValueError, match="not an HMMRoFormer"):
        load_hmm_roformer(str(tmp_path / "gpt2"))
    with pytest.raises(ValueError, match="config.json"):
        load_hmm_roformer(str(tmp_path / "missing"))


def probe_script():
    spec = importlib.util.spec_from_file_location("probe_script", ROOT / "scripts" / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_script_writes_results(tmp_path):
    tiny_model().save_pretrained(tmp_path / "model")
    command = [
        sys.executable,
        str(ROOT / "scripts" / "probe.py"),
        "--model",
        str(tmp_path / "model"),
        "--quiet",
    ]
    fast = ["--num-probe-tasks", "4", "--rows-per-task", "8", "--shuffle-rows", "8", "--num-resamples", "50"]
    done = subprocess.run([*command, "--data", "tiny", *fast], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Patterns of the paper" in done.stdout
    written = sorted(path.name for path in (tmp_path / "model" / "probes").iterdir())
    assert written == [
        "figure2_shuffle.png",
        "figure3a_hidden_state_task.png",
        "figure3b_previous_tokens.png",
        "figure7_attention_row0.png",
        "probe_results.json",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "hmm_mixture_config.json"),  # a checkpoint that does not say its corpus, and no --data
        (["--data", "tiny", "--distances", "9"], "distance=9"),
        (["--data", "tiny", "--layers", "5"], "out of range"),
        (["--data", "FOLDER"], "hmm_mixture_config.json"),  # a folder that is not a corpus
    ],
)
def test_probe_script_refuses_bad_input_with_one_error_line(tmp_path, capsys, arguments, message):
    tiny_model().save_pretrained(tmp_path / "model")
    (tmp_path / "FOLDER").mkdir()
    arguments = [str(tmp_path / "FOLDER") if a == "FOLDER" else a for a in arguments]
    capsys.readouterr()
    code = probe_script().main(["--model", str(tmp_path / "model"), "--quiet", *arguments])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "model" / "probes").exists()


def test_probe_script_names_a_missing_checkpoint_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        probe_script().main(["--model", str(tmp_path / "nowhere")])
    assert stopped.value.code == 2 and "no such checkpoint folder" in capsys.readouterr().err
