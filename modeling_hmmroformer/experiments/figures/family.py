"""Lemma 1 on the family built to test it (`hmm_datasets.lemma1_family`), as figures:
`tv_by_level.png` (log TV against L, the median member of each γ level, task known and unknown)
and `rate_vs_gamma.png` (each member's fitted rate against γ, with the bound's rate γ⁴ at C = 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from model_cards.lemma1_report import VARIANTS
from probing.figures import pyplot, save_figure


def plot_tv_by_level(result: dict, path: str | Path) -> Path:
    """Per variant a panel: mean TV against L on a log axis, one line per γ level (the median of
    its members' TV at each L)."""
    plt = pyplot()
    memories = np.asarray(result["memories"])
    levels = sorted({m["level"] for m in result["members"]})
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(levels)))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    for ax, (variant, title) in zip(axes, VARIANTS.items()):
        for level, color in zip(levels, colors):
            curves = np.asarray([m[variant]["tv"] for m in result["members"] if m["level"] == level])
            median = np.median(curves, 0)
            shown = median > result["fit_floor"]
            ax.plot(memories[shown], median[shown], "o-", ms=3, color=color, label=f"γ = {level:g}")
        ax.set_yscale("log")
        ax.set_xlabel("memory L (tokens)")
        ax.set_title(f"Lemma 1: {title}")
    axes[0].set_ylabel("TV of memory-L to full predictor (median member)")
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_rate_vs_gamma(result: dict, path: str | Path) -> Path:
    """Each member's fitted rate (with its bootstrap interval) against γ, both variants, and the
    bound's rate γ⁴ (C = 1) on log axes."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.6))
    for (variant, label), color in zip(VARIANTS.items(), ("tab:blue", "tab:orange")):
        members = [m for m in result["members"] if m[variant]["fit"]["rate"]]
        gamma = np.asarray([m["gamma"] for m in members])
        rate = np.asarray([m[variant]["fit"]["rate"] for m in members])
        spread = np.abs(np.asarray([m[variant]["rate_ci"] for m in members]).T - rate)
        ax.errorbar(gamma, rate, yerr=spread, fmt="o", ms=4, color=color, label=label, alpha=0.8)
    grid = np.linspace(min(m["gamma"] for m in result["members"]), 1.0, 100)
    ax.plot(grid, grid**4, "k--", label="bound's rate γ⁴ (C = 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("observability coefficient γ (Assumption 2)")
    ax.set_ylabel("fitted decay rate of TV per token")
    ax.set_title("Lemma 1: rate against observability")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
