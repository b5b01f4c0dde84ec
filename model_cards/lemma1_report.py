"""REPORT.md of `scripts/lemma1.py`: Lemma 1 on the family built to test it, per variant (task
known, task unknown) the table of fitted rates by γ level, their Spearman correlation with γ and
the bound's check.
"""

from __future__ import annotations

VARIANTS = {"known": "task known (oracle)", "mixture": "task unknown (mixture over the family)"}


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


def render_lemma1_report(result: dict) -> str:
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
        "`modeling_hmmroformer.experiments.commands.lemma1`); what it measures: the repository's `docs/memory.md`.",
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
