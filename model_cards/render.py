"""Render the model card and the reproduction report from a summary of plain data.

The summary (built by `modeling_hmmroformer.experiments.analyses.summary.summarize_model_folder` from what a model
folder holds) is a JSON-ready dict: `model`, `corpus`, `training`, `run_config`,
`in_context` (Figure 1's headline numbers), `probes` (the per-layer tables), `claims`,
`figures` (where the folder keeps each figure) and `figure7`. Both the model card and `REPORT.md` render it (`results.md` is the section they
share). Nothing here reads a checkpoint or imports the other packages of this project.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2
import yaml
from huggingface_hub import DatasetCard, DatasetCardData, EvalResult, ModelCard, ModelCardData

from . import (
    CITATION,
    DATASET_CARD_MARKER,
    DATASET_CARD_TEMPLATE,
    MODEL_CARD_MARKER,
    MODEL_CARD_TEMPLATE,
    REPORT_TEMPLATE,
    RESULTS_TEMPLATE,
)


# ---- markdown ------------------------------------------------------------------------------
def render_results_section(summary: dict) -> str:
    """The results section (`results.md`) of a summary; empty when nothing was evaluated."""
    if summary["in_context"] is None:
        return ""
    environment = jinja2.Environment()
    environment.filters.update(CELL_FILTERS)
    template = environment.from_string(RESULTS_TEMPLATE.read_text())
    figures = {**summary["figures"], "figure7": summary["figure7"]}  # paths in the model folder
    return template.render(
        in_context=summary["in_context"],
        probes=summary["probes"],
        memory=summary.get("memory"),
        claims=summary["claims"],
        claim_header=[name for name, _ in CLAIM_COLUMNS],
        claim_rows=claim_rows(summary["claims"]),
        beliefs=summary.get("beliefs", []),
        figures=figures,
    )


def model_index_results(summary: dict, dataset_type: str, dataset_name: str) -> list[EvalResult]:
    """The measured in-context results as `model-index` entries (test split, all demonstrations)."""
    in_context = summary["in_context"]
    if in_context is None:
        return []
    demos = in_context["by_num_demos"][-1]["demos"]
    values = [
        ("accuracy", f"Top-1 accuracy, {demos} demonstrations", in_context["accuracy"]["model"]),
        ("accuracy", "Top-1 accuracy, no demonstrations", in_context["accuracy_no_demos"]["model"]),
        (
            "agreement",
            "Argmax agreement with the Bayes-optimal predictor",
            in_context["model_vs_bayes"]["agreement"],
        ),
        (
            "kl_divergence",
            "KL(Bayes-optimal || model), nats/token",
            in_context["model_vs_bayes"]["kl_bayes_model"],
        ),
    ]
    return [
        EvalResult(
            task_type="text-generation",
            task_name="In-context next-token prediction",
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_split="test",
            metric_type=metric_type,
            metric_name=name,
            metric_value=round(float(value), 4),
        )
        for metric_type, name, value in values
    ]


def placement_results(placement: dict | None, dataset_type: str) -> list[EvalResult]:
    """A kept network's place on the in-context ladder (`render_kept_network_card`'s
    `placement`) as `model-index` entries: per split, its KL from the split's reference, the best
    rung's, its top-1 accuracy and the learner it is nearest; across the splits, the gate (infers,
    retrieves or below the ladder). None where it was not placed: nothing is measured here."""
    if placement is None:
        return []
    corpus = f"hmm_mixture {placement['corpus']}"
    results = []
    for split in placement["splits"]:
        values = [
            ("kl_divergence", f"KL({split['reference']} || network), nats/token", round(split["kl"], 4)),
            (
                "kl_divergence",
                f"KL({split['reference']} || best in-context rung, {split['best_rung']}), nats/token",
                round(split["best_rung_kl"], 4),
            ),
            ("accuracy", "Top-1 accuracy", round(split["accuracy"], 4)),
            ("learner", "Nearest learner (a rung of the ladder, retrieval or inference)", split["label"]),
        ]
        results += [
            EvalResult(
                task_type="text-generation",
                task_name="In-context next-token prediction",
                dataset_type=dataset_type,
                dataset_name=f"{corpus}, {split['title']}",
                dataset_split=split["split"],
                metric_type=metric_type,
                metric_name=name,
                metric_value=value,
            )
            for metric_type, name, value in values
        ]
    titles = " and ".join(split["title"] for split in placement["splits"])
    results.append(
        EvalResult(
            task_type="text-generation",
            task_name="In-context next-token prediction",
            dataset_type=dataset_type,
            dataset_name=f"{corpus}, {titles}",
            metric_type="learner",
            metric_name="Learner on the ladder (infers, retrieves or below the ladder)",
            metric_value=placement["learner"],
        )
    )
    return results


def model_title(summary: dict) -> str:
    """The model's name in its card: architecture, sizes, corpus."""
    model = summary["model"]
    architecture = model.get("model_type") or "hmm_roformer"
    architecture = "HMMRoFormer" if architecture == "hmm_roformer" else architecture
    corpus_name = (summary["corpus"] or {}).get("name", "unknown corpus")
    return f"{architecture} {model['num_hidden_layers']} layers, hidden {model['hidden_size']}, on hmm_mixture {corpus_name}"


