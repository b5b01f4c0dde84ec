"""Figures of the reports across studies: the task-diversity study across K
(`diversity.summarize_diversity`) and the claims by architecture. Apart from `figures.model`, so that a
reproduction's or one study's figures do not load the code of the studies across them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probing.figures import pyplot, save_figure

from ..decisions.diversity import SPLITS, claim_against_k
from .study import legend

# ---- the task-diversity study across K (`diversity.summarize_diversity`) ------------------------
FLOOR_LINES = {"twin": ("-", "over the untrained twin"), "tokens": (":", "over the token-only baseline")}
YARDSTICK_COLORS = {"oracle": "C7", "mixture": "C0", "prior": "C1", "in_context": "C2"}  # drawn in this order
DEPTH_LINES = ("-", "--", "-.", ":")


def interval_bars(ax, x, stats: list[dict], **style) -> None:
    """Means with their 95% intervals across seeds as error bars (a bare point without one)."""
    means = np.array([np.nan if s["mean"] is None else s["mean"] for s in stats], dtype=float)
    low = np.array([s["ci_low"] if s.get("ci_low") is not None else m for s, m in zip(stats, means)])
    high = np.array([s["ci_high"] if s.get("ci_high") is not None else m for s, m in zip(stats, means)])
    ax.errorbar(x, means, yerr=[means - low, high - means], capsize=3, marker="o", ms=4, **style)


def other_draws(summary: dict, depth: int) -> list[dict]:
    """The cells of `depth` on a corpus draw other than 0 (plotted unfilled beside draw 0)."""
    return [c for c in summary["cells"] if c["depth"] == depth and c["corpus_seed"] != 0]


def k_axis(ax, ks: list[int]) -> None:
    ax.set_xlim(min(ks) / 1.5, max(ks) * 1.5)  # an axis with no point (every cell not testable) too
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("K, HMMs in the training mixture")


def plot_claim_against_k(summary: dict, key: str, path: Path) -> None:
    """One claim across K: every model's own statistic (left: each corpus draw's cells, draw 0
    filled, past the ladder or not) and the decided effects over the floors (right: models past
    the ladder, draws pooled), one line per depth, 95% intervals across seeds; the zero line is
    "no such pattern"."""
    plt = pyplot()
    fig, (own_ax, floor_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    claim = next(c for c in summary["claims"] if c["key"] == key)
    ks = sorted({c["num_tasks"] for c in summary["cells"]})
    for index, (depth, rows) in enumerate(claim_against_k(summary, key).items()):
        color = f"C{index}"
        first = sorted(
            (c for c in summary["cells"] if c["depth"] == depth and c["corpus_seed"] == 0),
            key=lambda c: c["num_tasks"],
        )
        interval_bars(
            own_ax,
            [c["num_tasks"] for c in first],
            [c["own"][key] for c in first],
            color=color,
            label=f"{depth} layers",
        )
        for cell in other_draws(summary, depth):
            label = f"{depth} layers, corpus draw {cell['corpus_seed']}"
            interval_bars(
                own_ax, [cell["num_tasks"]], [cell["own"][key]], color=color, mfc="none", label=label
            )
        x = [r["num_tasks"] for r in rows]
        for floor, (line, name) in FLOOR_LINES.items():
            effects = [
                r["floors"].get(floor) or {"mean": None, "ci_low": None, "ci_high": None} for r in rows
            ]
            if any(e["mean"] is not None for e in effects):
                interval_bars(floor_ax, x, effects, color=color, ls=line, label=f"{depth} layers, {name}")
    sign = "+" if claim["direction"] > 0 else "−"
    for ax, ylabel in (
        (own_ax, f"own statistic (predicted sign {sign})"),
        (floor_ax, "effect over the floor"),
    ):
        ax.axhline(0, color="grey", lw=0.6)
        k_axis(ax, ks)
        ax.set_ylabel(ylabel)
        legend(ax, 7)
    fig.suptitle(f"Fig {claim['figure']}: {claim['claim']}", fontsize=9)
    save_figure(fig, path)


def plot_yardsticks_against_k(summary: dict, path: Path) -> None:
    """KL(yardstick ‖ model) against K on seen and unseen tasks: one colour per yardstick, one
    line style per depth (corpus draw 0; other draws unfilled), 95% intervals across seeds."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    cells = sorted((c for c in summary["cells"] if c["corpus_seed"] == 0), key=lambda c: c["num_tasks"])
    depths = sorted({c["depth"] for c in cells})
    for ax, split in zip(axes, SPLITS):
        for depth, line in zip(depths, DEPTH_LINES):
            mine = [c for c in cells if c["depth"] == depth]
            for name, color in YARDSTICK_COLORS.items():
                stats = [c["yardsticks"][split]["kl"][name] for c in mine]
                label = f"{name.replace('_', ' ')}, {depth} layers"
                interval_bars(ax, [c["num_tasks"] for c in mine], stats, color=color, ls=line, label=label)
                for cell in other_draws(summary, depth):  # unfilled: another corpus draw
                    interval_bars(
                        ax,
                        [cell["num_tasks"]],
                        [cell["yardsticks"][split]["kl"][name]],
                        color=color,
                        mfc="none",
                    )
        k_axis(ax, sorted({c["num_tasks"] for c in cells}))
        ax.set_yscale("log")
        ax.set_title("seen tasks (test)" if split == "test" else "unseen tasks (test_unseen)")
    axes[0].set_ylabel("KL(yardstick ‖ model), nats/token")
    legend(axes[0], 6)
    save_figure(fig, path)


