"""One model's figures, drawn from its results' plain data: Figure 1, its memory, Lemma 1 (the
depth-and-seed study draws its own in `figures.study`, the reports across studies in
`figures.across`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hmm_datasets.files import write_json
from hmm_datasets.memory import FIT_FLOOR
from probing.figures import pyplot, save_figure

from .. import names

# ---- one model: Figure 1, its memory, Lemma 1 --------------------------------------------------
LINES = {"model": ("C0", "-"), "bayes": ("k", "--"), "oracle": ("0.5", ":")}  # other predictors: dash-dot


def plot_figure1(result: dict, path: str | Path) -> Path:
    """Three panels: early and all-token accuracy vs demonstrations, accuracy vs test position."""
    labels = result.get("labels", {})
    fig, axes = pyplot().subplots(1, 3, figsize=(15, 4.2))
    x = np.arange(len(result["demo_counts"]))
    others = iter(f"C{i}" for i in range(2, 10))
    for name in result["by_num_demos"]:
        color, line = LINES.get(name) or (next(others), "-.")
        style = {"color": color, "label": labels.get(name, name)}
        axes[0].plot(x, result["by_num_demos"][name]["early_accuracy"], line, marker="o", **style)
        axes[1].plot(x, result["by_num_demos"][name]["accuracy"], line, marker="o", **style)
        axes[2].plot(result["by_test_position"][name], line, **style)
    for ax, title in zip(axes[:2], (f"test tokens 1..{result['early_tokens']}", "all test tokens")):
        ax.set_xticks(x, [str(m) for m in result["demo_counts"]])
        ax.set_xlabel("number of demonstrations")
        ax.set_title(f"accuracy vs demonstrations ({title})")
    axes[2].set_xlabel("position in the test sequence")
    axes[2].set_title("accuracy vs test position (all demonstrations)")
    axes[0].set_ylabel("top-1 accuracy")
    axes[2].legend(loc="lower right", fontsize=8)
    return save_figure(fig, path)


def plot_model_memory(result: dict, path: str | Path) -> Path:
    """Per memory L: the memory-L Bayes predictor's TV to the full one (every memory evaluated)
    and the model's TV to the memory-L Bayes predictor, with the model's TV to the full one as a
    line and its memory (`memory_equivalent`) where that line meets the first curve."""
    plt = pyplot()
    equivalent = result["memory_equivalent"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    tv = np.asarray(equivalent["tv_bayes_memory_vs_full"])
    shown = tv > FIT_FLOOR  # a log axis cannot show exact zeros
    ax.plot(
        np.asarray(equivalent["memories"])[shown], tv[shown], "o-", label="TV(memory-L Bayes, full Bayes)"
    )
    ax.plot(result["memories"], result["tv_full_vs_bayes_memory"], "s-", label="TV(model, memory-L Bayes)")
    ax.axhline(result["full_vs_bayes"]["tv"], color="grey", ls="--", label="TV(model, full Bayes)")
    if equivalent["interpolated"] is not None:
        ax.axvline(equivalent["interpolated"], color="grey", ls=":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(result["memories"], [str(m) for m in result["memories"]])
    ax.set_xlabel("memory L (tokens)")
    ax.set_ylabel("mean total variation")
    found = equivalent["memory"]
    memory = f"> {equivalent['longest_searched']}" if found is None else f"{equivalent['interpolated']:.1f}"
    ax.set_title(f"the model predicts as well as memory-L Bayes at L = {memory}", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


VARIANTS = {
    "mixture": ("C0", "Bayes-optimal, memory L vs full"),
    "oracle": ("C1", "oracle, memory L vs full"),
}


def _plot_tv(ax, memories: np.ndarray, curve: dict, color, label: str) -> float:
    """One variant's mean TV with its interval and fitted line on a log axis; returns the smallest TV shown."""
    tv = np.asarray(curve["tv"], dtype=float)
    shown = tv > FIT_FLOOR  # below: equal up to rounding, and a log axis cannot show zeros
    low, high = np.asarray(curve["tv_ci_low"]), np.asarray(curve["tv_ci_high"])
    yerr = [(tv - low)[shown], (high - tv)[shown]]
    ax.errorbar(memories[shown], tv[shown], yerr=yerr, fmt="o-", color=color, label=label, capsize=3)
    fit = curve["fit"]
    if fit["rate"] is not None:
        grid = np.linspace(min(fit["memories"]), max(fit["memories"]), 50)
        r2 = "" if fit["r2"] is None else f", R² {fit['r2']:.2f}"
        ax.plot(
            grid,
            fit["C"] * np.exp(-fit["rate"] * grid),
            "--",
            color=color,
            label=f"fit: rate {fit['rate']:.3f}/token{r2}",
        )
    return float(tv[shown].min(initial=np.inf))