def render_model_card(
    summary: dict,
    *,
    location: str,
    repo_id: str | None = None,
    dataset_repo_id: str | None = None,
) -> ModelCard:
    """The model card of a summarized model folder.

    Its snippets load `repo_id` when given, else `location` (the folder as users reach it);
    `dataset_repo_id` names the corpus on the Hub in the metadata and the commands.
    """
    corpus_name = (summary["corpus"] or {}).get("name", "unknown corpus")
    results = model_index_results(summary, dataset_repo_id or "hmm_mixture", f"hmm_mixture {corpus_name}")
    return _model_card(summary, model_title(summary), results, location, repo_id, dataset_repo_id)


def render_kept_network_card(
    summary: dict, *, kept: dict, repo_id: str, dataset_repo_id: str | None = None
) -> ModelCard:
    """The card of a network kept over training, for its revision of the repo `repo_id`.

    `summary`: its folder summarized, as a model folder's is; `kept`: `step`, `revision` (its
    branch), `tokens` (training token positions at that step, None where unknown), `placement`
    (its place on the in-context ladder from the run's development record: `corpus`, `learner`
    and `splits`, each with `split`, `title`, `reference`, `kl`, `best_rung`, `best_rung_kl`,
    `past_ladder`, `label`, `accuracy`; None where no record placed it) and `unplaced` (why not).
    Its snippets load that revision; its `model-index` is `placement_results`.
    """
    title = f"{model_title(summary)}, training step {kept['step']}"
    results = placement_results(kept["placement"], dataset_repo_id or "hmm_mixture")
    return _model_card(summary, title, results, repo_id, repo_id, dataset_repo_id, kept=kept)


def _model_card(
    summary: dict,
    title: str,
    results: list[EvalResult],
    location: str,
    repo_id: str | None,
    dataset_repo_id: str | None,
    kept: dict | None = None,
) -> ModelCard:
    """`model_card.md` rendered: metadata with `results` as its `model-index`, snippets that load
    `repo_id` (else `location`), at the kept network's revision where `kept` is given."""
    corpus = summary["corpus"] or {}
    card_data = ModelCardData(
        model_name=title,
        library_name="transformers",
        license="apache-2.0",
        pipeline_tag="text-generation",
        tags=["hmm-roformer", "roformer", "hidden-markov-model", "in-context-learning", "arxiv:2506.01919"],
        datasets=[dataset_repo_id] if dataset_repo_id else None,
        eval_results=results or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(MODEL_CARD_TEMPLATE),
        marker=MODEL_CARD_MARKER,
        title=title,
        location=repo_id or location,
        repo_id=repo_id,
        summary=summary,
        results_section=render_results_section(summary),
        corpus=corpus,
        corpus_json=json.dumps(corpus, indent=2, sort_keys=True) if corpus else None,
        data_argument=dataset_repo_id or (corpus.get("name", "unknown corpus") if corpus else "<corpus>"),
        dataset_repo_id=dataset_repo_id,
        run_config_yaml=yaml.safe_dump(summary["run_config"], sort_keys=False)
        if summary["run_config"]
        else None,
        training_line=training_line(summary),
        on_hub=repo_id is not None,
        citation=CITATION,
        kept=kept,
        revision_argument=f', revision="{kept["revision"]}"' if kept else "",
    )