YARDSTICKS_FIGURE = "yardsticks_against_k.png"
CLAIM_FIGURE_PREFIX = "claim_"  # claim_<key>.png: one figure per claim


PHASE_DIAGRAM_FIGURE = "phase_diagram.png"
DEVELOPMENT_FIGURE_PREFIX = "development-K"  # development-K<k>.png: one figure per K


def is_diversity_figure(name: str) -> bool:
    """Whether a file name is one `plot_diversity` writes."""
    return name in (YARDSTICKS_FIGURE, PHASE_DIAGRAM_FIGURE) or (
        name.startswith((CLAIM_FIGURE_PREFIX, DEVELOPMENT_FIGURE_PREFIX)) and name.endswith(".png")
    )


def plot_diversity(summary: dict, folder: Path, developments: list[dict] = ()) -> dict[str, str]:
    """Every figure of the cross-K report into `folder`, with the phase diagram and each K's
    development where models kept networks over training (`developments`, development records);
    returns figure name -> file name."""
    files = {"yardsticks_against_k": YARDSTICKS_FIGURE}
    plot_yardsticks_against_k(summary, folder / files["yardsticks_against_k"])
    for claim in summary["claims"]:
        files[claim["key"]] = f"{CLAIM_FIGURE_PREFIX}{claim['key']}.png"
        plot_claim_against_k(summary, claim["key"], folder / files[claim["key"]])
    if developments:
        files["phase_diagram"] = PHASE_DIAGRAM_FIGURE
        plot_phase_diagram(developments, folder / PHASE_DIAGRAM_FIGURE)
    for k in sorted({d["num_tasks"] for d in developments}):
        files[f"development_K{k}"] = f"{DEVELOPMENT_FIGURE_PREFIX}{k}.png"
        cell = [d for d in developments if d["num_tasks"] == k]
        plot_cell_development(cell, folder / files[f"development_K{k}"])
    return files


ARCHITECTURES_FIGURE = "claims_by_architecture.png"


def plot_architectures(summary: dict, folder: Path) -> dict[str, str]:
    """The architecture comparison's figure into `folder`: every claim, one panel each, per
    architecture (and depth) the trained models' own statistic (filled) and the untrained twins'
    (unfilled), 95% intervals across seeds; the zero line is "no such pattern". Returns figure
    name -> file name."""
    plt = pyplot()
    claims = summary["claims"]
    columns = 3
    rows = -(-len(claims) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.6 * rows), squeeze=False)
    cells = summary["cells"]
    names = [f"{c['architecture']}\n{c['depth']} layers" for c in cells]
    for ax, (index, claim) in zip(axes.flat, enumerate(claims)):
        verdicts = [c["verdicts"][index] for c in cells]
        x = np.arange(len(cells))
        interval_bars(ax, x - 0.1, [v["own"] for v in verdicts], color="C0", ls="none", label="trained")
        twins = [(i, (v["floors"].get("twin") or {}).get("floor")) for i, v in enumerate(verdicts)]
        twins = [(i, twin) for i, twin in twins if twin]
        if twins:
            x_twin = [i + 0.1 for i, _ in twins]
            style = {"color": "C7", "ls": "none", "mfc": "none", "label": "untrained twin"}
            interval_bars(ax, x_twin, [twin for _, twin in twins], **style)
        for i, v in enumerate(verdicts):
            if v["own"]["mean"] is None:  # no statistic: say why where its point would be
                ax.text(i, 0, v["label"], ha="center", va="bottom", fontsize=6, color="grey", wrap=True)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(x, names, fontsize=7)
        ax.set_xlim(-0.6, len(cells) - 0.4)
        ax.set_title(f"Fig {claim['figure']}: {claim['claim']}", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(claims) :]:
        ax.axis("off")
    handles = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels())}
    axes.flat[0].legend(handles.values(), handles.keys(), fontsize=6)
    save_figure(fig, folder / ARCHITECTURES_FIGURE)
    return {"claims": ARCHITECTURES_FIGURE}


