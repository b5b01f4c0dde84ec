"""The results of `run_probing` (probe_results.json) as plain data: the per-layer tables, the
references, where each target first reaches its headroom, the shuffle test and the patterns.
`model_cards.render` renders it: in the model card and REPORT.md, and as text
(`format_summary`, what `hmm-probe` prints).
"""

from __future__ import annotations

from model_cards.render import format_probe_summary

from .layerwise import probe_targets, reference_cells, table_cells
from .records import RecordSet
from .results import ProbeResults
from .shuffle import PART_LABELS, PART_METRICS


def format_summary(results: ProbeResults) -> str:
    """`run_probing`'s results as plain text: the per-layer tables, the first layers reaching the
    headroom, the shuffle test and the paper's patterns (`model_cards.render.format_probe_summary`)."""
    return format_probe_summary(summarize_probe_results(results))


def summarize_probe_results(results: ProbeResults) -> dict:
    """Per-layer probe accuracies, chance and ceilings, and the shuffle test of `probe_results.json`,
    as the cards show them (`model_cards.render`)."""
    records = results.record_set()
    distances = results.settings["distances"]
    targets = probe_targets(distances)
    columns = ["hidden state (within task)", "task", *(f"token {d} back" for d in distances)]
    references = reference_cells(records, targets)
    return {
        "num_probe_rows": results.num_probe_rows["test"],
        "num_probe_tasks": len(results.probe_tasks),
        "num_hidden_layers": results.depth,
        "columns": columns,
        "layers": [
            {"layer": layer, "cells": table_cells(records, targets, layer)} for layer in results.layers
        ],
        **references,
        "headroom": headroom_table(results),
        "shuffle": layer_rows(records, PART_METRICS["total"]),
        "shuffle_parts": shuffle_parts(records),
        "skipped": results.skipped or {},  # analysis -> why it did not run
        "task_bayes_accuracy": records.find("task", "bayes_optimal_accuracy", network="ceiling").value,
        "hidden_state_oracle_accuracy": records.find(
            "hidden_state", "oracle_accuracy", network="ceiling"
        ).value,
        "patterns": results.patterns,
    }


def layer_rows(records: RecordSet, metric: str) -> list[dict]:
    """The shuffle test's `metric` per layer (mean over heads): layer, value and interval."""
    return [
        {"layer": r.layer, "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high}
        for r in records.by_layer("shuffle", metric)
    ]


def shuffle_parts(records: RecordSet) -> list[dict]:
    """The shuffle test's parts that were measured (`PART_LABELS`), each `{"label", "rows"}` with
    a row per layer (layer, value, interval)."""
    parts = []
    for metric, label in PART_LABELS.items():
        rows = layer_rows(records, metric)
        if rows:  # absent from results written before the decomposition
            parts.append({"label": label, "rows": rows})
    return parts


def headroom_table(results: ProbeResults) -> list[dict]:
    """Per position group: the first layer at which the hidden state and the task reach half and
    90% of their headroom, with bootstrap intervals (`figure3a.by_positions`); a layer is None
    where the headroom is never reached within the model."""
    rows, never = [], max(results.layers) + 1

    def layer(value: float) -> float | None:
        return None if value >= never else value

    for group, entry in results.patterns["figure3a"]["by_positions"].items():
        cells = []
        for target, name in (("hidden_state", "hidden state"), ("task", "task")):
            if target not in entry:
                continue
            reach = entry[target]
            for fraction in (0.5, 0.9):
                i = reach["fractions"].index(fraction)
                cells.append(
                    {
                        "target": name,
                        "fraction": fraction,
                        **{key: layer(reach[key][i]) for key in ("layer", "ci_low", "ci_high")},
                    }
                )
        rows.append({"positions": group, "cells": cells})
    return rows