def training_line(summary: dict) -> str | None:
    """One sentence on how long and on what the model was trained."""
    training, run = summary["training"], summary["run_config"]
    if not training or not run:
        return None
    arguments = run["training"]
    precision = "bf16" if arguments.get("bf16") else "fp16" if arguments.get("fp16") else "fp32"
    return (
        f"{arguments.get('max_steps')} steps of {arguments.get('per_device_train_batch_size')} rows per device "
        f"({training.get('train_tokens', 0):,} token positions) in {training.get('train_runtime', 0):.0f} s, "
        f"{precision}, learning rate {arguments.get('learning_rate')} ({arguments.get('lr_scheduler_type')}); "
        f"mean training loss {training.get('train_loss', float('nan')):.3f} nats/token."
    )


def write_model_card(folder: str | os.PathLike, summary: dict, location: str | None = None) -> Path:
    """Render the card of a summarized model folder into its README.md (`location`: what its
    snippets load, default the folder)."""
    path = Path(folder) / "README.md"
    render_model_card(summary, location=location or str(folder)).save(path)
    return path


def render_report(
    summary: dict, *, preset: str, stage_seconds: dict, machine: dict, files: dict, files_root: str
) -> str:
    """`REPORT.md` of a reproduction: the results section, timings and what lies where.

    `files` maps paths inside the reproduction folder to what they hold; `files_root` is that
    folder as the user typed it (for the commands shown).
    """
    template = jinja2.Template(REPORT_TEMPLATE.read_text())
    return template.render(
        preset=preset,
        summary=summary,
        results_section=render_results_section(summary),
        training_line=training_line(summary),
        files_root=files_root,
        stage_seconds=stage_seconds,
        total_seconds=sum(stage_seconds.values()),
        machine=machine,
        files=files,
        citation=CITATION,
    )


def across_seeds_text(stat: dict | None, spec: str = ".3f") -> str:
    """ "mean [low, high]" of an across-seed statistic ("mean" alone from one seed)."""
    if stat is None or stat.get("mean") is None:
        return "n/a"
    text = format(stat["mean"], spec)
    if stat.get("ci_low") is not None:
        text += f" [{format(stat['ci_low'], spec)}, {format(stat['ci_high'], spec)}]"
    return text


def floor_effect_text(cell: dict, floor: str) -> str:
    """A claim's effect over one floor (own minus floor) across seeds: "vacuous" for a floor left
    out, "refused" for one that holds the probed label, "—" where the floor does not apply."""
    if floor in cell["vacuous_floors"]:
        return "vacuous"
    if floor in cell.get("refused_floors", ()):
        return "refused (holds the label)"
    effect = cell["floors"].get(floor)
    return "—" if effect is None else across_seeds_text(effect, "+.3f")


CLAIM_COLUMNS = (  # the claims table of one model: header -> cell text of a decided claim
    ("figure", lambda c: c["figure"]),
    ("claim", lambda c: c["claim"]),
    ("statistic (predicted sign)", lambda c: f"{c['statistic']} ({'+' if c['direction'] > 0 else '−'})"),
    ("own", lambda c: across_seeds_text(c["own"], "+.3f")),
    ("over twin", lambda c: floor_effect_text(c, "twin")),
    ("over token-only", lambda c: floor_effect_text(c, "tokens")),
    ("spread across splits", lambda c: split_spread_text(c["split_spread"])),
    ("verdict", lambda c: c["label"]),
)


def split_spread_text(spread: dict) -> str:
    """The mean spread of a claim's own statistic across probe splits; "—" for a claim that reads
    no probe (Figures 1 and 2)."""
    return f"{spread['mean']:.3f}" if spread["n"] else "—"


def claim_rows(claims: list[dict]) -> list[list[str]]:
    """The cells of the claims table (`CLAIM_COLUMNS`) of decided claims."""
    return [[cell(claim) for _, cell in CLAIM_COLUMNS] for claim in claims]


