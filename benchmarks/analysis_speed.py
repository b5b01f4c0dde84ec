"""The analysis of one model, now and at the baseline commit, on the same checkpoint and rows.

What the study's analysis stages run for one model. Today: Figure 1 against Bayes (512 test
rows) with the untrained twin scored beside the model, the probes and belief-state probes of
the model and its twin with the shuffle test of both, the model against the memory-L Bayes
predictors (128 rows), and the rotary knock-out of the model and its twin (128 rows); and, once
per corpus, Lemma 1. At the baseline (7002bf7, before the analysis-speed work) the stages did
other work: Figure 1 without the twin, probes with the twin but no belief probes, no shuffle
test of the twin, the model cut to memories 1..32, no knock-out. So the ratio compares the
analysis a study ran then with the one it runs now, not the same computation. Both sides run
in a fresh process each, one after the other: the current tree, and the tree of `--baseline`
extracted with `git archive` (it imports `evaluate`, which the current code no longer needs:
`pip install "evaluate<1"` first). Each side writes every file its stages write, in its own
scratch folder.

    python benchmarks/analysis_speed.py                    # 16 x 64 and 4 x 128 on `small`
    python benchmarks/analysis_speed.py --small-model runs/reproduce-small/model

Models: `--deep-model` / `--small-model` name checkpoints; without them the benchmark
saves the study's 16 x 64 and the `small` preset's 4 x 128 architectures freshly initialised
(seed 0): the analysis does the same work on any weights, except the probe fits, which stop
when they converge. Writes results/analysis_speed.json with, at its top level,
`sixteen_layers_s`, `sixteen_layers_ratio`, `small_s` and `lemma1_small_s` (seconds of the
current code, and the baseline's seconds over ours), and `sixteen_layers_next_model_s`: the
same 16-layer analysis run again in the same process, as a study's next model is (the
exact predictions of the fixed test rows are computed once per process). Each side's probe
stage also reports its own sub-timings (`probe_timings`: captures, fits, shuffle test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "7002bf7"
CORPUS = "small"
EVAL_ROWS, MEMORY_ROWS, MEMORIES = 512, 128, (1, 2, 4, 8, 16, 32)  # the study's settings
ARCHITECTURES = {
    "deep": {"hidden_size": 64, "num_hidden_layers": 16},
    "small": {"hidden_size": 128, "num_hidden_layers": 4},
}


# ---- one side, in its own process (imports whichever tree PYTHONPATH names) ---------------
def analyse(model_path: str, out: Path, with_lemma1: bool) -> dict:
    """Seconds of each analysis stage of one model, its outputs written under `out`."""
    import inspect

    import torch

    import modeling_hmmroformer  # noqa: F401  (registers the model)

    try:  # the current layout: the analyses compute, the plots module writes
        from modeling_hmmroformer.experiments.analyses.evaluation import figure1, load_evaluation_data
        from modeling_hmmroformer.experiments.analyses.memory import corpus_lemma1, corpus_model_memory
        from modeling_hmmroformer.experiments.figures import model as plots

        def write_figure1(result, folder):
            plots.write_figure1(result.to_dict(), folder)

        def write_lemma1(data, memories, folder):
            plots.write_lemma1(corpus_lemma1(data, memories), folder)

        def write_model_memory(model, data, memories, folder):
            plots.write_model_memory(corpus_model_memory(model, data, memories), folder)

    except ImportError:
        try:  # the layout before it (each analysis wrote its own files)
            from modeling_hmmroformer.experiments.evaluation import (
                figure1,
                load_evaluation_data,
                write_figure1,
            )
            from modeling_hmmroformer.experiments.memory import write_lemma1, write_model_memory
        except ImportError:  # the baseline's
            from modeling_hmmroformer.evaluation import figure1, load_evaluation_data, write_figure1
            from modeling_hmmroformer.memory import write_lemma1, write_model_memory
    try:  # today's stages: the twin of the training seed, the rotary knock-out
        from hmm_datasets.predictors import reference_predictors
        from probing.capture import untrained_twin
        from probing.knockout import rotary_knockout, scored_test_positions
    except ImportError:
        untrained_twin = rotary_knockout = None
    from hmm_datasets.corpus import open_corpus
    from probing.capture import load_hmm_roformer
    from probing.plots import write_probe_results
    from probing.run import ProbeConfig, run_probing

    for name in ("figure1", "probes", "lemma1", "memory", "knockout"):
        (out / name).mkdir()
    seconds = {}
    model = load_hmm_roformer(model_path)
    if untrained_twin is not None:
        twin = untrained_twin(model, 0)
    else:
        torch.manual_seed(0)
        twin = type(model)(model.config).eval()

    start = time.perf_counter()
    scored_twin = {"twin": twin} if "twin" in inspect.signature(figure1).parameters else {}
    data = load_evaluation_data(CORPUS, EVAL_ROWS)
    write_figure1(figure1(model, data, progress=False, **scored_twin), out / "figure1")
    seconds["evaluate"] = time.perf_counter() - start

    start = time.perf_counter()
    result = run_probing(model, open_corpus(CORPUS), ProbeConfig(), untrained_model=twin, progress=False)
    write_probe_results(result, out / "probes")
    seconds["probe"] = time.perf_counter() - start
    results = result.results  # the baseline's are a dict
    seconds["probe_timings"] = (
        results.get("timings_s", {}) if isinstance(results, dict) else results.timings_s
    )

    data = load_evaluation_data(CORPUS, MEMORY_ROWS)
    if with_lemma1:
        start = time.perf_counter()
        write_lemma1(data, MEMORIES, out / "lemma1")
        seconds["lemma1"] = time.perf_counter() - start
    start = time.perf_counter()
    write_model_memory(model, data, MEMORIES, out / "memory")
    seconds["memory"] = time.perf_counter() - start
    stages = ["evaluate", "probe", "memory"]
    if rotary_knockout is not None:
        start = time.perf_counter()
        bayes = reference_predictors(data.params)["bayes"].next_token_probs(data.input_ids, data.task_ids)
        scored = scored_test_positions(data.layout, len(data.input_ids))
        knocked = {
            name: rotary_knockout(network, data.input_ids, scored, bayes, progress=False)
            for name, network in (("trained", model), ("twin", twin))
        }
        (out / "knockout" / "knockout.json").write_text(json.dumps(knocked))
        seconds["knockout"] = time.perf_counter() - start
        stages.append("knockout")
    seconds["analysis"] = sum(seconds[stage] for stage in stages)
    return seconds


def without_editable_install() -> None:
    """Only PYTHONPATH's tree is importable: the editable install's finder would otherwise
    hand the baseline side the current tree's modules the baseline lacks."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in repr(finder)]


