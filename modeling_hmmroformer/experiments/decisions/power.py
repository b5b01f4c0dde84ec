"""What a study design can decide: the rule's power, simulated through the rule's own code.

A claim's per-seed statistics in one cell (K, depth) are modelled as seeds nested in HMM draws:
the vector x = (own statistic, its effect over each tested floor) of seed s of draw d is

    x = mean + b_d + e_s,   b_d ~ N(0, between),   e_s ~ N(0, within)

with `mean`, `between` and `within` estimated from the committed records (`estimate_spread`:
method of moments, one-way random effects, projected onto positive semi-definite matrices); a
seed misses its statistic (the ladder gate, a precondition) with the share the records show. A
simulated report draws every cell of a design (`Design`: seeds per draw, per cell) from its
spreads and decides it with `verdicts.decide_cells`, the same function the report uses, so Holm
runs over the simulated report's whole family; `decision_rates` counts how often each claim
comes out holds or contradicted. Claims are drawn independently of each other (the records hold
6 seeds per cell: too few to estimate 9 x 9 correlations).

Plain data in, plain data out: `benchmarks/power.py` reads the records and writes the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .verdicts import AGREEING_SHARE, VACUOUS, _number, decide_cells

Cell = tuple[int, int]  # (K, depth)


def cell_label(cell: Cell) -> str:
    """ "K = 8192, 4 layers": how the power table names a cell."""
    return f"K = {cell[0]}, {cell[1]} layers"


@dataclass(frozen=True)
class ClaimSpread:
    """One claim in one cell as the simulation draws it: `parts` names the entries of the vector
    ("own", then "over <floor>" for each tested floor), `mean` `[P]`, `between` and `within`
    `[P, P]` its covariances across draws and across seeds within a draw; `testable` the share
    of seeds that have the statistic, `missing` what the others say (a record's `missing`);
    `vacuous` floors (0 in every seed) and `refused` ones (None in every seed) are kept as such."""

    key: str
    direction: int
    parts: tuple[str, ...]
    mean: np.ndarray
    between: np.ndarray
    within: np.ndarray
    testable: float
    missing: dict | None
    vacuous: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    num_seeds: int = 0
    num_draws: int = 0

    @property
    def floors(self) -> tuple[str, ...]:
        return tuple(part.removeprefix("over ") for part in self.parts[1:])

    def sd(self, level: str) -> list[float]:
        """The standard deviation of each part across draws (`level` "between") or seeds."""
        matrix = self.between if level == "between" else self.within
        return [float(v) for v in np.sqrt(np.clip(np.diag(matrix), 0.0, None))]

    def scaled(self, between: float) -> ClaimSpread:
        """The same claim with its draw covariance multiplied by `between`."""
        return ClaimSpread(**{**self.__dict__, "between": self.between * between})

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "direction": self.direction,
            "parts": list(self.parts),
            "mean": [float(v) for v in self.mean],
            "sd_between_draws": self.sd("between"),
            "sd_within_draw": self.sd("within"),
            "testable": self.testable,
            "vacuous_floors": list(self.vacuous),
            "refused_floors": list(self.refused),
            "num_seeds": self.num_seeds,
            "num_draws": self.num_draws,
        }


def nested_moments(values: np.ndarray, draws: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, between-draw and within-draw covariance of `values` `[n, P]` (one row per seed,
    `draws` its draw labels): the within covariance pooled over draws (n - D degrees of freedom,
    0 without any), the between covariance the draw means' covariance less within / (seeds per
    draw, harmonic mean), both projected onto the positive semi-definite cone (0 below two
    draws); the mean is the mean of the draws' means, as the rule tests it."""
    values = np.asarray(values, dtype=np.float64)
    labels = list(dict.fromkeys(draws))
    groups = [values[[d == label for d in draws]] for label in labels]
    means = np.stack([g.mean(axis=0) for g in groups])
    size = values.shape[1]
    residuals = np.concatenate([g - g.mean(axis=0) for g in groups])
    dof = len(values) - len(groups)
    within = residuals.T @ residuals / dof if dof > 0 else np.zeros((size, size))
    if len(groups) < 2:
        return means.mean(axis=0), np.zeros((size, size)), positive_part(within)
    per_draw = len(groups) / sum(1.0 / len(g) for g in groups)
    between = np.atleast_2d(np.cov(means, rowvar=False, ddof=1)) - within / per_draw
    return means.mean(axis=0), positive_part(between), positive_part(within)


def positive_part(matrix: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite matrix (negative eigenvalues set to 0)."""
    symmetric = 0.5 * (matrix + matrix.T)
    eigenvalues, vectors = np.linalg.eigh(symmetric)
    return (vectors * np.clip(eigenvalues, 0.0, None)) @ vectors.T


def estimate_spread(key: str, direction: int, seeds: list[dict]) -> ClaimSpread:
    """A claim's `ClaimSpread` from its per-seed statistics in one cell (`claims.counted`'s
    entries: "own", "floors", "missing", "draw"), with the floors the rule would test: those that
    are neither refused (None in every seed) nor vacuous (0 to within `VACUOUS` in every seed)."""
    measured = [s for s in seeds if s.get("missing") is None and _number(s.get("own"))]
    names = sorted({name for s in measured for name in s.get("floors", {})})
    refused = tuple(n for n in names if all(s["floors"].get(n) is None for s in measured))
    vacuous = tuple(
        n
        for n in names
        if n not in refused
        and all(_number(s["floors"].get(n)) and abs(s["floors"][n]) <= VACUOUS for s in measured)
    )
    tested = [n for n in names if n not in refused and n not in vacuous]
    rows = [
        (s["own"], *(s["own"] - s["floors"][n] for n in tested), s.get("draw", 0))
        for s in measured
        if all(_number(s["floors"].get(n)) for n in tested)
    ]
    missing = next((s["missing"] for s in seeds if s.get("missing") is not None), None)
    size = 1 + len(tested)
    if rows:
        mean, between, within = nested_moments(np.array([r[:-1] for r in rows]), [r[-1] for r in rows])
    else:
        mean, between, within = np.zeros(size), np.zeros((size, size)), np.zeros((size, size))
    return ClaimSpread(
        key=key,
        direction=direction,
        parts=("own", *(f"over {n}" for n in tested)),
        mean=mean,
        between=between,
        within=within,
        testable=len(measured) / len(seeds) if seeds else 0.0,
        missing=missing,
        vacuous=vacuous,
        refused=refused,
        num_seeds=len(seeds),
        num_draws=len({s.get("draw", 0) for s in measured}),
    )


def square_root(matrix: np.ndarray) -> np.ndarray:
    """A factor F with F F^T = `matrix` (positive semi-definite)."""
    eigenvalues, vectors = np.linalg.eigh(0.5 * (matrix + matrix.T))
    return vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))


def simulated_seeds(spread: ClaimSpread, seeds_per_draw: list[int], rng: np.random.Generator) -> list[dict]:
    """One cell's per-seed statistics of one claim, drawn from its spread: `seeds_per_draw[d]`
    seeds of draw d, each in the form `verdicts.claim_tests` reads."""
    size = len(spread.parts)
    between, within = square_root(spread.between), square_root(spread.within)
    seeds = []
    for draw, count in enumerate(seeds_per_draw):
        shift = spread.mean + between @ rng.standard_normal(size)
        values = shift + rng.standard_normal((count, size)) @ within.T
        for x, kept in zip(values, rng.random(count) < spread.testable):
            if not kept:
                seeds.append({"own": None, "floors": {}, "missing": spread.missing, "draw": draw})
                continue
            floors = {name: float(x[0] - x[1 + i]) for i, name in enumerate(spread.floors)}
            floors |= {name: 0.0 for name in spread.vacuous} | {name: None for name in spread.refused}
            seeds.append({"own": float(x[0]), "floors": floors, "missing": None, "draw": draw})
    return seeds


@dataclass(frozen=True)
class Design:
    """How many seeds each HMM draw of each cell has: cell -> seeds per draw (one entry a draw)."""

    name: str
    seeds_per_draw: dict[Cell, tuple[int, ...]]

    def draws(self, cell: Cell) -> int:
        return len(self.seeds_per_draw[cell])


def simulated_report(
    spreads: dict[Cell, list[ClaimSpread]], design: Design, rng: np.random.Generator
) -> dict[Cell, list[str]]:
    """One simulated report of `design` decided by the rule (`verdicts.decide_cells`, Holm over
    every claim of every cell): per cell, each claim's verdict word."""
    cells = list(design.seeds_per_draw)
    decided = decide_cells(
        [
            [(simulated_seeds(s, list(design.seeds_per_draw[cell]), rng), s.direction) for s in spreads[cell]]
            for cell in cells
        ]
    )
    return {cell: [row["verdict"] for row in rows] for cell, rows in zip(cells, decided)}


def decision_rates(
    spreads: dict[Cell, list[ClaimSpread]], design: Design, num_reports: int, seed: int = 0
) -> dict[Cell, dict[str, dict[str, float]]]:
    """Over `num_reports` simulated reports of `design`, per cell and claim the share decided
    holds, contradicted, and either (`decided`), with its Monte Carlo standard error."""
    rng = np.random.default_rng(seed)
    counts = {cell: np.zeros((len(spreads[cell]), 2)) for cell in design.seeds_per_draw}
    for _ in range(num_reports):
        for cell, words in simulated_report(spreads, design, rng).items():
            counts[cell][:, 0] += [w == "holds" for w in words]
            counts[cell][:, 1] += [w == "contradicted" for w in words]
    out = {}
    for cell, found in counts.items():
        out[cell] = {}
        for spread, (holds, contradicted) in zip(spreads[cell], found / num_reports):
            decided = holds + contradicted
            out[cell][spread.key] = {
                "holds": float(holds),
                "contradicted": float(contradicted),
                "decided": float(decided),
                "se": float(np.sqrt(decided * (1 - decided) / num_reports)),
            }
    return out


def cell_spreads(statistics: list[dict[str, dict]], claims: list[tuple[str, int]]) -> list[ClaimSpread]:
    """Every claim's spread in one cell (`claims`: (key, direction) in the report's order) from
    its seeds' statistics (`diversity.group_statistics`' entries)."""
    return [estimate_spread(key, direction, [seed[key] for seed in statistics]) for key, direction in claims]


def extended(cell_draws: dict[Cell, tuple[int, ...]], grown: dict[Cell, int], seeds: int) -> Design:
    """The committed design (`cell_draws`) with each cell of `grown` grown to that many draws: the
    draws it has keep their seeds, each new one has `seeds`; a cell asked for no more draws than
    it has stays as committed."""
    out = {}
    for cell, have in cell_draws.items():
        draws = grown.get(cell, len(have))
        out[cell] = (*have, *([seeds] * (draws - len(have)))) if draws > len(have) else have
    name = ", ".join(f"{cell_label(c)}: {len(d)} draws" for c, d in out.items())
    return Design(name, out)


def fresh(cell_draws: dict[Cell, tuple[int, ...]], cells: list[Cell], draws: int, seeds: int) -> Design:
    """`cells` measured anew on `draws` draws of `seeds` seeds each; the other cells as committed."""
    grown = {cell: (seeds,) * draws if cell in cells else have for cell, have in cell_draws.items()}
    return Design(f"{draws} draws x {seeds} seed(s)", grown)


def committed_design(statistics: dict[Cell, list[dict[str, dict]]]) -> dict[Cell, tuple[int, ...]]:
    """Seeds per draw of each cell as committed (the draws in the order the records give)."""
    out = {}
    for cell, seeds in statistics.items():
        draws = [next(iter(s.values()))["draw"] for s in seeds]
        out[cell] = tuple(draws.count(d) for d in dict.fromkeys(draws))
    return out


def smallest_deciding(table: dict[int, float], target: float) -> int | None:
    """The smallest number of draws whose decision rate (`table`: draws -> rate) reaches
    `target`, from which every larger number of draws in the table reaches it too; None if none."""
    reached = None
    for draws in sorted(table, reverse=True):
        if table[draws] < target:
            break
        reached = draws
    return reached


def agreeing_claims(
    statistics: dict[Cell, list[dict[str, dict]]], spreads: dict[Cell, list[ClaimSpread]]
) -> dict[Cell, list[str]]:
    """Per cell, the claims whose measured seeds lie on one side in at least `AGREEING_SHARE` of
    the cell's seeds today (5 of 6): the ones a design should decide."""
    out = {}
    for cell, claims in spreads.items():
        found = []
        for spread in claims:
            own = [s[spread.key]["own"] for s in statistics[cell]]
            values = np.asarray([v for v in own if _number(v)])
            needed = AGREEING_SHARE * len(own) - 1e-9
            if values.size and max((values > 0).sum(), (values < 0).sum()) >= needed:
                found.append(spread.key)
        out[cell] = found
    return out


def upper_bound_factor(num_draws: int, level: float = 0.8) -> float:
    """How much larger a variance estimated from `num_draws` draws' means may be at the one-sided
    `level` bound: (D - 1) / chi2_{1 - level}(D - 1), the chi-square quantile found by bisection
    on its CDF (the regularized lower incomplete gamma function, by its series)."""
    dof = num_draws - 1

    def chi2_cdf(x: float) -> float:
        a, term, total = dof / 2, 1.0 / (dof / 2), 1.0 / (dof / 2)
        for n in range(1, 500):
            term *= (x / 2) / (a + n)
            total += term
        return math.exp(a * math.log(x / 2) - x / 2 - math.lgamma(a)) * total

    low, high = 1e-9, 1e3
    while high - low > 1e-10:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if chi2_cdf(middle) < 1 - level else (low, middle)
    return dof / (0.5 * (low + high))


def chosen_draws(
    tables: dict[int, dict[Cell, dict[str, dict[str, float]]]],
    targets: dict[Cell, list[str]],
    target: float = 0.8,
) -> dict:
    """The design's number of draws from a table of decision rates (`tables`: draws ->
    `decision_rates`): per target claim (`targets`: cell -> claim keys) the smallest number of
    draws that decides it with probability `target` (`smallest_deciding`; None where no number
    in the table does), and the smallest that decides every claim that can be reached."""
    needed = {
        cell: {
            key: smallest_deciding({d: rates[cell][key]["decided"] for d, rates in tables.items()}, target)
            for key in keys
        }
        for cell, keys in targets.items()
    }
    reachable = [d for per_cell in needed.values() for d in per_cell.values() if d is not None]
    return {
        "target": target,
        "needed": {cell_label(cell): per_cell for cell, per_cell in needed.items()},
        "draws": max(reachable) if reachable else None,
        "unreachable": [
            f"{cell_label(cell)}: {key}"
            for cell, per_cell in needed.items()
            for key, d in per_cell.items()
            if d is None
        ],
    }
