"""PNG figures of a probing run: Figures 2, 3(a), 3(b) and 7 of the paper, and the rotary knock-out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hmm_datasets import SampleLayout

from .belief import BELIEF_GROUPS
from .figures import pyplot, save_figure
from .layerwise import BEFORE_NORM_METRIC, CEILINGS
from .names import FIGURE7_PATTERN, PROBE_FIGURES, PROBES_JSON
from .records import RecordSet
from .results import ProbeResults


def _band(ax, c: dict, label: str, color, line: str = "-") -> None:
    ax.plot(c["layer"], c["value"], line, color=color, marker="o", label=label)
    ax.fill_between(c["layer"], c["ci_low"], c["ci_high"], color=color, alpha=0.2)


def plot_figure2(results: ProbeResults, path: Path) -> Path:
    """Relative logit change per layer (mean over heads, 95% CI) with its position-only and
    content parts where the results have them (left; top axis: relative depth l/L, shaded:
    the upper layers of the comparison), and the total per (layer, head) (right)."""
    plt = pyplot()
    records = RecordSet(r for r in results.record_set() if r.target == "shuffle")
    layers = sorted({r.layer for r in records})
    heads = sorted({r.head for r in records if r.head is not None})
    grid = np.array(
        [
            [records.find("shuffle", "relative_logit_change", layer, head).value for head in heads]
            for layer in layers
        ]
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    _band(left, records.curve("shuffle", "relative_logit_change"), "total (mean over heads)", "C0")
    for color, metric, label in (
        ("C1", "position_only_change", "position only (keys re-rotated)"),
        ("C2", "content_change", "content (shuffled context)"),
    ):
        part = records.curve("shuffle", metric)
        if part["layer"].size:
            _band(left, part, label, color, "--")
    upper = results.patterns.get("figure2", {}).get("upper_layers", [])
    for layer in upper:
        left.axvspan(layer - 0.5, layer + 0.5, color="grey", alpha=0.08, lw=0)
    num_layers = results.depth
    depth = left.secondary_xaxis("top", functions=(lambda x: x / num_layers, lambda d: d * num_layers))
    depth.set_xticks(
        [layer / num_layers for layer in layers], [f"{layer / num_layers:.2g}" for layer in layers]
    )
    depth.set_xlabel("relative depth l / L")
    left.set_xticks(layers)
    left.set_xlabel("layer" + (" (shaded: upper layers compared)" if upper else ""))
    left.set_ylabel("relative change of attention logits")
    left.set_title("shuffle test: test queries -> demonstration keys")
    left.legend(fontsize=7)
    image = right.imshow(grid.T, aspect="auto", cmap="viridis", origin="lower")
    right.set_xticks(range(len(layers)), [str(layer) for layer in layers])
    right.set_xlabel("layer")
    right.set_yticks(range(len(heads)), [str(head) for head in heads])
    right.set_ylabel("head")
    right.set_title("total, per head")
    fig.colorbar(image, ax=right)
    return save_figure(fig, path)


def plot_figure3a(results: ProbeResults, path: Path) -> Path:
    """Hidden state (within task) and task identity by layer: accuracy with the untrained
    model's, the token-only baseline and the ceiling (left); the fraction of the headroom
    reached, by position group (right)."""
    plt = pyplot()
    records = results.record_set()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    names = {"hidden_state": "hidden state (within task)", "task": "task identity"}
    for color, target in zip(("C0", "C1"), ("hidden_state", "task")):
        _band(left, records.curve(target), names[target], color)
        untrained = records.curve(target, network="twin")
        if untrained["layer"].size:
            left.plot(
                untrained["layer"], untrained["value"], ":", color=color, label=f"{names[target]}: untrained"
            )
        left.axhline(
            records.find(target, CEILINGS[target], network="ceiling").value,
            color=color,
            ls="--",
            lw=1,
            label=f"{names[target]}: {'oracle' if target == 'hidden_state' else 'Bayes-optimal'}",
        )
        baseline = records.find(target, "token_baseline", network="floor")
        left.axhline(
            baseline.value, color=color, ls="-.", lw=0.8, alpha=0.6, label=f"{names[target]}: token only"
        )
    _label_probe_axes(left, results.layers, "Figure 3(a): linear probes for hidden state and task", 7)
    for color, group in zip(("C2", "C3", "C4", "C5"), BELIEF_GROUPS):
        for target, line in (("hidden_state", "-"), ("task", "--")):
            c = records.curve(target, "headroom_fraction", positions=group)
            if c["layer"].size:
                right.plot(
                    c["layer"],
                    c["value"],
                    line,
                    color=color,
                    marker="o",
                    ms=3,
                    label=f"{names[target]}, {group}",
                )
    right.axhline(0, color="grey", lw=0.6)
    right.axhline(1, color="grey", lw=0.6)
    right.set_ylim(-0.2, 1.1)
    _label_probe_axes(right, results.layers, "fraction of headroom above token only, by position", 6)
    right.set_ylabel("(accuracy − token only) / (ceiling − token only)")
    return save_figure(fig, path)


def plot_figure3b(results: ProbeResults, path: Path) -> Path:
    """Previous-token probes at each distance by layer (95% CI)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    records = results.record_set()
    before_norm = False
    for index, distance in enumerate(results.settings["distances"]):
        target = f"previous_token_{distance}"
        _band(ax, records.curve(target), f"token {distance} back", f"C{index}")
        point = records.curve(target, BEFORE_NORM_METRIC)
        if len(point["layer"]):
            ax.plot(point["layer"], point["value"], "x", color=f"C{index}", ms=8, mew=2)
            before_norm = True
    if before_norm:
        ax.plot([], [], "x", color="grey", label="last layer before the final norm")
    _label_probe_axes(ax, results.layers, "Figure 3(b): linear probes for previous tokens", 8)
    return save_figure(fig, path)


