"""The paper's layerwise claims, each a statistic of the trained network and of its floors.

A model's analyses (Figure 1, the probes and belief probes on three probe splits, the shuffle
test, the rotary knock-out) hold the same curves for the trained model, its untrained twin (same
seed, architecture and rows) and, for the probes, a token-only baseline. `profiles` reads them
into plain per-split profiles; every claim of `CLAIMS` measures one split's profiles
(`Claim.measure`: the own statistic and each floor's, or why it cannot), and `model_statistics`
averages a model's splits. `verdicts.decide_cell` decides a cell's claims across seeds. The
statistics and the rule are fixed here and in docs/study.md before any run they decide.

Depths: hidden-state curves run over layers 0..L (0 = embeddings; the last layer read before a
pre-norm model's final norm), attention curves (shuffle test, knock-out) over layers 1..L; both
are read against relative depth l / L. Layer 1 is left out of the Figure 2 slopes: it is the
only layer whose attention reads tokens alone, and it is reported apart (`layer_one`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from probing.results import ProbeResults

from ..decisions.verdicts import (
    BELOW_LADDER,
    MIN_GAIN,
    NA,
    NOT_TESTABLE,
    across_seeds,
    cross_fitted_fall,
    decide_cells,
    gain_lead,
    slope,
)
from .evaluation import Figure1Result

TESTABLE_MARGIN = 0.02  # a previous-token distance is testable when its peak beats each floor's by this
# The patching claim's preconditions (docs/patching.md, fixed before any record carried readings).
MIN_PATCHED_PAIRS = 32  # rows with a donor of each kind, task and state
SAME_DONOR_TOLERANCE = 1e-6  # nats: the same-donor control must move less
PATCHING_FIGURE = "3 (patching)"  # the causal reading of Figure 3's picture
PROBE_FIGURES = ("3(a)", "3(b)")  # the claims read by probes on each probe split
# Claims that entered the report's family after records were decided without them: reports give
# the verdicts of the family before them too (docs/patching.md).
ADDED_LATER = ("state_carried_lower",)
NETWORKS = ("trained", "twin", "tokens")
# The token-only features of records written before the floors were made free of the label
# (version 2): every block, for the previous-token probes too.
VERSION_2_TOKEN_BLOCKS = ("current_token", "previous_token", "segment", "offset", "segment_bag")
# The blocks that hold the token d back (the previous token, for d = 1) or a set that contains it
# (the bag of the segment's tokens so far): a previous-token floor with one of them is refused.
LABEL_BLOCKS = {
    "previous_token": "the previous token",
    "segment_bag": "the bag of the segment's tokens, the probed one among them",
}


class Missing(Exception):
    """A statistic that cannot be computed: `kind` is `verdicts.NA` (a curve it needs is absent)
    or `verdicts.NOT_TESTABLE` (a precondition fixed in advance fails), `why` says which."""

    def __init__(self, kind: str, why: str):
        super().__init__(why)
        self.kind, self.why = kind, why


@dataclass(frozen=True)
class Claim:
    """One claim: its figure, its words, the statistic that decides it, the sign it predicts, and
    how one split's profiles measure it (`measure(nets) -> (own, {floor: value})`)."""

    key: str
    figure: str
    text: str
    statistic: str
    direction: int  # +1: the paper predicts a positive statistic, -1: a negative one
    measure: Callable[[dict], tuple[float, dict[str, float]]]

    def measured(self, nets: dict) -> dict:
        """`{"own", "floors", "missing"}` of one split's profiles `nets` (network -> profile)."""
        try:
            own, floors = self.measure(nets)
        except Missing as missing:
            return {"own": None, "floors": {}, "missing": {"kind": missing.kind, "why": missing.why}}
        return {"own": own, "floors": floors, "missing": None}


# ---- statistics of one profile ---------------------------------------------------------------------
def _need(profile: dict, key: str, why: str):
    value = profile.get(key)
    if value is None:
        raise Missing(NA, why)
    return value


