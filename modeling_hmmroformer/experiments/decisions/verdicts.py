"""The study's decision rule: per claim and cell, holds, contradicted, not testable or undecided.

A claim's statistic is measured on the trained network ("own") and on its floors (the untrained
twin; for probe and belief claims a token-only baseline free of the probed label), one value per
training seed, each seed tagged with its corpus draw (the seed of the HMM parameters). Every
claim the report decides is one family: Holm's adjustment runs over all of them
(`decide_cells`). In a cell (a corpus size K and a depth) a claim

- holds: its own statistic lies on the claimed side in at least `AGREEING_SHARE` of the seeds (5
  of 6), the mean own statistic and the mean effect (own minus floor) over every floor lie on the
  claimed side, and its p-value is below `ALPHA` after Holm; its p-value is the largest of its
  tests (two-sided one-sample t of the own statistic and of each effect), since it needs all of
  them. The tests nest seeds in draws: with two draws or more, the t runs across the draws'
  means (D - 1 degrees of freedom), so a statistic that moves with the draw is not "holds";
- is contradicted: its own statistic on the other side in 5 of 6 seeds, and the own test's p
  (the one Holm adjusts for such a claim) below `ALPHA` after Holm;
- with fewer than `REQUIRED_DRAWS` draws, would-be "holds" or "contradicted" is "undecided (1 HMM
  draw; holds within it)": the seeds' interval is conditional on the one draw;
- is not testable: a precondition fixed in advance fails (the model below the in-context ladder,
  a curve that gains nothing, too few testable distances) in so many seeds that fewer than
  `REQUIRED_SEEDS` remain;
- is n/a: no seed has the curves its statistic needs;
- is undecided otherwise, printed with the number of seeds below `REQUIRED_SEEDS`.

A floor whose statistic is 0 to within `VACUOUS` in every seed is vacuous for that claim (the
twin's rotary knock-out changes nothing) and is left out; a floor refused for holding the label
(its value None in every seed) is left out and named. Plain numbers in, plain dicts out.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

REQUIRED_SEEDS = 6
REQUIRED_DRAWS = 2
AGREEING_SHARE = 5 / 6
ALPHA = 0.05
VACUOUS = 1e-6
MIN_GAIN = 0.02  # a curve gaining less over its embeddings is decoded there already (shares of gain)
VERDICTS = ("holds", "contradicted", "not testable", "n/a", "undecided")
NA, NOT_TESTABLE = "n/a", "not testable"  # the kinds of a missing per-seed statistic
BELOW_LADDER = "below the in-context ladder"  # the why of a seed the ladder gate leaves out


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
    half = t_quantile_975(array.size - 1) * float(array.std(ddof=1)) / math.sqrt(array.size)
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


@cache
def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom: the t whose two-sided p is
    0.05 (`t_two_sided_p`, which falls with t), by bisection to 1e-12."""
    low, high = 0.0, 1000.0
    while high - low > 1e-12:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if t_two_sided_p(middle, df) > 0.05 else (low, middle)
    return 0.5 * (low + high)


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
def draw_means(values, draws) -> np.ndarray:
    """The mean of `values` within each draw (`draws`: one label per value), numbers only, in
    the order the draws first appear."""
    by_draw: dict = {}
    for value, draw in zip(values, draws):
        if _number(value):
            by_draw.setdefault(draw, []).append(float(value))
    return np.asarray([np.mean(v) for v in by_draw.values()], dtype=np.float64)


def nested_test(values, draws) -> dict:
    """Mean, 95% t interval and two-sided p of mean 0, seeds nested in draws: across the draws'
    means (D - 1 degrees of freedom) when there are two draws or more, across seeds otherwise."""
    numbers = [v for v in values if _number(v)]
    seen = draw_means(values, draws)
    level = seen if seen.size >= 2 else np.asarray(numbers, dtype=np.float64)
    return {
        **across_seeds(list(level)),
        "n": len(numbers),
        "num_draws": int(seen.size),
        "p": one_sample_p(level),
    }