def format_probe_summary(probes: dict) -> str:
    """A probe summary (`probing.summary.summarize_probe_results`) as plain text: the per-layer
    tables, the first layers reaching the headroom, the shuffle test and the paper's patterns."""
    columns = probes["columns"]
    widths = [max(15, len(column)) for column in columns]
    lines = [
        f"Probe accuracy on probe-test positions ({probes['num_probe_rows']} rows); in brackets the "
        "fraction of the headroom above the token-only baseline reached (1: the ceiling)",
        f"{'layer':>6}  " + "  ".join(f"{column:>{width}}" for column, width in zip(columns, widths)),
    ]
    labelled = [(row["layer"], [probe_cell_text(cell) for cell in row["cells"]]) for row in probes["layers"]]
    labelled += [
        (label, [cell_text(value) for value in probes[key]])
        for label, key in (("token", "token_baseline"), ("chance", "chance"), ("best", "ceiling"))
    ]
    lines += [
        f"{label:>6}  " + "  ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths))
        for label, cells in labelled
    ]
    lines.append(
        "(token: majority label of the current token, within task for the hidden state; best: oracle filter "
        "for the hidden state, Bayes-optimal task posterior for the task)"
    )
    lines += ["", "First layer reaching half / 90% of the headroom, by position (95% CI):"]
    lines += [
        f"  {row['positions']:>6}: " + "; ".join(headroom_cell_text(cell) for cell in row["cells"])
        for row in probes["headroom"]
    ]
    return "\n".join([*lines, *_shuffle_lines(probes), *_pattern_lines(probes["patterns"])])


def _shuffle_lines(probes: dict) -> list[str]:
    """The shuffle test's per-layer changes and parts (or why it did not run)."""
    if not probes["shuffle"]:
        why = probes["skipped"].get("shuffle_test", "no shuffle records")
        return ["", f"Shuffle test: not run ({why})."]
    lines = [
        "",
        "Shuffle test: relative change of test-query -> demonstration attention logits, per layer",
        "  "
        + "  ".join(
            f"L{r['layer']}: {r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            for r in probes["shuffle"]
        ),
    ]
    for part in probes["shuffle_parts"]:
        lines.append(
            f"  {part['label']}: " + "  ".join(f"L{r['layer']}: {r['value']:.3f}" for r in part["rows"])
        )
    return lines


def _pattern_lines(patterns: dict) -> list[str]:
    """Figures 2, 3(a) and 3(b)'s patterns as numbers, with their intervals."""
    figure2, figure3a, figure3b = patterns.get("figure2"), patterns["figure3a"], patterns["figure3b"]
    if figure2 is None:
        figure2_line = "  Fig 2  not measured: the shuffle test did not run"
    else:
        figure2_line = (
            f"  Fig 2  upper layers {figure2['upper_layers']} minus lower {figure2['lower_layers']}, relative "
            f"change: {figure2['upper_minus_lower']:+.3f} {_pair(figure2['upper_minus_lower_ci'])}"
        )
    peaks = ", ".join(
        f"k={d}: layer {v['peak_layer']} ({v['peak_accuracy']:.3f})"
        for d, v in figure3b["by_distance"].items()
    )
    lines = [
        "",
        "The paper's patterns as numbers (95% bootstrap intervals over rows; the claims are decided by the "
        "study's rule, printed below by hmm-probe):",
        figure2_line,
        f"  Fig 3a on {figure3a['positions']} positions: task's first-reach layer minus the hidden state's, mean over "
        f"f = 0.50..0.95, / L: {number_text(figure3a['mean_reach_difference'])} {_pair(figure3a['mean_reach_difference_ci'])}; "
        f"task headroom fraction {number_text(figure3a['task_first_layer_fraction'])} -> "
        f"{number_text(figure3a['task_last_layer_fraction'])}",
        f"  Fig 3b peak accuracy, nearest minus farthest: {figure3b['accuracy_drop']:+.3f} "
        f"{_pair(figure3b['accuracy_drop_ci'])}; peak layer shift {figure3b['peak_layer_shift']:+d} "
        f"{_pair(figure3b['peak_layer_shift_ci'], '+.1f')}",
        f"         peaks: {peaks}",
    ]
    before_norm = [
        f"k={d}: {v['last_layer_before_final_norm']['value']:.3f}"
        for d, v in figure3b["by_distance"].items()
        if v.get("last_layer_before_final_norm")
    ]
    if before_norm:
        lines.append(f"         last layer before the final norm: {', '.join(before_norm)}")
    return lines


def _pair(values, spec: str = "+.3f") -> str:
    return f"[{number_text(values[0], spec)}, {number_text(values[1], spec)}]"


def claim_line(claim: dict) -> str:
    """One decided claim in one line: its verdict, own statistic, figure and words."""
    own = across_seeds_text(claim["own"], "+.3f").split(" [")[0]
    return f"{claim['label']:<24} own {own:>7}  Fig {claim['figure']:<5} {claim['claim']}"


