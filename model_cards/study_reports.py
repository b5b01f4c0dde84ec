"""Render the reports of studies from their summaries of plain data: a depth-and-seed study's
`REPORT.md` (`render_study_report`), the task-diversity report across K and the architecture
comparison, and the README's status table of the diversity study. The cells they share with a
reproduction's report (claims, numbers across seeds) come from `model_cards.render`.
"""

from __future__ import annotations

import jinja2

from . import (
    ARCHITECTURES_REPORT_TEMPLATE,
    DIVERSITY_REPORT_TEMPLATE,
    DIVERSITY_STATUS_MARKERS,
    STUDY_REPORT_TEMPLATE,
)
from .render import (
    across_seeds_text,
    floor_effect_text,
    memory_equivalent_text,
    number_text,
    split_spread_text,
)


def study_environment() -> jinja2.Environment:
    """The Jinja environment of the study reports: strict, with their number filters."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["stat"] = across_seeds_text
    environment.filters["verdict_cell"] = verdict_cell_text
    environment.filters["floor_effect"] = floor_effect_text
    environment.filters["split_spread"] = split_spread_text
    environment.filters["num"] = number_text
    environment.filters["spread"] = seconds_spread_text
    environment.filters["memory_equivalent"] = memory_equivalent_text
    return environment


def render_study_report(summary: dict, machine: dict) -> str:
    """`REPORT.md` of a depth-and-seed study (built by `modeling_hmmroformer.experiments.decisions.aggregate.summarize_study`)."""
    template = study_environment().from_string(STUDY_REPORT_TEMPLATE.read_text())
    return template.render(s=summary, machine=machine, zip=zip)


LEARNER_WORDS = {
    "infers": "infers (past the in-context ladder on unseen tasks)",
    "retrieves": "retrieves (past the ladder on seen tasks only)",
    "below the ladder": "below the in-context ladder",
    "mixed": "no learner in most seeds",
}
VERDICT_ORDER = ("holds", "contradicted", "not testable", "n/a", "undecided")
RUNGS = {  # the in-context ladder's rungs as the reports name them (hmm_datasets.predictors.IN_CONTEXT)
    "unigram": "unigram",
    "bigram": "bigram",
    "trigram": "trigram",
    "ngram4": "n-gram 4",
    "ngram8": "n-gram 8",
    "ppm3": "PPM-C 3",
    "ppm8": "PPM-C 8",
}


def render_diversity_report(summary: dict, figures: dict[str, str]) -> str:
    """`REPORT.md` of the task-diversity study across K (built by
    `modeling_hmmroformer.experiments.decisions.diversity.summarize_diversity`); `figures` maps each
    figure's name to its path beside the report."""
    environment = study_environment()
    environment.filters["nearest"] = lambda n: f"{n['mixture']} / {n['prior']} / {n['tied']}"
    environment.filters["learners"] = learner_counts_text
    environment.filters["labels"] = lambda counts: ", ".join(f"{label} {n}" for label, n in counts.items())
    environment.filters["tokens"] = lambda tokens: "—" if tokens is None else f"{tokens / 1e6:.3g} M"
    environment.filters["corpus_k"] = corpus_k_text
    environment.filters["shares"] = lambda shares: ", ".join("—" if v is None else f"{v:.2f}" for v in shares)
    template = environment.from_string(DIVERSITY_REPORT_TEMPLATE.read_text())
    return template.render(
        s=summary,
        status_line=diversity_status_line(summary),
        seeds_per_cell=seeds_per_cell_text(summary["cells"]),
        group_name=group_name,
        rung_keys=list(RUNGS),
        rung_names=list(RUNGS.values()),
        ladder_has_prior=any(
            "prior" in ladder[split]["references"]
            for ladder in summary.get("ladders", {}).values()
            for split in ladder
        ),
        **summary["setup"],
        studies=list(dict.fromkeys(c["study"] for c in summary["cells"])),
        splits=("test", "test_unseen"),
        figures=figures,
        status_table=render_diversity_status(summary),
        before_added=before_added_text(summary),
        learner_words=LEARNER_WORDS.get,
        by_verdict=claims_by_verdict,
        claim_words={c["key"]: f"Fig {c['figure']}: {c['claim']}" for c in summary["claims"]},
        statistic_words={
            "kl_bayes_model": "KL(Bayes ‖ model), test split",
            "model_accuracy": "model top-1, test split",
            **{
                f"kl_{name}_{split}": f"KL({words} ‖ model), {split}"
                for name, words in (("mixture", "mixture Bayes"), ("prior", "prior-level Bayes"))
                for split in ("test", "test_unseen")
            },
        },
    )