def claim_tests(seeds: list[dict], direction: int) -> dict:
    """The across-seed tests of one claim from its per-seed statistics.

    `seeds`: one dict per seed, `{"own": x, "floors": {name: y}, "missing": None or {"kind":
    NA or NOT_TESTABLE, "why": text}, "draw": corpus draw}` (a missing statistic has `own` None;
    a floor refused for holding the label is None; no "draw" is draw 0). Returns the own
    statistic across seeds (nested in draws), the sign counts, each non-vacuous floor's effect
    with its p, the vacuous and refused floors, the claim's p (`claim_p`) and why it has none
    where it has none.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be +1 (the claim says > 0) or -1 (< 0).")
    measured = [s for s in seeds if s.get("missing") is None and _number(s.get("own"))]
    draws = [s.get("draw", 0) for s in measured]
    own = np.asarray([s["own"] for s in measured], dtype=np.float64)
    floors, vacuous, refused = {}, [], []
    for name in sorted({name for s in measured for name in s.get("floors", {})}):
        values = [s["floors"].get(name) for s in measured]
        if all(v is None for v in values):
            refused.append(name)
            continue
        if all(_number(v) and abs(v) <= VACUOUS for v in values):
            vacuous.append(name)
            continue
        tested = nested_test([effect(s["own"], v) for s, v in zip(measured, values)], draws)
        floors[name] = {**tested, "floor": across_seeds(values)}
    missing = [s["missing"] for s in seeds if s.get("missing") is not None]
    own_test = nested_test(list(own), draws)
    out = {
        "own": {key: own_test[key] for key in ("mean", "ci_low", "ci_high", "n")},
        "n": int(own.size),
        "num_seeds": len(seeds),
        "num_draws": own_test["num_draws"],
        "agree": int((np.sign(own) == direction).sum()),
        "disagree": int((np.sign(own) == -direction).sum()),
        "p_own": own_test["p"],
        "floors": floors,
        "vacuous_floors": vacuous,
        "refused_floors": refused,
        "missing": _first_missing(missing),
        "num_missing": len(missing),
        "num_below_ladder": sum(m["why"] == BELOW_LADDER for m in missing),
    }
    out["claim_p"] = claim_p(out, direction)
    return out


def _first_missing(missing: list[dict]) -> dict | None:
    """The reason a cell's seeds miss a statistic: the ladder gate first, then a failed
    precondition (a seed that has the curves: the cell is not n/a), else the first given."""
    gated = [m for m in missing if m["why"] == BELOW_LADDER]
    failed = [m for m in missing if m["kind"] == NOT_TESTABLE]
    return (gated or failed or missing or [None])[0]


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
    """The verdict word of one claim in one cell (module docstring), before the draw cap
    (`capped_by_draws`)."""
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


def capped_by_draws(word: str, tests: dict, required_draws: int = REQUIRED_DRAWS) -> str:
    """ "undecided" for a would-be "holds" or "contradicted" measured on fewer than
    `required_draws` corpus draws; `word` otherwise."""
    if word in ("holds", "contradicted") and tests["num_draws"] < required_draws:
        return "undecided"
    return word


def label(word: str, tests: dict, required_seeds: int = REQUIRED_SEEDS, within: str | None = None) -> str:
    """The printed verdict: with the reason of n/a and not testable (the number of seeds above
    the ladder when the gate decides it), the seed count of undecided, and `within`, the verdict
    one draw would give, when the draw cap made it undecided."""
    if word == NOT_TESTABLE and tests["missing"]["why"] == BELOW_LADDER:
        above = tests["num_seeds"] - tests["num_below_ladder"]
        seeds = "seed" if tests["num_seeds"] == 1 else "seeds"
        return f"not testable ({above} of {tests['num_seeds']} {seeds} above the in-context ladder)"
    if word in (NA, NOT_TESTABLE):
        return f"{word} ({tests['missing']['why']})"
    if word == "undecided" and tests["n"] < required_seeds:
        return f"undecided ({tests['n']} seed{'s' if tests['n'] != 1 else ''})"
    if word == "undecided" and within is not None:
        return f"undecided ({tests['num_draws']} HMM draw; {within} within it)"
    return word


def decide_cells(
    cells: list[list[tuple[list[dict], int]]],
    required_seeds: int = REQUIRED_SEEDS,
    required_draws: int = REQUIRED_DRAWS,
) -> list[list[dict]]:
    """Every claim of every cell a report decides, decided together: `cells` holds per cell
    `(per-seed statistics, direction)` per claim (`claim_tests`); Holm runs across every claim
    of every cell that has a p-value (n/a and not testable leave the family). Returns per cell,
    per claim, its tests with `p_holm`, `verdict` and `label`."""
    tests = [[(claim_tests(seeds, direction), direction) for seeds, direction in cell] for cell in cells]
    flat = [pair for cell in tests for pair in cell]
    family = [
        t["claim_p"] if verdict(t, direction, None, required_seeds) not in (NA, NOT_TESTABLE) else None
        for t, direction in flat
    ]
    adjusted = iter(holm(family))
    out = []
    for cell in tests:
        rows = []
        for t, direction in cell:
            p = next(adjusted)
            within = verdict(t, direction, p, required_seeds)
            word = capped_by_draws(within, t, required_draws)
            shown = label(word, t, required_seeds, within if word != within else None)
            rows.append({**t, "p_holm": p, "verdict": word, "label": shown})
        out.append(rows)
    return out


def decide_cell(
    claims: list[tuple[list[dict], int]],
    required_seeds: int = REQUIRED_SEEDS,
    required_draws: int = REQUIRED_DRAWS,
) -> list[dict]:
    """The claims of one cell, as the only cell of its report (`decide_cells`)."""
    return decide_cells([claims], required_seeds, required_draws)[0]


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
    """How many layers earlier `earlier` reaches its gain than `later`: the sum over layers 1..L
    of the share of gain of `earlier` minus `later`'s (`shares_of_gain`). In layers, so the same
    pattern in absolute layers gives the same value at any depth: +1 for a rise at layer 1
    against one at layer 2, about +L/2 for a rise at layer 1 against one at L/2, 0 when both
    rise inside one layer."""
    return float(np.sum(shares_of_gain(earlier) - shares_of_gain(later)))


def cross_fitted_fall(half_a, half_b) -> float:
    """The drop from a curve's peak to its last layer, the peak layer chosen on one half of the
    rows and the drop measured on the other, both ways, averaged. A peak chosen at layer 0 (no
    rise) counts 0; a flat noisy curve gives about 0."""

    def fall(choose: np.ndarray, measure: np.ndarray) -> float:
        at = int(np.argmax(choose))
        return 0.0 if at == 0 else float(measure[at] - measure[-1])

    a, b = np.asarray(half_a, dtype=np.float64), np.asarray(half_b, dtype=np.float64)
    return 0.5 * (fall(a, b) + fall(b, a))
