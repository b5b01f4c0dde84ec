"""examples/first_look.py, the newcomer's notebook, run to its end as a reader runs it: a fresh
interpreter, offline, its outputs in a scratch folder. What it prints and what it keeps in
first_look.json must be true of what it measured: distributions that sum to one, a predictor at
KL 0 from itself, a task posterior that leaves the prior, a ladder in the order it claims."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import hmm_datasets

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "first_look.py"


@dataclass(frozen=True)
class Run:
    stdout: str
    out: Path
    numbers: dict


@pytest.fixture(scope="module")
def first_look(tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("first-look")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "HMM_FIRST_LOOK_OUT": str(out),
    }
    env.pop("HMM_FIRST_LOOK_STEPS", None)  # the preset's own steps
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)],
        cwd=out,  # from any folder: it finds the clone from its own path
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return Run(done.stdout, out, json.loads((out / "first_look.json").read_text()))


def printed_number(stdout: str, pattern: str) -> float:
    """The number a printed sentence gives in the group of `pattern`."""
    match = re.search(pattern, stdout)
    assert match, f"no line matches {pattern!r} in:\n{stdout}"
    return float(match.group(1))


def test_it_writes_the_figure_and_the_model_into_its_folder(first_look):
    figure = first_look.out / "first_look.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figure.stat().st_size > 10_000  # two panels drawn, not an empty canvas
    assert first_look.numbers["figure"] == str(figure)
    assert (first_look.out / "model" / "model.safetensors").is_file()
    assert json.loads((first_look.out / "model" / "train_results.json").read_text())["train_steps"] == 40


def test_the_row_it_shows_follows_the_data_contract(first_look):
    config = hmm_datasets.get_preset("tiny")
    corpus = first_look.numbers["corpus"]
    assert corpus["rows"] == {
        "train": config.num_train,
        "validation": config.num_validation,
        "test": config.num_test,
    }
    assert corpus["row_length"] == config.num_demos * (config.demo_length + 1) + config.test_length
    assert corpus["row0_delimiters"] == config.num_demos
    assert corpus["row0_states_at_delimiters"] == [-1]
    assert f"Row 0 was drawn from HMM {corpus['row0_task_id']}:" in first_look.stdout


def test_the_bayes_numbers_are_those_of_a_distribution_and_its_yardstick(first_look):
    bayes = first_look.numbers["bayes"]
    assert bayes["shape"][2] == hmm_datasets.get_preset("tiny").vocab_size + 1
    assert bayes["max_sum_error"] < 1e-4
    printed = printed_number(first_look.stdout, r"each distribution sums to one within (\S+)\.")
    assert printed < 1e-4
    scores = bayes["test_tokens"]
    assert abs(scores["bayes"]["kl"]) < 1e-9 and scores["bayes"]["agreement"] == 1.0
    assert printed_number(first_look.stdout, r"KL\(Bayes \|\| Bayes\) = (\S+) nats/token") == 0.0
    assert scores["oracle"]["kl"] >= -1e-6 and scores["bigram"]["kl"] > scores["oracle"]["kl"]
    assert all(0 <= s["correct"] <= 1 for s in scores.values())
    # the posterior of the true task starts at the prior and leaves it as the row is read
    assert bayes["posterior_prior"] == pytest.approx(1 / hmm_datasets.get_preset("tiny").num_tasks)
    assert bayes["posterior_prior"] < bayes["posterior_true_task_after_demo1"] <= 1
    assert 0.5 < bayes["posterior_true_task_at_end"] <= 1


def test_the_ladder_is_in_the_order_it_prints_and_its_gap_is_its_own(first_look):
    ladder = first_look.numbers["ladder"]
    rungs = ladder["rungs"]
    accuracies = [rung["accuracy"] for rung in rungs]
    assert accuracies == sorted(accuracies)  # lowest first, as printed
    assert {"model", "bayes", "oracle", "unigram", "bigram", "ppm3"} <= {rung["name"] for rung in rungs}
    assert all(rung["kl_bayes"] >= -1e-6 for rung in rungs if rung["kl_bayes"] is not None)
    by_name = {rung["name"]: rung["accuracy"] for rung in rungs}
    best = ladder["best_in_context"]
    assert by_name[best] == max(by_name[rung["name"]] for rung in rungs if rung["in_context"])
    gap = (by_name["model"] - by_name[best]) / (by_name["bayes"] - by_name[best])
    assert ladder["gap_closed"]["model"] == pytest.approx(gap)
    assert ladder["below_in_context"]["model"] == (gap < 0)
    assert printed_number(first_look.stdout, r"it closes (-?[\d.]+) of the gap") == round(gap, 2)
    lines = first_look.stdout.split("The ladder on", 1)[1].splitlines()[1:]
    printed = [line for line in lines[: len(rungs) + 1] if line.startswith("  ")]
    assert [float(line.split("top-1 ")[1].split()[0]) for line in printed] == [
        round(a, 3) for a in accuracies
    ]


def test_the_probe_has_one_accuracy_per_layer_between_chance_and_one(first_look):
    probe = first_look.numbers["probe"]
    assert probe["layers"] == [0, 1, 2]  # the embeddings and tiny's 2 layers
    for name in ("task_accuracy", "hidden_state_accuracy"):
        assert len(probe[name]) == 3 and all(0 <= value <= 1 for value in probe[name])
    assert probe["task_chance"] == pytest.approx(1 / 8)  # 8 probed tasks, as many rows each
    assert probe["task_chance"] <= probe["task_token_baseline"] <= 1
    assert probe["task_chance"] < probe["task_bayes_ceiling"] <= 1
    last = printed_number(first_look.stdout, r"and ([\d.]+) from the last layer")
    assert last == round(probe["task_accuracy"][-1], 3)
