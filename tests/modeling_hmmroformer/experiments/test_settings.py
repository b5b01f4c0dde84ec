"""Settings as typed objects: the one override syntax of every script, values read by type, run
configs changed by nested dicts, the table of named pipelines, the fingerprint."""

import re
from pathlib import Path

import pytest

import hmm_datasets
from modeling_hmmroformer.experiments.fields import fields_page, section_fields
from modeling_hmmroformer.experiments.settings import (
    AMBIGUOUS_DRAWS,
    DECIDING_DRAWS,
    PIPELINES,
    REPRODUCTIONS,
    Settings,
    fingerprint,
    get_settings,
    load_run_config,
    parse_overrides,
    pipeline_run_config,
    read_yaml,
    record_fingerprint,
)

ROOT = Path(__file__).resolve().parents[3]
SECTIONS = ("corpus", "data", "model", "training", "run")


def test_overrides_go_to_their_sections_read_by_their_fields_types():
    arguments = ["--training.eval_strategy=no", "--training.bf16", "false", "--training.learning_rate=1e-3"]
    arguments += ["--training.report_to", "[]", "--model.num_hidden_layers", "8"]
    arguments += ["--training.run_name", "123", "--data.source", "2024", "--model.norm_placement", "null"]
    arguments += ["--model.some_llama_field", "3", "--training.warmup_ratio", "1"]
    assert parse_overrides(arguments, SECTIONS) == {
        "training": {
            "eval_strategy": "no",
            "bf16": False,
            "learning_rate": 1e-3,
            "report_to": [],
            "run_name": "123",  # a string field keeps the text as typed
            "warmup_ratio": 1.0,  # a number field reads a number
        },
        "model": {"num_hidden_layers": 8, "norm_placement": None, "some_llama_field": 3},
        "data": {"source": "2024"},
    }
    # a field's string list or text: JSON where the field takes a list, else the text
    assert parse_overrides(["--training.report_to", "none"])["training"]["report_to"] == "none"
    assert parse_overrides(["--training.report_to", '["tensorboard"]'])["training"]["report_to"] == [
        "tensorboard"
    ]
    # YAML 1.2 in the files: YAML 1.1 would read "no" as False and "3e-4" as a string
    assert read_yaml("a: no\nb: 3e-4\nc: yes\nd: true") == {"a": "no", "b": 3e-4, "c": "yes", "d": True}


