"""The corpus families as figures. Lemma 1 on the family built to test it
(`hmm_datasets.lemma1_family`): `tv_by_level.png` (log TV against L, the median member of each γ
level, task known and unknown) and `rate_vs_gamma.png` (each member's fitted rate against γ, with
the bound's rate γ⁴ at C = 1). The corpora where the token hides the state
(`hmm_datasets.ambiguity`): `ambiguity.png` (`plot_ambiguity`).
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


def plot_ambiguity(result: dict, path: str | Path) -> Path:
    """A corpus family by emission mixing (`hmm_datasets.ambiguity.level_measures` per level):
    left, H(state), H(state | token) and H(state | history) against the mixing; right, the state's
    top-1 by the token rule and by the exact filter, and the next token's by the oracle, mixture
    Bayes and the best in-context rung."""
    plt = pyplot()
    levels = result["levels"]
    mixing = [level["emission_mixing"] for level in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    entropies = {
        "H(state)": [level["parameters"]["state_entropy"] for level in levels],
        "H(state | token), exact": [level["parameters"]["state_given_token_entropy"] for level in levels],
        "H(state | history), exact filter": [
            level["filter"]["state_given_history_entropy"] for level in levels
        ],
    }
    for (label, values), style in zip(entropies.items(), ("k:", "o-", "s-")):
        left.plot(mixing, values, style, label=label)
    left.set_ylabel("nats")
    accuracies = {
        "state: token rule": [level["filter"]["token_rule_accuracy"] for level in levels],
        "state: exact filter": [level["filter"]["filter_accuracy"] for level in levels],
        "next token: oracle": [level["predictors"]["accuracy"]["oracle"] for level in levels],
        "next token: mixture Bayes": [level["predictors"]["accuracy"]["bayes"] for level in levels],
        "next token: best rung": [
            level["predictors"]["accuracy"][level["predictors"]["best_in_context"]] for level in levels
        ],
    }
    for (label, values), style in zip(accuracies.items(), ("o--", "o-", "s:", "s-", "^-")):
        right.plot(mixing, values, style, label=label)
    right.set_ylabel("top-1 accuracy")
    for ax in (left, right):
        ax.set_xlabel("emission mixing (share of each emission row made uniform)")
        ax.legend(fontsize=7)
    return save_figure(fig, path)