def _label_probe_axes(ax, layers: list[int], title: str, legend_size: int) -> None:
    ax.set_xticks(layers)
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("probe accuracy")
    ax.set_title(title)
    ax.legend(fontsize=legend_size)


def plot_figure7(weights: np.ndarray, layout: SampleLayout, row: int, path: Path) -> Path:
    """Attention weights `[layers, heads, L, L]` of one row, one panel per (layer, head),
    with lines at the segment boundaries (after each delimiter)."""
    plt = pyplot()
    num_layers, num_heads = weights.shape[:2]
    size = 2.2 if num_layers * num_heads <= 64 else 1.2
    height = size * num_layers + 0.8  # inches: the panels and 0.8 for the titles
    fig, axes = plt.subplots(num_layers, num_heads, figsize=(size * num_heads, height), squeeze=False)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.2 / height, top=1 - 0.6 / height)
    boundaries = np.arange(1, layout.num_demos + 1) * (layout.demo_length + 1) - 0.5
    edge = weights.shape[-1] - 0.5
    for layer in range(num_layers):
        for head in range(num_heads):
            ax = axes[layer, head]
            ax.imshow(weights[layer, head] ** 0.5, cmap="magma", vmin=0, vmax=1, interpolation="nearest")
            ax.hlines(boundaries, -0.5, edge, color="c", lw=0.3)
            ax.vlines(boundaries, -0.5, edge, color="c", lw=0.3)
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0:
                ax.set_ylabel(f"layer {layer + 1}", fontsize=7)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=7)
    fig.suptitle(
        f"Figure 7: attention weights (square root) of test row {row}; lines: segment boundaries",
        y=1 - 0.1 / height,
        va="top",
    )
    return save_figure(fig, path, dpi=100, tight=False)  # many panels: tight_layout would take seconds