def on_twin(statistic: Callable[[dict], float]) -> Callable[[dict], tuple[float, dict]]:
    """A claim measured by one statistic of a profile, on the trained network and on its twin."""

    def measure(nets: dict) -> tuple[float, dict]:
        own = statistic(nets["trained"])
        return own, ({} if nets.get("twin") is None else {"twin": statistic(nets["twin"])})

    return measure


def demo_gain(profile: dict) -> float:
    return _need(profile, "demo_gain", "no figure 1")


def position_gain(profile: dict) -> float:
    return _need(profile, "position_gain", "no figure 1")


def slope_above_layer_one(curve: str, absent: str) -> Callable[[dict], float]:
    """Slope over l/L of an attention curve in layers 2..L."""

    def statistic(profile: dict) -> float:
        values = _need(profile, curve, absent)
        if profile["depth"] < 3:
            raise Missing(NA, "fewer than 3 layers")
        return slope(profile["attention_depth"][1:], values[1:])

    return statistic


def _belief(profile: dict, belief: str, metric: str = "log_r2") -> np.ndarray:
    curves = _need(profile, "beliefs", "no belief probes").get(belief)
    if curves is None or curves.get(metric) is None:
        raise Missing(NA, f"no {belief.replace('_', ' ')} probe")
    return np.asarray(curves[metric], dtype=float)


def task_rise(profile: dict) -> float:
    """The task posterior's log-space R² at the last layer minus at layer 1: the rise across
    layers, layer 1's (a bag of tokens reads the task there) reported apart (`layer_one`)."""
    task = _belief(profile, "task_posterior")
    if task.size < 3:
        raise Missing(NA, "fewer than 2 layers")
    return float(task[-1] - task[1])


def measure_task_rises(nets: dict) -> tuple[float, dict]:
    own, floors = on_twin(task_rise)(nets)
    if nets.get("tokens") is not None:  # the token-only features stand in for the last layer
        floors["tokens"] = float(
            _belief(nets["tokens"], "task_posterior")[0] - _belief(nets["trained"], "task_posterior")[1]
        )
    return own, floors


def gains(curve: np.ndarray) -> bool:
    """Whether a curve over layers 0..L rises at least `MIN_GAIN` above its embeddings."""
    return bool(curve.max() - curve[0] >= MIN_GAIN)


def state_before_task(profile: dict) -> float:
    return gain_lead(_belief(profile, "state_filter_per_task"), _belief(profile, "task_posterior"))


def measure_state_before_task(nets: dict) -> tuple[float, dict]:
    """Testable only where both of the trained network's curves gain over its embeddings: a flat
    curve has a share of 1 at every layer, which would make the lead one-sided."""
    trained = nets["trained"]
    for belief, words in (("state_filter_per_task", "state filter"), ("task_posterior", "task posterior")):
        if not gains(_belief(trained, belief)):
            raise Missing(NOT_TESTABLE, f"the {words} gains nothing over the embeddings")
    return on_twin(state_before_task)(nets)


def _previous(profile: dict, curve: str = "all") -> dict[int, np.ndarray]:
    """distance -> accuracy over layers (`curve` "all") or over layers on each half of the
    probe-test rows, each half scored by a probe fitted on its own half of the probe-train rows
    ("halves_apart": `[2, layers]`)."""
    tokens = _need(profile, "previous_tokens", "no previous-token probes")
    if any(curve not in v for v in tokens.values()):
        raise Missing(NA, "both halves scored by one probe (a version-2 record)")
    return {
        int(d): np.asarray(v[curve], dtype=float)
        for d, v in sorted(tokens.items(), key=lambda kv: int(kv[0]))
    }


def label_in_floor(tokens: dict) -> str | None:
    """What in the token-only floor's previous-token features holds the probed token (None: it
    holds none): the features a record names, every block for a record that names none."""
    blocks = tokens.get("features", {}).get("previous_tokens", VERSION_2_TOKEN_BLOCKS)
    held = [words for block, words in LABEL_BLOCKS.items() if block in blocks]
    return "; ".join(held) or None


