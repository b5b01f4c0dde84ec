"""The observability coefficient of an HMM: how far apart its emissions keep two state distributions.

The paper's Assumption 2 (over-complete gamma-observability, after Uehara et al. 2022 and
Guo et al. 2023): there is a gamma > 0 with

    || O b - O b' ||_1  >=  gamma || b - b' ||_1      for all distributions b, b' over the S states,

where `O = E^T [V, S]` maps a distribution of the hidden state to the distribution of the token
it emits (`E [S, V]`: the emission rows). The coefficient of an HMM is the largest such gamma.
Every x != 0 with sum(x) = 0 is, scaled, some b - b' (its positive and negative parts), so

    gamma = min over x != 0 with sum(x) = 0 of  ||O x||_1 / ||x||_1.

gamma lies in [0, 1] (a Markov kernel shrinks the l1 norm): identity emissions give 1, two
states that emit the same distribution give 0 (x = e_i - e_j), and so does any HMM with more
states than tokens (S > V: O x sums to zero too, so O maps the S - 1 sum-zero directions into
V - 1 and some x has O x = 0). With one state there is nothing to tell apart: gamma = 1 by
convention.

**Exact value** (`observability_exact`). gamma = 1 / max ||x||_1 over the polytope
`K = {x : sum(x) = 0, ||O x||_1 <= 1}` (bounded when O is one-to-one on sum-zero vectors), and a
convex function is largest at a vertex of a polytope. K is the l1 ball of R^V cut by the
(S - 1)-dimensional image of the sum-zero vectors, so at a vertex x the tokens v with
(O x)_v = 0 pin x down to a line: some S - 2 of them, with sum(x) = 0, have x's direction as their
only solution. Every set Z of S - 2 tokens thus gives one candidate direction, its ratio
||O x||_1 / ||x||_1 is an upper bound on gamma, and the smallest over all C(V, S - 2) sets is
gamma itself. The direction is the null vector of a k x (k + 1) system, in whichever space is
smaller: the sum-zero vectors (k = S - 2: x orthogonal, through O, to the tokens of Z) or the
tokens outside Z (k = V - S + 1: u = O x is zero on Z and in the range of O, then x = O^+ u).
A singular system gives no candidate, a nearly singular one a direction that is still feasible.
Cost per HMM: C(V, S - 2) solves of a (k + 1) x (k + 1) system, e.g. 8,008 of 6 x 6 for S = 12,
V = 16 (the `small` corpus): about 0.2 s for its 32 HMMs on 2 CPU cores.

**Bounds** (`observability_bounds`, where C(V, S - 2) is too many): with `sigma` the smallest
singular value of O on the sum-zero vectors, ||O x||_1 >= ||O x||_2 >= sigma ||x||_2 >= sigma
||x||_1 / sqrt(S), so gamma >= sigma / sqrt(S); gamma is at most the ratio at any x, taken at
every pair of states (x = e_i - e_j: the TV distance of their emission rows) and at the
singular vector of sigma.

Shapes: K HMMs, S states, V observation tokens.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

MAX_EXACT_SUBSETS = 50_000  # token sets per HMM above which `observability_coefficient` gives bounds
MAX_SUBSETS_AT_ALL = 10_000_000  # `observability_exact` refuses more token sets per HMM
RANK_TOLERANCE = 1e-12  # O is not one-to-one on sum-zero vectors below this singular value: gamma = 0
_CHUNK_FLOATS = 2**22  # floats of the systems solved at once


def check_emissions(emissions) -> np.ndarray:
    """`[K, S, V]` float64 emission rows; `ValueError` saying what is wrong otherwise."""
    array = np.asarray(emissions, dtype=np.float64)
    if array.ndim == 2:
        raise ValueError(
            f"emissions has shape {array.shape}: give a batch of HMMs [K, S, V] (for one HMM, "
            "emissions[None])."
        )
    if array.ndim != 3 or 0 in array.shape:
        raise ValueError(f"emissions must be [K, S, V] with K, S, V >= 1, got shape {array.shape}.")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError("emissions has negative or non-finite entries: each row must be a distribution.")
    worst = float(np.max(np.abs(array.sum(-1) - 1.0)))
    if worst > 1e-4:
        raise ValueError(
            f"emission rows must sum to 1 (the worst is off by {worst:.2e}): normalise the last axis."
        )
    return array


def sum_zero_basis(num_states: int) -> np.ndarray:
    """`[S, S-1]`: an orthonormal basis of the vectors x with sum(x) = 0."""
    _, _, vh = np.linalg.svd(np.ones((1, num_states)))
    return vh[1:].T


def smallest_singular_value(emissions: np.ndarray) -> np.ndarray:
    """`[K]`: smallest singular value of O = E^T on the sum-zero vectors (0 where S > V)."""
    num_states, vocab = emissions.shape[1:]
    if num_states > vocab:
        return np.zeros(emissions.shape[0])
    on_sum_zero = np.swapaxes(emissions, 1, 2) @ sum_zero_basis(num_states)  # [K, V, S-1]
    return np.linalg.svd(on_sum_zero, compute_uv=False)[:, -1]


def exact_subsets(num_states: int, vocab_size: int) -> int:
    """Number of token sets (C(V, S - 2)) the exact method solves per HMM."""
    return math.comb(vocab_size, num_states - 2) if num_states >= 2 else 0


def null_vectors(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(null [..., k+1], independent [...])`: a vector orthogonal to the k rows of each
    `rows [..., k, k+1]` (the last column of the inverse with a fixed random row appended), and
    whether those rows are independent (else `null` is not defined)."""
    *batch, height, width = rows.shape
    square = torch.empty(*batch, width, width, dtype=torch.float64)
    square[..., :height, :] = rows
    square[..., height, :] = torch.as_tensor(np.random.default_rng(0).standard_normal(width))
    last = torch.zeros(width, 1, dtype=torch.float64)
    last[-1] = 1.0
    solved, info = torch.linalg.solve_ex(square, last.expand(*batch, width, 1))
    return solved[..., 0], info == 0