@pytest.mark.parametrize(
    "override, message",
    [
        (["--training.max_steps", "ten"], "training.max_steps='ten' must be an integer"),
        (["--model.hidden_size", "64.0"], "model.hidden_size='64.0' must be an integer"),
        (["--run.vary_num_demos", "yes"], "run.vary_num_demos='yes' must be true or false"),
    ],
)
def test_text_that_is_not_of_the_fields_type_is_refused_naming_the_type(override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_run_config(ROOT / "configs" / "tiny.yaml", override)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["num_tasks=64"], "write overrides as --section.field value"),
        (["--corpus.num_tasks"], "has no value"),
        (["--trainng.max_steps", "3"], r"unknown section 'trainng' \(did you mean training\?\)"),
    ],
)
def test_a_bad_override_says_how_to_write_one(arguments, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides(arguments, SECTIONS)


def test_an_unknown_yaml_section_is_one_line_with_the_nearest_section(tmp_path, run_script):
    """scripts/train.py, the command `accelerate launch` starts: one line, exit status 2, no traceback."""
    config = tmp_path / "run.yaml"
    config.write_text((ROOT / "configs" / "tiny.yaml").read_text().replace("\nrun:", "\nrnu:"))
    with pytest.raises(ValueError, match=r"unknown section\(s\) \['rnu'\] \(did you mean run\?\)"):
        load_run_config(config)
    done = run_script("scripts/train.py", config, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {config}: unknown section(s) ['rnu'] (did you mean run?)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.yaml"]


def test_generate_takes_the_same_syntax(run_script, tmp_path):
    arguments = ["--preset", "tiny", "--out", tmp_path / "c"]
    done = run_script(
        "scripts/generate.py", *arguments, "--corpus.num_tasks", "4", "--table-rows", "0", "--num-proc", "1"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert hmm_datasets.load_corpus_config(tmp_path / "c").num_tasks == 4
    bad = run_script("scripts/generate.py", *arguments, "--model.hidden_size", "8")
    assert bad.returncode != 0 and "unknown section 'model'" in bad.stderr


# ---- typed settings ---------------------------------------------------------------------------
def test_overrides_apply_as_nested_dicts_and_are_validated_again():
    run = load_run_config(ROOT / "configs" / "tiny.yaml")
    changed = run.with_overrides({"model": {"num_hidden_layers": 3}, "training": {"seed": 7}})
    assert (changed.depth, changed.seed) == (3, 7)
    assert (run.depth, run.seed) == (2, 0)  # the original is left as it was
    assert changed.model["hidden_size"] == run.model["hidden_size"]  # other fields of the section kept
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['layers'\] in section 'model'"):
        run.with_overrides({"model": {"layers": 3}})
    # the command line's list and the nested dict give the same run config
    as_list = load_run_config(
        ROOT / "configs" / "tiny.yaml", ["--model.num_hidden_layers", "3", "--training.seed=7"]
    )
    assert as_list == changed


def test_null_removes_a_field_wherever_the_overrides_come_from():
    base = load_run_config(ROOT / "configs" / "study.yaml")
    assert base.model["norm_placement"] == "pre"
    on_the_command_line = load_run_config(ROOT / "configs" / "study.yaml", ["--model.norm_placement", "null"])
    assert "norm_placement" not in on_the_command_line.model
    assert on_the_command_line == base.with_overrides({"model": {"norm_placement": None}})
    # a study's null survives the command line's overrides merged onto it
    llama = get_settings("architecture-llama", overrides={"training": {"max_steps": 3}})
    run = load_run_config(ROOT / "configs" / "study.yaml", llama.overrides)
    assert "norm_placement" not in run.model and run.model_type == "llama"
    assert run.training["max_steps"] == 3


def test_the_inference_cells_nest_distinct_seeds_in_three_draws_and_probe_kept_steps(tmp_path):
    from modeling_hmmroformer.experiments.running.plan import make_pipeline
    from modeling_hmmroformer.experiments.running.study_plan import STUDY
    from modeling_hmmroformer.experiments.running.training import kept_steps

    for k in (32, 512, 8192):
        cells = [PIPELINES[f"inference-{k}-draw{d}"] for d in (0, 1, 2)]
        assert [c.overrides["corpus"] for c in cells] == [
            {"preset": f"diversity-{k}", "seed": d} for d in (0, 1, 2)
        ]
        seeds = [seed for c in cells for seed in c.seeds]
        assert len(seeds) == len(set(seeds)) == 6  # no initialisation shared across draws
        for cell in cells:
            pipeline = make_pipeline(cell, tmp_path / cell.name, plan=STUDY)  # its own checks pass
            kept = kept_steps(pipeline.models[0].run)
            assert len(kept) == 13 and kept[-1] == 12000
            assert set(cell.development_probes) <= set(kept) and max(cell.development_probes) == kept[-1]


def test_the_grown_inference_cells_add_one_new_seed_per_draw_and_share_no_initialisation():
    for k, draws in DECIDING_DRAWS.items():
        cells = [PIPELINES[f"inference-{k}-draw{d}"] for d in range(draws)]
        assert [c.overrides["corpus"]["seed"] for c in cells] == list(range(draws))
        assert all(c.depths == (4,) and len(c.seeds) == 1 and not c.lemma1 for c in cells[3:])
        assert all(c.lemma1 for c in cells[:3])  # the committed draws as they ran
        seeds = [seed for c in cells for seed in c.seeds]
        assert len(seeds) == len(set(seeds)) == 6 + draws - 3
        assert len({record_fingerprint(c.name) for c in cells}) == draws  # one corpus each
    assert f"inference-32-draw{DECIDING_DRAWS[32]}" not in PIPELINES


def test_the_cells_where_the_token_hides_the_state_keep_the_base_draws_and_are_patched():
    for draw in range(AMBIGUOUS_DRAWS):
        base = pipeline_run_config(PIPELINES[f"inference-8192-draw{draw}"]).corpus_config()
        for level, mixing in zip((25, 50), hmm_datasets.config.AMBIGUITY_LEVELS):
            cell = PIPELINES[f"inference-8192-m{level}-draw{draw}"]
            corpus = pipeline_run_config(cell).corpus_config()
            assert (corpus.seed, corpus.emission_mixing, corpus.num_tasks) == (draw, mixing, 8192)
            assert corpus.replace(emission_mixing=0.0, name=base.name) == base  # the base draw's HMMs
            assert cell.seeds == (2 * draw,) and cell.patching == {} and not cell.lemma1
            assert record_fingerprint(cell.name) != record_fingerprint(f"inference-8192-draw{draw}")


def test_the_named_pipelines_are_one_table_of_one_type():
    diversity = {"diversity-32", "diversity-512", "diversity-8192", "diversity-512-draw1"}
    inference = {f"inference-{k}-draw{d}" for k in (32, 512, 8192) for d in (0, 1, 2)}
    inference |= {f"inference-{k}-draw{d}" for k, draws in DECIDING_DRAWS.items() for d in range(3, draws)}
    inference |= {f"inference-8192-m{level}-draw{d}" for level in (25, 50) for d in range(AMBIGUOUS_DRAWS)}
    named = {"tiny", "small", "paper", "default", "quick", "architecture-llama", *diversity, *inference}
    assert set(PIPELINES) == named
    assert all(isinstance(settings, Settings) for settings in PIPELINES.values())
    assert REPRODUCTIONS == ["paper", "small", "tiny"]  # one model each: the run config's own
    for name, settings in PIPELINES.items():  # each names a run config that validates
        run = load_run_config(ROOT / "configs" / settings.run_config, settings.overrides)
        assert run.corpus_config().name.removesuffix("-custom") in hmm_datasets.PRESETS, name
    quick = get_settings("quick", seeds=(0, 1, 2), overrides={"training": {"learning_rate": 1e-3}})
    assert quick.seeds == (0, 1, 2) and quick.depths == PIPELINES["quick"].depths
    assert quick.overrides["training"] == {
        "max_steps": 20,
        "eval_steps": 10,
        "save_steps": 10,
        "learning_rate": 1e-3,
    }


def test_the_fingerprint_follows_what_shapes_results_not_where_the_folders_lie():
    settings = PIPELINES["tiny"]
    run = load_run_config(ROOT / "configs" / "tiny.yaml")
    moved = run.with_overrides(
        {"data": {"source": "/else"}, "training": {"output_dir": "/x", "disable_tqdm": True}}
    )
    assert fingerprint(settings, run) == fingerprint(settings, moved)
    assert fingerprint(settings, run) != fingerprint(
        settings, run.with_overrides({"training": {"max_steps": 3}})
    )
    assert fingerprint(settings, run) != fingerprint(settings.replace(eval_rows=8), run)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"eval_rows": 0}, "eval_rows=0 must be at least 1"),
        ({"corpus_table_rows": -1}, "corpus_table_rows=-1 must be 0 or more"),
        ({"overrides": {"optimizer": {"lr": 1}}}, r"unknown section\(s\) \['optimizer'\]"),
        ({"seeds": (-1,)}, "must be >= 0"),
        ({"probe": {"num_probe_tasks": 0}}, "num_probe_tasks"),
    ],
)
def test_bad_settings_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        Settings("bad", "tiny.yaml", **changes)


