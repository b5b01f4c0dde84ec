"""Shared by the probing tests: the row layout of the tiny corpus (the tiny model: tests/conftest.py)."""

import pytest

from hmm_datasets import SampleLayout


@pytest.fixture
def layout() -> SampleLayout:
    return SampleLayout(num_demos=4, demo_length=8, test_length=16)  # the tiny corpus's rows
