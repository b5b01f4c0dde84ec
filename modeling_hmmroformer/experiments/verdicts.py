"""The study's decision rule: per claim and cell, holds, contradicted, not testable or undecided.

A claim's statistic is measured on the trained network ("own") and on its floors (the untrained
twin; for probe and belief claims a token-only baseline), one value per training seed. In a cell
(a corpus and depth) with `REQUIRED_SEEDS` seeds or more, a claim

- holds: its own statistic lies on the claimed side in at least `AGREEING_SHARE` of the seeds (5
  of 6), the mean own statistic and the mean effect (own minus floor) over every floor lie on the
  claimed side, and its p-value is below `ALPHA` after Holm's adjustment across the claims of the
  cell; its p-value is the largest of its tests (two-sided one-sample t of the own statistic and
  of each effect), since it needs all of them;
- is contradicted: its own statistic on the other side in 5 of 6 seeds, and the own test's p
  (the one Holm adjusts for such a claim) below `ALPHA` after Holm;
- is not testable: a precondition fixed in advance fails in so many seeds that fewer than
  `REQUIRED_SEEDS` remain;
- is n/a: no seed has the curves its statistic needs;
- is undecided otherwise, printed with the number of seeds below `REQUIRED_SEEDS`.

A floor whose statistic is 0 to within `VACUOUS` in every seed is vacuous for that claim (the
twin's rotary knock-out changes nothing) and is left out. Plain numbers in, plain dicts out.
"""

from __future__ import annotations

import math

import numpy as np

REQUIRED_SEEDS = 6
AGREEING_SHARE = 5 / 6
ALPHA = 0.05
VACUOUS = 1e-6
MIN_GAIN = 0.02  # a curve gaining less over its embeddings is decoded there already (shares of gain)
VERDICTS = ("holds", "contradicted", "not testable", "n/a", "undecided")
NA, NOT_TESTABLE = "n/a", "not testable"  # the kinds of a missing per-seed statistic
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


def effect(own: float | None, floor: float | None) -> float | None:
    """The own statistic minus a floor's (None where either is missing)."""
    if own is None or floor is None or not (math.isfinite(own) and math.isfinite(floor)):
        return None
    return float(own) - float(floor)


# ---- p-values ---------------------------------------------------------------------------------
def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (continued fraction, Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the continued fraction converges fast on this side only
        return 1.0 - regularized_beta(1.0 - x, b, a)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a) - log_beta(a, b)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction


def log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom."""
    return regularized_beta(df / (df + t * t), df / 2, 0.5)


def one_sample_p(values) -> float | None:
    """Two-sided one-sample t-test p of mean 0 (None below two values; 0 or 1 without spread)."""
    array = finite(values)
    if array.size < 2:
        return None
    spread = float(array.std(ddof=1))
    if spread == 0:
        return 1.0 if float(array.mean()) == 0 else 0.0
    return t_two_sided_p(float(array.mean()) / (spread / math.sqrt(array.size)), array.size - 1)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of the p-values that are not None (the others stay None)."""
    given = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(given)):
        running = max(running, min(1.0, (len(given) - rank) * p))
        out[i] = running
    return out


# ---- one claim in one cell ----------------------------------------------------------------------
def claim_tests(seeds: list[dict], direction: int) -> dict:
    """The across-seed tests of one claim from its per-seed statistics.

    `seeds`: one dict per seed, `{"own": x, "floors": {name: y}, "missing": None or {"kind":
    NA or NOT_TESTABLE, "why": text}}` (a missing statistic has `own` None). Returns the own
    statistic across seeds, the sign counts, each non-vacuous floor's effect across seeds with
    its p, the vacuous floors, the claim's p (`claim_p`) and why it has none where it has none.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be +1 (the claim says > 0) or -1 (< 0).")
    measured = [s for s in seeds if s.get("missing") is None and _number(s.get("own"))]
    own = np.asarray([s["own"] for s in measured], dtype=np.float64)
    floors, vacuous = {}, []
    for name in sorted({name for s in measured for name in s.get("floors", {})}):
        values = [s["floors"].get(name) for s in measured]
        if all(_number(v) and abs(v) <= VACUOUS for v in values):
            vacuous.append(name)
            continue
        effects = [effect(s["own"], v) for s, v in zip(measured, values)]
        floors[name] = {**across_seeds(effects), "floor": across_seeds(values), "p": one_sample_p(effects)}
    missing = [s["missing"] for s in seeds if s.get("missing") is not None]
    out = {
        "own": across_seeds(list(own)),
        "n": int(own.size),
        "num_seeds": len(seeds),
        "agree": int((np.sign(own) == direction).sum()),
        "disagree": int((np.sign(own) == -direction).sum()),
        "p_own": one_sample_p(own),
        "floors": floors,
        "vacuous_floors": vacuous,
        "missing": missing[0] if missing else None,
        "num_missing": len(missing),
    }
    out["claim_p"] = claim_p(out, direction)
    return out


def _number(value) -> bool:
    return value is not None and math.isfinite(value)


def claimed_side(value: float | None, direction: int) -> bool:
    return value is not None and value * direction > 0


def claim_p(tests: dict, direction: int) -> float | None:
    """The p-value Holm adjusts: the largest of the own test and every floor's effect test when
    the mean own statistic lies on the claimed side, the own test's otherwise."""
    if tests["p_own"] is None:
        return None
    if not claimed_side(tests["own"]["mean"], direction):
        return tests["p_own"]
    ps = [tests["p_own"], *(floor["p"] for floor in tests["floors"].values())]
    return None if any(p is None for p in ps) else max(ps)


