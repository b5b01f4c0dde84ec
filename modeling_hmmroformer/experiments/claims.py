"""The paper's layerwise claims as effects over the untrained twin, one statistic each.

A model's analyses (Figure 1, the probes and the shuffle test, the rotary knock-out) hold the
same curves for the trained model and for its untrained twin (same seed, architecture and
rows). `profiles` reads both into one plain form; every claim of `CLAIMS` is a statistic of a
profile with the direction the paper predicts, and its effect is the trained profile's value
minus the twin's (`claim_effects`). `verdicts.decide` turns a depth's per-seed effects into
holds / contradicted / undecided. The statistics are fixed here, before any run they decide.

Depths: hidden-state curves (probes) run over layers 0..L (0 = embeddings), attention curves
(shuffle test, knock-out) over layers 1..L; both are read against relative depth l / L.
Layer 1 is left out of the Figure 2 slopes: it is the only layer whose attention reads tokens
alone, and it is reported apart (`layer_one`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from probing.layerwise import curve

from .verdicts import centroid, crossing, effect, slope

DECIDING_POSITIONS = "demo1"  # Figure 3(a): the first demonstration, where the task is still uncertain


@dataclass(frozen=True)
class Claim:
    """One claim: its figure, its words, the statistic that decides it and the sign it predicts."""

    key: str
    figure: str
    text: str
    statistic: str
    direction: int  # +1: the paper predicts a positive effect, -1: a negative one
    compute: Callable[[dict], float | None]


def _upper_layers(profile: dict, curve: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(relative depths, values) of an attention curve in layers 2..L, or None without it."""
    values = profile.get(curve)
    if values is None:
        return None
    return np.asarray(profile["attention_depth"][1:]), np.asarray(values[1:], dtype=float)


def _slope_above_layer_one(curve: str) -> Callable[[dict], float | None]:
    def compute(profile: dict) -> float | None:
        found = _upper_layers(profile, curve)
        return None if found is None else slope(*found)

    return compute


def _belief(profile: dict, belief: str) -> np.ndarray | None:
    values = profile["belief_r2"].get(belief, {}).get(DECIDING_POSITIONS)
    return None if values is None else np.asarray(values, dtype=float)


def task_rise(profile: dict) -> float | None:
    """R² of the task posterior at the last layer minus at the embeddings (first demonstration)."""
    task = _belief(profile, "task_posterior")
    return None if task is None else float(task[-1] - task[0])


def state_before_task(profile: dict) -> float | None:
    """Relative depth at which the task posterior's R² crosses half its range minus the state
    filter's (first demonstration): positive when the state is decoded first."""
    task, state = _belief(profile, "task_posterior"), _belief(profile, "state_filter")
    if task is None or state is None:
        return None
    depths = profile["probe_depth"]
    task_at, state_at = crossing(depths, task), crossing(depths, state)
    return None if task_at is None or state_at is None else task_at - state_at


def _previous(profile: dict) -> tuple[np.ndarray, np.ndarray]:
    """(distances, accuracy [distances, layers]) of the previous-token probes."""
    tokens = profile["previous_tokens"]
    distances = sorted(tokens, key=int)
    return np.asarray([int(d) for d in distances]), np.asarray([tokens[d] for d in distances], dtype=float)


def accuracy_falls_with_distance(profile: dict) -> float | None:
    """Peak accuracy (over layers) of the nearest token back minus the farthest's."""
    _, accuracy = _previous(profile)
    return float(accuracy[0].max() - accuracy[-1].max())


def rises_then_falls(profile: dict) -> float | None:
    """Mean over distances of min(peak - embeddings, peak - last layer): positive only where a
    curve both rises from layer 0 and falls again by the last layer."""
    _, accuracy = _previous(profile)
    peak = accuracy.max(1)
    return float(np.minimum(peak - accuracy[:, 0], peak - accuracy[:, -1]).mean())


def peak_moves_up(profile: dict) -> float | None:
    """Centroid depth (`verdicts.centroid`) of the farthest token's curve minus the nearest's."""
    _, accuracy = _previous(profile)
    far, near = centroid(profile["probe_depth"], accuracy[-1]), centroid(profile["probe_depth"], accuracy[0])
    return None if far is None or near is None else far - near


