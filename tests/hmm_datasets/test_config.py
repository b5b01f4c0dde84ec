import dataclasses

import datasets
import pytest

from hmm_datasets import PRESETS, HMMMixtureConfig, get_preset
from hmm_datasets.config import field_help

BUILDER_FIELDS = {field.name for field in dataclasses.fields(datasets.BuilderConfig)}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_and_round_trip(name):
    config = get_preset(name)
    config.validate()
    assert HMMMixtureConfig.from_dict(config.to_dict()) == config
    assert config.sequence_length == config.num_demos * (config.demo_length + 1) + config.test_length


def test_paper_preset_has_the_papers_sizes():
    paper = get_preset("paper")
    assert (paper.num_tasks, paper.num_states, paper.vocab_size, paper.num_train) == (8192, 128, 16, 131072)


def test_get_preset_returns_an_independent_copy():
    config = get_preset("tiny")
    config.num_tasks = 99
    assert PRESETS["tiny"].num_tasks == 8


def test_replace_validates_and_renames():
    config = get_preset("small", num_tasks=64)
    assert config.num_tasks == 64 and config.name == "small-custom"
    with pytest.raises(ValueError, match="num_states"):
        get_preset("small", num_states=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_tasks", 0, "num_tasks=0 must be >= 1"),
        ("num_states", -3, "num_states=-3 must be >= 1"),
        ("vocab_size", 2.5, "vocab_size=2.5 must be an integer"),
        ("num_demos", -1, "num_demos=-1 must be >= 0: num_demos is demonstrations per row (N)"),
        ("demo_length", 0, "demo_length=0"),
        ("test_length", 0, "test_length=0"),
        ("num_train", 0, "num_train=0"),
        ("seed", -1, "seed=-1"),
        ("emission_concentration", 0.0, "emission_concentration=0.0 must be a finite Dirichlet"),
        ("transition_concentration", float("nan"), "transition_concentration=nan"),
        ("transition_rank", 7, "transition_rank=7 is larger than num_states=6"),
        ("transition_rank", 0, "transition_rank=0 must be >= 1"),
        ("delimiter_id", 3, "unknown HMMMixtureConfig field(s)"),  # the delimiter is always vocab_size
        ("task_prior", (1.0, 2.0), "task_prior has 2 entries but num_tasks=8"),
        ("task_prior", (-1.0,) + (1.0,) * 7, "task_prior must be non-negative"),
        ("num_states", 40000, "num_states=40000 is too large"),
    ],
)
def test_bad_values_name_the_field_the_value_and_the_fix(field, value, message):
    values = {**PRESETS["tiny"].to_dict(), field: value}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        HMMMixtureConfig.from_dict(values)


def test_a_config_saved_with_the_old_delimiter_field_still_loads():
    saved = {**PRESETS["tiny"].to_dict(), "delimiter_id": None}
    assert HMMMixtureConfig.from_dict(saved) == PRESETS["tiny"]
    assert HMMMixtureConfig.from_dict({**saved, "delimiter_id": 6}).delimiter == 6


def test_unknown_fields_are_rejected_with_the_known_ones_listed():
    with pytest.raises(ValueError, match="unknown HMMMixtureConfig field"):
        HMMMixtureConfig.from_dict({"num_taks": 3})


def test_task_prior_is_normalised():
    config = get_preset("tiny", task_prior=(2.0,) * 4 + (0.0,) * 4)
    prior = config.task_prior_array()
    assert prior.sum() == pytest.approx(1.0) and prior[0] == pytest.approx(0.25) and prior[-1] == 0


def test_generation_fields_exclude_builder_bookkeeping():
    fields = get_preset("tiny").generation_fields()
    assert "data_files" not in fields and "version" not in fields
    assert set(fields) == {f.name for f in dataclasses.fields(HMMMixtureConfig)} - {
        "name",
        "version",
        "data_dir",
        "data_files",
        "description",
    }


def test_every_field_carries_the_one_line_that_says_what_it_is():
    """The help `--help` and the errors show lives with the field (its metadata), once."""
    own = [f for f in dataclasses.fields(HMMMixtureConfig) if f.name not in BUILDER_FIELDS]
    assert len(own) == 17 and all(f.metadata.get("help") for f in own)
    assert field_help("num_tasks") == "HMMs in the mixture (K)"
    with pytest.raises(ValueError, match=r"^seed=-1 must be >= 0: seed is seed of the HMM parameters"):
        HMMMixtureConfig.from_dict({**PRESETS["tiny"].to_dict(), "seed": -1})
