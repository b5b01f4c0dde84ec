"""The depth-and-seed study's figures, drawn from its summary's plain data: each depth's curves
against relative depth l/L, the mean over seeds with a band from the lowest to the highest seed,
the trained models solid and their untrained twins dashed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probing.figures import pyplot, save_figure

from .. import names


def seed_band(ax, x, curves: list[list[float | None]], label: str | None, color, line: str = "-") -> None:
    """Mean over seeds and the min..max band of equally long curves."""
    values = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
    if values.size == 0 or np.isnan(values).all():
        return
    with np.errstate(all="ignore"):
        ax.plot(x, np.nanmean(values, 0), line, color=color, marker="o", ms=3, label=label)
        if values.shape[0] > 1:
            ax.fill_between(x, np.nanmin(values, 0), np.nanmax(values, 0), color=color, alpha=0.15)


def legend(ax, size: int) -> None:
    """A legend where the panel has labelled lines."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def by_depth(summary: dict) -> dict[int, list[dict]]:
    """The model records of each depth."""
    out: dict[int, list[dict]] = {}
    for record in summary["models"]:
        out.setdefault(record["depth"], []).append(record)
    return out


def plot_distance_to_bayes(summary: dict, path: Path) -> None:
    """KL and agreement with Bayes by depth (mean over seeds, 95% t interval), and KL by test
    position per depth (mean over seeds, min..max band) beside the best in-context predictor."""
    plt = pyplot()
    depths = [d["depth"] for d in summary["depths"]]
    curves = {
        depth: [r["kl_bayes_by_test_position"] for r in records if r.get("kl_bayes_by_test_position")]
        for depth, records in by_depth(summary).items()
    }
    with_positions = any(curves.values())
    fig, axes = plt.subplots(1, 3 if with_positions else 2, figsize=(12 if with_positions else 8, 3.2))
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
    if with_positions:
        ax, colors = axes[2], plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for index, (depth, mine) in enumerate(c for c in curves.items() if c[1]):
            positions = np.arange(1, len(mine[0]["model"]))  # test tokens 1..T-1
            model = [c["model"][1:] for c in mine]
            seed_band(ax, positions, model, f"{depth} layers", colors[index % len(colors)])
        in_context = next(c for mine in curves.values() for c in mine)["in_context"]
        if in_context is not None:
            ax.plot(positions, in_context["kl"][1:], ":", color="black", label=in_context["label"])
        ax.set_yscale("log")
        ax.set_xlabel("position in the test sequence")
        ax.set_ylabel("KL(Bayes ‖ ·), nats/token")
        legend(ax, 7)
    save_figure(fig, path)


NETWORKS = {"trained": ("-", "trained"), "twin": ("--", "untrained twin")}


def profile_curves(records: list[dict], network: str, key: str, *path: str) -> list[list[float | None]]:
    """One curve of every record's `network` profile (`profiles[network][key][path...]`)."""
    curves = []
    for record in records:
        value = record["profiles"][network][key]
        for step in path:  # a curve a model lacks (a belief group too small to fit) is left out
            value = (value or {}).get(step)
        curves.append(value if value is not None else [])
    return curves


def trained_and_twin(ax, records: list[dict], x_key: str, key: str, *path: str, label: str, color) -> None:
    """A depth's curve for the trained models (solid) and their twins (dashed), over seeds."""
    x = records[0]["profiles"]["trained"][x_key]
    for network, (line, name) in NETWORKS.items():
        curves = [c for c in profile_curves(records, network, key, *path) if len(c) == len(x)]
        if curves:
            seed_band(ax, x, curves, f"{label}, {name}" if network == "trained" else None, color, line)


def plot_figure2_by_depth(summary: dict, path: Path) -> None:
    """Figure 2 across depths against the twin: the shuffle test's position-only change and the
    NLL increase with one layer's rotary off, per layer (layer 1 at l/L = 1/L)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    panels = {
        "shuffle_position_only": "position-only change of attention logits",
        "knockout_nll": "NLL increase, that layer's rotary off (nats/token)",
    }
    for ax, (key, ylabel) in zip(axes, panels.items()):
        for index, (depth, records) in enumerate(by_depth(summary).items()):
            trained_and_twin(ax, records, "attention_depth", key, label=f"{depth} layers", color=f"C{index}")
        ax.set_xlabel("relative depth l/L (dashed: untrained twins)")
        ax.set_ylabel(ylabel)
        legend(ax, 7)
    save_figure(fig, path)


def plot_beliefs_by_depth(summary: dict, path: Path) -> None:
    """Figure 3(a) by belief regression: held-out log-space R² of each exact belief on the first
    demonstration (the state filter with one map per task), per layer (the last read before the
    final norm), trained (solid) and twin (dashed)."""
    plt = pyplot()
    beliefs = ("task_posterior", "state_filter_per_task", "joint_posterior")
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), sharey=True)
    for ax, belief in zip(axes, beliefs):
        for index, (depth, records) in enumerate(by_depth(summary).items()):
            trained_and_twin(
                ax,
                records,
                "probe_depth",
                "beliefs",
                belief,
                "log_r2",
                label=f"{depth} layers",
                color=f"C{index}",
            )
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xlabel("relative depth l/L (0: embeddings; dashed: twins)")
        ax.set_title(f"{belief.replace('_', ' ')}, demonstration 1")
    axes[0].set_ylabel("held-out log-space R²")
    legend(axes[0], 7)
    save_figure(fig, path)


def plot_previous_tokens_by_depth(summary: dict, path: Path) -> None:
    """Figure 3(b) across depths: one panel per depth, one colour per distance, twins dashed."""
    plt = pyplot()
    groups = by_depth(summary)
    fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), squeeze=False, sharey=True)
    for ax, (depth, records) in zip(axes[0], groups.items()):
        for index, distance in enumerate(records[0]["profiles"]["trained"]["previous_tokens"]):
            trained_and_twin(
                ax,
                records,
                "probe_depth",
                "previous_tokens",
                distance,
                "all",
                label=f"k={distance}",
                color=f"C{index}",
            )
        ax.set_title(f"{depth} layers")
        ax.set_xlabel("relative depth l/L")
    axes[0][0].set_ylabel("previous-token probe accuracy")
    legend(axes[0][0], 6)
    save_figure(fig, path)


def plot_memory_by_depth(summary: dict, path: Path) -> None:
    """Each depth's distance to the memory-L Bayes predictors (the model sees its whole context)."""
    plt = pyplot()
    memories = summary["study"]["memories"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for index, (depth, records) in enumerate(by_depth(summary).items()):
        curves = [r["memory"]["tv_full_vs_bayes_memory"] for r in records if r["memory"] is not None]
        seed_band(ax, memories, curves, f"{depth} layers", f"C{index}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(memories, [str(m) for m in memories])
    ax.set_xlabel("memory L (tokens)")
    ax.set_ylabel("TV(model, memory-L Bayes)")
    legend(ax, 7)
    save_figure(fig, path)


def plot_study(summary: dict, folder: Path) -> None:
    """Every figure of the study's report into `folder`."""
    plots = {
        "distance_to_bayes": plot_distance_to_bayes,
        "figure2_by_depth": plot_figure2_by_depth,
        "beliefs_by_depth": plot_beliefs_by_depth,
        "previous_tokens_by_depth": plot_previous_tokens_by_depth,
        "memory_by_depth": plot_memory_by_depth,
    }
    for name, plot in plots.items():
        if name in summary["figures"]:  # memory_by_depth only where a model measured its memory
            plot(summary, folder / Path(names.STUDY_FIGURES[name]).name)