def format_claims(claims: list[dict]) -> str:
    """The claims table of one model (or one cell) as plain text, one claim per paragraph."""
    lines = []
    for cells in claim_rows(claims):
        lines.append(f"  Fig {cells[0]:<5} {cells[1]}: {cells[-1]}")
        lines.append(f"            {cells[2]}")
        lines.append(
            "            "
            + "; ".join(f"{name} {cell}" for (name, _), cell in zip(CLAIM_COLUMNS[3:-1], cells[3:-1]))
        )
    return "\n".join(lines)


def number_text(value: float | None, spec: str = ".3f") -> str:
    """`value` formatted by `spec`, "n/a" where there is none (a fit from fewer than two points);
    a value that rounds to zero has no minus sign (a KL of -3e-9 from float32 rounding is 0.000)."""
    if value is None:
        return "n/a"
    text = format(value, spec)
    if text.startswith("-") and float(text) == 0:
        text = ("+" if "+" in spec else "") + text[1:]
    return text


# ---- the cells of the results section: the summary holds numbers, these write them -----------
def cell_text(value: float | int | None) -> str:
    """A table cell: a measured value to 3 decimals, an exact reference (an int: Bayes-optimal's
    agreement 1, KL 0) as itself, nothing where there is no value."""
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.3f}"


def probe_cell_text(cell: dict) -> str:
    """A probe table cell (`probing.layerwise.table_cells`): the accuracy, and in brackets the
    fraction of the headroom reached."""
    text = f"{cell['accuracy']:.3f}"
    return text if cell["headroom_fraction"] is None else f"{text} [{cell['headroom_fraction']:.2f}]"


def headroom_cell_text(cell: dict) -> str:
    """Where a target first reaches a fraction of its headroom (`probing.summary.headroom_table`),
    with its interval; "never" for a layer past the model's."""

    def layer(value: float | None, prefix: str = "") -> str:
        return "never" if value is None else f"{prefix}{value:.0f}"

    return (
        f"{cell['target']} {cell['fraction']:.0%}: {layer(cell['layer'], 'layer ')} "
        f"[{layer(cell['ci_low'])}, {layer(cell['ci_high'])}]"
    )


def belief_cell_text(cell: dict) -> str:
    """A belief-probe cell: "model / twin" R² (the model's alone without a twin)."""
    if cell["twin"] is None:
        return f"{cell['model']:.3f}"
    return f"{cell['model']:.3f} / {cell['twin']:.3f}"


def ladder_text(ladder: dict, title: str) -> str:
    """A `predictor_ladder` as text under `title`: its rungs, lowest first, then where each
    model stands on it (the share of the gap to Bayes it closes)."""
    lines = [title]
    for rung in ladder["rungs"]:
        # a KL is >= 0: one that rounding put just below (the oracle where it equals Bayes) shows 0.000
        kl = "" if rung["kl_bayes"] is None else f"  KL {max(rung['kl_bayes'], 0.0):.3f}"
        lines.append(f"  {rung['accuracy']:.3f}  {rung['label']}{kl}")
    best = next(rung for rung in ladder["rungs"] if rung["name"] == ladder["best_in_context"])
    for name, share in ladder["gap_closed"].items():
        where = "below the in-context baseline" if ladder["below_in_context"][name] else "above it"
        closed = "n/a" if share is None else f"{share:+.2f}"
        lines.append(
            f"{name}: share of the gap from the best in-context predictor ({best['label']}) to Bayes "
            f"closed: {closed} ({where})"
        )
    return "\n".join(lines)


def figure1_text(result: dict) -> str:
    """Figure 1's curves as plain-text tables (`hmm-figure1` prints them), with the ladder and the
    model against Bayes."""
    names = list(result["by_num_demos"])
    lines = [
        f"Top-1 accuracy on the test sequence, {result['num_rows']} rows "
        f"(all: test tokens 1..{result['layout']['test_length'] - 1}; early: tokens 1..{result['early_tokens']})",
        "",
        f"{'demos':>5}  " + "  ".join(f"{name + ' early':>13}" for name in names),
    ]
    for index, m in enumerate(result["demo_counts"]):
        values = [result["by_num_demos"][name]["early_accuracy"][index] for name in names]
        lines.append(f"{m:>5}  " + "  ".join(f"{value:>13.3f}" for value in values))
    lines += ["", f"{'demos':>5}  " + "  ".join(f"{name + ' all':>13}" for name in names)]
    for index, m in enumerate(result["demo_counts"]):
        values = [result["by_num_demos"][name]["accuracy"][index] for name in names]
        lines.append(f"{m:>5}  " + "  ".join(f"{value:>13.3f}" for value in values))
    if "ladder" in result:
        title = "The ladder, all demonstrations (accuracy on test tokens 1..T-1; KL to Bayes in nats/token):"
        lines += ["", ladder_text(result["ladder"], title)]
    versus = result["model_vs_bayes"]
    if versus:
        lines += [
            "",
            f"with all demonstrations: model argmax = Bayes argmax on {versus['agreement']:.3f} of test positions, "
            f"KL(Bayes || model) {versus['kl_bayes_model']:.3f} nats/token, excess NLL {versus['excess_nll']:.3f}",
        ]
    return "\n".join(lines)