@dataclass(frozen=True)
class SumZeroMaps:
    """What every token set's candidate direction of HMMs `emissions [K, S, V]` is found from,
    computed once for all the sets (`sum_zero_maps`): `basis` Q [S, S-1] of the sum-zero vectors,
    `on_sum_zero` B = O Q [K, V, S-1], and from B's SVD, `outside` [K, V, V-S+1], a basis of the
    complement of B's range, and `inverse` (Q B^+)^T [K, V, S]."""

    basis: torch.Tensor
    on_sum_zero: torch.Tensor
    outside: torch.Tensor
    inverse: torch.Tensor


def sum_zero_maps(emissions: torch.Tensor) -> SumZeroMaps:
    """`SumZeroMaps` of `emissions [K, S, V]` (float64)."""
    num_states = emissions.shape[1]
    basis = torch.as_tensor(sum_zero_basis(num_states))  # Q [S, S-1]
    on_sum_zero = emissions.transpose(1, 2) @ basis  # B [K, V, S-1]
    left, sigma, right = torch.linalg.svd(on_sum_zero)  # B = left diag(sigma) right
    inverse = (left[:, :, : num_states - 1] / sigma[:, None]) @ right @ basis.T  # (Q B^+)^T [K, V, S]
    return SumZeroMaps(basis, on_sum_zero, left[:, :, num_states - 1 :], inverse)


