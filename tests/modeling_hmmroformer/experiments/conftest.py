"""Fixtures the experiments' test modules share."""

import json

import pytest

from modeling_hmmroformer.experiments import names
from modeling_hmmroformer.experiments.commands import development as command
from modeling_hmmroformer.experiments.running.training import train
from tests.modeling_hmmroformer.experiments.test_development import LEARNS, tiny_run


@pytest.fixture(scope="session")
def tiny_development(tmp_path_factory):
    """A tiny model trained with its networks kept over training (`LEARNS`: steps 0, 10, 23, 52,
    120 in `run/development/`), each placed by `hmm-development` into `development.json` beside
    `run/` (its yardsticks in `yardsticks/` there): (the record, its path)."""
    folder = tmp_path_factory.mktemp("development")
    run = tiny_run(folder, *LEARNS)
    train(run)
    out = folder / "development.json"
    status = command.main(
        [
            "--checkpoints", str(run.output_dir / names.DEVELOPMENT),
            "--rows", "32",
            "--prior-particles", "256",
            "--out", str(out),
            "--quiet",
        ]
    )  # fmt: skip
    assert status == 0
    return json.loads(out.read_text()), out
