"""A family of HMMs built to test Lemma 1, and the measurement of memory decay on it.

Lemma 1 of the paper (through Theorem 14 of Uehara et al. 2022): under low-rank transitions
(Assumption 1, rank d) and γ-observable emissions (Assumption 2), the belief of a predictor
that keeps only the last L observations is within ε of the full one once L ≥ C γ⁻⁴ log(d/ε),
C a universal constant the paper does not give: the error is at most d exp(-γ⁴ L / C), a decay
rate of at least γ⁴ / C per token. The next-token distribution is the belief pushed through
T and E, so the same bound holds for the total variation (TV) of the predictions.

**The family** (`ObservabilityFamily`, `build_family`). Each part controls one assumption:

- *emissions* (Assumption 2): E = (1 - λ) E_distinct + λ 1 rᵀ, with E_distinct's rows on disjoint
  token sets (state s emits the tokens v ≡ s mod S) and one shared row r. For every x with
  Σx = 0, Eᵀx = (1 - λ) E_distinctᵀ x, and disjoint rows keep the l1 norm, so γ = 1 - λ exactly:
  a family level is its γ (`observability_coefficient` confirms it per member).
- *transitions* (what must not do the forgetting): T = (1 - ε) P + ε/S with P a random
  permutation, so |λ₂| = 1 - ε: the chain forgets its start at rate -log(1 - ε) only, and a
  faster forgetting comes from the observations. With `rank=d` (Assumption 1) T = A B instead,
  A [S, d] sending each state to one of d hub states, B [d, S] = (1 - ε) one-hot(hub) + ε/S.
- *initial distribution*: the chain's stationary one, so a window's first state has the right
  marginal and the memory-L predictor (window filtered from the stationary distribution) is the
  Bayes predictor given the last L tokens.

**The measurement** (`memory_tv`, `measure_member`, `measure_family`). Per member, rows of one
long sequence each; at every position i (predicting token i + 1) the TV between the memory-L
predictor (tokens i-L+1..i) and the full one (tokens 0..i), with the task known (`known`) and
with the task unknown (`mixture`: Bayes over the family's members, uniform prior, both the
memory-L and the full one). A window that reaches the segment start (i < L) is the full
predictor: those positions are not scored; every L is scored on the same positions
i ≥ max(memories). log TV is fitted against L (`memory.fit_exponential_decay`, TV at or below
`memory.FIT_FLOOR` left out), with a bootstrap interval of the rate over rows.

The filters are the project's own (`BayesOptimalPredictor` in float64, `family_predictor`);
the rest is float64 numpy. Shapes: K members, S states, V tokens, B rows, N positions,
M memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
from .memory import FIT_FLOOR, fit_exponential_decay, rank_correlation, total_variation
from .observability import observability_coefficient
from .params import HMMParams
from .sampler import SamplingTables, sample_chains
from .windows import check_memories

BOOTSTRAP_RESAMPLES = 200


@dataclass(frozen=True)
class ObservabilityFamily:
    """The family's settings; `ValueError` naming the field on a bad value.

    levels: the γ of each level, in [0, 1] (λ = 1 - γ); mixing: ε, the chain's |λ₂| is 1 - ε;
    rank: None for full-rank transitions, else d in 1..S-1 (Assumption 1)."""

    num_states: int = 6
    vocab_size: int = 12
    mixing: float = 0.02
    levels: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8)
    hmms_per_level: int = 4
    rank: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_states", "vocab_size", "hmms_per_level"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1.")
        if self.num_states < 2 or self.vocab_size < self.num_states:
            raise ValueError(
                f"num_states={self.num_states}, vocab_size={self.vocab_size}: need 2 <= num_states <= "
                "vocab_size (each state owns its own tokens)."
            )
        if not 0.0 < self.mixing <= 1.0:
            raise ValueError(f"mixing={self.mixing!r} must be in (0, 1]: the chain's |λ₂| is 1 - mixing.")
        if not self.levels or any(not 0.0 <= float(level) <= 1.0 for level in self.levels):
            raise ValueError(f"levels={self.levels!r} must be a non-empty tuple of γ values in [0, 1].")
        if self.rank is not None and (
            isinstance(self.rank, bool)
            or not isinstance(self.rank, (int, np.integer))
            or not 1 <= self.rank < self.num_states
        ):
            raise ValueError(f"rank={self.rank!r} must be None or an integer in 1..num_states-1.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be an integer >= 0.")


@dataclass(frozen=True)
class FamilyHMMs:
    """K members, float64: `level [K]` (the γ built in), `initial [K, S]` (stationary),
    `transitions [K, S, S]`, `emissions [K, S, V]`, `observability [K]` (γ computed by
    `observability_coefficient`), `second_eigenvalue [K]` (|λ₂| of T), `rank` (d or S)."""

    level: np.ndarray
    initial: np.ndarray
    transitions: np.ndarray
    emissions: np.ndarray
    observability: np.ndarray
    second_eigenvalue: np.ndarray
    rank: int

    @property
    def num_members(self) -> int:
        return len(self.level)


# ---- the family ---------------------------------------------------------------------------------
def distinct_emissions(num_states: int, vocab_size: int, rng: np.random.Generator) -> np.ndarray:
    """`[S, V]`: row s is a Dirichlet(1) distribution over the tokens v ≡ s (mod S) (disjoint)."""
    owner = np.arange(vocab_size) % num_states
    weights = rng.gamma(1.0, size=vocab_size) * (owner[None, :] == np.arange(num_states)[:, None])
    return weights / weights.sum(1, keepdims=True)


def mixed_emissions(distinct: np.ndarray, shared: np.ndarray, gamma: float) -> np.ndarray:
    """`[S, V]`: (1 - λ) `distinct` + λ 1 `shared`ᵀ with λ = 1 - `gamma` (its coefficient is γ)."""
    return gamma * distinct + (1.0 - gamma) * shared[None, :]


def slow_transitions(num_states: int, mixing: float, rng: np.random.Generator) -> np.ndarray:
    """`[S, S]`: (1 - ε) P + ε/S for a random permutation P (|λ₂| = 1 - ε, doubly stochastic)."""
    permutation = np.eye(num_states)[rng.permutation(num_states)]
    return (1.0 - mixing) * permutation + mixing / num_states


def low_rank_transitions(num_states: int, rank: int, mixing: float, rng: np.random.Generator) -> np.ndarray:
    """`[S, S]` of rank `rank`: A B with B [d, S] = (1 - ε) one-hot(hub) + ε/S on d random hub
    states and A [S, d] one-hot, sending the hubs along a random cycle and the other states to
    random hubs (every row sums to 1; the hub chain is slow-mixing)."""
    hubs = rng.choice(num_states, size=rank, replace=False)
    right = (1.0 - mixing) * np.eye(num_states)[hubs] + mixing / num_states  # [d, S]
    target = rng.integers(0, rank, size=num_states)
    target[hubs] = np.roll(np.arange(rank), 1)[rng.permutation(rank)]
    return np.eye(rank)[target] @ right


def stationary(transitions: np.ndarray) -> np.ndarray:
    """`[S]`: π with π T = π, Σπ = 1 (least squares, exact for an ergodic T)."""
    size = len(transitions)
    system = np.vstack([transitions.T - np.eye(size), np.ones((1, size))])
    target = np.zeros(size + 1)
    target[-1] = 1.0
    solution = np.linalg.lstsq(system, target, rcond=None)[0]
    solution = np.clip(solution, 0.0, None)
    return solution / solution.sum()


def second_eigenvalue(transitions: np.ndarray) -> float:
    """|λ₂| of `transitions [S, S]`: the second largest eigenvalue modulus."""
    return float(np.sort(np.abs(np.linalg.eigvals(transitions)))[-2])


def build_family(config: ObservabilityFamily) -> FamilyHMMs:
    """The `config.hmms_per_level` members of every level, level by level (module docstring)."""
    rng = np.random.default_rng(config.seed)
    levels, transitions, emissions = [], [], []
    for level in config.levels:
        for _ in range(config.hmms_per_level):
            distinct = distinct_emissions(config.num_states, config.vocab_size, rng)
            shared = rng.dirichlet(np.ones(config.vocab_size))
            emissions.append(mixed_emissions(distinct, shared, float(level)))
            if config.rank is None:
                transitions.append(slow_transitions(config.num_states, config.mixing, rng))
            else:
                transitions.append(low_rank_transitions(config.num_states, config.rank, config.mixing, rng))
            levels.append(float(level))
    transitions, emissions = np.stack(transitions), np.stack(emissions)
    gamma, _ = observability_coefficient(emissions)
    return FamilyHMMs(
        level=np.asarray(levels),
        initial=np.stack([stationary(t) for t in transitions]),
        transitions=transitions,
        emissions=emissions,
        observability=gamma,
        second_eigenvalue=np.asarray([second_eigenvalue(t) for t in transitions]),
        rank=config.rank or config.num_states,
    )


def sample_sequences(
    initial: np.ndarray, transitions: np.ndarray, emissions: np.ndarray, rows: int, length: int, seed: int
) -> np.ndarray:
    """`[B, T]` int64 tokens of one HMM (`initial [S]`, `transitions [S, S]`, `emissions [S, V]`),
    one sequence per row, its first state drawn from `initial` (the corpus's sampler,
    `sampler.sample_chains`)."""
    params = HMMParams(np.ones(1), initial[None], transitions[None], emissions[None])
    tables = SamplingTables.from_params(params)
    _, tokens = sample_chains(tables, np.zeros(rows, dtype=np.int64), length, np.random.default_rng(seed))
    return tokens


# ---- the filters ------------------------------------------------------------------------------
def window_reaches_start(num_positions: int, memories: Sequence[int]) -> np.ndarray:
    """`[M, N]` bool: position i's window of L tokens (i-L+1..i) reaches the segment start (i < L):
    there the memory-L predictor sees the whole past, its TV is 0 and not a measure of memory."""
    return np.arange(num_positions)[None, :] < np.asarray(memories)[:, None]


def family_predictor(hmms: FamilyHMMs) -> BayesOptimalPredictor:
    """The project's exact predictors (`BayesOptimalPredictor`, float64) over the family's
    members, uniform prior: the full and memory-L filters, task known and unknown."""
    prior = np.full(hmms.num_members, 1.0 / hmms.num_members)
    params = HMMParams(prior, hmms.initial, hmms.transitions, hmms.emissions)
    return BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)


def memory_tv(hmms: FamilyHMMs, tokens: np.ndarray, task: int, memories: Sequence[int]) -> dict:
    """TV of the memory-L predictors to the full ones on `tokens [B, T]` drawn from member `task`:
    `known [M, B, N]` (that member's filter) and `mixture [M, B, N]` (Bayes over all members), at
    the positions i = 0..T-2 (N = T - 1). Where the window reaches the segment start the memory-L
    predictor is the full one (TV 0; `window_reaches_start` marks them). The window's first state
    has the stationary marginal (the family starts there)."""
    memories = check_memories(memories)
    bayes, tasks = family_predictor(hmms), np.full(len(tokens), task)
    full, full_known = bayes.next_token_probs(tokens), bayes.oracle_next_token_probs(tokens, tasks)
    mixture = bayes.truncated_by_memory(tokens, memories)
    known = bayes.truncated_oracle_by_memory(tokens, tasks, memories)
    return {
        "known": np.stack([total_variation(known[m], full_known).numpy() for m in memories]),
        "mixture": np.stack([total_variation(mixture[m], full).numpy() for m in memories]),
    }


# ---- the fits -----------------------------------------------------------------------------------
def scored_row_means(tv: np.ndarray, first_position: int) -> np.ndarray:
    """`[B, M]`: each row's mean of `tv [M, B, N]` over the scored positions i >= `first_position`."""
    if first_position >= tv.shape[2]:
        raise ValueError(
            f"no position to score: sequences give {tv.shape[2]} positions and the first one whose "
            f"window does not reach the start is {first_position}; make the sequences longer."
        )
    return tv[:, :, first_position:].mean(2).T


def bootstrap_rates(
    row_means: np.ndarray, memories: Sequence[int], fitted: Sequence[int], seed: int
) -> np.ndarray:
    """`[R]`: the fitted rate of `row_means [B, M]` with rows resampled (`BOOTSTRAP_RESAMPLES`
    times), on the memories of the point fit (`fitted`); NaN when fewer than two."""
    if len(fitted) < 2:
        return np.full(BOOTSTRAP_RESAMPLES, np.nan)
    columns = [list(memories).index(m) for m in fitted]
    picks = np.random.default_rng(seed).integers(0, len(row_means), (BOOTSTRAP_RESAMPLES, len(row_means)))
    curves = row_means[:, columns][picks].mean(1)  # [R, M']
    logs = np.log(np.maximum(curves, FIT_FLOOR))
    slopes = np.polyfit(np.asarray(fitted, dtype=np.float64), logs.T, 1)[0]
    return -slopes


def decay_record(tv: np.ndarray, memories: list[int], first_position: int, seed: int) -> dict:
    """One member, one variant: the mean TV per L over rows and scored positions (`tv`), the fit
    (`memory.fit_exponential_decay`: `rate`, `C`, `r2`, `memories`) and the rate's 95% bootstrap
    interval over rows (`rate_ci`), with the bootstrap rates kept for the level summaries."""
    row_means = scored_row_means(tv, first_position)
    curve = row_means.mean(0)
    fit = fit_exponential_decay(memories, curve)
    rates = bootstrap_rates(row_means, memories, fit["memories"], seed)
    interval = [float(v) for v in np.nanpercentile(rates, [2.5, 97.5])] if fit["rate"] is not None else None
    return {"tv": [float(v) for v in curve], "fit": fit, "rate_ci": interval, "bootstrap_rates": rates}


def measure_member(
    hmms: FamilyHMMs, task: int, memories: Sequence[int], rows: int, length: int, seed: int
) -> dict:
    """Member `task` on `rows` sampled sequences of `length` tokens: `known` and `mixture`
    decay records (`decay_record`), scored at positions i >= max(memories)."""
    memories = check_memories(memories)
    tokens = sample_sequences(
        hmms.initial[task], hmms.transitions[task], hmms.emissions[task], rows, length, seed
    )
    tv = memory_tv(hmms, tokens, task, memories)
    first = max(memories)
    return {name: decay_record(tv[name], memories, first, seed) for name in ("known", "mixture")}


def level_summary(levels: np.ndarray, gamma: np.ndarray, records: list[dict], variant: str) -> list[dict]:
    """Per level: its γ, the median rate over its members with a 95% bootstrap interval (the
    median of the members' bootstrap rates, replicate by replicate), the smallest and largest
    rate, the median R², the bound's rate γ⁴ (C = 1) and the median rate over it."""
    summary = []
    for level in np.unique(levels):
        members = [r[variant] for r, at in zip(records, levels) if at == level and r[variant]["fit"]["rate"]]
        rates = np.asarray([m["fit"]["rate"] for m in members])
        level_gamma = float(np.median(gamma[levels == level]))
        entry = {"level": float(level), "gamma": level_gamma, "members_fitted": len(members)}
        if len(members):
            replicates = np.nanmedian(np.stack([m["bootstrap_rates"] for m in members]), 0)
            median = float(np.median(rates))
            bound_rate = level_gamma**4
            entry.update(
                median_rate=median,
                rate_ci=[float(v) for v in np.nanpercentile(replicates, [2.5, 97.5])],
                rate_min=float(rates.min()),
                rate_max=float(rates.max()),
                median_r2=float(np.median([m["fit"]["r2"] for m in members if m["fit"]["r2"] is not None])),
                bound_rate=bound_rate,
                rate_over_bound=median / bound_rate if bound_rate > 0 else None,
            )
        summary.append(entry)
    return summary


def bound_holds(tv: Sequence[float], memories: Sequence[int], gamma: float, rank: int) -> bool:
    """Whether TV(L) <= d exp(-γ⁴ L) (the bound with C = 1) at every L."""
    bound = rank * np.exp(-(gamma**4) * np.asarray(memories, dtype=np.float64))
    return bool(np.all(np.asarray(tv) <= bound))


def measure_family(
    config: ObservabilityFamily,
    memories: Sequence[int] = tuple(range(1, 25)),
    rows: int = 256,
    length: int = 96,
) -> dict:
    """Lemma 1 on the family of `config` (JSON-ready): the `family` (settings, per member γ, |λ₂|),
    per member and variant (`known`, `mixture`) the TV curve, fit and rate interval
    (`members`), per variant the level table (`levels`, `level_summary`), Spearman of rate and γ,
    and whether the C = 1 bound holds for every member."""
    memories = check_memories(memories)
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 2:
        raise ValueError(f"rows={rows!r} must be an integer >= 2 (sequences per HMM).")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < max(memories) + 2:
        raise ValueError(f"length={length!r} must be an integer >= max(memories) + 2 = {max(memories) + 2}.")
    hmms = build_family(config)
    records = [
        measure_member(hmms, task, memories, rows, length, seed=config.seed * 100_003 + task + 1)
        for task in range(hmms.num_members)
    ]
    result = {
        "family": {
            "num_states": config.num_states,
            "vocab_size": config.vocab_size,
            "mixing": config.mixing,
            "levels": [float(v) for v in config.levels],
            "hmms_per_level": config.hmms_per_level,
            "rank": config.rank,
            "seed": config.seed,
        },
        "memories": memories,
        "rows_per_hmm": rows,
        "length": length,
        "scored_positions_per_row": length - 1 - max(memories),
        "fit_floor": FIT_FLOOR,
        "members": [],
    }
    for task, record in enumerate(records):
        entry = {
            "level": float(hmms.level[task]),
            "gamma": float(hmms.observability[task]),
            "second_eigenvalue": float(hmms.second_eigenvalue[task]),
        }
        for variant in ("known", "mixture"):
            entry[variant] = {k: v for k, v in record[variant].items() if k != "bootstrap_rates"}
            entry[variant]["bound_holds"] = bound_holds(
                record[variant]["tv"], memories, float(hmms.observability[task]), hmms.rank
            )
        result["members"].append(entry)
    for variant in ("known", "mixture"):
        fitted = [
            (g, r[variant]["fit"]["rate"])
            for g, r in zip(hmms.observability, records)
            if r[variant]["fit"]["rate"]
        ]
        result[variant] = {
            "levels": level_summary(hmms.level, hmms.observability, records, variant),
            "rate_gamma_spearman": rank_correlation([g for g, _ in fitted], [r for _, r in fitted]),
            "bound_holds_for_all": all(m[variant]["bound_holds"] for m in result["members"]),
        }
    return result
