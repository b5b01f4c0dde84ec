"""The prior-level yardstick by particle learning: the Bayes predictor under the HMM prior, with
the HMM's parameters integrated out exactly and only its state paths sampled.

`hmm_datasets.prior` estimates the Bayes predictor under the prior by K' fresh HMMs, which does
not converge on `small`'s sparse prior. Here the Dirichlet priors are conjugate given a state
path (Rao-Blackwellised particle filtering, "particle learning": Carvalho, Johannes, Lopes &
Polson 2010): a particle is a state path summarised by its current state and its counts, and
its predictive is the Polya-urn (Dirichlet-multinomial) one of those counts.

    probs = ParticlePriorPredictor(config, num_particles=1024).next_token_probs(input_ids)  # [B, L, V+1]
    report = particle_convergence(config, input_ids, 1024)
    report["spread"]["kl_symmetric"], report["converged"], report["label"]

The prior (full-rank transitions only): initial ~ Dir(a0) over S states, each transition row
~ Dir(aT), each emission row ~ Dir(aE) over V tokens. One HMM generates every segment of a row;
every segment restarts the chain from the initial distribution. A particle at a segment start
moves to j with probability (a0 + init[j]) / (S a0 + sum init), else from state s with
(aT + trans[s, j]) / (S aT + sum trans[s]), and emits o from j with
(aE + emit[j, o]) / (V aE + sum emit[j]). After an observation each particle's weight is
multiplied by its predictive of it, its next state is drawn from its posterior, its counts are
incremented, and the particles are resampled (systematic) when the effective sample size falls
below N / 2. A delimiter observes nothing: the next observation is a segment start.

With `emission_mixing` m (each emission row (1 - m) Dir(aE) + m / V: the token hides the state),
a particle emits o from j with (1 - m) times the urn's probability plus m / V; once its state is
drawn, whether the token came from the row or from the uniform share is drawn too, and only a
row's token is counted: the augmentation keeps the urn the exact posterior of the drawn rows.

Shapes: B rows, L positions, N particles, S states, V observation tokens (the delimiter is V).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .config import HMMMixtureConfig
from .memory import scored_positions
from .predictors import _with_delimiters
from .prior import CONVERGENCE_TOLERANCE, converged, convergence

DEFAULT_MEMORY_BUDGET = 2**29  # bytes of particle counts held at once; rows are chunked to fit
_START = -1  # a particle's state at a segment start (no state yet)


class ParticlePriorPredictor:
    """The Bayes predictor under `config`'s HMM prior, estimated with `num_particles` state paths
    per row (the HMM's parameters are integrated out exactly). `seed` seeds the particles' draws;
    other seeds give independent estimates. Rows are filtered in chunks of at most
    `memory_budget_bytes` of counts, one generator across the chunks (so an estimate depends on
    the chunking, not its distribution), on `device` (a GPU's random stream differs from the
    CPU's: the same seed gives another estimate of the same distribution there)."""

    def __init__(
        self,
        config: HMMMixtureConfig,
        num_particles: int,
        seed: int = 0,
        *,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
        device: str | torch.device = "cpu",
    ) -> None:
        if config.transition_rank is not None:
            raise ValueError(
                f"transition_rank={config.transition_rank}: the particle predictor needs full-rank "
                "Dirichlet transitions (conjugate given a path); use transition_rank=None."
            )
        _check_positive("num_particles", num_particles, "a number of particles")
        _check_positive("memory_budget_bytes", memory_budget_bytes, "a number of bytes")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed={seed!r} must be a non-negative integer (0, 1, ...).")
        self.config = config
        self.num_particles = int(num_particles)
        self.seed = int(seed)
        self.memory_budget_bytes = int(memory_budget_bytes)
        self.device = torch.device(device)

    @property
    def rows_per_chunk(self) -> int:
        """Rows filtered at once: N (S S + S V + 2 S) float64 counts per row (twice, for resampling)."""
        S, V = self.config.num_states, self.config.vocab_size
        per_row = 2 * 8 * self.num_particles * (S * S + S * V + 2 * S)
        return max(1, self.memory_budget_bytes // per_row)

    @torch.no_grad()
    def next_token_probs(self, input_ids) -> torch.Tensor:
        """`[B, L, V+1]` float64: P(token i+1 | tokens 0..i) under the prior; where token i + 1 is
        a delimiter the layout makes it certain (all mass on the delimiter, as `BayesOptimalPredictor`)."""
        ids = _as_ids(input_ids, self.config.vocab_size)
        generator = torch.Generator(self.device).manual_seed(self.seed)
        chunks = [
            self._filter(rows.to(self.device), generator).cpu() for rows in ids.split(self.rows_per_chunk)
        ]
        return _with_delimiters(torch.cat(chunks), ids, self.config.delimiter)

    def _filter(self, ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """`[B, L, V]`: the particles' weighted predictive of the observation after each position."""
        particles = _Particles(self.config, ids.shape[0], self.num_particles, ids.device)
        out = torch.empty(
            ids.shape[0], ids.shape[1], self.config.vocab_size, dtype=torch.float64, device=ids.device
        )
        for position in range(ids.shape[1]):
            particles.observe(ids[:, position], generator)
            out[:, position] = particles.predictive()
        return out


class _Particles:
    """N weighted state paths per row, as their current states and counts (`[B, N, ...]` float64)."""

    def __init__(
        self, config: HMMMixtureConfig, batch: int, num_particles: int, device: torch.device
    ) -> None:
        S, V, N = config.num_states, config.vocab_size, num_particles
        exact = self._exact = {"dtype": torch.float64, "device": device}
        self.a0, self.aT, self.aE = (
            float(config.initial_concentration),
            float(config.transition_concentration),
            float(config.emission_concentration),
        )
        self.mixing = float(config.emission_mixing)  # each emission uniform with this probability
        self.S, self.V = S, V
        self.state = torch.full((batch, N), _START, dtype=torch.long, device=device)
        self.weight = torch.full((batch, N), 1.0 / N, **exact)
        self.init = torch.zeros(batch, N, S, **exact)
        self.trans = torch.zeros(batch, N, S, S, **exact)
        self.emit = torch.zeros(batch, N, S, V, **exact)
        self.emit_total = torch.zeros(batch, N, S, **exact)  # emit.sum(-1)
        self._ahead: torch.Tensor | None = None  # `next_state_probs` of the particles as they are

    def next_state_probs(self) -> torch.Tensor:
        """`[B, N, S]`: each particle's predictive of the next state (Polya urn of its counts),
        computed once per step: `predictive` and the next `observe` read the same particles."""
        if self._ahead is None:
            self._ahead = self._next_state_probs()
        return self._ahead

    def _next_state_probs(self) -> torch.Tensor:
        start = (self.a0 + self.init) / (self.S * self.a0 + self.init.sum(-1, keepdim=True))
        index = self.state.clamp(min=0)[..., None, None].expand(-1, -1, 1, self.S)
        row = self.trans.gather(2, index).squeeze(2)
        moved = (self.aT + row) / (self.S * self.aT + row.sum(-1, keepdim=True))
        return torch.where((self.state == _START)[..., None], start, moved)

    def predictive(self) -> torch.Tensor:
        """`[B, V]`: the weighted mean over particles of sum_j P(next state j) P(o | j)."""
        B, N = self.state.shape
        scale = self.weight[..., None] * self.next_state_probs() / (self.V * self.aE + self.emit_total)
        counts = torch.bmm(scale.view(B, 1, N * self.S), self.emit.view(B, N * self.S, self.V))
        urn = counts.squeeze(1) + self.aE * scale.sum((1, 2))[:, None]
        return urn if self.mixing == 0 else (1 - self.mixing) * urn + self.mixing / self.V

    def observe(self, tokens: torch.Tensor, generator: torch.Generator) -> None:
        """Condition every row on its next token `tokens [B]` (a delimiter: back to a segment start)."""
        B, N = self.state.shape
        observed = tokens != self.V
        token = tokens.clamp(max=self.V - 1)
        emitted = self.emit.gather(3, token[:, None, None, None].expand(B, N, self.S, 1)).squeeze(3)
        urn = (self.aE + emitted) / (self.V * self.aE + self.emit_total)  # [B, N, S]: P(o | j, counts)
        emission = urn if self.mixing == 0 else (1 - self.mixing) * urn + self.mixing / self.V
        joint = self.next_state_probs() * emission
        likelihood = joint.sum(-1)  # [B, N]
        uniform = torch.rand(B, N, 1, generator=generator, **self._exact)
        cumulative = (joint / likelihood[..., None]).cumsum(-1)
        drawn = (cumulative < uniform * cumulative[..., -1:]).sum(-1).clamp(max=self.S - 1)
        self._count(drawn, token, observed, self._from_rows(drawn, urn, emission, generator))
        self._ahead = None  # the particles move
        weight = torch.where(observed[:, None], self.weight * likelihood, self.weight)
        self.weight = weight / weight.sum(-1, keepdim=True)
        self.state = torch.where(observed[:, None], drawn, _START)
        self._resample(observed, generator)

    def _from_rows(
        self, drawn: torch.Tensor, urn: torch.Tensor, emission: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor | None:
        """`[B, N]` whether each particle's token came from its state's drawn emission row rather
        than the uniform share (`emission_mixing`), sampled given the state `drawn`: only those
        tokens are counted, so the urn stays the posterior of the drawn rows. None without mixing
        (every token is the row's; nothing is drawn, so the random stream is unchanged)."""
        if self.mixing == 0:
            return None
        pick = drawn[..., None]
        from_row = (1 - self.mixing) * urn.gather(2, pick) / emission.gather(2, pick)
        return torch.rand(from_row.shape, generator=generator, **self._exact).lt(from_row).squeeze(2)

    def _count(
        self, drawn: torch.Tensor, token: torch.Tensor, observed: torch.Tensor, from_row: torch.Tensor | None
    ) -> None:
        """Add the step into state `drawn [B, N]` emitting `token [B]` to the rows `observed [B]`;
        the emission only where `from_row [B, N]` (every observed one where None)."""
        B, N = drawn.shape
        add = observed[:, None].expand(B, N).double()
        at_start = self.state == _START
        self.init.scatter_add_(2, drawn[..., None], (add * at_start)[..., None])
        edge = self.state.clamp(min=0) * self.S + drawn
        self.trans.view(B, N, -1).scatter_add_(2, edge[..., None], (add * ~at_start)[..., None])
        emitted = add if from_row is None else add * from_row
        self.emit.view(B, N, -1).scatter_add_(
            2, (drawn * self.V + token[:, None])[..., None], emitted[..., None]
        )
        self.emit_total.scatter_add_(2, drawn[..., None], emitted[..., None])

    def _resample(self, observed: torch.Tensor, generator: torch.Generator) -> None:
        """Systematic resampling of the rows whose effective sample size fell below N / 2."""
        B, N = self.state.shape
        ess = 1.0 / (self.weight**2).sum(-1)
        rows = (observed & (ess < N / 2)).nonzero().squeeze(1)
        offset = torch.rand(B, 1, generator=generator, **self._exact)  # drawn for every row
        if len(rows) == 0:
            return
        points = (offset[rows] + torch.arange(N, **self._exact)) / N
        cumulative = self.weight[rows].cumsum(-1)
        picked = torch.searchsorted(cumulative, points * cumulative[:, -1:]).clamp(max=N - 1)
        chosen = (rows[:, None], picked)
        for name in ("state", "init", "trans", "emit", "emit_total"):
            tensor = getattr(self, name)
            tensor[rows] = tensor[chosen]
        self.weight[rows] = 1.0 / N


def particle_convergence(
    config: HMMMixtureConfig,
    input_ids,
    num_particles: int,
    seeds: Sequence[int] = (0, 1),
    *,
    tolerance: float = CONVERGENCE_TOLERANCE,
    **predictor_kwargs,
) -> dict:
    """Has the N = `num_particles` estimate converged on rows `input_ids [B, L]`? Predicts them with
    two independent particle sets (`seeds`) and returns `convergence_report` of the two."""
    seeds = [int(seed) for seed in seeds]
    if len(seeds) != 2 or seeds[0] == seeds[1]:
        raise ValueError(f"seeds={seeds} must be two different seeds, e.g. (0, 1): the spread needs two.")
    ids = _as_ids(input_ids, config.vocab_size)
    first, second = (
        ParticlePriorPredictor(config, num_particles, seed, **predictor_kwargs).next_token_probs(ids)
        for seed in seeds
    )
    return convergence_report(config, ids, num_particles, seeds, first, second, tolerance)


def convergence_report(
    config: HMMMixtureConfig,
    input_ids,
    num_particles: int,
    seeds: Sequence[int],
    first: torch.Tensor,
    second: torch.Tensor,
    tolerance: float = CONVERGENCE_TOLERANCE,
) -> dict:
    """JSON-ready, with `measure_convergence`'s keys where they apply: `num_particles`, `seeds`,
    `num_rows`, `num_positions` (scored: next token an observation), `spread` (`convergence` of
    the two estimates `first, second [B, L, V+1]`), `tolerance`, `converged` and `label`."""
    ids = _as_ids(input_ids, config.vocab_size)
    scored = scored_positions(ids, config.delimiter)
    report = {
        "num_particles": int(num_particles),
        "seeds": [int(seed) for seed in seeds],
        "num_rows": int(ids.shape[0]),
        "num_positions": int(scored.sum()),
        "spread": convergence(first, second, scored),
        "tolerance": float(tolerance),
    }
    report["converged"] = converged(report, tolerance)
    spread = report["spread"]["kl_symmetric"]
    report["label"] = (
        "converged"
        if report["converged"]
        else f"NOT CONVERGED: two particle sets of N={num_particles} differ by {spread:.4f} "
        f"nats/token (tolerance {tolerance}); use more particles"
    )
    return report


def _as_ids(input_ids, vocab_size: int) -> torch.Tensor:
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    if ids.ndim != 2 or ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) > vocab_size:
        raise ValueError(
            f"input_ids must be rows [B, L] of token ids 0..{vocab_size} (the delimiter is {vocab_size}), "
            f"got shape {tuple(ids.shape)}: pass corpus rows of this config."
        )
    return ids


def _check_positive(name: str, value, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be {meaning}: an integer >= 1.")