def side_main(argv: list[str]) -> int:
    without_editable_install()
    model_path, out, with_lemma1, again = argv[0], Path(argv[1]), argv[2] == "lemma1", argv[3] == "again"
    seconds = analyse(model_path, out, with_lemma1)
    if again:  # the next model of a study, in the same process (what is computed once is reused)
        (out / "again").mkdir()
        seconds["next_model"] = analyse(model_path, out / "again", False)
    print(json.dumps(seconds))
    return 0


# ---- the harness -----------------------------------------------------------------------------
def initialised_model(kind: str, folder: Path) -> str:
    """The architecture of `kind` at its initialisation (seed 0), saved for both sides."""
    import torch

    from hmm_datasets import get_preset
    from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM

    corpus = get_preset(CORPUS)
    config = HMMRoFormerConfig(
        vocab_size=corpus.vocab_size + 1,
        num_attention_heads=4,
        max_position_embeddings=512,
        **ARCHITECTURES[kind],
    )
    torch.manual_seed(0)
    HMMRoFormerForCausalLM(config).save_pretrained(folder / kind)
    return str(folder / kind)


def baseline_tree(folder: Path, commit: str = BASELINE) -> Path:
    """The files of `commit` (default: the baseline), extracted from this clone's history."""
    tree = folder / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def side_in_tree(script: str, tree: Path, arguments: list[str], cwd: Path):
    """What `script --side ARGUMENTS` prints last (JSON), run in a fresh process where only `tree`
    is importable (its side calls `without_editable_install`), offline, without progress bars."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, script, "--side", *arguments]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the side at {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_side(tree: Path, model_path: str, out: Path, with_lemma1: bool, again: bool = False) -> dict:
    flags = ["lemma1" if with_lemma1 else "-", "again" if again else "-"]
    return side_in_tree(__file__, tree, [model_path, str(out), *flags], out.parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--deep-model", help="a 16-layer checkpoint (default: the study's architecture, initialised)"
    )
    parser.add_argument("--small-model", help="a `small` checkpoint (default: its architecture, initialised)")
    parser.add_argument("--skip-baseline", action="store_true", help="time the current code only")
    args = parser.parse_args(argv)

    from common import write_result

    result = {
        "baseline_commit": BASELINE,
        "corpus": CORPUS,
        "eval_rows": EVAL_ROWS,
        "memory_rows": MEMORY_ROWS,
    }
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        given = {"deep": args.deep_model, "small": args.small_model}
        models = {
            kind: str(Path(path).resolve()) if path else initialised_model(kind, scratch)
            for kind, path in given.items()
        }
        baseline = None if args.skip_baseline else baseline_tree(scratch)
        for kind, model_path in models.items():
            entry = {"model": model_path if given[kind] else "initialised (seed 0)"}
            for name, tree in (("current", ROOT), ("baseline", baseline)):
                if tree is None:
                    continue
                out = scratch / f"{kind}-{name}"
                out.mkdir()
                again = kind == "deep" and name == "current"
                entry[name] = run_side(tree, model_path, out, with_lemma1=kind == "small", again=again)
                print(f"{kind:>5} {name:>8}: {entry[name]}", flush=True)
            if "baseline" in entry:
                entry["ratio"] = {
                    k: entry["baseline"][k] / entry["current"][k]
                    for k in entry["baseline"]
                    if isinstance(entry["baseline"][k], float) and k in entry["current"]
                }
            result[kind] = entry
    result["sixteen_layers_s"] = result["deep"]["current"]["analysis"]
    result["sixteen_layers_ratio"] = result["deep"].get("ratio", {}).get("analysis")
    result["sixteen_layers_next_model_s"] = result["deep"]["current"]["next_model"]["analysis"]
    result["small_s"] = result["small"]["current"]["analysis"]
    result["lemma1_small_s"] = result["small"]["current"]["lemma1"]
    print(f"wrote {write_result('analysis_speed', result)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--side"]:
        sys.exit(side_main(sys.argv[2:]))
    sys.exit(main())