def candidate_directions(
    maps: SumZeroMaps, tokens: torch.Tensor, in_token_space: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(x [K, N, S], O x [K, N, V])`: per HMM of `maps` (`sum_zero_maps` of its emissions) and
    token set Z of `tokens [N, S-2]`, the direction x with sum(x) = 0 and (O x)_v = 0 for v in Z,
    and what it emits (NaN where Z gives no line).

    `in_token_space` False: x = Q y for Q a basis of the sum-zero vectors and y orthogonal to the
    rows Z of B = O Q. True: u = O x is zero on Z and orthogonal to a basis of the complement of
    B's range, which leaves V - S + 2 unknowns on the other tokens; then x = Q B^+ u."""
    count, vocab, _ = maps.on_sum_zero.shape
    num_states = maps.basis.shape[0]
    if in_token_space:
        keep = torch.ones(len(tokens), vocab, dtype=torch.bool)
        keep[torch.arange(len(tokens))[:, None], tokens] = False
        others = keep.nonzero()[:, 1].reshape(len(tokens), vocab - num_states + 2)  # [N, V-S+2]
        u, independent = null_vectors(maps.outside[:, others].transpose(-1, -2))  # [K, N, V-S+2]
        emitted = torch.zeros(count, len(tokens), vocab, dtype=torch.float64)
        emitted.scatter_(2, others.expand(count, -1, -1), u)
        x = emitted @ maps.inverse
    else:
        y, independent = null_vectors(maps.on_sum_zero[:, tokens])  # [K, N, S-1]
        x, emitted = y @ maps.basis.T, y @ maps.on_sum_zero.transpose(1, 2)
    return x.masked_fill(~independent[..., None], torch.nan), emitted


def ratio(emitted: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """`[K, N]`: ||O x||_1 / ||x||_1 from `emitted [K, N, V]` = O x and `directions x [K, N, S]`
    (NaN where x is zero or not finite)."""
    return emitted.abs().sum(-1) / directions.abs().sum(-1)


def observability_exact(emissions) -> np.ndarray:
    """`[K]`: the observability coefficient of each HMM `emissions [K, S, V]`, exactly (module
    docstring; exact up to `RANK_TOLERANCE`). Costs C(V, S - 2) small solves per HMM: use
    `observability_coefficient` where that may be too many."""
    emissions = check_emissions(emissions)
    count, num_states, vocab = emissions.shape
    if num_states == 1:
        return np.ones(count)
    subsets = exact_subsets(num_states, vocab)
    if subsets > MAX_SUBSETS_AT_ALL:
        raise ValueError(
            f"the exact coefficient of HMMs with S={num_states} states and V={vocab} tokens solves "
            f"C(V, S - 2) = {subsets:,} systems per HMM, more than {MAX_SUBSETS_AT_ALL:,}: use "
            "observability_coefficient (bounds past that) or observability_bounds."
        )
    injective = smallest_singular_value(emissions) > RANK_TOLERANCE
    best = np.zeros(count)
    if subsets and injective.any():
        table = torch.as_tensor(emissions[injective])
        tokens = torch.as_tensor(list(itertools.combinations(range(vocab), num_states - 2)), dtype=torch.long)
        tokens = tokens.reshape(subsets, num_states - 2)
        in_token_space = vocab - num_states + 2 < num_states - 1
        size = min(num_states - 1, vocab - num_states + 2) + 1
        per_chunk = max(1, _CHUNK_FLOATS // (len(table) * size * max(size, num_states)))
        smallest = torch.full((len(table),), torch.inf, dtype=torch.float64)
        maps = sum_zero_maps(table)  # once: every chunk of token sets reads the same maps
        for start in range(0, subsets, per_chunk):
            x, emitted = candidate_directions(maps, tokens[start : start + per_chunk], in_token_space)
            smallest = torch.minimum(smallest, ratio(emitted, x).nan_to_num(torch.inf).amin(1))
        best[injective] = smallest.numpy()
    return np.clip(best, 0.0, 1.0)


def observability_bounds(emissions) -> tuple[np.ndarray, np.ndarray]:
    """`(lower [K], upper [K])` around the coefficient of each HMM `emissions [K, S, V]`, in
    O(S^2 V) per HMM: sigma / sqrt(S) below; above, the smallest ratio at a pair of states and at
    the smallest singular vector (module docstring)."""
    emissions = check_emissions(emissions)
    count, num_states, _ = emissions.shape
    if num_states == 1:
        return np.ones(count), np.ones(count)
    sigma = smallest_singular_value(emissions)
    first, second = np.triu_indices(num_states, 1)
    pairs = np.eye(num_states)[first] - np.eye(num_states)[second]  # [pairs, S]: e_i - e_j
    directions = [torch.as_tensor(pairs).expand(count, -1, -1)]
    if num_states <= emissions.shape[2]:  # and the direction of sigma
        on_sum_zero = np.swapaxes(emissions, 1, 2) @ sum_zero_basis(num_states)
        weakest = np.linalg.svd(on_sum_zero)[2][:, -1:] @ sum_zero_basis(num_states).T  # [K, 1, S]
        directions.append(torch.as_tensor(weakest))
    table = torch.as_tensor(emissions)
    upper = torch.cat([ratio(x @ table, x) for x in directions], 1).amin(1).numpy()
    lower = np.where(sigma <= RANK_TOLERANCE, 0.0, sigma / math.sqrt(num_states))
    upper = np.where(sigma <= RANK_TOLERANCE, 0.0, upper)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def observability_coefficient(
    emissions, max_subsets: int = MAX_EXACT_SUBSETS
) -> tuple[np.ndarray, np.ndarray]:
    """`(lower [K], upper [K])`: the coefficient of each HMM `emissions [K, S, V]`, equal where
    exact: exact when C(V, S - 2) <= `max_subsets` or when S > V (then 0), else
    `observability_bounds`."""
    emissions = check_emissions(emissions)
    if isinstance(max_subsets, bool) or not isinstance(max_subsets, (int, np.integer)) or max_subsets < 0:
        raise ValueError(f"max_subsets={max_subsets!r} must be an integer >= 0 (token sets per HMM).")
    _, num_states, vocab = emissions.shape
    if num_states > vocab:
        zeros = np.zeros(emissions.shape[0])
        return zeros, zeros.copy()
    if exact_subsets(num_states, vocab) <= max_subsets:
        exact = observability_exact(emissions)
        return exact, exact.copy()
    return observability_bounds(emissions)
