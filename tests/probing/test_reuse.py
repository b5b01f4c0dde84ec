"""Readings reused within a process: equal inputs, one computation; any difference, a new one."""

import dataclasses

import numpy as np
import torch

from probing import reuse


@dataclasses.dataclass
class Settings:
    l2: float
    device: str


def inputs(**changes):
    values = {
        "features": torch.arange(12, dtype=torch.float16).view(3, 4),
        "labels": {"task": np.arange(6), "token": np.ones(6, dtype=np.int64)},
        "split": (np.array([0, 2]), np.array([1])),
        "seed": np.int64(0),
        "settings": Settings(1e-3, "cpu"),
    }
    return {**values, **changes}


def test_equal_inputs_have_one_digest_and_every_difference_another():
    assert reuse.digest(inputs()) == reuse.digest(inputs())
    assert reuse.digest(inputs()) == reuse.digest({key: value for key, value in reversed(inputs().items())})
    changed = [
        {"features": torch.arange(12, dtype=torch.float16).view(4, 3)},  # same bytes, other shape
        {"features": torch.arange(12, dtype=torch.int16).view(3, 4)},  # other dtype
        {"labels": {"task": np.arange(6), "token": np.zeros(6, dtype=np.int64)}},
        {"split": (np.array([0]), np.array([1, 2]))},  # the same rows, split elsewhere
        {"seed": 1},
        {"settings": Settings(1e-2, "cpu")},
    ]
    digests = {reuse.digest(inputs(**change)) for change in changed}
    assert len(digests) == len(changed) and reuse.digest(inputs()) not in digests


def test_a_reading_is_computed_once_and_handed_out_as_a_copy():
    reuse.clear()
    calls = []

    def compute():
        calls.append(1)
        return {"records": [{"value": 0.5}]}

    first = reuse.once("curves", inputs(), compute)
    first["records"].append("changed by its caller")
    again = reuse.once("curves", inputs(), compute)
    assert calls == [1] and again == {"records": [{"value": 0.5}]}
    reuse.once("twin", inputs(), compute)  # another reading of the same inputs
    reuse.once("curves", inputs(seed=3), compute)
    assert len(calls) == 3


def test_the_oldest_readings_are_dropped_past_the_kept_number():
    reuse.clear()
    calls = []
    for seed in range(reuse.KEPT + 1):
        reuse.once("curves", inputs(seed=seed), lambda: calls.append(1))
    reuse.once("curves", inputs(seed=reuse.KEPT), lambda: calls.append(1))  # the newest: kept
    assert len(calls) == reuse.KEPT + 1
    reuse.once("curves", inputs(seed=0), lambda: calls.append(1))  # the oldest: dropped
    assert len(calls) == reuse.KEPT + 2
    reuse.clear()
