"""The whole layerwise analysis: every layer, target and pattern reported; planted activations
decoded exactly where they were planted; bad settings refused."""

import itertools
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hmm_datasets import beliefs as beliefs_module
from hmm_datasets import cache
from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.corpus import open_corpus
from model_cards.render import format_probe_summary
from probing import reuse
from probing import run as run_module
from probing.layerwise import BEFORE_NORM_METRIC
from probing.plots import write_probe_results
from probing.records import RECORDS_VERSION, RecordSet
from probing.results import ProbeResults
from probing.run import ProbeConfig, run_probing
from probing.summary import summarize_probe_results
from tests.probing.test_architectures import causal_lm
from tests.processes import StartedRun

ROOT = Path(__file__).resolve().parents[2]
FAST = {
    "num_probe_tasks": 4,
    "rows_per_task": 12,
    "positions_per_row": 12,
    "shuffle_rows": 16,
    "num_resamples": 100,
}


def test_a_probing_run_reports_every_layer_target_and_pattern(tiny_model, tmp_path, monkeypatch):
    model = tiny_model()
    untrained = tiny_model(position_embedding="none")
    splits, calls, fit = (
        [],
        [],
        run_module.layerwise_probes,
    )  # every probe: fitted and scored on disjoint rows
    monkeypatch.setattr(
        run_module, "layerwise_probes", lambda *a, **k: splits.append(a[5]) or calls.append(a) or fit(*a, **k)
    )
    settings = {
        key: value for key, value in FAST.items() if key != "shuffle_rows"
    }  # default: fits the corpus
    result = run_probing(
        model,
        open_corpus("tiny"),
        ProbeConfig(distances=(1, 2), **settings),
        untrained_model=untrained,
        progress=False,
    )
    results = result.results
    assert len(splits) >= 2 and all(np.intersect1d(train, test).size == 0 for train, test in splits)
    # Figure 3(a)'s probes of the first demonstration are fitted on its positions alone
    refits = [call for call in calls if call[3] == ["hidden_state", "task"]]
    assert len(refits) == 2  # the model's and the twin's
    for call in refits:
        labels = call[2]
        for target in ("hidden_state", "task"):
            assert (labels[target] >= 0).any() and (labels["segment"][labels[target] >= 0] == 0).all()
    assert results.num_shuffle_rows == 64  # the tiny corpus's test split, fewer than 256
    assert results.records_version == RECORDS_VERSION
    assert RecordSet(results.records).curve("task", network="twin")["layer"].tolist() == [0, 1, 2]
    targets = ["hidden_state", "task", "previous_token_1", "previous_token_2"]
    for target in targets:
        metrics = ("accuracy", "headroom_fraction") if target in ("hidden_state", "task") else ("accuracy",)
        for metric in metrics:
            for positions in ("all", "demo1", "demo2", "later", "test"):
                assert RecordSet(results.records).curve(target, metric, positions)["layer"].tolist() == [
                    0,
                    1,
                    2,
                ]
        assert RecordSet(results.records).find(target, "chance", network="floor") is not None
        assert RecordSet(results.records).find(target, "token_baseline", None, None, "demo1", "floor")
        assert RecordSet(results.records).find(target, "chance") is None  # a floor is no network's
    figure3a = results.patterns["figure3a"]
    assert figure3a["positions"] == "demo1"
    reach = figure3a["by_positions"]["demo1"]["task"]
    assert reach["fractions"][0] == 0.5 and reach["fractions"][-1] == 0.95 and len(reach["layer"]) == 10
    peak = results.patterns["figure3b"]["by_distance"]["1"]
    assert peak["peak_layer_ci"][0] <= peak["peak_layer"] <= peak["peak_layer_ci"][1]
    assert set(peak["by_positions"]) == {"demos", "test"}
    assert peak["last_layer_before_final_norm"] is None  # post-norm: no final norm to read before
    assert RecordSet(results.records).curve("task", BEFORE_NORM_METRIC)["layer"].size == 0
    assert RecordSet(results.records).find("task", "bayes_optimal_accuracy", network="ceiling").value > 0.5
    assert RecordSet(results.records).find("hidden_state", "oracle_accuracy", network="ceiling").value > 0.5
    for metric in (
        "relative_logit_change",
        "position_only_change",
        "content_change",
        "weighted_attention_tv",
    ):
        assert RecordSet(results.records).curve("shuffle", metric)["layer"].tolist() == [1, 2]
    figure2 = results.patterns["figure2"]
    assert figure2["upper_layers"] == [2] and figure2["lower_layers"] == [1]  # 2 layers: the upper half
    assert set(figure2["by_part"]) == {"total", "position_only", "content", "weighted_attention_tv"}
    assert figure2["by_part"]["total"]["upper_minus_lower"] == figure2["upper_minus_lower"]
    summarized = summarize_probe_results(results)
    assert [r["layer"] for r in summarized["shuffle"]] == [1, 2]
    parts = {part["label"]: part["rows"] for part in summarized["shuffle_parts"]}
    assert list(parts) == ["position-only part", "content part", "weighted attention TV"]
    assert parts["content part"][0]["value"] < 1e-5  # layer 1 reads tokens only
    assert set(results.patterns) == {"figure2", "figure2_untrained", "figure3a", "figure3b"}
    twin = results.patterns["figure2_untrained"]  # the twin has no rotary: no position-only change
    assert max(twin["by_part"]["position_only"]["per_layer_mean"]) < 1e-5
    assert min(figure2["by_part"]["position_only"]["per_layer_mean"]) > 1e-3
    train, test = (np.asarray(results.probe_rows[name]) for name in ("train", "test"))
    assert np.intersect1d(train, test).size == 0 and train.size + test.size == 4 * 12
    for name in ("task_posterior", "state_filter", "joint_posterior"):
        for metric, network in itertools.product(("r2", "kl"), ("trained", "twin")):
            for positions in ("later", "test"):  # demonstration 1 has too few positions here to fit on
                found = RecordSet(results.records).curve(f"belief_{name}", metric, positions, network)
                assert found["layer"].tolist() == [0, 1, 2] and np.isfinite(found["value"]).all()
            found = RecordSet(results.records).curve(f"belief_{name}", metric, "demo1", network)
            assert found["layer"].size == 0
    assert result.attention.shape == (2, 1, 2, 52, 52)  # tiny rows: 4 x (8 + 1) + 16 tokens
    np.testing.assert_allclose(result.attention.sum(-1), 1.0, atol=1e-5)
    paths = write_probe_results(result, tmp_path)
    assert all(path.is_file() and path.stat().st_size > 0 for path in paths.values())
    assert json.loads(paths["json"].read_text())["records"] == json.loads(json.dumps(results.records))
    assert ProbeResults.read(paths["json"]) == ProbeResults.from_dict(
        json.loads(json.dumps(results.to_dict()))
    )
    text = format_probe_summary(summarized)
    assert "Fig 3b" in text and "Shuffle test" in text and "content part: L1: " in text
    assert "token 2 back" in text and "hidden state 90%" in text