def before_added_text(summary: dict) -> str:
    """What the family without the claims added later (`before_added`) decides otherwise: each
    verdict of another claim that differs, or that none does."""
    before = summary.get("before_added")
    if not before:
        return ""
    words = {c["key"]: f"Fig {c['figure']} {c['claim']}" for c in summary["claims"]}
    added = "; ".join(words.get(key, key) for key in before["without"])
    changed = [
        f"{group_name(g)}, {words[row['key']]}: {row['label']} (without it: {old['labels'][row['key']]})"
        for g, old in zip(summary["decided"], before["groups"])
        for row in g["verdicts"]
        if row["key"] in old["labels"] and row["label"] != old["labels"][row["key"]]
    ]
    if not changed:
        return f"The family without the claim added later ({added}) gives every other claim the same verdict."
    return (
        f"The family without the claim added later ({added}) decides {len(changed)} verdicts otherwise; "
        f"this report's family decides: {'; '.join(changed)}."
    )


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def seeds_per_cell_text(cells: list[dict]) -> str:
    """How many training seeds each study cell has, in words: "six", or "two to six" where they differ."""
    counts = sorted({len(cell["seeds"]) for cell in cells})
    words = [NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n) for n in (counts[0], counts[-1])]
    return words[0] if counts[0] == counts[-1] else f"{words[0]} to {words[1]}"


def render_architectures_report(summary: dict, figures: dict[str, str]) -> str:
    """`REPORT.md` of the architecture comparison (built by
    `modeling_hmmroformer.experiments.decisions.architectures.summarize_architectures`)."""
    template = study_environment().from_string(ARCHITECTURES_REPORT_TEMPLATE.read_text())
    return template.render(
        s=summary,
        **summary["setup"],
        sources=summary["sources"],
        figures=figures,
        machine=summary["machine"],
        cell_names=[f"{c['architecture']}, {c['depth']} layers" for c in summary["cells"]],
        difference_words=lambda d: difference_words(d, summary),
    )


def difference_words(difference: dict, summary: dict) -> str:
    """What differs between the architectures at one depth, in words, from the numbers: the
    claims whose verdicts differ and the statistics whose intervals do not overlap."""
    depth, names = difference["depth"], summary["architectures"]
    claims = {c["key"]: c for c in summary["claims"]}
    verdicts = [
        f"Fig {claims[key]['figure']} {claims[key]['claim']} ("
        + ", ".join(f"{name} {label}" for name, label in zip(names, labels))
        + ")"
        for key, labels in difference["verdicts"].items()
    ]
    text = f"At {depth} layers, " + (
        f"the verdicts differ on {len(verdicts)} of {difference['num_claims']} claims: {'; '.join(verdicts)}."
        if verdicts
        else f"every one of the {difference['num_claims']} claims has the same verdict in each architecture."
    )
    apart = [
        f"{row['words']} ({row['better']} is better): "
        + ", ".join(f"{number_text(mean)} {name}" for name, mean in row["means"].items())
        for row in difference["apart"]
    ]
    if apart:
        return f"{text} Intervals across seeds apart: {'; '.join(apart)}; every other statistic's overlap."
    return f"{text} On the ladder and the yardsticks every interval across seeds overlaps the other architecture's."


def corpus_k_text(cell: dict) -> str:
    """A cell's K, with its emission mixing where the token hides the state: "8192 (emission mixing 0.25)"."""
    mixing = cell.get("emission_mixing") or 0
    return f"{cell['num_tasks']} (emission mixing {mixing:g})" if mixing else str(cell["num_tasks"])


def group_name(group: dict) -> str:
    """ "K = 512, 4 layers (draws 0, 1)" of a decided group of the diversity report."""
    draws = ", ".join(str(d) for d in group["draws"])
    mixing = group.get("emission_mixing") or 0
    told = f", emission mixing {mixing:g}" if mixing else ""
    return f"K = {group['num_tasks']}{told}, {group['depth']} layers (draw{'s' if len(group['draws']) > 1 else ''} {draws})"


def learner_counts_text(counts: dict[str, int]) -> str:
    """ "2 infer, 0 retrieve, 4 below the ladder" of a cell's seeds."""
    return f"{counts['infers']} infer, {counts['retrieves']} retrieve, {counts['below the ladder']} below the ladder"