def previous_token_floor(nets: dict) -> dict | None:
    """The token-only profile as a floor of the previous-token claims: None when absent or when
    its features hold the probed label (`label_in_floor`), which no network could beat."""
    tokens = nets.get("tokens")
    return None if tokens is None or label_in_floor(tokens) is not None else tokens


def measure_falls_with_distance(nets: dict) -> tuple[float, dict]:
    def statistic(profile: dict) -> float:
        peaks = [curve.max() for curve in _previous(profile).values()]
        return float(peaks[0] - peaks[-1])

    own, floors = on_twin(statistic)(nets)
    if nets.get("tokens") is not None:  # refused (None) when it holds the label
        floor = previous_token_floor(nets)
        floors["tokens"] = None if floor is None else statistic(floor)
    return own, floors


def testable_distances(nets: dict, needed: int) -> list[int]:
    """The distances whose peak accuracy lies at least `TESTABLE_MARGIN` above the twin's peak and
    above the token-only floor's; `Missing` (not testable) when fewer than `needed`, or when
    there is no token-only floor free of the label to test them against."""
    if nets.get("twin") is None:
        raise Missing(NA, "no untrained twin")
    floor = previous_token_floor(nets)
    if floor is None:
        raise Missing(NOT_TESTABLE, "no token-only floor free of the probed token")
    trained, twin, tokens = _previous(nets["trained"]), _previous(nets["twin"]), _previous(floor)
    found = [d for d in trained if trained[d].max() - max(twin[d].max(), tokens[d].max()) >= TESTABLE_MARGIN]
    if len(found) < needed:
        raise Missing(
            NOT_TESTABLE,
            f"{len(found)} distance{'s' if len(found) != 1 else ''} peak {TESTABLE_MARGIN} above the twin "
            f"and the token-only floor, {needed} needed",
        )
    return found


def measure_rises_then_falls(nets: dict) -> tuple[float, dict]:
    distances = testable_distances(nets, 1)

    def statistic(profile: dict) -> float:
        halves = _previous(profile, "halves_apart")
        return float(np.mean([cross_fitted_fall(*halves[d]) for d in distances]))

    return statistic(nets["trained"]), {"twin": statistic(nets["twin"])}


def measure_peak_moves_up(nets: dict) -> tuple[float, dict]:
    distances = testable_distances(nets, 2)

    def statistic(profile: dict) -> float:
        curves = _previous(profile)
        return gain_lead(curves[distances[0]], curves[distances[-1]])

    return statistic(nets["trained"]), {"twin": statistic(nets["twin"])}


def measure_state_carried_lower(nets: dict) -> tuple[float, dict]:
    """The activation patching's `state_carried_lower` (`probing.patching`) of the trained network,
    its untrained twin's the floor. Not testable unless the trained network has at least
    `MIN_PATCHED_PAIRS` pairs of the task and of the state donor, both donors' whole effect is
    positive and the same-donor control moves less than `SAME_DONOR_TOLERANCE`; nor where the
    twin's statistic is undefined (a donor of no effect to share): no floor, no test, as for the
    previous-token claims without a token-only floor."""
    model = _need(nets["trained"], "patching", "no activation patching")
    for kind in ("task", "state"):
        donor = model["donors"][kind]
        if donor["pairs"] < MIN_PATCHED_PAIRS:
            raise Missing(
                NOT_TESTABLE, f"{donor['pairs']} pairs of the {kind} donor, {MIN_PATCHED_PAIRS} needed"
            )
        if not (donor["effect_nats"] or 0.0) > 0:
            raise Missing(NOT_TESTABLE, f"the {kind} donor's whole effect is not positive")
    if not model["same_donor_max_nats"] < SAME_DONOR_TOLERANCE:
        raise Missing(NOT_TESTABLE, f"the same-donor control moves {model['same_donor_max_nats']:.2g} nats")
    if model["state_carried_lower"] is None:
        raise Missing(NA, "no site between the embeddings and the last layer")
    twin = (nets.get("twin") or {}).get("patching")
    if twin is None:
        raise Missing(NA, "no untrained twin patched")
    if twin["state_carried_lower"] is None:
        raise Missing(NOT_TESTABLE, "the untrained twin's donors have no effect to share: no floor")
    return model["state_carried_lower"], {"twin": twin["state_carried_lower"]}


