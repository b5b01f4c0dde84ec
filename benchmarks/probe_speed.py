"""The probes of one K = 8192 model, now and at the task-diversity study's commit, in one run.

What the study's probe stage runs for one model (`run_probing` with the default `ProbeConfig`,
the model's untrained twin as the control), on the same checkpoint and the same corpus
(`diversity-8192`, which both commits know), each side in a fresh process of one torch thread,
one after the other, with nothing else running: the layout of a study's models (one thread
each). The baseline (`--baseline`, default ec73395: the commit whose code recorded
`results/diversity`'s probe stages, 594-657 s per 4-layer K = 8192 model there) is extracted
with `git archive` and imported alone (the editable install's finder is removed). The current
side then reads the same network again in the same process against the same twin: what reading
another kept network of the model costs (the study's `development-probe` stage reads its kept
networks so, against the step-0 twin), with the exact beliefs of the probe rows and the twin's
probes reused.

    python benchmarks/probe_speed.py --model runs/inference-8192-draw0/models/depth4-seed0/training \
        --next-model runs/inference-8192-draw0/models/depth4-seed1/training

With `--next-model`, the current and baseline sides then read another model in the same
process, against its own twin: what each further model of a corpus costs a study's worker,
which reads its models one after the other (what is computed once per corpus, such as the
exact beliefs of the probe rows, is reused; the baseline's side reuses what its code reused).

A third side (`--before`, default 909abd4: the exact beliefs in float64, now float32) says
which recorded numbers the latest change moved: every record value of its first read against
the current one's, the largest difference per metric.

Writes results/probe_speed.json: each side's seconds and its own sub-timings (`timings_s`),
`ratio` (baseline over current, first read), the largest difference of any probe accuracy
between current and baseline (the estimators changed between those commits;
docs/benchmarks.md), and `changed_by_before` (metric -> the largest difference from `--before`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from analysis_speed import baseline_tree, side_in_tree, without_editable_install

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "ec73395"
BEFORE = "909abd4"  # the last commit whose exact beliefs were float64
CORPUS = "diversity-8192"


# ---- one side, in its own process (imports whichever tree PYTHONPATH names) ---------------
def read_once(model_path: str, corpus_name: str) -> dict:
    """Seconds of one probe stage of the model at `model_path`, its sub-timings and its
    trained network's probe accuracies."""
    import modeling_hmmroformer  # noqa: F401  (registers the model)
    from hmm_datasets.corpus import open_corpus
    from probing.capture import load_hmm_roformer, untrained_twin
    from probing.run import ProbeConfig, run_probing

    corpus = open_corpus(corpus_name)
    model = load_hmm_roformer(model_path)
    twin = untrained_twin(model, 0)
    start = time.perf_counter()
    results = run_probing(model, corpus, ProbeConfig(), untrained_model=twin, progress=False).results
    seconds = time.perf_counter() - start
    results = results if isinstance(results, dict) else results.to_dict()  # the baseline's are a dict
    values = {
        "/".join(str(r.get(key)) for key in ("metric", "target", "layer", "head", "positions", "network")): r[
            "value"
        ]
        for r in results["records"]
    }
    return {"seconds": seconds, "timings_s": results["timings_s"], "values": values}


def trained_accuracies(values: dict) -> dict:
    """The trained network's probe accuracies (no head) among a side's record values."""
    out = {}
    for key, value in values.items():
        metric, target, layer, head, positions, network = key.split("/")
        if metric == "accuracy" and network in ("trained", "None") and head == "None":
            out[f"{target}/{layer}/{'all' if positions == 'None' else positions}"] = value
    return out


def largest_changes(before: dict, after: dict) -> dict[str, float]:
    """metric -> the largest `value_change` of a record value both sides hold."""
    out: dict[str, float] = {}
    for key in sorted(set(before) & set(after)):
        metric = key.split("/")[0]
        out[metric] = max(out.get(metric, 0.0), value_change(before[key], after[key]))
    return out


def value_change(a, b) -> float:
    """|a - b| of two numbers; 0 for equal values (NaN equal to NaN, None to None), infinity
    where only one is a number."""
    if a == b or (a != a and b != b):
        return 0.0
    if isinstance(a, float | int) and isinstance(b, float | int) and a == a and b == b:
        return abs(a - b)
    return float("inf")


def side_main(argv: list[str]) -> int:
    without_editable_install()
    import torch

    torch.set_num_threads(1)
    model_path, corpus_name, again, next_model = argv[0], argv[1], argv[2] == "again", argv[3]
    reads = [read_once(model_path, corpus_name)]
    if again:
        reads.append(read_once(model_path, corpus_name))
    if next_model != "-":  # another model of the corpus, as a study's worker reads its next one
        reads.append({**read_once(next_model, corpus_name), "next_model": True})
    print(json.dumps(reads))
    return 0