# ---- the phase diagram: task diversity K x training tokens (`development.Development`) ---------
def plot_phase_diagram(records: list[dict], path: str | Path) -> Path:
    """Per split, every kept network of every record at (training tokens, K), coloured by its
    phase label (`development.phase_label`); records of one K (seeds, HMM draws) side by side
    in a narrow band around it. Step 0 and networks without a token count are left out."""
    from .model import SPLIT_TITLES, phase_color

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), squeeze=False)
    ks = sorted({r["num_tasks"] for r in records})
    labels = set()
    for ax, split in zip(axes[0], SPLIT_TITLES):
        for k in ks:
            same = [r for r in records if r["num_tasks"] == k]
            for index, record in enumerate(same):
                y = k * 2 ** (0.3 * (index - (len(same) - 1) / 2) / max(1, len(same)))
                for network in record["networks"]:
                    place = network["splits"].get(split)
                    if place is None or not network["tokens"]:
                        continue
                    labels.add(place["label"])
                    ax.scatter(
                        network["tokens"], y, color=phase_color(place["label"]), s=40, edgecolor="k", lw=0.3
                    )
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_yticks(ks, [str(k) for k in ks])
        ax.set_ylim(min(ks) / 2, max(ks) * 2)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("K, HMMs in the training mixture")
        ax.set_title(f"nearest learner, {SPLIT_TITLES[split]}", fontsize=9)
    ordered = sorted(labels, key=lambda label: (label in ("retrieval", "inference"), label))
    handles = [plt.Line2D([], [], ls="", marker="o", color=phase_color(label)) for label in ordered]
    axes[0][-1].legend(handles, ordered, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_figure(fig, path)


def plot_cell_development(records: list[dict], path: str | Path) -> Path:
    """One cell (records of one K: seeds and HMM draws) over training: per split, each record's
    KL from the split's reference against training tokens (thin), their mean at the steps all
    share (thick), and the mean over the records of every rung's and prior-level Bayes's KL as
    horizontal lines. Step 0 and networks without a token count are left out."""
    from .model import SPLIT_TITLES, development_axes, rung_lines

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), squeeze=False)
    for ax, split in zip(axes[0], SPLIT_TITLES):
        curves = {}
        for record in records:
            points = [(n["tokens"], n["splits"][split]) for n in record["networks"] if n["tokens"]]
            if not points:
                continue
            reference = points[0][1]["reference"]
            tokens = [t for t, _ in points]
            values = [p["distances"][reference] for _, p in points]
            ax.plot(tokens, values, color="C0", lw=0.6, alpha=0.5)
            curves.update({t: curves.get(t, []) + [v] for t, v in zip(tokens, values)})
        shared = sorted(t for t, v in curves.items() if len(v) == len(records))
        ax.plot(
            shared, [np.mean(curves[t]) for t in shared], color="C0", lw=2, label=f"mean of {len(records)}"
        )
        reference = records[0]["networks"][-1]["splits"][split]["reference"]
        scales = [r["ladder"][split]["references"][reference] for r in records]
        shared_names = [name for name in scales[0] if all(name in scale for scale in scales)]
        rung_lines(
            ax, {name: float(np.mean([sc[name] for sc in scales])) for name in shared_names}, reference
        )
        development_axes(ax, reference, f"K = {records[0]['num_tasks']}, {SPLIT_TITLES[split]}")
        ax.legend(fontsize=7, loc="upper right")
    return save_figure(fig, path)