def verdict(tests: dict, direction: int, p_holm: float | None, required_seeds: int = REQUIRED_SEEDS) -> str:
    """The verdict word of one claim in one cell (module docstring)."""
    n = tests["n"]
    if tests["missing"] is not None and n < min(tests["num_seeds"], required_seeds):
        kind = tests["missing"]["kind"]
        if kind == NOT_TESTABLE or n == 0:
            return kind
    if n < required_seeds or p_holm is None or p_holm >= ALPHA:
        return "undecided"
    needed = math.ceil(AGREEING_SHARE * n - 1e-9)
    floors_agree = all(claimed_side(floor["mean"], direction) for floor in tests["floors"].values())
    if tests["agree"] >= needed and claimed_side(tests["own"]["mean"], direction) and floors_agree:
        return "holds"
    if tests["disagree"] >= needed and claimed_side(tests["own"]["mean"], -direction):
        return "contradicted"
    return "undecided"


def label(word: str, tests: dict, required_seeds: int = REQUIRED_SEEDS) -> str:
    """The printed verdict: with the reason of n/a and not testable, the seed count of undecided."""
    if word in (NA, NOT_TESTABLE):
        return f"{word} ({tests['missing']['why']})"
    if word == "undecided" and tests["n"] < required_seeds:
        return f"undecided ({tests['n']} seed{'s' if tests['n'] != 1 else ''})"
    return word


def decide_cell(claims: list[tuple[list[dict], int]], required_seeds: int = REQUIRED_SEEDS) -> list[dict]:
    """Every claim of one cell decided together: `claims` is `(per-seed statistics, direction)`
    per claim (`claim_tests`); Holm runs across the claims that have a p-value. Returns per claim
    its tests with `p_holm`, `verdict` and `label`."""
    tests = [claim_tests(seeds, direction) for seeds, direction in claims]
    words = [
        verdict(t, direction, None, required_seeds) for t, (_, direction) in zip(tests, claims)
    ]  # before Holm: n/a and not testable leave the family
    family = [t["claim_p"] if w not in (NA, NOT_TESTABLE) else None for t, w in zip(tests, words)]
    out = []
    for t, (_, direction), p in zip(tests, claims, holm(family)):
        word = verdict(t, direction, p, required_seeds)
        out.append({**t, "p_holm": p, "verdict": word, "label": label(word, t, required_seeds)})
    return out


# ---- continuous statistics of a per-layer curve -------------------------------------------------
def slope(depths, values) -> float | None:
    """Least-squares slope of `values` over `depths` (relative depth l/L); None below two points."""
    x, y = np.asarray(depths, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def shares_of_gain(values) -> np.ndarray:
    """`[L]` for a curve over layers 0..L: at each layer l >= 1 the share of the curve's gain
    over the embeddings reached so far, (max over j <= l of v_j - v_0) / (max of v - v_0). A
    curve that gains less than `MIN_GAIN` is as decodable at the embeddings as anywhere: its
    share is 1 at every layer."""
    v = np.asarray(values, dtype=np.float64)
    reached = np.maximum.accumulate(v)[1:] - v[0]
    if not reached[-1] >= MIN_GAIN:
        return np.ones(v.size - 1)
    return np.clip(reached / reached[-1], 0.0, 1.0)


def gain_lead(earlier, later) -> float:
    """Mean over layers 1..L of the share of gain of `earlier` minus `later`'s (`shares_of_gain`):
    positive when `earlier` reaches its gain at shallower layers, 0 when both rise inside one
    layer, about +0.5 for a rise at layer 1 against one at L/2."""
    return float(np.mean(shares_of_gain(earlier) - shares_of_gain(later)))


def cross_fitted_fall(half_a, half_b) -> float:
    """The drop from a curve's peak to its last layer, the peak layer chosen on one half of the
    rows and the drop measured on the other, both ways, averaged. A peak chosen at layer 0 (no
    rise) counts 0; a flat noisy curve gives about 0."""

    def fall(choose: np.ndarray, measure: np.ndarray) -> float:
        at = int(np.argmax(choose))
        return 0.0 if at == 0 else float(measure[at] - measure[-1])

    a, b = np.asarray(half_a, dtype=np.float64), np.asarray(half_b, dtype=np.float64)
    return 0.5 * (fall(a, b) + fall(b, a))
