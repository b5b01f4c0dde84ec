"""The forward recursion of a batch of HMMs: the filtered feature distribution after every token.

One recursion serves every exact predictor (`bayes.BayesOptimalPredictor`: the mixture, the
oracle, the state filters, the memory-L windows). A chain is one HMM reading one row; after
token t its feature distribution is

    z_t = z_{t-1} @ F[x_t] / sum(...)      F[v] = right @ diag(E[:, v]) @ left   [d x d]
    z_t = start_features[x_t]               where token t opens a segment (a reset)

(`left = I`, `right = P` for a dense HMM). Two schedules compute the same z:

- `sequential`: one batched step per token, every chain at once. Cheap in arithmetic
  (2 d^2 flops per token and chain), but each step costs a few framework calls, so it pays
  off when many chains share a step.
- `scan`: the products F[x_1] ... F[x_t] by a work-efficient parallel scan (a tree of
  pairwise products, then the prefixes read down the tree): about 2 log2(T) batched calls in
  all, at 2 d^3 flops per token and chain. It pays off for few, long chains (one row of
  thousands of tokens), where the sequential loop would pay its call overhead per token.

The scan keeps every product as `diag(exp(r)) @ N` with each row of N scaled to a maximum
of 1 and the row's scale in log space, so no row of a long product underflows: a chain that
the sequential filter follows stays representable however unlikely its tokens. A reset is
the rank-1 matrix whose rows are all the segment's start features, flagged so that a
product containing one forgets what came before it (as the sequential filter does, even
after a token of probability 0). Delimiters are the identity; what a filter holds at a
delimiter is never read (the next token opens a segment).

Shapes: M HMMs, R rows, T tokens, S states, V observation tokens, d features. `observed` is
[1, R, T] (every HMM reads every row: the mixture) or [M, 1, T] (HMM m reads row m).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Costs the schedule is chosen by (a CPU of these machines; the choice only needs the order
# of magnitude): one framework call, and arithmetic per second in small batched products.
CALL_SECONDS = 6e-6
FLOPS = 1.5e10
SEQUENTIAL_CALLS_PER_TOKEN = 7
SCAN_CALLS_PER_LEVEL = 30


def flush_subnormal_(probs: torch.Tensor) -> torch.Tensor:
    """Set probabilities below sqrt(smallest normal number) to zero, in place.

    Sparse HMMs produce tiny probabilities all the time, and CPU arithmetic that reads or
    writes subnormal numbers is 10-20x slower. With every factor either zero or above
    sqrt(tiny) (1e-19 in float32, 1e-154 in float64), no product is subnormal. Such
    values are far below anything a prediction can show.
    """
    return torch.nn.functional.threshold_(probs, torch.finfo(probs.dtype).tiny ** 0.5, 0.0)


def positive(totals: torch.Tensor) -> torch.Tensor:
    """Normalising totals safe to divide by: zeros become the smallest normal number (a
    distribution of zeros stays zeros), every other total is kept, however small."""
    return totals.clamp_min(torch.finfo(totals.dtype).tiny)


def by_token(table: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """`table[m, observed[m or 0, r or 0, ...]]`: `[M, V, *cell] -> [M, R, ..., *cell]`.

    observed is [1, R, ...] (every HMM reads the same rows) or [M, 1, ...] (HMM m reads row m).
    """
    num_hmms, cell = table.shape[0], table.shape[2:]
    if observed.shape[0] == 1:
        return table.index_select(1, observed.reshape(-1)).view(num_hmms, *observed.shape[1:], *cell)
    hmm = torch.arange(num_hmms, device=observed.device).view(num_hmms, *[1] * (observed.ndim - 2))
    return table[hmm, observed[:, 0]][:, None]


@dataclass
class HMMTables:
    """M HMMs on a device, with the tables of the feature-space recursion.

    initial [M, S], emissions [M, S, V], left [M, S, d] (None: identity, d = S),
    right [M, d, S]. Derived: start_probs [M, V] and start_features [M, V, d] (the first
    token of a segment), feature_probs [M, d, V] = right @ E, and feature_step
    [M, V, d, d] = right diag(E[:, v]) left (None: recurse through the states).
    """

    initial: torch.Tensor
    emissions: torch.Tensor
    left: torch.Tensor | None
    right: torch.Tensor
    start_probs: torch.Tensor
    start_features: torch.Tensor
    feature_probs: torch.Tensor
    feature_step: torch.Tensor | None

    @classmethod
    def build(cls, initial, emissions, left, right, fuse: bool) -> HMMTables:
        start_probs = torch.einsum("ms,msv->mv", initial, emissions)
        start_states = initial[:, None, :] * emissions.transpose(1, 2)  # [M, V, S]
        start_features = start_states if left is None else torch.bmm(start_states, left)
        start_features = flush_subnormal_(start_features / positive(start_probs[..., None]))
        feature_probs = torch.bmm(right, emissions)
        feature_step = None
        if fuse:  # right[m] diag(E[m, :, v]) left[m] for every v: [M, V, d, d]
            steps = []
            for token in range(emissions.shape[2]):
                weighted = right * emissions[:, None, :, token]  # [M, d, S]
                steps.append(weighted if left is None else torch.bmm(weighted, left))
            feature_step = flush_subnormal_(torch.stack(steps, dim=1))
        return cls(initial, emissions, left, right, start_probs, start_features, feature_probs, feature_step)

    @property
    def num_features(self) -> int:
        return self.right.shape[1]

    def select(self, index: torch.Tensor) -> HMMTables:
        """The HMMs `index` [M'] as new tables (for the oracle: one HMM per row)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return HMMTables(**{name: None if t is None else t[index] for name, t in fields.items()})

    def state_step(self, states: torch.Tensor) -> torch.Tensor:
        """Propagate state distributions `[M, R, S]` one step."""
        return flush_subnormal_(torch.bmm(self.to_features(states), self.right))

    def to_features(self, states: torch.Tensor) -> torch.Tensor:
        return states if self.left is None else flush_subnormal_(states @ self.left)

    def to_states(self, features: torch.Tensor) -> torch.Tensor:
        """`[M, ..., d] -> [M, ..., S]`: the state distribution one step after `features`."""
        flat = features.reshape(features.shape[0], -1, features.shape[-1])
        return torch.bmm(flat, self.right).view(*features.shape[:-1], -1)

    def token_probs(self, features: torch.Tensor) -> torch.Tensor:
        """`[M, ..., d] -> [M, ..., V]`: next-token distribution of each HMM."""
        flat = features.reshape(features.shape[0], -1, features.shape[-1])
        return torch.bmm(flat, self.feature_probs).view(*features.shape[:-1], -1)

    def observe(self, features: torch.Tensor, observed: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out` = the unnormalised feature distribution after the tokens `observed` ([1, R] or [M, 1])."""
        if self.feature_step is None:
            states = torch.bmm(features, self.right)
            emitted = by_token(self.emissions.transpose(1, 2), observed)
            if self.left is None:
                return torch.mul(states, emitted, out=out)
            return torch.bmm(states.mul_(emitted), self.left, out=out)
        if observed.shape[0] != 1:  # HMM m reads row m
            return torch.bmm(features, by_token(self.feature_step, observed)[:, 0], out=out)
        for token in observed[0].unique().tolist():  # rows that read the same token share a matrix
            rows = (observed[0] == token).nonzero()[:, 0]
            out.index_copy_(1, rows, torch.bmm(features.index_select(1, rows), self.feature_step[:, token]))
        return out

    def step_matrices(self, observed: torch.Tensor) -> torch.Tensor:
        """`[M, R, T, d, d]`: F[x_t] for every chain and token of `observed` [1, R, T] or [M, 1, T]."""
        if self.feature_step is not None:
            return by_token(self.feature_step, observed)
        emitted = by_token(self.emissions.transpose(1, 2), observed)  # [M, R, T, S]
        weighted = self.right[:, None, None] * emitted[..., None, :]  # right diag(E[:, x])
        return weighted if self.left is None else weighted @ self.left[:, None, None]


def filtered_features(
    tables: HMMTables,
    observed: torch.Tensor,
    resets: torch.Tensor,
    previous: torch.Tensor,
    first: tuple[torch.Tensor, torch.Tensor] | None = None,
    budget_floats: int = 2**28,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(features [M, R, T, d], likelihood [M, R, T])`: the feature distribution of every chain
    after each token of `observed`, and the probability the chain gave that token.

    observed [1, R, T] or [M, 1, T] (observation tokens; a delimiter read as any of them);
    resets [same]: the token opens a segment; previous [M, R, d]: the distribution before
    the first token; first: the distribution after the first token and its likelihood,
    given (a window that starts inside a segment). The schedule (`sequential` or `scan`) is
    chosen by its cost; both give the same values. `budget_floats` caps the scan's memory.
    """
    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    chains, d = num_hmms * rows, tables.num_features
    padded = 2 ** math.ceil(math.log2(max(length, 1)))
    sequential_cost = length * (SEQUENTIAL_CALLS_PER_TOKEN * CALL_SECONDS + chains * 4 * d * d / FLOPS)
    scan_cost = (
        2 * math.log2(padded) * SCAN_CALLS_PER_LEVEL * CALL_SECONDS + chains * padded * 6 * d**3 / FLOPS
    )
    fits = chains * padded * d * d * 8 <= budget_floats
    if length > 1 and fits and scan_cost < sequential_cost:
        return scan(tables, observed, resets, previous, first)
    return sequential(tables, observed, resets, previous, first)


def sequential(tables, observed, resets, previous, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`filtered_features` one token at a time, every chain at once."""
    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    like = tables.right
    out = torch.empty(length, num_hmms, rows, tables.num_features, dtype=like.dtype, device=like.device)
    likelihood = torch.empty(length, num_hmms, rows, 1, dtype=like.dtype, device=like.device)
    flat = resets.flatten(0, 1)
    reset_all, reset_any = flat.all(0).tolist(), flat.any(0).tolist()  # one device sync, not T
    features = previous
    for t in range(length):
        token = observed[..., t]
        if t == 0 and first is not None:
            out[t], likelihood[t] = first[0], first[1][..., None]
        elif reset_all[t]:
            out[t], likelihood[t] = _start(tables, token)
        else:
            tables.observe(features, token, out=out[t])
            torch.sum(out[t], -1, keepdim=True, out=likelihood[t])
            flush_subnormal_(out[t].div_(positive(likelihood[t])))
            if reset_any[t]:
                start, start_likelihood = _start(tables, token)
                out[t] = torch.where(resets[..., t, None], start, out[t])
                likelihood[t] = torch.where(resets[..., t, None], start_likelihood, likelihood[t])
        features = out[t]
    return out.permute(1, 2, 0, 3), likelihood[..., 0].permute(1, 2, 0)


def _start(tables: HMMTables, token: torch.Tensor):
    """Features and likelihood of the tokens `token` ([1, R] or [M, 1]) opening a segment."""
    return by_token(tables.start_features, token), by_token(tables.start_probs[..., None], token)


def scan(tables, observed, resets, previous, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`filtered_features` by a parallel scan over the tokens (see the module's docstring)."""
    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    d, dtype = tables.num_features, tables.right.dtype
    # in float64 whatever the tables: the products' row scales then rarely need the exact path
    steps = tables.step_matrices(observed).double().expand(num_hmms, rows, length, d, d)
    starts = by_token(tables.start_features, observed).double().expand(num_hmms, rows, length, d)
    flags = resets.expand(num_hmms, rows, length)
    if first is not None:
        starts = torch.cat([first[0].double()[:, :, None], starts[:, :, 1:]], dim=2)
        flags = torch.cat([torch.ones_like(flags[..., :1]), flags[..., 1:]], dim=-1)
    matrices = torch.where(flags[..., None, None], starts[..., None, :].expand_as(steps), steps)
    matrices, flat_flags = matrices.flatten(0, 1), flags.flatten(0, 1)  # [N, T, d, d], [N, T]
    padded = 2 ** math.ceil(math.log2(length))
    if padded > length:  # the identity after the last token
        eye = torch.eye(d, dtype=matrices.dtype, device=matrices.device)
        matrices = torch.cat([matrices, eye.expand(matrices.shape[0], padded - length, d, d)], dim=1)
        flat_flags = torch.cat(
            [flat_flags, flat_flags.new_zeros(flat_flags.shape[0], padded - length)], dim=1
        )
    top = matrices.amax(-1)
    leaves = (flat_flags, torch.log(top), flush_subnormal_(matrices / positive(top)[..., None]))
    levels = [leaves]
    while levels[-1][0].shape[1] > 2:  # pairwise products up the tree (the root is never read)
        below = levels[-1]
        levels.append(_compose(_pick(below, 0), _pick(below, 1)))
    vectors = previous.double().expand(num_hmms, rows, d).reshape(-1, 1, d)
    for level in reversed(levels):  # each node's input, down the tree: the right child reads its left sibling
        vectors = torch.stack([vectors, _apply(vectors, _pick(level, 0))], dim=2).flatten(1, 2)
    features = _apply(vectors, leaves)[:, :length].reshape(num_hmms, rows, length, d).to(dtype)
    before = vectors[:, :length].reshape(num_hmms, rows, length, d).to(dtype)  # the input of each token
    likelihood = (before * by_token(tables.feature_probs.transpose(1, 2), observed)).sum(-1)
    likelihood = torch.where(flags, by_token(tables.start_probs[..., None], observed)[..., 0], likelihood)
    if first is not None:
        likelihood[:, :, 0] = first[1]
    return features, likelihood


def _pick(level, parity: int):
    return tuple(part[:, parity::2] for part in level)


def _compose(first, then):
    """The product of two scaled matrices (flags, r, N) with the second applied after the first.

    Row i of the product is sum_j N1[i, j] exp(r2[j]) N2[j]. Scaling every r2 by the largest
    is exact unless some exp underflows (scales more than ~700 nats apart in float64); then
    each row is scaled by the largest r2 it reaches instead.
    """
    flags1, r1, n1 = first
    flags2, r2, n2 = then
    shift = r2.amax(-1, keepdim=True).clamp_min(torch.finfo(r2.dtype).min)
    scale = torch.exp(r2 - shift)
    if bool(((scale == 0) & (r2 > -math.inf)).any()):  # rare: exact, row by row
        reached = torch.where(n1 > 0, r2[..., None, :], -math.inf).amax(-1, keepdim=True)
        reached = reached.clamp_min(torch.finfo(r2.dtype).min)  # [.., d, 1]
        product = (n1 * torch.exp((r2[..., None, :] - reached).clamp(max=0.0))) @ n2
        shift = reached[..., 0]
    else:
        product = n1 @ (scale[..., None] * n2)
    top = product.amax(-1)
    n = flush_subnormal_(product / positive(top)[..., None])
    r = r1 + shift + torch.log(top)
    reset = flags2[..., None]
    return flags1 | flags2, torch.where(reset, r2, r), torch.where(reset[..., None], n2, n)


def _apply(vectors: torch.Tensor, matrices) -> torch.Tensor:
    """Normalised `vectors @ matrices` ([N, K, d] through K scaled matrices); a flagged product
    (it contains a reset) forgets its input. Each vector's entries are scaled by the largest
    scale it reaches, so none underflows."""
    flags, r, n = matrices
    vectors = torch.where(flags[..., None], 1.0, vectors)
    shift = torch.where(vectors > 0, r, -math.inf).amax(-1, keepdim=True)
    weights = vectors * torch.exp(r - shift.clamp_min(torch.finfo(r.dtype).min)).clamp(max=1.0)
    out = (weights[..., None, :] @ n)[..., 0, :]
    return flush_subnormal_(out / positive(out.sum(-1, keepdim=True)))