CLAIMS = (
    Claim(
        "demonstrations",
        "1",
        "accuracy rises with the number of demonstrations",
        "accuracy with all demonstrations minus none",
        1,
        on_twin(demo_gain),
    ),
    Claim(
        "test_position",
        "1",
        "accuracy rises along the test sequence",
        "accuracy on the second half minus test tokens 1..n-1, demonstration ends left out",
        1,
        on_twin(position_gain),
    ),
    Claim(
        "position_slope",
        "2",
        "upper layers' attention depends less on position",
        "slope over l/L of the shuffle test's position-only change, layers 2..L",
        -1,
        on_twin(slope_above_layer_one("shuffle_position_only", "no shuffle test")),
    ),
    Claim(
        "rotary_knockout_slope",
        "2",
        "switching rotary off hurts upper layers less",
        "slope over l/L of the NLL increase with one layer's rotary off, layers 2..L",
        -1,
        on_twin(slope_above_layer_one("knockout_nll", "no knock-out")),
    ),
    Claim(
        "task_rises",
        "3(a)",
        "the task posterior becomes linearly decodable across layers",
        "log-space R² of the task posterior on demonstration 1, last layer minus layer 1",
        1,
        measure_task_rises,
    ),
    Claim(
        "state_before_task",
        "3(a)",
        "the hidden state is decoded before the task",
        "layers by which the state filter (per task) reaches its gain before the task posterior, demonstration 1",
        1,
        measure_state_before_task,
    ),
    Claim(
        "falls_with_distance",
        "3(b)",
        "previous tokens are decoded less well the further back they are",
        "peak accuracy, nearest minus farthest token",
        1,
        measure_falls_with_distance,
    ),
    Claim(
        "rises_then_falls",
        "3(b)",
        "previous-token accuracy rises, then falls in upper layers",
        "cross-fitted fall from the peak to the last layer, mean over testable distances",
        1,
        measure_rises_then_falls,
    ),
    Claim(
        "peak_moves_up",
        "3(b)",
        "the layer decoding a token moves up with its distance",
        "layers by which the nearest testable token reaches its gain before the farthest",
        1,
        measure_peak_moves_up,
    ),
    Claim(
        "state_carried_lower",
        PATCHING_FIGURE,
        "the state is carried below the task",
        "activation patching: mean over inner sites of the state donor's share minus the task donor's",
        1,
        measure_state_carried_lower,
    ),
)


def claim_words() -> list[dict]:
    """Every claim's key, figure, words, statistic and predicted sign, as the reports list them."""
    return [
        {
            "key": c.key,
            "figure": c.figure,
            "claim": c.text,
            "statistic": c.statistic,
            "direction": c.direction,
        }
        for c in CLAIMS
    ]


def model_statistics(splits: list[dict], patching: dict | None = None) -> dict[str, dict]:
    """`key -> {"own", "floors", "missing", "own_by_split"}` of one model: every claim measured on
    each split's profiles (`splits`: network -> profile, one dict per probe split) and averaged
    over the splits; missing when any split misses it. `patching`: the model's activation
    patching (`probing.patching.PatchingResult.to_dict`; None where it was not patched), on rows
    of its own, the same in every split (`with_patching`)."""
    splits = with_patching(splits, patching)
    out = {}
    for claim in CLAIMS:
        found = [claim.measured(nets) for nets in splits]
        missing = next((f["missing"] for f in found if f["missing"] is not None), None)
        if missing is not None:
            out[claim.key] = {"own": None, "floors": {}, "missing": missing, "own_by_split": []}
            continue
        floors = sorted(set.intersection(*(set(f["floors"]) for f in found)))
        out[claim.key] = {
            "own": float(np.mean([f["own"] for f in found])),
            "floors": {name: _split_mean([f["floors"][name] for f in found]) for name in floors},
            "missing": None,
            "own_by_split": [f["own"] for f in found],
        }
    return out