def write_probe_results(result, out: str | Path) -> dict[str, Path]:
    """`probe_results.json` and the figures in `out`; returns their paths by name."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = result.results
    paths = {"json": out / PROBES_JSON}
    paths["json"].write_text(json.dumps(results.to_dict(), indent=1) + "\n")
    if "figure2" in results.patterns:  # no shuffle test on a model without rotary positions
        paths["figure2"] = plot_figure2(results, out / PROBE_FIGURES["figure2"])
    paths["figure3a"] = plot_figure3a(results, out / PROBE_FIGURES["figure3a"])
    paths["figure3b"] = plot_figure3b(results, out / PROBE_FIGURES["figure3b"])
    for index, row in enumerate(results.settings["attention_rows"]):
        path = out / FIGURE7_PATTERN.format(row=row)
        paths[f"figure7_row{row}"] = plot_figure7(result.attention[:, index], result.layout, row, path)
    return paths


def plot_rotary_knockout(result: dict, path: str | Path, untrained: dict | None = None) -> Path:
    """Delta NLL (left) and delta KL(Bayes || model) (right) per layer against relative depth
    l / L, with their bootstrap intervals; beside them, dashed, an untrained twin's `untrained`
    result (`rotary_knockout` of the same architecture freshly initialised) when given."""
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4.2))
    runs = [("trained", result, "C0", "-")]
    if untrained is not None:
        runs.append(("untrained twin", untrained, "0.5", "--"))
    for ax, metric, title in (
        (axes[0], "nll", "NLL of the next token"),
        (axes[1], "kl", "KL(Bayes || model)"),
    ):
        for label, run, color, line in runs:
            delta, depth = run[f"delta_{metric}"], run["relative_depth"]
            intact = run["intact"][metric]["value"]
            ax.plot(
                depth, delta["value"], line, color=color, marker="o", label=f"{label} (intact {intact:.3f})"
            )
            ax.fill_between(depth, delta["ci_low"], delta["ci_high"], color=color, alpha=0.2)
        ax.axhline(0.0, color="k", lw=0.6)
        ax.set_xlabel("relative depth l / L of the layer without rotary")
        ax.set_ylabel("change, nats/token")
        ax.set_title(f"rotary off in one layer: change of {title}")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


PATCHING_COLORS = {"task": "C0", "state": "C1"}


def plot_patching(result: dict, path: Path) -> Path:
    """Each site's share of the task donor's and the state donor's effect (`PatchingResult.to_dict`'s
    form): the model (solid), its untrained twin (dashed, where run) and the random donor of the
    task donor's norm (dotted grey); 0 at no move, 1 at the whole donor's move."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    sites = result["model"]["site_names"]
    readings = [("model", "-", result["model"]), ("untrained twin", "--", result["control"])]
    for name, line, reading in readings:
        if reading is None:
            continue
        for kind, color in PATCHING_COLORS.items():
            donor = reading["donors"][kind]
            if donor["shares"]:
                label = f"{name}: {kind} donor ({donor['pairs']} pairs, {donor['effect_nats']:.3f} nats)"
                ax.plot(
                    range(len(sites)), _floats(donor["shares"]), line, color=color, marker="o", label=label
                )
        random = reading["donors"]["task"]["random_shares"]
        if random:
            ax.plot(range(len(sites)), _floats(random), ":", color="0.5", label=f"{name}: random donor")
    ax.axhline(0, color="grey", lw=0.6)
    ax.axhline(1, color="grey", lw=0.6)
    ax.set_xticks(range(len(sites)), sites, rotation=30, fontsize=8)
    ax.set_ylabel("share of the donor's move towards\nits exact Bayes predictive")
    ax.set_title("activation patching: where the task and the state are carried", fontsize=9)
    ax.legend(fontsize=6)
    return save_figure(fig, path)


def _floats(values: list) -> list[float]:
    """JSON's numbers to plot, None (no value) as NaN (no point)."""
    return [np.nan if value is None else value for value in values]


def write_patching_results(result, folder: Path) -> dict[str, Path]:
    """`patching.json` and `patching.png` of a `PatchingResult` into `folder`."""
    from hmm_datasets.files import write_json

    from .names import PATCHING_FIGURE, PATCHING_JSON

    folder.mkdir(parents=True, exist_ok=True)
    data = result.to_dict()
    json_path = write_json(folder / PATCHING_JSON, data)
    return {"json": json_path, "figure": plot_patching(data, folder / PATCHING_FIGURE)}
