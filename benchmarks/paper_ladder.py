"""The in-context ladder beside the committed paper run's Figure 1, on CPU.

    python benchmarks/paper_ladder.py            # results/paper/ladder.json + REPORT.md's ladder section

The paper run (results/paper) was made before the ladder existed, and its checkpoint stays on
the GPU machine. Its test split regenerates deterministically from the corpus config in
results.json, so the in-context predictors are scored here on the same 2048 rows; the model,
Bayes-optimal and oracle accuracies are the committed figure1.json's (Bayes over 8192 HMMs of
128 states is a GPU job). The unigram and bigram, which the committed run also scored, must
come out as committed: that checks that the rows are the same.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import write_result

import hmm_datasets
from hmm_datasets.predictors import IN_CONTEXT, in_context_predictor
from hmm_datasets.sampler import SamplingTables, generate_rows
from hmm_datasets.scoring import mean_over_tokens, predictor_ladder, scores_by_demo_count

RUN = Path(__file__).resolve().parents[1] / "results" / "paper"
BEGIN, END = "<!-- ladder: benchmarks/paper_ladder.py -->", "<!-- /ladder -->"


def in_context_accuracy(run: Path) -> tuple[dict, dict]:
    """(accuracy of every in-context predictor on the run's test rows, the run's figure1.json)."""
    figure1 = json.loads((run / "figure1" / "figure1.json").read_text())
    config = hmm_datasets.HMMMixtureConfig.from_dict(json.loads((run / "results.json").read_text())["corpus"])
    params = hmm_datasets.sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, figure1["num_rows"])
    predictors = {name: in_context_predictor(name, config.vocab_size) for name in IN_CONTEXT}
    layout = hmm_datasets.SampleLayout.from_config(config)
    (scores,) = scores_by_demo_count(
        predictors,
        rows["input_ids"],
        rows["task_id"],
        layout,
        reference="unigram",
        demo_counts=[layout.num_demos],
    ).values()
    accuracy = {name: mean_over_tokens(scores[name]["correct"]) for name in predictors}
    for name in ("unigram", "bigram"):  # the committed run scored these two on its rows
        committed = figure1["by_num_demos"][name]["accuracy"][-1]
        if not np.isclose(accuracy[name], committed, atol=1e-9):
            raise RuntimeError(
                f"{name}: {accuracy[name]} here, {committed} committed: not the run's test rows"
            )
    return accuracy, figure1


def ladder_section(ladder: dict) -> str:
    rows = "\n".join(
        f"| {'**model**' if rung['name'] == 'model' else rung['label']} | {rung['accuracy']:.3f} |"
        for rung in ladder["rungs"]
    )
    share = ladder["gap_closed"]["model"]
    where = "**below the in-context baseline**" if ladder["below_in_context"]["model"] else "above it"
    return (
        f"{BEGIN}\nThe ladder of predictors with all demonstrations, lowest first as measured (added after the "
        "run by `benchmarks/paper_ladder.py`: the in-context predictors read only the row's own tokens and were "
        "scored on CPU on the regenerated test rows; the model, Bayes-optimal and oracle numbers are this "
        "run's):\n\n| predictor | top-1 accuracy |\n| --- | --- |\n"
        f"{rows}\n\nThe model is {where}: share of the gap from the best in-context predictor to Bayes-optimal "
        f"that it closes: {share:+.2f}.\n{END}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, default=RUN, help="a reproduction folder (default: %(default)s)")
    args = parser.parse_args(argv)
    accuracy, figure1 = in_context_accuracy(args.run)
    accuracy.update(
        {name: figure1["by_num_demos"][name]["accuracy"][-1] for name in ("model", "bayes", "oracle")}
    )
    labels = {"model": "model", "bayes": "Bayes-optimal", "oracle": "oracle (knows the task)"}
    labels |= {name: label for name, (label, _, _) in IN_CONTEXT.items()}
    ladder = predictor_ladder(accuracy, labels, list(IN_CONTEXT))
    (args.run / "ladder.json").write_text(json.dumps(ladder, indent=2) + "\n")
    report = args.run / "REPORT.md"
    text = report.read_text()
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + text[text.index(END) + len(END) + 1 :]
    anchor = "![Figure 1: accuracy vs demonstrations and vs test position](figure1/figure1.png)\n"
    report.write_text(text.replace(anchor, anchor + "\n" + ladder_section(ladder)))
    write_result("paper_ladder", {"accuracy": accuracy, "best_in_context": ladder["best_in_context"]})
    for rung in ladder["rungs"]:
        print(f"{rung['accuracy']:.3f}  {rung['label']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
