"""The folder-layout contract: every file a run writes goes through the one atomic writer."""

import ast
from pathlib import Path

import pytest

from hmm_datasets import files
from hmm_datasets.files import write_atomically, write_text
from modeling_hmmroformer.experiments import names

EXPERIMENTS = Path(names.__file__).parent
DIRECT_WRITES = {"write_text", "write_bytes", "save", "dump", "save_file"}  # each makes a file in place


def direct_writes(source: str) -> list[str]:
    """Calls in `source` that create a file in place: `x.write_text(...)`, `params.save(...)`,
    `json.dump(...)`, or `open(...)` with a mode that writes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in DIRECT_WRITES:
            found.append(f"line {node.lineno}: .{func.attr}(...)")
        elif isinstance(func, ast.Name) and func.id == "open" and _writes(node):
            found.append(f"line {node.lineno}: open(..., mode that writes)")
    return found


def _writes(call: ast.Call) -> bool:
    modes = [*call.args[1:2], *(keyword.value for keyword in call.keywords if keyword.arg == "mode")]
    return any(not isinstance(mode, ast.Constant) or set(str(mode.value)) & set("wax+") for mode in modes)


def test_the_direct_write_finder_sees_each_kind_of_write():
    source = (
        "path.write_text(text)\nparams.save(path)\njson.dump(record, handle)\nopen(path, 'w')\n"
        "open(path, mode='ab')\nopen(path)\nopen(path, 'rb')\nwrite_text(path, text)\n"
    )
    assert [line.split(":")[0] for line in direct_writes(source)] == [f"line {n}" for n in range(1, 6)]


@pytest.mark.parametrize(
    "module", sorted(EXPERIMENTS.rglob("*.py")), ids=lambda path: str(path.relative_to(EXPERIMENTS))
)
def test_no_experiment_module_writes_a_file_around_the_atomic_writer(module):
    """A direct write killed half-way leaves a half file that looks complete (a run config a
    checkpoint is judged complete by, a train_results.json a finished run is judged by)."""
    assert direct_writes(module.read_text()) == [], (
        f"{module.name}: write through write_text / write_atomically"
    )


def test_the_one_writer_writes_in_place_only_its_staging_file():
    found = direct_writes(Path(files.__file__).read_text())
    assert len(found) == 1 and ".write_text" in found[0]  # `write_text` fills its staging file


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_partial_one(tmp_path):
    path = tmp_path / "train_results.json"
    write_text(path, '{"train_steps": 40}\n')

    def half_then_fail(staging: Path) -> None:
        staging.write_text('{"train_st')
        raise KeyboardInterrupt  # Ctrl-C in the middle of the write

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, half_then_fail)
    assert path.read_text() == '{"train_steps": 40}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["train_results.json"]


def test_the_checkpoint_file_names_are_transformers_own():
    from transformers import utils

    assert names.MODEL_CONFIG_JSON == utils.CONFIG_NAME
    assert names.WEIGHTS == utils.SAFE_WEIGHTS_NAME
    assert names.WEIGHTS_INDEX == utils.SAFE_WEIGHTS_INDEX_NAME
