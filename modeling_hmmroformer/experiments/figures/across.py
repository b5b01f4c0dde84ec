"""Figures of the reports across studies: the task-diversity study across K
(`diversity.summarize_diversity`) and the claims by architecture. Apart from `figures.model`, so that a
reproduction's or one study's figures do not load the code of the studies across them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from model_cards.study_reports import corpus_k_text
from probing.figures import pyplot, save_figure

from ..decisions.diversity import SPLITS, claim_against_k, on_drawn_tokens
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
PATCHING_FIGURE = "patching_by_site.png"
DEVELOPMENT_FIGURE_PREFIX = "development-K"  # development-K<k>-L<depth>.png: one per (K, depth)


def development_figure(num_tasks: int, depth: int | None) -> tuple[str, str]:
    """(figure name, file name) of one (K, depth)'s development figure; depth None for records
    that do not say it (`hmm-development`'s)."""
    if depth is None:
        return f"development_K{num_tasks}", f"{DEVELOPMENT_FIGURE_PREFIX}{num_tasks}.png"
    return f"development_K{num_tasks}_L{depth}", f"{DEVELOPMENT_FIGURE_PREFIX}{num_tasks}-L{depth}.png"


def development_cells(records: list[dict]) -> dict[tuple[int, int | None], list[dict]]:
    """Development records (with their model's `depth` where known) by (K, depth), in order."""
    cells: dict[tuple[int, int | None], list[dict]] = {}
    for record in records:
        cells.setdefault((record["num_tasks"], record.get("depth")), []).append(record)
    return dict(sorted(cells.items(), key=lambda item: (item[0][0], item[0][1] or 0)))


def is_diversity_figure(name: str) -> bool:
    """Whether a file name is one `plot_diversity` writes."""
    return name in (YARDSTICKS_FIGURE, PHASE_DIAGRAM_FIGURE, PATCHING_FIGURE) or (
        name.startswith((CLAIM_FIGURE_PREFIX, DEVELOPMENT_FIGURE_PREFIX)) and name.endswith(".png")
    )


def plot_diversity(summary: dict, folder: Path, developments: list[dict] = ()) -> dict[str, str]:
    """Every figure of the cross-K report into `folder`, with the phase diagram and each K's
    development where models kept networks over training (`developments`, development records);
    returns figure name -> file name."""
    summary = on_drawn_tokens(summary)
    files = {"yardsticks_against_k": YARDSTICKS_FIGURE}
    plot_yardsticks_against_k(summary, folder / files["yardsticks_against_k"])
    for claim in summary["claims"]:
        files[claim["key"]] = f"{CLAIM_FIGURE_PREFIX}{claim['key']}.png"
        plot_claim_against_k(summary, claim["key"], folder / files[claim["key"]])
    if summary.get("patching"):
        files["patching_by_site"] = PATCHING_FIGURE
        plot_patching_by_site(summary["patching"], folder / PATCHING_FIGURE)
    if developments:
        files["phase_diagram"] = PHASE_DIAGRAM_FIGURE
        plot_phase_diagram(developments, folder / PHASE_DIAGRAM_FIGURE)
    for (k, depth), cell in development_cells(developments).items():
        name, file = development_figure(k, depth)
        files[name] = file
        plot_cell_development(cell, folder / file)
    return files


PATCHING_DONORS = {"task": "C0", "state": "C1"}
PATCHING_NETWORKS = {"trained": "-", "twin": "--"}
SHARE_LIMITS = (-0.25, 1.25)  # a twin's shares, ratios of effects near 0, may fall far outside


def plot_patching_by_site(rows: list[dict], path: Path) -> None:
    """Each patched model's share of the task and the state donor's effect by site
    (`diversity.patching_rows`), one panel per cell (K, emission mixing, depth): the trained
    network solid, its untrained twin dashed, one line per model; shares beyond `SHARE_LIMITS`
    are cut at the frame, and a donor without a positive effect has no line."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["num_tasks"], row["emission_mixing"], row["depth"]), []).append(row)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(cells), figsize=(4.4 * len(cells), 3.6), squeeze=False)
    for ax, ((_, _, depth), members) in zip(axes[0], cells.items()):
        sites = members[0]["site_names"]
        for row in members:
            for network, reading in row["networks"].items():
                for kind, color in PATCHING_DONORS.items():
                    shares = [np.nan if v is None else v for v in reading[f"{kind}_shares"]]
                    ax.plot(
                        range(len(sites)),
                        np.clip(shares, *SHARE_LIMITS),
                        PATCHING_NETWORKS[network],
                        color=color,
                        marker="o",
                        ms=3,
                    )
        ax.axhline(0, color="grey", lw=0.6)
        ax.axhline(1, color="grey", lw=0.6)
        ax.set_ylim(*SHARE_LIMITS)
        ax.set_xticks(range(len(sites)), sites, rotation=30, fontsize=8)
        models = f"{len(members)} model{'s' * (len(members) > 1)}"
        ax.set_title(f"K = {corpus_k_text(members[0])}, {depth} layers ({models})", fontsize=9)
    axes[0][0].set_ylabel("share of the donor's move towards\nits exact Bayes predictive")
    handles = [
        plt.Line2D([], [], color=color, linestyle=line, label=f"{kind} donor, {network}")
        for network, line in PATCHING_NETWORKS.items()
        for kind, color in PATCHING_DONORS.items()
    ]
    axes[0][-1].legend(handles=handles, fontsize=7)
    save_figure(fig, path)


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
TARGET_NAMES = {"mixture": "mixture Bayes", "prior": "prior-level Bayes"}
LEARNER_COLORS = {"infers": "C1", "retrieves": "C0", "below the ladder": "0.8"}
K_COLORS = ("C2", "C4", "C3", "C5", "C6", "C8")  # one per K, apart from the gate's colours


def cell_style(ks: list[int], num_tasks: int, depth: int | None, depths: list) -> dict:
    """A (K, depth)'s line: its K's colour, its depth's dash (the shallowest solid)."""
    return {
        "color": K_COLORS[ks.index(num_tasks) % len(K_COLORS)],
        "ls": DEPTH_LINES[depths.index(depth) % len(DEPTH_LINES)],
    }


def cell_name(num_tasks: int, depth: int | None) -> str:
    return f"K = {num_tasks}" if depth is None else f"K = {num_tasks}, {depth} layers"


def plot_phase_diagram(records: list[dict], path: str | Path) -> Path:
    """Every kept network of every record (with its model's `depth` where known) over training
    tokens. Above: the report's gate per network (`NetworkPlace.learner`: infers, retrieves,
    below the ladder), one row per model, the models of each (K, depth) in one band. Below, per
    split: the share of the way from the best rung to the split's best learner each network has
    gone (each split place's `gap_closed` and `target`, as `Development.to_dict` writes them; 0
    at the best rung, 1 at mixture Bayes on seen tasks and at prior-level Bayes on unseen ones),
    one thin line per model, the mean over the models of each (K, depth) thick. Step 0 and
    networks without a token count are left out."""
    from .model import SPLIT_TITLES

    plt = pyplot()
    cells = development_cells(records)
    ks = sorted({k for k, _ in cells})
    depths = sorted({d for _, d in cells}, key=lambda d: d or 0)
    fig = plt.figure(figsize=(13, 8.5), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.2))
    gate = fig.add_subplot(grid[0, :])
    row, ticks = 0, []
    for (k, depth), models in cells.items():
        ticks.append((row + (len(models) - 1) / 2, f"{cell_name(k, depth)} ({len(models)})"))
        for record in models:
            kept = [n for n in record["networks"] if n["tokens"]]
            colors = [LEARNER_COLORS[n["learner"]] for n in kept]
            gate.scatter(
                [n["tokens"] for n in kept], [row] * len(kept), c=colors, s=28, edgecolor="k", lw=0.3
            )
            row += 1
        gate.axhline(row - 0.5, color="grey", lw=0.5)
        row += 0.5
    gate.set_xscale("log")
    gate.set_yticks([y for y, _ in ticks], [name for _, name in ticks], fontsize=8)
    gate.invert_yaxis()
    gate.set_xlabel("training tokens")
    gate.set_title("the report's gate per network (one row per model)", fontsize=9)
    handles = [
        plt.Line2D([], [], ls="", marker="o", mec="k", mew=0.3, color=c) for c in LEARNER_COLORS.values()
    ]
    gate.legend(handles, list(LEARNER_COLORS), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    for column, split in enumerate(SPLIT_TITLES):
        ax = fig.add_subplot(grid[1, column])
        targets: set[str] = set()
        for (k, depth), models in cells.items():
            style = cell_style(ks, k, depth, depths)
            curves = []
            for record in models:
                kept = [n for n in record["networks"] if n["tokens"] and split in n["splits"]]
                shares = {n["tokens"]: n["splits"][split]["gap_closed"] for n in kept}
                shares = {x: y for x, y in shares.items() if y is not None}
                targets.update(n["splits"][split]["target"] for n in kept)
                ax.plot(list(shares), list(shares.values()), lw=0.5, alpha=0.5, **style)
                curves.append(shares)
            shared = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            mean = [float(np.mean([c[x] for c in curves])) for x in shared]
            ax.plot(shared, mean, lw=2, label=f"{cell_name(k, depth)}: mean of {len(models)}", **style)
        target = " or ".join(TARGET_NAMES[name] for name in sorted(targets)) or "the split's best learner"
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        ax.axhline(1, color="grey", lw=0.8, ls=":")
        for level, words in ((0, "the best rung"), (1, target)):
            ax.text(
                0.99, level, words, ha="right", va="bottom", fontsize=7, transform=ax.get_yaxis_transform()
            )
        ax.set_ylim(-1.05, 1.15)  # far below the ladder is clipped: the gate above says where
        ax.set_xscale("log")
        ax.set_xlabel("training tokens")
        ax.set_ylabel(f"share of the way from the best rung\nto {target}")
        ax.set_title(SPLIT_TITLES[split], fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path, tight=False)


def plot_cell_development(records: list[dict], path: str | Path) -> Path:
    """One (K, depth) over training (its models: seeds and HMM draws): per split, each model's KL
    from the split's reference against training tokens (thin), their mean at the steps all share
    (thick), and the mean over the models of every rung's and prior-level Bayes's KL as labelled
    horizontal lines. Step 0 and networks without a token count are left out."""
    from .model import SPLIT_TITLES, development_axes, rung_lines

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), squeeze=False)
    title = cell_name(records[0]["num_tasks"], records[0].get("depth"))
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
        development_axes(ax, reference, f"{title}, {SPLIT_TITLES[split]}")
        ax.legend(fontsize=7, loc="upper right")
    return save_figure(fig, path)