def with_patching(splits: list[dict], patching: dict | None) -> list[dict]:
    """The probe splits' profiles with the activation patching's readings beside them: the
    model's in the trained network's profile, the control's in the twin's (`splits` unchanged)."""
    if patching is None:
        return splits
    readings = {"trained": patching["model"], "twin": patching["control"]}
    return [
        {
            network: {**profile, "patching": readings[network]} if network in readings else profile
            for network, profile in nets.items()
        }
        for nets in splits
    ]


def _split_mean(values: list[float | None]) -> float | None:
    """The mean over probe splits of a floor's statistic; None (refused) when any split refused it."""
    return None if any(v is None for v in values) else float(np.mean(values))


def counted(statistics: dict[str, dict], past_ladder: bool, draw: int = 0) -> dict[str, dict]:
    """A model's statistics (`model_statistics`) as the rule counts them, tagged with its corpus
    draw: Figure 1's behavioural claims always, the layerwise ones (Figures 2, 3(a), 3(b), the patching) only
    for a model past the in-context ladder (`ladder_gate`); below it they are not testable,
    unless the model has no such curve at all (n/a says why: a GPT-2 has no shuffle test)."""
    out = {}
    for claim in CLAIMS:
        statistic = statistics[claim.key]
        absent = (statistic.get("missing") or {}).get("kind") == NA
        if not past_ladder and claim.figure != "1" and not absent:
            statistic = {
                "own": None,
                "floors": {},
                "missing": {"kind": NOT_TESTABLE, "why": BELOW_LADDER},
                "own_by_split": [],
            }
        out[claim.key] = {**statistic, "draw": draw}
    return out


# ---- profiles from a model's analyses -------------------------------------------------------------
def demonstration_ends(test_length: int, demo_length: int) -> np.ndarray:
    """`[test_length]` bool: the test positions where a demonstration would end (multiples of the
    demonstration length), where a model trained on the layout expects a delimiter."""
    position = np.arange(test_length)
    return (position > 0) & (position % demo_length == 0)