def plant_previous_tokens(model, noise: float = 0.0) -> None:
    """Make layer i's output at position p the one-hot code of the token i positions back
    (zeros before the row starts), plus Gaussian `noise` of that scale, through forward hooks:
    what the probes must then read."""
    seen = {}
    generator = torch.Generator().manual_seed(0)

    def one_hot_back(ids: torch.Tensor, distance: int) -> torch.Tensor:
        codes = torch.nn.functional.one_hot(
            torch.roll(ids, distance, dims=1), model.config.hidden_size
        ).float()
        codes[:, :distance] = 0
        return codes + noise * torch.randn(codes.shape, generator=generator)

    model.model.register_forward_pre_hook(lambda m, a, kw: seen.update(ids=kw["input_ids"]), with_kwargs=True)
    for index, layer in enumerate(model.model.layers, start=1):
        layer.register_forward_hook(lambda m, a, out, index=index: one_hot_back(seen["ids"], index))


@pytest.mark.parametrize(
    "architecture, noise", [("hmm_roformer", 0.0), ("hmm_roformer", 1e-6), ("llama", 0.0)]
)
def test_planted_previous_tokens_are_decoded_exactly_at_their_layers(tiny_model, architecture, noise):
    """Through run_probing's own capture and labels: a one-position misalignment of features and
    labels would make these accuracies fall from 1. The planted codes leave 23 of the 32
    features constant (zero before the final norm, one value after it): a fit that divides
    their rounding by their spread reads noise (0.33 to 0.93 here, by BLAS code path); with
    1e-6 noise added they vary, at the level of noise only. A Llama goes through the same
    capture path (its layers, its RMSNorm read before and after)."""
    # 2 layers and a final norm, read before and after
    model = tiny_model(norm_placement="pre") if architecture == "hmm_roformer" else causal_lm(architecture)
    plant_previous_tokens(model, noise)
    result = run_probing(model, open_corpus("tiny"), ProbeConfig(distances=(1, 2), **FAST), progress=False)
    records = RecordSet(result.results.records)
    assert records.find("previous_token_2", BEFORE_NORM_METRIC, 2).value == 1.0
    assert records.find("previous_token_1", BEFORE_NORM_METRIC, 2).value < 0.9
    before = result.results.patterns["figure3b"]["by_distance"]["2"]["last_layer_before_final_norm"]
    assert before["value"] == 1.0
    assert records.find("previous_token_1", "accuracy", 1).value == 1.0  # layer 1 holds token p-1
    assert records.find("previous_token_2", "accuracy", 2).value == 1.0  # layer 2 holds token p-2
    assert records.find("previous_token_1", "accuracy", 2).value < 0.9  # not what layer 2 holds
    assert records.find("previous_token_2", "accuracy", 1).value < 0.9