def test_the_fields_page_is_what_the_code_accepts():
    """docs/fields.md (what `scripts/train.py --help` prints) is generated: it may not drift."""
    page = (ROOT / "docs" / "fields.md").read_text()
    assert page == fields_page(), (
        'regenerate it: python -c \'from modeling_hmmroformer.experiments.fields import fields_page; open("docs/fields.md", "w").write(fields_page())\''
    )
    for section in section_fields():
        assert f"\n{section}: " in page
    for name in (
        "--training.learning_rate (float = 5e-05)",
        "--model.num_hidden_layers (int = 4)",
        "--corpus.num_tasks (int = 32)",
    ):
        assert name in page


def test_a_record_fingerprint_ignores_the_grid_but_not_the_settings():
    """A study run a few depths or seeds at a time shares its records with the whole grid."""
    run = load_run_config(ROOT / "configs" / "tiny.yaml")
    whole = get_settings("quick")
    part = get_settings("quick", depths=(3,), seeds=(1,))
    assert fingerprint(whole, run, grid=False) == fingerprint(part, run, grid=False)
    assert fingerprint(whole, run) != fingerprint(part, run)  # a pipeline folder is still one grid
    other = get_settings("quick", eval_rows=16)
    assert fingerprint(whole, run, grid=False) != fingerprint(other, run, grid=False)


