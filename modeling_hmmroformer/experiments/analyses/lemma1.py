"""Lemma 1 on the family built to test it (`hmm_datasets.lemma1_family`): figures, report, JSON.

`write_lemma1_family(result, folder)` writes `results.json`, `REPORT.md`, `tv_by_level.png`
(log TV against L, the median member of each γ level, task known and unknown) and
`rate_vs_gamma.png` (each member's fitted rate against γ, with the bound's rate γ⁴ at C = 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hmm_datasets.files import write_json, write_text
from probing.figures import pyplot, save_figure

from .. import layout

VARIANTS = {"known": "task known (oracle)", "mixture": "task unknown (mixture over the family)"}


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


def format_number(value) -> str:
    return "none" if value is None else f"{value:.3g}"


def level_table(summary: list[dict]) -> str:
    """The Markdown table of a variant's `levels` (median rate, interval, range, R², bound)."""
    lines = [
        "| γ | members fitted | median rate [95% interval] | smallest, largest | median R² | γ⁴ | median rate / γ⁴ |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for entry in summary:
        if not entry["members_fitted"]:
            lines.append(f"| {entry['gamma']:.3g} | 0 | none | | | | |")
            continue
        low, high = entry["rate_ci"]
        lines.append(
            f"| {entry['gamma']:.3g} | {entry['members_fitted']} | {entry['median_rate']:.3g} "
            f"[{low:.3g}, {high:.3g}] | {entry['rate_min']:.3g}, {entry['rate_max']:.3g} | "
            f"{entry['median_r2']:.4f} | {entry['bound_rate']:.3g} | {format_number(entry['rate_over_bound'])} |"
        )
    return "\n".join(lines)


def lemma1_report(result: dict) -> str:
    """REPORT.md: the family, and per variant the level table, Spearman and the bound check."""
    family = result["family"]
    eigen = sorted({round(m["second_eigenvalue"], 6) for m in result["members"]})
    gamma_error = max(abs(m["gamma"] - m["level"]) for m in result["members"])
    rank = family["rank"] or family["num_states"]
    transitions = "full rank" if family["rank"] is None else f"rank {family['rank']}"
    text = [
        "# Lemma 1 on HMMs built to test it",
        "",
        "Made by `python scripts/lemma1.py` (`hmm_datasets.lemma1_family`, "
        "`modeling_hmmroformer.experiments.analyses.lemma1`); what it measures: the repository's `docs/memory.md`.",
        "",
        f"Family: S = {family['num_states']} states, V = {family['vocab_size']} tokens, "
        f"{len(family['levels'])} γ levels × {family['hmms_per_level']} HMMs, transitions "
        f"{transitions} with mixing ε = "
        f"{family['mixing']} (|λ₂| = {', '.join(f'{v:g}' for v in eigen)}), seed {family['seed']}. "
        f"Computed γ equals the level built in to {gamma_error:.1e}. {result['rows_per_hmm']} rows of "
        f"{result['length']} tokens per HMM, memories L = {result['memories'][0]}..{result['memories'][-1]}, "
        f"scored at the {result['scored_positions_per_row']} positions per row whose window does not "
        f"reach the segment start (i ≥ {max(result['memories'])}); fits over the L with TV > "
        f"{result['fit_floor']:g}; intervals: 95% bootstrap over rows ({result['runtime_s']:.0f} s).",
        "",
        "The bound (Lemma 1 through Theorem 14 of Uehara et al. 2022): TV ≤ d exp(−γ⁴ L / C), a rate of "
        f"at least γ⁴ / C; shown with C = 1, d = {rank}.",
        "",
        "![log TV against L per γ level](tv_by_level.png)",
        "",
        "![rate against γ with the bound](rate_vs_gamma.png)",
    ]
    for variant, title in VARIANTS.items():
        block = result[variant]
        text += [
            "",
            f"## {title[0].upper() + title[1:]}",
            "",
            level_table(block["levels"]),
            "",
            f"Spearman correlation of rate and γ over the members: {format_number(block['rate_gamma_spearman'])}. "
            f"TV ≤ d exp(−γ⁴ L) at every L for every member: {'yes' if block['bound_holds_for_all'] else 'no'}.",
        ]
    return "\n".join(text) + "\n"


def write_lemma1_family(result: dict, folder: str | Path) -> dict[str, Path]:
    """`results.json`, `REPORT.md` and the two figures into `folder` (created); their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json(folder / layout.RESULTS_JSON, result),
        "report": write_text(folder / layout.REPORT_MD, lemma1_report(result)),
        "tv": plot_tv_by_level(result, folder / "tv_by_level.png"),
        "rate": plot_rate_vs_gamma(result, folder / "rate_vs_gamma.png"),
    }