BLAS_CODE_PATHS = ("COMPATIBLE", "AVX2", None)


@pytest.fixture(scope="module")
def planted_runs(tmp_path_factory) -> dict:
    """The planted test in a fresh process per `MKL_CBWR` value, all started at once (they
    overlap on the cores): code path -> its run."""
    test = f"{__file__}::test_planted_previous_tokens_are_decoded_exactly_at_their_layers[hmm_roformer-0.0]"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    logs, runs = tmp_path_factory.mktemp("blas"), {}
    for code_path in BLAS_CODE_PATHS:
        env = {key: value for key, value in os.environ.items() if key != "MKL_CBWR"}
        if code_path is not None:
            env["MKL_CBWR"] = code_path
        runs[code_path] = StartedRun(command, logs / str(code_path), env=env, cwd=ROOT)
    return runs


@pytest.mark.parametrize("code_path", BLAS_CODE_PATHS)
def test_the_planted_probes_are_exact_under_every_blas_code_path(planted_runs, code_path):
    """The planted test in a fresh process under MKL's conditional numerical reproducibility
    setting (`MKL_CBWR`: each value makes an x86 CPU round as another CPU's code path would;
    unset, the machine's own): an exact answer that only one CPU's rounding gives is a bug of
    the optimiser. (No effect where torch runs without MKL.)"""
    done = planted_runs[code_path].finished()
    assert "1 passed" in done.stdout


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"distances": (8,)}, "distance"),
        ({"layers": (0, 3)}, "out of range"),
        ({"shuffle_rows": 1000}, "shuffle_rows"),
        ({"probe_train_fraction": 1.0}, "probe_train_fraction"),
    ],
)
def test_bad_probe_settings_are_refused(tiny_model, settings, message):
    with pytest.raises(ValueError, match=message):
        run_probing(tiny_model(), open_corpus("tiny"), ProbeConfig(**{**FAST, **settings}), progress=False)