def diversity_status_line(summary: dict) -> str:
    """The diversity report's first finding in one line: the claims by verdict over every
    decided group, and how many models past the in-context ladder the layerwise ones read;
    marked interim while planned cells (`missing`) have not run."""
    labels = [v["verdict"] for g in summary["decided"] for v in g["verdicts"]]
    counts = ", ".join(f"{labels.count(word)} {word}" for word in VERDICT_ORDER if word in labels)
    past = sum(g["learners"]["infers"] + g["learners"]["retrieves"] for g in summary["decided"])
    total = sum(g["num_seeds"] for g in summary["decided"])
    missing = summary.get("missing") or []
    interim = (
        f" (interim: {len(missing)} planned cells not run yet; the design's verdicts are those read once "
        "every planned cell has run)"
        if missing
        else ""
    )
    return (
        f"**Status{interim}:** {len(labels)} verdicts in {len(summary['decided'])} cells (K, depth): {counts}. "
        f"{past} of {total} models are past the in-context ladder; only theirs count for the layerwise claims "
        "(Figures 2, 3(a), 3(b) and the patching), and a cell measured on one HMM draw decides nothing (the rule: docs/study.md)."
    )


def claims_by_verdict(cell: dict) -> list[tuple[str, list[str]]]:
    """A cell's claims grouped by verdict ("holds", then "contradicted", ...), each as "Fig N: claim"."""
    groups: dict[str, list[str]] = {}
    for verdict in cell["verdicts"]:
        groups.setdefault(verdict["label"], []).append(f"Fig {verdict['figure']} {verdict['claim']}")

    def rank(label: str) -> int:
        return next((i for i, v in enumerate(VERDICT_ORDER) if label.startswith(v)), len(VERDICT_ORDER))

    return sorted(groups.items(), key=lambda item: rank(item[0]))


def render_diversity_status(summary: dict) -> str:
    """The claims against every decided cell (K, depth) of the task-diversity study, as one
    markdown table: the cell's models on the in-context ladder, then each claim's verdict."""
    groups = summary["decided"]
    rows = [["", "models: infer / retrieve / below the ladder", *[_learner_cell(g) for g in groups]]]
    for index, claim in enumerate(summary["claims"]):
        rows.append(
            [claim["figure"], claim["claim"], *[f"**{g['verdicts'][index]['label']}**" for g in groups]]
        )
    return markdown_table(["figure", "claim", *[group_name(g) for g in groups]], rows)


def render_readme_status(summary: dict) -> str:
    """The status block a README carries of a cross-K report: its status line
    (`diversity_status_line`), then its claims table (`render_diversity_status`)."""
    return f"{diversity_status_line(summary)}\n\n{render_diversity_status(summary)}"


def _learner_cell(group: dict) -> str:
    counts = group["learners"]
    return f"{counts['infers']} / {counts['retrieves']} / {counts['below the ladder']}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table of `header` and `rows` (cells as given)."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def replace_marked_block(text: str, block: str, markers: tuple[str, str] = DIVERSITY_STATUS_MARKERS) -> str:
    """`text` with what lies between the two marker lines replaced by `block`; `ValueError`
    when the markers are not there once each, in order."""
    start, end = markers
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"the file needs the lines {start!r} and {end!r}, once each and in that order")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{block}\n{end}{tail}"


def seconds_spread_text(times: dict) -> str:
    """ "median s [min, max]" of wall times (`aggregate.time_row`); "not recorded" without any."""
    if times["median"] is None:
        return "not recorded"
    if times["min"] == times["max"]:
        return f"{times['median']:.0f} s"
    return f"{times['median']:.0f} s [{times['min']:.0f}, {times['max']:.0f}]"


def verdict_cell_text(cell: dict | None) -> str:
    """ "**verdict**: own mean [low, high], k/n with the predicted sign, Holm-adjusted p" of one
    claim in one cell (a row of `claims.decide_claims`)."""
    if cell is None:
        return ""
    if cell["own"]["mean"] is None:
        return f"**{cell['label']}**"
    text = f"**{cell['label']}**: {across_seeds_text(cell['own'], '+.3f')}, {cell['agree']}/{cell['n']}"
    return text if cell.get("p_holm") is None else f"{text}, p {cell['p_holm']:.2g}"
