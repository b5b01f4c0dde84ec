"""Exact predictions computed once per process (`hmm_datasets.cache`)."""

import threading
import time

import numpy as np
import pytest
import torch

from hmm_datasets import SamplingTables, cache, generate_rows, get_preset, sample_hmm_params
from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.memory import memory_bayes_probs
from hmm_datasets.predictors import reference_predictors


@pytest.fixture
def tiny():
    cache.clear()
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 4)
    yield params, np.asarray(rows["input_ids"]), np.asarray(rows["task_id"])
    cache.clear()


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_the_same_rows_and_parameters_are_computed_once(tiny):
    params, ids, _ = tiny
    compute, calls = counting(torch.zeros(3))
    first = cache.cached("x", params, ids, compute)
    assert cache.cached("x", params, ids.copy(), compute) is first and len(calls) == 1
    cache.cached("x", params, ids[:2], compute)  # other rows
    cache.cached("y", params, ids, compute)  # another prediction
    cache.cached("x", sample_hmm_params(get_preset("tiny", seed=1)), ids, compute)  # another mixture
    assert len(calls) == 4


def test_the_oldest_entries_go_past_the_budget(tiny, monkeypatch):
    params, ids, _ = tiny
    monkeypatch.setattr(cache, "MAX_BYTES", 3 * 8 * 100)
    for k in range(5):
        cache.cached(str(k), params, ids, lambda: torch.zeros(100, dtype=torch.float64))
    compute, calls = counting(torch.zeros(1))
    cache.cached("0", params, ids, compute)
    cache.cached("4", params, ids, compute)
    assert len(calls) == 1  # "0" was dropped, "4" kept


def test_cached_predictors_equal_the_predictor(tiny):
    params, ids, tasks = tiny
    bayes = BayesOptimalPredictor(params, dtype=torch.float64)
    predictors = reference_predictors(params, bayes)
    for _ in range(2):
        torch.testing.assert_close(
            predictors["bayes"].next_token_probs(ids, tasks), bayes.next_token_probs(ids)
        )
        torch.testing.assert_close(
            predictors["oracle"].next_token_probs(ids, tasks), bayes.oracle_next_token_probs(ids, tasks)
        )
    shuffled = tasks[::-1].copy()  # the oracle depends on the tasks: another entry
    torch.testing.assert_close(
        predictors["oracle"].next_token_probs(ids, shuffled), bayes.oracle_next_token_probs(ids, shuffled)
    )
    memory = memory_bayes_probs(params, ids, [2, 5])
    again = memory_bayes_probs(params, ids, [5, 3])
    assert again[5] is memory[5]
    for m in (2, 3, 5):
        torch.testing.assert_close(again.get(m, memory.get(m)), bayes.truncated_next_token_probs(ids, m))


def test_processes_side_by_side_share_predictions_through_a_folder(tiny, tmp_path, monkeypatch):
    params, ids, _ = tiny
    first = cache.cached("bayes-memory-2", params, ids, lambda: torch.arange(6.0).reshape(2, 3))
    assert not list(tmp_path.iterdir())  # no folder named: nothing written
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "shared"))
    cache.clear()
    cache.cached("bayes-memory-2", params, ids, lambda: first)
    written = list((tmp_path / "shared").glob("*.safetensors"))
    assert len(written) == 1 and written[0].suffix == ".safetensors"
    cache.clear()  # another process: its memory empty, the folder there

    def never():
        raise AssertionError("computed again instead of read from the shared folder")

    assert torch.equal(cache.cached("bayes-memory-2", params, ids, never), first)
    other_rows = ids[:2]
    assert cache.cached("bayes-memory-2", params, other_rows, lambda: first + 1)[0, 0] == 1.0


def test_side_by_side_the_first_to_ask_computes_and_the_others_wait(tiny, tmp_path, monkeypatch):
    params, ids, _ = tiny
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "shared"))
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.5)  # long enough for the other to ask before this one is written
        return torch.arange(4.0)

    values = []
    askers = [
        threading.Thread(target=lambda: values.append(cache.cached("bayes", params, ids, slow)))
        for _ in range(2)
    ]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert len(calls) == 1 and all(torch.equal(value, torch.arange(4.0)) for value in values)


def test_a_process_waiting_for_another_does_what_it_was_given_meanwhile(tiny, tmp_path, monkeypatch):
    params, ids, _ = tiny
    done = []
    cache.cached("full", params, ids, lambda: torch.zeros(1), meanwhile=lambda: done.append("no folder"))
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "shared"))
    cache.cached("oracle", params, ids, lambda: torch.zeros(1), meanwhile=lambda: done.append("nobody else"))
    assert done == []  # nothing to wait for: it is not run
    started, release = threading.Event(), threading.Event()

    def slow():  # another worker's computation, holding the lock until released
        started.set()
        release.wait(10)
        return torch.arange(4.0)

    other = threading.Thread(target=lambda: cache.cached("bayes", params, ids, slow))
    other.start()
    started.wait(10)
    cache.clear()  # this process's memory: the other's value comes through the folder

    def meanwhile():
        done.append("while the other computes")
        release.set()

    never = lambda: torch.full((4,), -1.0)  # noqa: E731
    assert torch.equal(cache.cached("bayes", params, ids, never, meanwhile=meanwhile), torch.arange(4.0))
    other.join()
    assert done == ["while the other computes"]
