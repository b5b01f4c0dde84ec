"""The study's decision rule: per claim and depth, holds, contradicted or undecided.

A claim is decided on its effect: the statistic of the trained model minus the same statistic
of its untrained twin (same seed, architecture and rows), one effect per training seed. With
`REQUIRED_SEEDS` seeds or more the verdict is

- holds: the mean effect lies on the claimed side of 0, its 95% t interval across seeds
  excludes 0, and at least `AGREEING_SHARE` of the seeds (5 of 6) have the claimed sign;
- contradicted: the same on the other side;
- undecided: otherwise.

Fewer seeds are always undecided, printed with their number ("undecided (3 seeds)").

The per-seed statistics are continuous, so that a t interval across seeds means something:
the centroid layer of a curve instead of its argmax, the interpolated crossing of a share of a
curve's range instead of the first layer reaching it, a least-squares slope over relative
depth (`centroid`, `crossing`, `slope`).
"""

from __future__ import annotations

import math

import numpy as np

REQUIRED_SEEDS = 6
AGREEING_SHARE = 5 / 6
VERDICTS = ("holds", "contradicted", "undecided")
# t quantiles (0.975) for an across-seed interval with n - 1 degrees of freedom.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def finite(values) -> np.ndarray:
    """The values that are numbers (None and NaN dropped), as float64."""
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)


def across_seeds(values: list[float | None]) -> dict:
    """Mean over seeds with a 95% t interval (none from one seed)."""
    array = finite(values)
    if array.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    mean = float(array.mean())
    if array.size == 1:
        return {"mean": mean, "ci_low": None, "ci_high": None, "n": 1}
    half = T_975.get(array.size - 1, 1.96) * float(array.std(ddof=1)) / math.sqrt(array.size)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": int(array.size)}


def effect(trained: float | None, twin: float | None) -> float | None:
    """The trained model's statistic minus its untrained twin's (None where either is missing)."""
    if trained is None or twin is None or not (math.isfinite(trained) and math.isfinite(twin)):
        return None
    return float(trained) - float(twin)


def decide(effects: list[float | None], direction: int, required_seeds: int = REQUIRED_SEEDS) -> dict:
    """The verdict on one claim at one depth from its per-seed effects.

    `direction` is +1 where the claim says the effect is positive, -1 where negative. Returns
    the verdict, its printed label, the across-seed mean and interval, and how many seeds have
    the claimed sign and the other one.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be +1 (the claim says > 0) or -1 (< 0).")
    values = finite(effects)
    summary = across_seeds(list(values))
    n = int(values.size)
    agree, disagree = int((np.sign(values) == direction).sum()), int((np.sign(values) == -direction).sum())
    verdict = "undecided"
    if n >= required_seeds and summary["ci_low"] is not None:
        needed = math.ceil(AGREEING_SHARE * n - 1e-9)
        excludes_zero = summary["ci_low"] > 0 or summary["ci_high"] < 0
        side = np.sign(summary["mean"]) * direction
        if excludes_zero and side > 0 and agree >= needed:
            verdict = "holds"
        elif excludes_zero and side < 0 and disagree >= needed:
            verdict = "contradicted"
    label = verdict if n >= required_seeds else f"undecided ({n} seed{'s' if n != 1 else ''})"
    return {"verdict": verdict, "label": label, "agree": agree, "disagree": disagree, **summary}


# ---- continuous statistics of a per-layer curve -------------------------------------------------
def slope(depths, values) -> float | None:
    """Least-squares slope of `values` over `depths` (relative depth l/L); None below two points."""
    x, y = np.asarray(depths, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def centroid(depths, values) -> float | None:
    """The depth at the centre of mass of a curve above its own minimum: sum d (v - min) / sum
    (v - min). A flat curve has none (None)."""
    x, y = np.asarray(depths, dtype=np.float64), np.asarray(values, dtype=np.float64)
    weights = y - np.nanmin(y)
    total = np.nansum(weights)
    if not np.isfinite(total) or total <= 0:
        return None
    return float(np.nansum(x * weights) / total)


def crossing(depths, values, share: float = 0.5) -> float | None:
    """The depth at which a curve first reaches min + share * (max - min), interpolated
    linearly between layers. A flat curve has none (None)."""
    x, y = np.asarray(depths, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if not 0 < share < 1:
        raise ValueError(f"share={share} must lie strictly between 0 and 1.")
    if y.size == 0 or not np.isfinite(y).all() or np.ptp(y) == 0:
        return None
    level = y.min() + share * np.ptp(y)
    first = int(np.argmax(y >= level))
    if first == 0:
        return float(x[0])
    before, after = y[first - 1], y[first]
    return float(x[first - 1] + (level - before) / (after - before) * (x[first] - x[first - 1]))