def memory_equivalent_text(equivalent: dict | None) -> str:
    """ "L (interpolated, 95% [low, high])"; "interpolated (in before..L)" from grid memories only
    (not bisected); "<= L" at the grid's first memory; "> longest searched"; "n/a" without one."""
    if equivalent is None:
        return "n/a"
    longest = equivalent["longest_searched"]
    if equivalent["memory"] is None:
        return f"> {longest}"
    if equivalent["memory"] == equivalent["memories"][0]:
        return f"<= {equivalent['memory']}"
    if not equivalent.get("bisected", False):  # grid memories only: L lies between two of them
        before = equivalent["memories"][equivalent["memories"].index(equivalent["memory"]) - 1]
        return f"{equivalent['interpolated']:.1f} (in {before}..{equivalent['memory']})"
    low, high = equivalent["interval"]
    interval = (
        "" if low is None else f", 95% [{low:.1f}, {f'> {longest}' if high is None else f'{high:.1f}'}]"
    )
    return f"{equivalent['memory']} ({equivalent['interpolated']:.1f}{interval})"


CELL_FILTERS = {
    "cell": cell_text,
    "num": number_text,
    "probe_cell": probe_cell_text,
    "headroom_cell": headroom_cell_text,
    "belief_cell": belief_cell_text,
    "memory_equivalent": memory_equivalent_text,
}


# ---- the dataset card -------------------------------------------------------------------------
def render_dataset_card(facts: dict, *, location: str, repo_id: str | None = None) -> DatasetCard:
    """The dataset card of a corpus: YAML `configs:` for `load_dataset(folder)`, then the numbers.

    `facts` is plain data (`hmm_datasets.export.dataset_card_facts`): the corpus config, its
    splits with their Parquet bytes, the HMM tensors, the Bayes-optimal table. `location` is what
    the usage snippet loads (the folder, or the Hub id once pushed); `repo_id` the Hub dataset
    repo, when there is one. The YAML `dataset_info` (split sizes, bytes) also tells apart, in
    datasets' cache, two corpora whose folders have the same name: for a folder with `configs:`
    datasets keys its cache by the folder's name, the file patterns and this `dataset_info`.
    """
    config, splits = facts["config"], facts["splits"]
    card_data = DatasetCardData(
        license="apache-2.0",
        pretty_name=f"Mixture of {config['num_tasks']} HMMs ({config['name']})",
        task_categories=["text-generation"],
        tags=["hidden-markov-model", "in-context-learning", "synthetic", "hmm-roformer", "arxiv:2506.01919"],
        size_categories=size_category(sum(split["rows"] for split in splits)),
        configs=[
            {
                "config_name": "default",
                "data_files": [
                    {"split": split["name"], "path": f"{facts['data_dir']}/{split['name']}-*.parquet"}
                    for split in splits
                ],
            }
        ],
        dataset_info={
            "config_name": "default",
            "download_size": sum(split["bytes"] for split in splits),
            "splits": [
                {"name": split["name"], "num_bytes": split["bytes"], "num_examples": split["rows"]}
                for split in splits
            ],
        },
    )
    return DatasetCard.from_template(
        card_data,
        template_path=str(DATASET_CARD_TEMPLATE),
        pretty_name=card_data.pretty_name,
        **facts,
        citation=CITATION,
        location=location,
        repo_id=repo_id,
        marker=DATASET_CARD_MARKER,
    )


def size_category(rows: int) -> str:
    """The Hub's size category of a dataset of `rows` rows."""
    for limit, label in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
    ):
        if rows < limit:
            return label
    return "1M<n<10M"