def test_a_depth_is_written_once_where_it_lives_the_model_section():
    run = load_run_config(ROOT / "configs" / "tiny.yaml")
    deeper = run.with_depth(run.depth + 3)
    assert deeper.depth == run.depth + 3 == deeper.model["num_hidden_layers"]
    assert {k: v for k, v in deeper.model.items() if k != "num_hidden_layers"} == {
        k: v for k, v in run.model.items() if k != "num_hidden_layers"
    }
    assert deeper.to_dict() | {"model": run.model} == run.to_dict()  # nothing else changes
    with pytest.raises(ValueError, match="model.num_hidden_layers='4' must be an integer"):
        run.with_depth("4")


def test_a_files_values_are_yaml_and_checked_against_the_fields_types(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text((ROOT / "configs" / "tiny.yaml").read_text().replace("loss_mask: all", "loss_mask: 3"))
    assert read_yaml(config.read_text())["run"]["loss_mask"] == 3
    with pytest.raises(ValueError, match=re.escape("run.loss_mask=3 must be a string")):
        load_run_config(config)


def test_the_model_and_training_sections_read_as_their_typed_objects():
    run = load_run_config(ROOT / "configs" / "tiny.yaml", ["--model.attn_implementation", "eager"])
    config = run.model_config()
    assert type(config).__name__ == "HMMRoFormerConfig"
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 2)
    corpus = hmm_datasets.get_preset("tiny")
    assert config.vocab_size == corpus.model_vocab_size  # sized to read the corpus, not the class default
    assert run.attn_implementation == "eager"
    unset = load_run_config(ROOT / "configs" / "tiny.yaml", ["--model.attn_implementation", "null"])
    assert "attn_implementation" not in unset.model and unset.attn_implementation == "sdpa"  # the default
    arguments = run.training_arguments()
    assert (arguments.max_steps, arguments.learning_rate, arguments.seed) == (40, 3.0e-3, 0)
    assert arguments.remove_unused_columns is False  # the collator reads segment_ids
    assert arguments.output_dir == run.training["output_dir"]


def test_a_reproduction_preset_is_one_file_whose_analysis_section_sizes_its_analyses(tmp_path, monkeypatch):
    import modeling_hmmroformer.experiments.settings as settings_module

    tiny = PIPELINES["tiny"]
    assert (tiny.eval_rows, tiny.memories, tiny.probe["distances"]) == (64, (1, 2, 4, 8), [1, 2, 3])
    assert PIPELINES["small"].eval_rows == Settings("x", "x.yaml").eval_rows  # no size given: the default
    run = load_run_config(ROOT / "configs" / "tiny.yaml")  # a run reads the run's sections only
    assert "analysis" not in run.to_yaml() and "analysis" not in run.to_dict()
    text = (ROOT / "configs" / "tiny.yaml").read_text().replace("  memory_rows: 32", "  memory_row: 32")
    (tmp_path / "tiny.yaml").write_text(text)
    monkeypatch.setattr(settings_module, "CONFIGS_DIR", tmp_path)
    with pytest.raises(
        ValueError, match=r"\['memory_row'\] in section 'analysis' \(did you mean analysis.memory_rows\?\)"
    ):
        settings_module.preset_settings("tiny")
    (tmp_path / "tiny.yaml").write_text(text.replace("  memory_row: 32", "  seeds: [0, 1]"))
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['seeds'\]"):  # a grid: a study's
        settings_module.preset_settings("tiny")