def figure1_profile(figure1: Figure1Result, name: str) -> dict:
    """A predictor's gain from demonstrations and along the test sequence (Figure 1's curves):
    the second half of the test sequence against tokens 1..n-1, demonstration ends left out."""
    counts, accuracy = figure1.demo_counts, figure1.by_num_demos[name]["accuracy"]
    position = np.asarray(figure1.by_test_position[name], dtype=float)
    demo_length = figure1.layout["demo_length"]
    keep = ~demonstration_ends(position.size, demo_length)
    early = np.zeros_like(keep)
    early[1:demo_length] = True
    late = np.zeros_like(keep)
    late[position.size // 2 :] = True
    return {
        "demo_gain": accuracy[counts.index(max(counts))] - accuracy[counts.index(0)],
        "position_gain": float(np.nanmean(position[late & keep]) - np.nanmean(position[early & keep])),
    }


def attention_profile(probes: ProbeResults, knockout: dict | None, network: str) -> dict:
    """The shuffle test's per-layer parts and the knock-out's damage of one network."""
    key = "figure2" if network == "trained" else "figure2_untrained"
    shuffle = probes.patterns.get(key, {}).get("by_part")
    return {
        "shuffle_position_only": None if shuffle is None else shuffle["position_only"]["per_layer_mean"],
        "shuffle_total": None if shuffle is None else shuffle["total"]["per_layer_mean"],
        "knockout_nll": None if knockout is None else knockout[network]["delta_nll"]["value"],
        "knockout_kl": None if knockout is None else knockout[network]["delta_kl"]["value"],
    }


def profiles(
    figure1: Figure1Result | None, probes: ProbeResults, knockout: dict | None, depth: int
) -> list[dict]:
    """One dict per probe split, network ("trained", "twin", "tokens") -> profile: the plain curves
    every claim reads. The twin is absent from a run without the control; the token-only
    baseline has probe curves only (one value per curve)."""
    splits = []
    for curves in probes.splits["curves"]:
        nets = {}
        for network in NETWORKS:
            if curves.get(network) is None:
                continue
            profile = {
                "depth": depth,
                "attention_depth": [layer / depth for layer in range(1, depth + 1)],
                "probe_depth": probes.relative_depth,
                **curves[network],
            }
            if network != "tokens":
                name = "model" if network == "trained" else "twin"
                profile.update(figure1_profile(figure1, name) if figure1 is not None else {})
                profile.update(attention_profile(probes, knockout, network))
            nets[network] = profile
        splits.append(nets)
    return splits


def layer_one(profile: dict) -> dict:
    """What the slopes and the task's rise leave out: layer 1's position-only change, knock-out
    damage and rise of the task posterior's log-space R² over the embeddings."""
    knockout, shuffle = profile.get("knockout_nll"), profile.get("shuffle_position_only")
    task = ((profile.get("beliefs") or {}).get("task_posterior") or {}).get("log_r2")
    return {
        "shuffle_position_only": None if shuffle is None else shuffle[0],
        "knockout_nll": None if knockout is None else knockout[0],
        "task_rise": None if task is None or len(task) < 2 else float(task[1] - task[0]),
    }


# ---- deciding --------------------------------------------------------------------------------------
def decide_claims(per_seed: list[dict[str, dict]]) -> list[dict]:
    """The claims of one cell, as the only cell of its report (`decide_report`)."""
    return decide_report([per_seed])[0]


def claims_before_added() -> tuple[Claim, ...]:
    """The report's family before the claims `ADDED_LATER` entered it."""
    return tuple(claim for claim in CLAIMS if claim.key not in ADDED_LATER)


def decide_report(cells: list[list[dict[str, dict]]], claims: tuple[Claim, ...] = CLAIMS) -> list[list[dict]]:
    """Every claim (of `claims`) of every cell of a report decided by the rule
    (`verdicts.decide_cells`, Holm across all of them), from each cell's per-seed statistics
    (`model_statistics`, or `counted` with the ladder gate and the draw): per cell, per claim its
    words, its tests and verdict, and the spread of its own statistic across probe splits (max
    minus min, across seeds; none for the claims that read no probe)."""
    decided = decide_cells(
        [
            [([seed[claim.key] for seed in per_seed], claim.direction) for claim in claims]
            for per_seed in cells
        ]
    )
    return [claim_rows(per_seed, rows, claims) for per_seed, rows in zip(cells, decided)]


def claim_rows(
    per_seed: list[dict[str, dict]], decided: list[dict], claims: tuple[Claim, ...] = CLAIMS
) -> list[dict]:
    """One cell's decided claims (`decided`, in `claims` order) with their words, per-seed own
    statistics and spread across probe splits."""
    rows = []
    for claim, tests in zip(claims, decided):
        spreads = [
            np.ptp(s[claim.key]["own_by_split"])
            for s in per_seed
            if s[claim.key]["own_by_split"] and claim.figure in PROBE_FIGURES
        ]
        rows.append(
            {
                "key": claim.key,
                "figure": claim.figure,
                "claim": claim.text,
                "statistic": claim.statistic,
                "direction": claim.direction,
                "per_seed": [s[claim.key]["own"] for s in per_seed],
                "split_spread": across_seeds([float(s) for s in spreads]),
                **tests,
            }
        )
    return rows