# ---- the harness -----------------------------------------------------------------------------
def run_side(
    tree: Path, model_path: str, corpus_name: str, again: bool, next_model: str | None
) -> list[dict]:
    arguments = [model_path, corpus_name, "again" if again else "-", next_model or "-"]
    return side_in_tree(__file__, tree, arguments, tree)


def next_model_read(reads: list[dict]) -> dict | None:
    """A side's read of the next model (`--next-model`), or None."""
    return next((read for read in reads if read.get("next_model")), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a trained 4 x 64 checkpoint of a K = 8192 corpus")
    parser.add_argument(
        "--corpus", default=CORPUS, help="a corpus preset both commits know (default: %(default)s)"
    )
    parser.add_argument(
        "--baseline", default=BASELINE, help="the commit to compare with (default: %(default)s)"
    )
    parser.add_argument(
        "--before",
        default=BEFORE,
        help="the commit before the latest change, whose records are compared value by value "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--next-model",
        help="another checkpoint of the same architecture, read next in the current and baseline "
        "sides' processes: what each further model of a study's corpus costs",
    )
    args = parser.parse_args(argv)
    model_path = str(Path(args.model).resolve())
    next_model = None if args.next_model is None else str(Path(args.next_model).resolve())
    for given, path in ((args.model, model_path), (args.next_model, next_model)):
        if path is not None and not (Path(path) / "config.json").is_file():
            parser.error(f"{given} has no config.json: pass a checkpoint folder (a study model's training/).")

    from common import write_result

    with tempfile.TemporaryDirectory() as scratch:
        sides = {"current": run_side(ROOT, model_path, args.corpus, True, next_model)}
        print(f"current: {[round(read['seconds'], 1) for read in sides['current']]} s", flush=True)
        for name, commit, then_next in (
            ("before", args.before, None),
            ("baseline", args.baseline, next_model),
        ):
            (Path(scratch) / name).mkdir()
            tree = baseline_tree(Path(scratch) / name, commit)
            sides[name] = run_side(tree, model_path, args.corpus, False, then_next)
            print(f"{name} ({commit}): {[round(read['seconds'], 1) for read in sides[name]]} s", flush=True)
    now, before, then = sides["current"][0], sides["before"][0], sides["baseline"][0]
    accuracies = {name: trained_accuracies(side["values"]) for name, side in (("now", now), ("then", then))}
    shared = sorted(set(accuracies["now"]) & set(accuracies["then"]))
    result = {
        "model": model_path,
        "corpus": args.corpus,
        "baseline_commit": args.baseline,
        "before_commit": args.before,
        "threads_per_side": 1,
        "current_s": now["seconds"],
        "current_again_s": sides["current"][1]["seconds"],
        "before_s": before["seconds"],
        "baseline_s": then["seconds"],
        "ratio": then["seconds"] / now["seconds"],
        "ratio_again": then["seconds"] / sides["current"][1]["seconds"],
        "next_model": next_model,
        "current_next_model_s": None,
        "baseline_next_model_s": None,
        "ratio_next_model": None,
        "accuracies_compared": len(shared),
        "largest_accuracy_difference": max(abs(accuracies["now"][k] - accuracies["then"][k]) for k in shared),
        "records_compared_with_before": len(set(now["values"]) & set(before["values"])),
        "changed_by_before": largest_changes(before["values"], now["values"]),
        "sides": {
            name: [{k: v for k, v in read.items() if k != "values"} for read in reads]
            for name, reads in sides.items()
        },
    }
    now_next, then_next = (next_model_read(sides[name]) for name in ("current", "baseline"))
    if now_next is not None and then_next is not None:
        result["current_next_model_s"], result["baseline_next_model_s"] = (
            now_next["seconds"],
            then_next["seconds"],
        )
        result["ratio_next_model"] = then_next["seconds"] / now_next["seconds"]
        print(f"next model: baseline {then_next['seconds']:.1f} s, current {now_next['seconds']:.1f} s")
    print(
        f"probes: baseline {then['seconds']:.1f} s, current {now['seconds']:.1f} s ({result['ratio']:.2f}x)"
    )
    print(f"largest change from {args.before}, by metric: {result['changed_by_before']}")
    print(f"wrote {write_result('probe_speed', result)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--side"]:
        sys.exit(side_main(sys.argv[2:]))
    sys.exit(main())