PER_TASK = {
    "oracle_per_task": "C1",  # the corpus
    "low_rank_oracle_per_task": "C2",  # its low-rank variant
}


def _rank_label(block: dict) -> str:
    """`full rank` or `rank d`, with the Spearman correlation of rate and observability."""
    rank = "full rank" if block["transition_rank"] is None else f"rank {block['transition_rank']}"
    rho = block["rate_observability_spearman"]
    return f"{rank} (Spearman {'n/a' if rho is None else f'{rho:.2f}'})"


def _plot_rates(ax, result: dict) -> None:
    """Per task, the oracle's fitted decay rate against its observability coefficient, for the
    corpus and its low-rank variant (horizontal bars: lower to upper bound, where not exact)."""
    blocks = [(result[key], color) for key, color in PER_TASK.items() if result.get(key)]
    shown = []
    for block, color in blocks:
        records = [record for record in block["tasks"] if record["fit"]["rate"] is not None]
        if not records:
            continue
        x = np.array([record["observability"] for record in records])
        upper = np.array([record["observability_upper"] for record in records])
        rates = [record["fit"]["rate"] for record in records]
        ax.errorbar(
            x,
            rates,
            xerr=[np.zeros_like(x), upper - x],
            fmt="o",
            color=color,
            alpha=0.8,
            label=_rank_label(block),
        )
        shown.extend(x)
    if not shown:
        ax.text(0.5, 0.5, "no per-task decay rate to show", ha="center", va="center", transform=ax.transAxes)
    elif min(shown) > 0:
        ax.set_xscale("log")
    ax.set_xlabel("observability coefficient γ (Assumption 2)")
    ax.set_ylabel("fitted decay rate per token (oracle, one task)")
    ax.set_title("Lemma 1 per HMM: rate vs observability")
    if shown:
        ax.legend(fontsize=8)


def plot_lemma1(result: dict, path: str | Path) -> Path:
    """Mean TV vs L on a log axis with the fitted C exp(-rate L) lines (left), argmax agreement vs L
    (middle), and per task the oracle's decay rate vs the task's observability coefficient (right)."""
    plt = pyplot()
    memories = np.asarray(result["memories"])
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.2))
    smallest = np.inf
    for name, (color, label) in VARIANTS.items():
        smallest = min(smallest, _plot_tv(left, memories, result[name], color, label))
        middle.plot(memories, result[name]["agreement"], "o-", color=color, label=label)
    left.set_yscale("log")
    if np.isfinite(smallest):  # interval ends near zero would stretch the axis to the rounding floor
        left.set_ylim(bottom=smallest / 30)
    left.set_ylabel("mean total variation to the full predictor")
    left.set_title("Lemma 1: distance vs memory")
    middle.set_ylabel("top-1 agreement with the full predictor")
    middle.set_title("argmax agreement vs memory")
    for ax in (left, middle):
        ax.set_xlabel("memory L (tokens)")
        ax.legend(fontsize=8)
    _plot_rates(right, result)
    return save_figure(fig, path)


# ---- a figure with its numbers: JSON and PNG side by side in a folder ---------------------------
def write_figure1(result: dict, out: str | Path) -> dict[str, Path]:
    """`figure1.json` and `figure1.png` of `evaluation.figure1`'s result (its JSON form,
    `Figure1Result.to_dict`) in `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = write_json(out / names.FIGURE1_JSON, result)
    return {"json": json_path, "png": plot_figure1(result, out / names.FIGURE1_PNG)}


def write_lemma1(result: dict, folder: str | Path) -> dict[str, Path]:
    """`lemma1.json` and `lemma1.png` of `memory.corpus_lemma1`'s result in `folder`."""
    folder = Path(folder)
    json_path = write_json(folder / names.LEMMA1_JSON, result)
    return {"json": json_path, "png": plot_lemma1(result, folder / names.LEMMA1_PNG)}


def write_model_memory(result: dict, folder: str | Path) -> dict[str, Path]:
    """`memory.json` and `memory.png` of `memory.model_memory`'s result in `folder`."""
    folder = Path(folder)
    json_path = write_json(folder / names.MEMORY_JSON, result)
    return {"json": json_path, "png": plot_model_memory(result, folder / names.MEMORY_PNG)}


# ---- a model over training (`development.Development`) -----------------------------------------
PHASE_COLORS = {"retrieval": "C0", "inference": "C1"}  # the rungs: grey to black, lowest rung lightest
SPLIT_TITLES = {"test": "seen tasks", "test_unseen": "unseen tasks"}


