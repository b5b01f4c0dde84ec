"""The depth-and-seed study's figures: each depth's curves against relative depth l/L, the
mean over seeds with a band from the lowest to the highest seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probing.figures import pyplot, save_figure

from . import layout

SHUFFLE_PARTS = {  # probe_results.json metric -> (panel title, y label)
    "relative_logit_change": ("total change", "relative change of attention logits"),
    "position_only_change": ("position-only part", "relative change of attention logits"),
    "content_change": ("content part", "relative change of attention logits"),
    "weighted_attention_tv": ("attention over demonstrations", "TV, weighted by demonstration mass"),
}


def seed_band(ax, x, curves: list[list[float | None]], label: str, color, line: str = "-") -> None:
    """Mean over seeds and the min..max band of equally long curves."""
    values = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
    if values.size == 0 or np.isnan(values).all():
        return
    with np.errstate(all="ignore"):
        ax.plot(x, np.nanmean(values, 0), line, color=color, marker="o", ms=3, label=label)
        if values.shape[0] > 1:
            ax.fill_between(x, np.nanmin(values, 0), np.nanmax(values, 0), color=color, alpha=0.15)


def by_depth(summary: dict) -> dict[int, list[dict]]:
    """The model records of each depth."""
    out: dict[int, list[dict]] = {}
    for record in summary["models"]:
        out.setdefault(record["depth"], []).append(record)
    return out


def plot_distance_to_bayes(summary: dict, path: Path) -> None:
    """KL and agreement with Bayes by depth (mean over seeds, 95% t interval)."""
    plt = pyplot()
    depths = [d["depth"] for d in summary["depths"]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    labels = {"kl_bayes_model": "KL(Bayes ‖ model), nats/token", "agreement": "argmax = Bayes argmax"}
    for ax, (key, label) in zip(axes, labels.items()):
        stats = [d[key] for d in summary["depths"]]
        means = np.array([s["mean"] for s in stats], dtype=float)
        low = np.array([s["ci_low"] if s["ci_low"] is not None else s["mean"] for s in stats], dtype=float)
        high = np.array([s["ci_high"] if s["ci_high"] is not None else s["mean"] for s in stats], dtype=float)
        ax.errorbar(depths, means, yerr=[means - low, high - means], marker="o", capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.set_xlabel("layers")
        ax.set_ylabel(label)
    save_figure(fig, path)


def plot_shuffle_by_depth(summary: dict, path: Path) -> None:
    """Figure 2 across depths: one panel per part of the change, one line per depth."""
    plt = pyplot()
    groups = by_depth(summary)
    parts = [p for p in SHUFFLE_PARTS if any(p in r["curves"]["shuffle"] for r in summary["models"])]
    columns = 2
    rows = -(-len(parts) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(parts) :]:
        ax.set_visible(False)
    for ax, part in zip(axes.flat, parts):
        for index, (depth, records) in enumerate(groups.items()):
            x = records[0]["curves"]["attention_depth"]
            seed_band(
                ax, x, [r["curves"]["shuffle"].get(part, []) for r in records], f"{depth} layers", f"C{index}"
            )
        ax.axvspan(0.5, 15 / 16, color="grey", alpha=0.08)
        ax.set_xlabel("relative depth l/L (shaded: the paper's upper layers)")
        title, ylabel = SHUFFLE_PARTS[part]
        ax.set_ylabel(ylabel)
        ax.set_title(f"shuffle test: {title}")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_headroom_by_depth(summary: dict, path: Path) -> None:
    """Figure 3(a) across depths: headroom fraction on the first demonstration, task and hidden state."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, target in zip(axes, ("hidden_state", "task")):
        for index, (depth, records) in enumerate(by_depth(summary).items()):
            x = records[0]["curves"]["probe_depth"]
            seed_band(
                ax,
                x,
                [r["curves"]["headroom_demo1"][target] for r in records],
                f"{depth} layers",
                f"C{index}",
            )
        ax.axhline(0, color="grey", lw=0.6)
        ax.axhline(1, color="grey", lw=0.6)
        ax.set_xlabel("relative depth l/L (0: embeddings)")
        ax.set_ylabel("fraction of headroom above token only")
        ax.set_title(f"{target.replace('_', ' ')}, first demonstration")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_previous_tokens_by_depth(summary: dict, path: Path) -> None:
    """Figure 3(b) across depths: one panel per depth, one line per distance."""
    plt = pyplot()
    groups = by_depth(summary)
    fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), squeeze=False, sharey=True)
    for ax, (depth, records) in zip(axes[0], groups.items()):
        x = records[0]["curves"]["probe_depth"]
        for index, distance in enumerate(records[0]["curves"]["previous_tokens"]):
            curves = [r["curves"]["previous_tokens"][distance] for r in records]
            seed_band(ax, x, curves, f"k={distance}", f"C{index}")
        ax.set_title(f"{depth} layers")
        ax.set_xlabel("relative depth l/L")
    axes[0][0].set_ylabel("previous-token probe accuracy")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path)


def plot_memory_by_depth(summary: dict, path: Path) -> None:
    """Each depth's distance to the memory-L Bayes predictor, and to itself cut to L tokens."""
    plt = pyplot()
    memories = summary["study"]["memories"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    keys = {
        "tv_full_vs_bayes_memory": "TV(model, memory-L Bayes)",
        "tv_cut_vs_full": "TV(model cut to L, model)",
    }
    for ax, (key, label) in zip(axes, keys.items()):
        for index, (depth, records) in enumerate(by_depth(summary).items()):
            curves = [r["memory"][key] for r in records]
            seed_band(ax, memories, curves, f"{depth} layers", f"C{index}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(memories, [str(m) for m in memories])
        ax.set_xlabel("memory L (tokens)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_study(summary: dict, folder: Path) -> None:
    """Every figure of the study's report into `folder`."""
    plots = {
        "distance_to_bayes": plot_distance_to_bayes,
        "shuffle_by_depth": plot_shuffle_by_depth,
        "headroom_by_depth": plot_headroom_by_depth,
        "previous_tokens_by_depth": plot_previous_tokens_by_depth,
        "memory_by_depth": plot_memory_by_depth,
    }
    for name, plot in plots.items():
        plot(summary, folder / Path(layout.STUDY_FIGURES[name]).name)
