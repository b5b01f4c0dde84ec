"""scripts/reproduce.py end to end on `tiny`: the report, the cards, resumable stages, and the
published folders used without the plugin."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers.trainer
from huggingface_hub import ModelCard

import hmm_datasets
from model_cards.render import memory_equivalent_text
from modeling_hmmroformer.experiments.analyses.claims import CLAIMS
from modeling_hmmroformer.experiments.running import stages as stages_module
from modeling_hmmroformer.experiments.running.pipeline import read_pipeline_state, run_pipeline
from modeling_hmmroformer.experiments.running.plan import REPRODUCE_STAGES, make_pipeline
from modeling_hmmroformer.experiments.running.reproduction_plan import REPRODUCTION
from modeling_hmmroformer.experiments.settings import PIPELINES, REPRODUCTIONS, get_settings
from probing import capture_hidden_states, load_hmm_roformer, sample_positions
from tests.hmm_datasets.test_export import damage

ROOT = Path(__file__).resolve().parents[3]
FIGURES = [
    "figure1/figure1.png",
    "probes/figure2_shuffle.png",
    "probes/figure3a_hidden_state_task.png",
    "probes/figure3b_previous_tokens.png",
    "probes/figure7_attention_row0.png",
    "memory/lemma1.png",
    "memory/memory.png",
]


STATE_NAME = "reproduce_state.json"
STAGES = ["corpus", "train", "evaluate", "probe", "memory", "knockout", "model", "report"]


def tiny_reproduction(out, **overrides):
    settings = get_settings("tiny", overrides=overrides)
    return make_pipeline(settings, out, plan=REPRODUCTION, progress=False)


def test_a_reproduction_is_the_pipeline_of_one_model_in_its_own_folder(tmp_path):
    pipeline = tiny_reproduction(tmp_path / "r")
    assert pipeline.stage_names() == STAGES
    [model] = pipeline.models
    assert model.folder == tmp_path / "r" and (model.depth, model.seed) == (2, 0)  # configs/tiny.yaml's own
    assert model.run.output_dir == tmp_path / "r" / "training"
    assert model.run.data["source"] == str(tmp_path / "r" / "corpus")


NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def test_the_page_and_redo_list_the_pipelines_stages_in_order(tmp_path):
    """docs/reproduce.md's stage table and count, and the stages `--redo` accepts, are the pipeline's."""
    stages = tiny_reproduction(tmp_path / "r").stage_names()
    page = (ROOT / "docs" / "reproduce.md").read_text()
    table = page.split("| stage | what | writes |\n| --- | --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    assert [row.split("|")[1].strip().strip("`") for row in table.splitlines()] == stages
    assert f"One command runs {NUMBER_WORDS[len(stages)]} stages" in page
    assert list(REPRODUCE_STAGES) == stages


def test_the_report_shows_every_figure_and_every_number_next_to_bayes(reproduced_tiny):
    out, stdout = reproduced_tiny
    report = (out / "REPORT.md").read_text()
    for figure in FIGURES:
        assert f"]({figure})" in report and (out / figure).is_file(), figure
    figure1 = json.loads((out / "figure1" / "figure1.json").read_text())
    by_demos = figure1["by_num_demos"]
    for name in ("model", "bayes", "oracle"):  # the headline row: all demonstrations
        assert f"{by_demos[name]['accuracy'][-1]:.3f}" in report
    headline = next(
        line for line in report.splitlines() if line.startswith("| top-1 accuracy, 4 demonstrations |")
    )
    assert headline.split("|")[2:5] == [
        f" {by_demos[name]['accuracy'][-1]:.3f} " for name in ("model", "bayes", "oracle")
    ]
    assert f"| argmax = Bayes-optimal argmax | {figure1['model_vs_bayes']['agreement']:.3f} |" in report
    probes = json.loads((out / "probes" / "probe_results.json").read_text())
    task_ceiling = next(
        r["value"]
        for r in probes["records"]
        if r["target"] == "task" and r["metric"] == "bayes_optimal_accuracy"
    )
    assert (
        f"| ceiling | {next(r['value'] for r in probes['records'] if r['metric'] == 'oracle_accuracy'):.3f} | {task_ceiling:.3f} |"
        in report
    )
    results = json.loads((out / "results.json").read_text())
    claims = results["claims"]
    assert [c["figure"] for c in claims] == [*"1122", "3(a)", "3(a)", "3(b)", "3(b)", "3(b)", "3 (patching)"]
    for claim in claims:
        assert f"| {claim['figure']} | {claim['claim']} | {claim['statistic']} (" in report
        assert claim["claim"] in stdout and claim["label"] in stdout
        # one model is one seed: never decided; a 2-layer model has no slope over layers 2..L
        assert claim["label"] == "undecided (1 seed)" or claim["verdict"] in ("n/a", "not testable")
    slopes = [c["label"] for c in claims if c["figure"] == "2"]
    assert slopes == ["n/a (fewer than 3 layers)"] * 2
    lemma1 = json.loads((out / "memory" / "lemma1.json").read_text())
    memory = json.loads((out / "memory" / "memory.json").read_text())
    assert lemma1["memories"] == memory["memories"] == list(PIPELINES["tiny"].memories)
    bayes_row = next(line for line in report.splitlines() if line.startswith("| Bayes, memory L vs full |"))
    assert bayes_row.split("|")[2:-1] == [f" {v:.2e} " for v in lemma1["mixture"]["tv"]]
    assert f"has L = {memory_equivalent_text(memory['memory_equivalent'])}\n" in report
    for stage in STAGES[:-1]:
        assert f"| {stage} | " in report
    assert set(results["stage_seconds"]) == set(STAGES) - {"report"}


def test_the_checkpoint_carries_a_model_card_with_the_measured_results(reproduced_tiny):
    out, _ = reproduced_tiny
    model = out / "model"
    names = {path.name for path in model.iterdir()}
    assert {"model.safetensors", "config.json", "README.md", "hmm_params.safetensors"} <= names
    assert {
        "configuration_hmm_roformer.py",
        "modeling_hmm_roformer.py",
        "figure1",
        "probes",
        "memory",
    } <= names
    assert not any(name.startswith("checkpoint-") or name.endswith(".bin") for name in names)
    assert "auto_map" in json.loads((model / "config.json").read_text())
    card = ModelCard.load(model / "README.md")
    assert card.data.library_name == "transformers" and "arxiv:2506.01919" in card.data.tags
    figure1 = json.loads((model / "figure1" / "figure1.json").read_text())
    metrics = {result.metric_name: result.metric_value for result in card.data.eval_results}
    assert metrics["Top-1 accuracy, 4 demonstrations"] == round(
        figure1["by_num_demos"]["model"]["accuracy"][-1], 4
    )
    assert metrics["Argmax agreement with the Bayes-optimal predictor"] == round(
        figure1["model_vs_bayes"]["agreement"], 4
    )
    text = card.text
    assert f'from_pretrained("{model}", trust_remote_code=True)' in text
    below = figure1["ladder"]["below_in_context"]["model"]  # the card and the report say where it stands
    for shown in (text, (out / "REPORT.md").read_text()):
        assert ("below the in-context baseline" in shown) == below
        assert "The ladder of predictors" in shown and "**model**" in shown
    assert "arxiv.org/abs/2506.01919" in text and "@article" in text
    for figure in FIGURES:
        assert f"]({figure})" in text and (model / figure).is_file()
    corpus_card = (out / "corpus" / "README.md").read_text()
    assert "configs:" in corpus_card and f'load_dataset("{out / "corpus"}")' in corpus_card


def test_a_rerun_skips_every_complete_stage(reproduced_tiny, run_script):
    out, _ = reproduced_tiny
    before = {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}
    done = run_script("scripts/reproduce.py", "--preset", "tiny", "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("complete, skipped") == len(STAGES)
    changed = [path for path, mtime in before.items() if path.stat().st_mtime_ns != mtime]
    assert [path.name for path in changed] == [STATE_NAME]  # rewritten with the same content


def test_an_interrupted_stage_is_redone_never_used(reproduced_tiny, tmp_path):
    source, _ = reproduced_tiny
    out = tmp_path / "tiny"
    shutil.copytree(source, out)
    original = (out / "figure1" / "figure1.json").read_text()
    # interrupted while evaluating: a half-written result and a staging folder are left behind
    state = json.loads((out / STATE_NAME).read_text())
    state["stages"] = {name: v for name, v in state["stages"].items() if name in ("corpus", "train")}
    (out / STATE_NAME).write_text(json.dumps(state))
    (out / "figure1" / "figure1.json").write_text(original[: len(original) // 2])
    (out / ".figure1.partial").mkdir()
    (out / ".figure1.partial" / "junk").write_text("x")
    trained = (out / "training" / "model.safetensors").stat().st_mtime_ns
    logged = []
    run_pipeline(tiny_reproduction(out), log=logged.append)
    assert logged[:2] == [line for line in logged if "skipped" in line]  # corpus and train
    assert (out / "figure1" / "figure1.json").read_text() == original  # redone, same seed, same numbers
    assert json.loads((out / "model" / "figure1" / "figure1.json").read_text()) == json.loads(original)
    assert not (out / ".figure1.partial").exists()
    assert (out / "training" / "model.safetensors").stat().st_mtime_ns == trained
    assert set(json.loads((out / STATE_NAME).read_text())["stages"]) == set(STAGES)


def test_training_runs_in_this_process_and_resumes_to_the_same_weights(
    reproduced_tiny, tmp_path, monkeypatch
):
    """One process: no `accelerate launch` subprocess; a run stopped after its first checkpoint
    resumes from it to the weights the whole run gave."""
    source, _ = reproduced_tiny
    out = tmp_path / "tiny"
    shutil.copytree(source, out)
    training = out / "training"
    expected = load_hmm_roformer(str(training), "cpu").state_dict()
    checkpoints = sorted(training.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    shutil.rmtree(checkpoints[-1])  # stopped before the last checkpoint
    (training / "train_results.json").unlink()
    (training / "model.safetensors").unlink()

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a one-process run launched a subprocess: {args}")

    # the stages module's own name only: the doc test's pages start processes from other threads meanwhile
    monkeypatch.setattr(stages_module, "subprocess", SimpleNamespace(run=no_subprocess))
    warned = []
    monkeypatch.setattr(
        transformers.trainer.logger, "warning", lambda message, *a, **k: warned.append(message)
    )
    pipeline = tiny_reproduction(out)
    stages_module.train_model(pipeline, pipeline.models[0])
    assert not [message for message in warned if "missing keys" in message]  # tied weights: no false alarm
    resumed = load_hmm_roformer(str(training), "cpu").state_dict()
    for name, value in expected.items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6, msg=name)
    assert (out / "run_config.yaml").is_file()


def test_a_folder_made_with_other_settings_is_refused_and_kept(reproduced_tiny):
    out, _ = reproduced_tiny
    state = (out / STATE_NAME).read_text()
    with pytest.raises(ValueError, match="other settings"):
        read_pipeline_state(tiny_reproduction(out, training={"max_steps": 10}))
    assert (out / STATE_NAME).read_text() == state


def test_a_folder_that_is_not_a_reproduction_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a reproduction folder"):
        run_pipeline(tiny_reproduction(tmp_path))
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            ["--preset", "tiny", "--model.num_layers", "3"],
            "unknown field(s) ['num_layers'] in section 'model'",
        ),
        (["--preset", "tiny", "--num-processes", "2"], "needs as many GPUs"),
        (["--preset", "tiny", "--num-processes", "0"], "argument --num-processes: 0 must be at least 1"),
        (  # honoured or refused, never silently replaced by the run's own corpus
            ["--preset", "tiny", "--data.source", "elsewhere"],
            "--data.source elsewhere: a reproduction trains on the corpus it generates",
        ),
        (
            ["--preset", "tiny", "--training.output_dir", "elsewhere"],
            "--training.output_dir: a reproduction sets it for each model; give --out",
        ),
    ],
)
def test_bad_input_is_one_error_line(run_script, tmp_path, arguments, message):
    if "--num-processes" in arguments and torch.cuda.is_available():
        pytest.skip("this machine has GPUs")
    done = run_script("scripts/reproduce.py", *arguments, "--out", tmp_path / "r")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error:") and message in done.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("how", ["deleted", "truncated", "replaced"])
def test_a_damaged_corpus_is_redone_not_skipped(reproduced_tiny, tmp_path, how):
    source, _ = reproduced_tiny
    out = tmp_path / "tiny"
    shutil.copytree(source, out)
    [shard] = (out / "corpus" / "data").glob("test-*.parquet")
    written = shard.read_bytes()
    damage(out / "corpus", how)
    logged = []
    run_pipeline(tiny_reproduction(out), log=logged.append)
    assert logged[0].startswith(f"corpus: {out / 'corpus'} is ") and "the test split" in logged[0]
    assert logged[1] == f"[1/{len(STAGES)}] corpus ..."
    assert sum("complete, skipped" in line for line in logged) == len(STAGES) - 1
    assert shard.read_bytes() == written  # the same bytes again: the later stages stand


def test_a_failed_redo_leaves_no_report_that_looks_current(reproduced_tiny, tmp_path, monkeypatch):
    source, _ = reproduced_tiny
    out = tmp_path / "tiny"
    shutil.copytree(source, out)

    def stopped(*args):
        raise RuntimeError("stopped")

    monkeypatch.setattr(stages_module, "probe_model", stopped)
    with pytest.raises(RuntimeError, match="stopped"):
        run_pipeline(tiny_reproduction(out), redo="probe", log=lambda line: None)
    assert not (out / "REPORT.md").exists() and not (out / "results.json").exists()
    assert "report" not in json.loads((out / STATE_NAME).read_text())["stages"]


def test_presets_are_validated(tmp_path):
    assert REPRODUCTIONS == ["paper", "small", "tiny"]
    with pytest.raises(ValueError, match="not a named pipeline"):
        get_settings("huge")
    with pytest.raises(ValueError, match="run it with scripts/study.py --study quick"):
        make_pipeline(PIPELINES["quick"], tmp_path / "q", plan=REPRODUCTION)
    assert not (tmp_path / "q").exists()


# ---- the published folders, without the plugin ------------------------------------------------
def test_the_exported_model_loads_without_the_plugin_and_the_probes_capture_it(
    reproduced_tiny, run_without_plugin, tmp_path
):
    out, _ = reproduced_tiny
    model_dir = out / "model"
    test = hmm_datasets.load_hmm_mixture("tiny", split="test").with_format("numpy")[:6]["input_ids"]
    positions = sample_positions(
        hmm_datasets.SampleLayout.from_config(hmm_datasets.get_preset("tiny")), 6, 5, seed=0
    )
    np.save(tmp_path / "ids.npy", np.asarray(test))
    np.save(tmp_path / "positions.npy", positions)
    run_without_plugin(
        f"""
        import importlib
        import importlib.util
        import numpy as np
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained({str(model_dir)!r}, trust_remote_code=True)
        assert "transformers_modules" in type(model).__module__, type(model).__module__
        # the probes' capture module, from the package's folder under another name: it needs
        # torch, numpy, tqdm and transformers only (its siblings recording and architecture too)
        spec = importlib.util.spec_from_file_location(
            "standalone_probing",
            {str(ROOT / "probing" / "__init__.py")!r},
            submodule_search_locations=[{str(ROOT / "probing")!r}],
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["standalone_probing"] = package
        spec.loader.exec_module(package)
        capture = importlib.import_module("standalone_probing.capture")
        capture.check_hmm_roformer(model)
        ids, positions = np.load("ids.npy"), np.load("positions.npy")
        states = capture.capture_hidden_states(model.eval(), ids, positions, dtype="float32", progress=False)
        logits = capture.capture_attention_logits(model, ids, [40, 45], positions)
        np.save("remote_states.npy", states.numpy())
        np.save("remote_logits.npy", logits.numpy())
        """
    )
    model = load_hmm_roformer(str(model_dir), "cpu")
    states = capture_hidden_states(model, test, positions, dtype="float32", progress=False)
    remote = np.load(tmp_path / "remote_states.npy")
    assert remote.shape == (3, 6, 5, 32)  # embeddings + 2 layers, rows, positions, hidden
    np.testing.assert_allclose(remote, states.numpy(), atol=1e-5)
    with torch.no_grad():
        hidden = model(torch.as_tensor(test), output_hidden_states=True).hidden_states
    expected = torch.stack(hidden).gather(
        2, torch.as_tensor(positions)[None, ..., None].expand(3, -1, -1, 32)
    )
    np.testing.assert_allclose(remote, expected.numpy(), atol=1e-5)
    assert np.load(tmp_path / "remote_logits.npy").shape == (2, 6, 2, 2, 5)


def test_the_exported_corpus_loads_without_the_plugin(reproduced_tiny, run_without_plugin):
    out, _ = reproduced_tiny
    stdout = run_without_plugin(
        f"""
        import json
        from datasets import load_dataset

        ds = load_dataset({str(out / "corpus")!r})
        print(json.dumps({{split: ds[split][:] for split in ds}}))
        """
    )
    loaded = json.loads(stdout.strip().splitlines()[-1])
    expected = hmm_datasets.load_hmm_mixture("tiny")
    assert set(loaded) == {"train", "validation", "test"}
    for split, rows in loaded.items():
        reference = expected[split][:]
        for column in ("input_ids", "hidden_states", "task_id", "segment_ids"):
            np.testing.assert_array_equal(
                np.asarray(rows[column]), np.asarray(reference[column]), err_msg=split
            )


def test_corpora_in_folders_of_the_same_name_do_not_share_a_cache_entry(tmp_path):
    """datasets keys `load_dataset(folder)` by the folder's name: two `corpus` folders must not mix."""
    from datasets import load_dataset

    from hmm_datasets.corpus import open_corpus

    configs = {"a": hmm_datasets.get_preset("tiny"), "b": hmm_datasets.get_preset("tiny", seed=1)}
    for name, config in configs.items():
        hmm_datasets.export_corpus(config, tmp_path / name / "corpus", table_rows=0, progress=False)
    for name, config in configs.items():
        expected = hmm_datasets.load_hmm_mixture(config, split="validation")["input_ids"]
        opened = open_corpus(str(tmp_path / name / "corpus")).splits["validation"]["input_ids"]
        plain = load_dataset(str(tmp_path / name / "corpus"), split="validation")["input_ids"]
        np.testing.assert_array_equal(np.asarray(opened), np.asarray(expected))
        np.testing.assert_array_equal(np.asarray(plain), np.asarray(expected))


def test_the_gpu_benchmark_runs_the_same_stages_and_measures_them(reproduced_tiny, run_script, tmp_path):
    """benchmarks/paper_gpu.py at tiny size on the CPU: the code path of the GPU run, stage for stage."""
    source, _ = reproduced_tiny
    out = tmp_path / "tiny"
    shutil.copytree(source, out)
    results, published = tmp_path / "tiny_gpu.json", tmp_path / "published"
    arguments = ["--preset", "tiny", "--out", out, "--results", results, "--publish", published]
    done = run_script("benchmarks/paper_gpu.py", *arguments, "--matmul-size", "256", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("complete, skipped") == len(STAGES)  # resumes a finished folder
    measured = json.loads(results.read_text())
    trained = json.loads((out / "model" / "train_results.json").read_text())
    assert measured["train_tokens_per_s"] == pytest.approx(trained["train_tokens"] / trained["train_runtime"])
    flops = 6 * 25_696 + 12 * 2 * 32 * 52  # 6 N + 12 L d T for the tiny model and its 52-token rows
    assert measured["training_flops_per_token"] == flops
    assert measured["mfu"] == pytest.approx(
        flops * measured["train_tokens_per_s"] / (measured["bf16_matmul_tflops"] * 1e12)
    )
    steady_tokens_per_s = trained["train_tokens"] / trained["train_steps"] / trained["steady_step_s"]
    assert measured["steady_mfu"] == pytest.approx(
        flops * steady_tokens_per_s / (measured["bf16_matmul_tflops"] * 1e12)
    )
    assert measured["first_step_s"] == trained["first_step_s"]
    assert measured["bayes_test_split"]["rows"] == 64
    assert measured["bayes_test_split"]["max_normalisation_error"] < 1e-5  # distributions, not NaN
    assert set(measured["stage_seconds"]) == set(STAGES)
    assert set(measured["targets_met"]) == {"train_s", "mfu", "bayes_test_split_s"}
    assert {path.name for path in published.iterdir()} == {
        "REPORT.md",
        "results.json",
        "reproduce_state.json",
        "figure1",
        "probes",
    }
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"Fig {CLAIMS[-1].figure}: {CLAIMS[-1].text}")
    assert "MFU" in done.stdout and "Bayes-optimal, whole test split" in done.stdout
