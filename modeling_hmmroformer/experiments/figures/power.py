"""The decision rule's power as a figure (`benchmarks/power.py`'s result): per grown cell a panel,
the probability that each claim the seeds agree on today is decided against the number of HMM
draws, at the between-draw spread's estimate (solid) and at its upper 80% bound (dashed), with
the design's target of 0.8."""

from __future__ import annotations

from pathlib import Path

from probing.figures import pyplot, save_figure

GROWN = "grown, 1 seed per new draw"
CAUTIOUS = "grown, 1 seed per new draw, between-draw spread at its upper 80% bound"


def plot_power(result: dict, path: str | Path) -> Path:
    """`power.png`: decision rate against draws, one panel per cell the design grows."""
    plt = pyplot()
    tables = result["tables"]
    cells = [c for c in result["targets"] if c in next(iter(tables[GROWN].values())) and grown(result, c)]
    fig, axes = plt.subplots(1, len(cells), figsize=(6 * len(cells), 4.4), sharey=True, squeeze=False)
    for ax, cell in zip(axes[0], cells):
        for index, key in enumerate(result["targets"][cell]):
            color = f"C{index % 10}"
            for name, style in ((GROWN, "o-"), (CAUTIOUS, "s--")):
                draws = [int(d) for d in tables[name]]
                rates = [tables[name][str(d)][cell][key]["decided"] for d in draws]
                ax.plot(draws, rates, style, ms=3, color=color, label=key if name == GROWN else None)
        ax.axhline(result["choice"]["target"], color="grey", lw=0.8)
        ax.set_title(f"{cell}: decided (holds or contradicted)", fontsize=10)
        ax.set_xlabel("HMM draws (3 committed with 2 seeds, each new one 1 seed)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("probability over simulated reports")
    fig.suptitle("solid: between-draw spread as estimated; dashed: at its upper 80% bound", fontsize=9)
    return save_figure(fig, path)


def grown(result: dict, cell: str) -> bool:
    """Does the design grow this cell (more draws at the largest D than committed)?"""
    last = max(result["tables"][GROWN], key=int)
    return int(last) > len(result["committed_design"][cell]) and cell in result["choice"]["needed"]