def test_a_second_reading_on_the_same_rows_reuses_the_exact_beliefs(tiny_model, monkeypatch):
    """The kept networks of a model are read on the same rows: the exact beliefs (the task
    posterior the ceiling's task guesses read among them) are computed for the first and reused,
    and the records are the same bytes."""
    cache.clear()
    calls, compute = [], beliefs_module.belief_states
    monkeypatch.setattr(beliefs_module, "belief_states", lambda *a, **k: calls.append(1) or compute(*a, **k))
    posteriors, posterior = [], BayesOptimalPredictor.task_posterior
    monkeypatch.setattr(
        BayesOptimalPredictor,
        "task_posterior",
        lambda self, ids: posteriors.append(1) or posterior(self, ids),
    )
    model, corpus, config = tiny_model(), open_corpus("tiny"), ProbeConfig(distances=(1,), **FAST)
    first = run_probing(model, corpus, config, progress=False).results
    counted = len(calls), len(posteriors)
    again = run_probing(model, corpus, config, progress=False).results
    assert counted[0] == 1 and counted[1] > 0 and (len(calls), len(posteriors)) == counted
    assert json.dumps(again.records) == json.dumps(first.records)
    cache.clear()
    reuse.clear()
    uncached = run_probing(model, corpus, config, progress=False).results
    assert json.dumps(uncached.records) == json.dumps(first.records)
    cache.clear()


def test_the_twin_is_read_once_for_every_network_read_against_it(tiny_model, monkeypatch):
    """Kept networks read against the same twin on the same rows: the twin's probes and the
    split curves of the twin and of the token floor are computed for the first network and
    reused for the next; the records are those of a run that computes everything."""
    twin_calls, curve_calls = [], []
    twin, curves = run_module.twin_records, run_module.network_split_curves
    monkeypatch.setattr(run_module, "twin_records", lambda *a: twin_calls.append(1) or twin(*a))
    monkeypatch.setattr(run_module, "network_split_curves", lambda *a: curve_calls.append(1) or curves(*a))
    corpus, config = open_corpus("tiny"), ProbeConfig(distances=(1,), num_splits=2, **FAST)
    untrained = tiny_model()
    early, late = tiny_model(initializer_range=0.05), tiny_model(initializer_range=0.2)
    run_probing(early, corpus, config, untrained_model=untrained, progress=False)
    assert (len(twin_calls), len(curve_calls)) == (1, 3 * 2)  # trained, twin, tokens x 2 splits
    reused = run_probing(late, corpus, config, untrained_model=untrained, progress=False).results
    assert (len(twin_calls), len(curve_calls)) == (1, 3 * 2 + 2)  # the new network's alone
    reuse.clear()
    computed = run_probing(late, corpus, config, untrained_model=untrained, progress=False).results
    assert (len(twin_calls), len(curve_calls)) == (2, 3 * 2 + 2 + 3 * 2)
    for key in ("records", "splits", "patterns"):
        assert json.dumps(getattr(reused, key)) == json.dumps(getattr(computed, key))


def test_the_ceiling_guesses_the_probed_task_the_posterior_ranks_first():
    """Among the probed tasks only: a remainder entry or an unprobed task that outranks them is
    never the guess; the kept tasks may come in any order."""
    posterior = np.array([[[0.1, 0.3, 0.2, 0.4], [0.5, 0.1, 0.3, 0.1]]])  # [1 row, 2 positions, K']
    every = run_module.posterior_task_guesses(posterior, None, np.array([0, 2]))
    assert every.tolist() == [[2, 0]]  # task 3 (0.4) and task 1 are not probed
    kept = np.array([7, 5, 9])  # the last column is the others' mass, the largest at position 0
    guesses = run_module.posterior_task_guesses(posterior, kept, np.array([5, 7, 9]))
    assert guesses.tolist() == [[5, 7]]
    tied = run_module.posterior_task_guesses(np.full((1, 1, 3), 1 / 3), None, np.array([2, 0]))
    assert tied.tolist() == [[2]]  # a tie goes to the first probed task, as argmax orders them