CLAIMS = (
    Claim(
        "demonstrations",
        "1",
        "accuracy rises with the number of demonstrations",
        "accuracy with all demonstrations minus none",
        1,
        lambda profile: profile["demo_gain"],
    ),
    Claim(
        "test_position",
        "1",
        "accuracy rises along the test sequence",
        "accuracy on the second half minus test tokens 1..8",
        1,
        lambda profile: profile["position_gain"],
    ),
    Claim(
        "position_slope",
        "2",
        "upper layers' attention depends less on position",
        "slope over l/L of the shuffle test's position-only change, layers 2..L",
        -1,
        _slope_above_layer_one("shuffle_position_only"),
    ),
    Claim(
        "rotary_knockout_slope",
        "2",
        "switching rotary off hurts upper layers less",
        "slope over l/L of the NLL increase with one layer's rotary off, layers 2..L",
        -1,
        _slope_above_layer_one("knockout_nll"),
    ),
    Claim(
        "task_rises",
        "3(a)",
        "the task posterior becomes linearly decodable across layers",
        "R² of the task posterior on demonstration 1, last layer minus embeddings",
        1,
        task_rise,
    ),
    Claim(
        "state_before_task",
        "3(a)",
        "the hidden state is decoded before the task",
        "half-range crossing depth on demonstration 1, task posterior minus state filter",
        1,
        state_before_task,
    ),
    Claim(
        "falls_with_distance",
        "3(b)",
        "previous tokens are decoded less well the further back they are",
        "peak accuracy, nearest minus farthest token",
        1,
        accuracy_falls_with_distance,
    ),
    Claim(
        "rises_then_falls",
        "3(b)",
        "previous-token accuracy rises, then falls in upper layers",
        "min(peak - embeddings, peak - last layer), mean over distances",
        1,
        rises_then_falls,
    ),
    Claim(
        "peak_moves_up",
        "3(b)",
        "the layer decoding a token moves up with its distance",
        "centroid depth, farthest minus nearest token",
        1,
        peak_moves_up,
    ),
)


def claim_effects(trained: dict, twin: dict) -> dict[str, dict]:
    """`key -> {"trained", "twin", "effect"}` for every claim of `CLAIMS`."""
    out = {}
    for claim in CLAIMS:
        mine, theirs = claim.compute(trained), claim.compute(twin)
        out[claim.key] = {"trained": mine, "twin": theirs, "effect": effect(mine, theirs)}
    return out


# ---- profiles from a model's analyses ----------------------------------------------------------------
def figure1_profile(figure1: dict, name: str) -> dict:
    """A predictor's gain from demonstrations and along the test sequence (`figure1.json`)."""
    counts, accuracy = figure1["demo_counts"], figure1["by_num_demos"][name]["accuracy"]
    position = np.asarray(figure1["by_test_position"][name], dtype=float)
    early, late = slice(1, 1 + figure1["early_tokens"]), slice(len(position) // 2, None)
    return {
        "demo_gain": accuracy[counts.index(max(counts))] - accuracy[counts.index(0)],
        "position_gain": float(np.nanmean(position[late]) - np.nanmean(position[early])),
    }


def probe_curve(records: list[dict], target: str, metric: str, positions: str = "all") -> list[float]:
    """A per-layer probe metric (no head), in layer order, as a list (`probing.layerwise.curve`)."""
    return curve(records, target, metric, positions)["value"].tolist()


def probes_profile(probes: dict, prefix: str) -> dict:
    """The probe curves of the model (`prefix` "") or its twin ("untrained_") in `probe_results.json`."""
    records = probes["records"]
    accuracy = "untrained_accuracy" if prefix else "accuracy"
    beliefs = sorted({r["target"][len("belief_") :] for r in records if r["target"].startswith("belief_")})
    groups = sorted({r.get("positions", "all") for r in records if r["target"].startswith("belief_")})
    shuffle = probes["patterns"]["figure2_untrained" if prefix else "figure2"]["by_part"]
    return {
        "probe_depth": probes["relative_depth"],
        "previous_tokens": {
            str(d): probe_curve(records, f"previous_token_{d}", accuracy)
            for d in probes["settings"]["distances"]
        },
        "belief_r2": {
            belief: {
                group: probe_curve(records, f"belief_{belief}", f"{prefix}r2", group) for group in groups
            }
            for belief in beliefs
        },
        "shuffle_position_only": shuffle["position_only"]["per_layer_mean"],
        "shuffle_total": shuffle["total"]["per_layer_mean"],
    }


def profiles(figure1: dict, probes: dict, knockout: dict | None, depth: int) -> dict[str, dict]:
    """`{"trained": profile, "twin": profile}` of one model from its analyses; a profile is the
    plain curves every claim's statistic reads."""
    out = {}
    for network, name, prefix in (("trained", "model", ""), ("twin", "twin", "untrained_")):
        out[network] = {
            "depth": depth,
            "attention_depth": [layer / depth for layer in range(1, depth + 1)],
            **figure1_profile(figure1, name),
            **probes_profile(probes, prefix),
            "knockout_nll": None if knockout is None else knockout[network]["delta_nll"]["value"],
            "knockout_kl": None if knockout is None else knockout[network]["delta_kl"]["value"],
        }
    return out


def layer_one(profile: dict) -> dict:
    """What Figure 2's slopes leave out: layer 1's position-only change and knock-out damage."""
    knockout = profile.get("knockout_nll")
    return {
        "shuffle_position_only": profile["shuffle_position_only"][0],
        "knockout_nll": None if knockout is None else knockout[0],
    }