def phase_color(label: str) -> str:
    """The colour of a phase label: retrieval, inference, or a rung of the ladder (greys)."""
    from hmm_datasets.predictors import IN_CONTEXT

    if label in PHASE_COLORS:
        return PHASE_COLORS[label]
    return str(0.75 - 0.6 * list(IN_CONTEXT).index(label) / max(1, len(IN_CONTEXT) - 1))


LABEL_GAP = 0.045  # the least distance of two line labels, in fractions of the axis's height


def rung_lines(ax, levels: dict[str, float], reference: str) -> None:
    """Each predictor's KL from `reference` (the rungs, mixture, prior; `reference` itself left
    out) as a horizontal line, prior-level Bayes in its own colour, labelled at the right edge;
    labels of lines nearer than `LABEL_GAP` are spread apart (`spread_labels`), each with a tick
    to its line. Call it after the curves: it fixes the y limits it placed the labels for."""
    drawn = {name: kl for name, kl in levels.items() if name != reference}
    for name, kl in drawn.items():
        ax.axhline(kl, color="C1" if name == "prior" else "grey", ls=":", lw=0.8)
    ax.autoscale_view()
    low, high = ax.get_ylim()
    ax.set_ylim(low, high)
    order = sorted(drawn, key=drawn.get)
    wanted = [(drawn[name] - low) / (high - low) for name in order]
    for name, at, placed in zip(order, wanted, spread_labels(wanted, LABEL_GAP)):
        ax.annotate(
            f" {name}",
            xy=(1.0, at),
            xytext=(1.02, placed),
            xycoords="axes fraction",
            textcoords="axes fraction",
            va="center",
            fontsize=7,
            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "grey"},
        )


def spread_labels(positions: list[float], gap: float) -> list[float]:
    """Ascending positions moved apart until neighbours are at least `gap` apart: each pushed
    above the one below it, then all shifted down by half the top one's push, so the labels sit
    around their lines rather than above them."""
    placed: list[float] = []
    for at in positions:
        placed.append(max(at, placed[-1] + gap) if placed else at)
    shift = (placed[-1] - positions[-1]) / 2 if placed else 0.0
    return [at - shift for at in placed]


def development_axes(ax, reference: str, title: str) -> None:
    """A development panel's axes: training tokens (log) against KL from the split's reference."""
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel(f"KL({reference} ‖ network) on test tokens, nats/token")
    ax.set_title(title, fontsize=9)


def plot_development(development: dict, path: str | Path) -> Path:
    """Per split, the network's KL from the split's reference, from mixture Bayes and from
    prior-level Bayes against training tokens (log scale; step 0 and networks without a token
    count are left out), the reference's points coloured by their phase label; every rung of
    the ladder and prior-level Bayes as a horizontal line on the reference's scale."""
    plt = pyplot()
    networks = [n for n in development["networks"] if n["tokens"]]
    splits = [s for s in SPLIT_TITLES if networks and all(s in n["splits"] for n in networks)]
    fig, axes = plt.subplots(1, max(1, len(splits)), figsize=(6.5 * max(1, len(splits)), 4.5), squeeze=False)
    tokens = [n["tokens"] for n in networks]
    for ax, split in zip(axes[0], splits):
        places = [n["splits"][split] for n in networks]
        reference = places[0]["reference"]
        curves = {
            reference: "-",
            **{name: style for name, style in (("mixture", "--"), ("prior", ":")) if name != reference},
        }
        for name, style in curves.items():
            if all(name in p["distances"] for p in places):
                values = [p["distances"][name] for p in places]
                ax.plot(tokens, values, style, color="k", lw=1, label=f"KL({name} ‖ network)")
        for x, place in zip(tokens, places):
            ax.scatter(x, place["distances"][reference], color=phase_color(place["label"]), zorder=3, s=30)
        rung_lines(ax, development["ladder"][split]["references"][reference], reference)
        development_axes(ax, reference, f"{development['corpus']}, {SPLIT_TITLES[split]}")
        labels = sorted({p["label"] for p in places})
        handles = [plt.Line2D([], [], ls="", marker="o", color=phase_color(label)) for label in labels]
        ax.add_artist(ax.legend(handles, labels, title="nearest", fontsize=7, loc="upper right"))
        ax.legend(fontsize=7, loc="lower left")
    return save_figure(fig, path)


def write_development(record: dict, path: str | Path) -> dict[str, Path]:
    """A development record (`development.Development.to_dict`) as JSON at `path`, its figure
    (`plot_development`) beside it as development.png."""
    path = Path(path)
    return {
        "json": write_json(path, record),
        "png": plot_development(record, path.with_name(names.DEVELOPMENT_PNG)),
    }
