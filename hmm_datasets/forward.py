"""The forward recursion of a batch of HMMs: the filtered feature distribution after every token.

One recursion serves every exact predictor (`bayes.BayesOptimalPredictor`: the mixture, the
oracle, the state filters, the memory-L windows). A chain is one HMM reading one row; after
token t its feature distribution is

    z_t = z_{t-1} @ F[x_t] / sum(...)      F[v] = right @ diag(E[:, v]) @ left   [d x d]
    z_t = start_features[x_t]               where token t opens a segment (a reset)

(`left = I`, `right = P` for a dense HMM). Three schedules compute the same z, and
`filtered_features` runs the one its cost model (`schedule_costs`) finds cheapest:

- `sequential`: one batched step per token, every chain at once. Cheap in arithmetic
  (2 d^2 flops per token and chain), but each step costs a few framework calls, so it pays
  off when many chains share a step (the mixture: every HMM reads every row).
- `compiled` (CPU): a compiled loop over the tokens of each chain, the chains in parallel
  (`loop.filter_chains`, numba). No call overhead per token, but no batched products
  either: it pays off for few chains, long rows and small batches (the oracle).
- `scan` (for a GPU, where there is no compiled loop): the products F[x_1] ... F[x_t] by a
  work-efficient parallel scan (a tree of pairwise products, then the prefixes read down
  the tree): about 2 log2(T) batched calls in all, at 2 d^3 flops per token and chain. It
  pays off for few, long chains, where the sequential loop would pay its call overhead per
  token.

The scan keeps every product as `diag(exp(r)) @ N` with each row of N scaled to a maximum
of 1 and the row's scale in log space, so no row of a long product underflows: a chain that
the sequential filter follows stays representable however unlikely its tokens. A reset is
the rank-1 matrix whose rows are all the segment's start features, flagged so that a
product containing one forgets what came before it (as the sequential filter does, even
after a token of probability 0). Delimiters are the identity; what a filter holds at a
delimiter is never read (the next token opens a segment).

Shapes: M HMMs, R rows, T tokens, S states, V observation tokens, d features. `observed` is
[1, R, T] (every HMM reads every row: the mixture) or [M, R, T] (HMM m reads rows [m, :]: the
oracle, its rows grouped by task).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

# Costs the schedule is chosen by (a CPU of these machines; the choice only needs the order
# of magnitude): one framework call, arithmetic per second in small batched products, and
# arithmetic per second of one thread of the compiled loop.
CALL_SECONDS = 6e-6
FLOPS = 1.5e10
LOOP_FLOPS = 2.5e9
# threads the cost model credits the compiled loop with: a constant, so that the schedule, and
# with it the last bits of float32 results, never depends on the thread setting
LOOP_THREADS = 2
# the loop costs its process about 0.4 s once (import numba, load the kernel): it is offered for
# work of 1 Mflop and more (`small`'s one row of 4,096 tokens is 1.2), not for the tiny calls that
# every schedule ends within milliseconds, where a process making only those would lose by it
LOOP_MIN_FLOPS = 2**20
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


def by_token(table: torch.Tensor, observed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`table[m, observed[m or 0, ...]]`: `[M, V, *cell] -> [M, R, ..., *cell]`.

    observed is [1, R, ...] (every HMM reads the same rows) or [M, R, ...] (HMM m its own rows).
    `out`: a contiguous buffer of that shape to write into.
    """
    num_hmms, vocab, cell = table.shape[0], table.shape[1], table.shape[2:]
    if observed.shape[0] == 1:  # (cells flattened: index_select copies those far faster)
        index = observed.reshape(-1)
        flat_out = None if out is None else out.view(num_hmms, index.shape[0], -1)
        flat = torch.index_select(table.reshape(num_hmms, vocab, -1), 1, index, out=flat_out)
        return flat.view(num_hmms, *observed.shape[1:], *cell)
    first_row = torch.arange(0, num_hmms * vocab, vocab, device=observed.device)
    flat = (observed + first_row.view(num_hmms, *[1] * (observed.ndim - 1))).reshape(-1)
    flat_out = None if out is None else out.view(flat.shape[0], *cell)
    rows = torch.index_select(table.reshape(num_hmms * vocab, *cell), 0, flat, out=flat_out)
    return rows.view(*observed.shape, *cell)


@dataclass
class HMMTables:
    """M HMMs on a device, with the tables of the feature-space recursion.

    initial [M, S], emissions [M, S, V], left [M, S, d] (None: identity, d = S),
    right [M, d, S]. Derived: emitted [M, V, S] (emissions by token), start_probs [M, V] and
    start_features [M, V, d] (the first token of a segment), feature_probs [M, d, V] =
    right @ E, and feature_step [M, V, d, d] = right diag(E[:, v]) left (None: recurse through
    the states).
    """

    initial: torch.Tensor
    emissions: torch.Tensor
    emitted: torch.Tensor
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
        emitted = emissions.transpose(1, 2).contiguous()
        tables = cls(
            initial, emissions, emitted, left, right, start_probs, start_features, feature_probs, None
        )
        if fuse:
            tables.feature_step = flush_subnormal_(tables.token_steps())
        return tables

    @property
    def num_features(self) -> int:
        return self.right.shape[1]

    def step_flops(self) -> int:
        """Arithmetic of one token of one chain."""
        d, num_states = self.right.shape[1:]
        if self.feature_step is not None:
            return 2 * d * d
        return 2 * d * num_states * (1 if self.left is None else 2)

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

    def observe(
        self,
        features: torch.Tensor,
        observed: torch.Tensor,
        out: torch.Tensor,
        work: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`out` = the unnormalised feature distribution after the tokens `observed` ([1, R] or [M, R]).
        `work`: `[2, M, R, S]` to hold the states and emissions of a step through the states (kept
        across steps: a fresh tensor this size costs its page faults, at 512 HMMs as much as the
        step's product)."""
        if self.feature_step is None:
            states = torch.bmm(features, self.right, out=None if work is None else work[0])
            emitted = by_token(self.emitted, observed, out=None if work is None else work[1])
            if self.left is None:
                return torch.mul(states, emitted, out=out)
            return torch.bmm(states.mul_(emitted), self.left, out=out)
        if observed.shape[0] != 1:  # each HMM reads its own rows
            steps = by_token(self.feature_step, observed)  # [M, R, d, d]
            return torch.matmul(features[..., None, :], steps, out=out[..., None, :])[..., 0, :]
        for token in observed[0].unique().tolist():  # rows that read the same token share a matrix
            rows = (observed[0] == token).nonzero()[:, 0]
            out.index_copy_(1, rows, torch.bmm(features.index_select(1, rows), self.feature_step[:, token]))
        return out

    def token_steps(self) -> torch.Tensor:
        """`[M, V, d, d]`: F[v] = right diag(E[:, v]) left for every token v (the fused table when
        kept; else built a token at a time, so no [M, V, d, S] temporary is held)."""
        if self.feature_step is not None:
            return self.feature_step
        steps = []
        for token in range(self.emitted.shape[1]):
            weighted = self.right * self.emitted[:, None, token]  # [M, d, S]
            steps.append(weighted if self.left is None else torch.bmm(weighted, self.left))
        return torch.stack(steps, dim=1)


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

    observed [1, R, T] or [M, R, T] (observation tokens; a delimiter read as any of them);
    resets [same]: the token opens a segment; previous [M, R, d]: the distribution before
    the first token; first: the distribution after the first token and its likelihood,
    given (a window that starts inside a segment). The schedule (`sequential`, `scan` or,
    on CPU, `compiled`) is chosen by its cost; all give the same values. `budget_floats`
    caps the scan's memory.
    """
    chains = tables.initial.shape[0] * observed.shape[1]
    costs = schedule_costs(tables, chains, observed.shape[2], budget_floats)
    schedule = {"sequential": sequential, "scan": scan, "compiled": compiled}[min(costs, key=costs.get)]
    return schedule(tables, observed, resets, previous, first)


def schedule_costs(tables: HMMTables, chains: int, length: int, budget_floats: int) -> dict[str, float]:
    """Estimated seconds of each schedule that can run `chains` chains of `length` tokens."""
    d, flops = tables.num_features, tables.step_flops()
    costs = {"sequential": length * (SEQUENTIAL_CALLS_PER_TOKEN * CALL_SECONDS + chains * 2 * flops / FLOPS)}
    padded = 2 ** math.ceil(math.log2(max(length, 1)))
    if length > 1 and chains * padded * d * d * 8 <= budget_floats:
        levels = 2 * math.log2(padded) * SCAN_CALLS_PER_LEVEL * CALL_SECONDS
        costs["scan"] = levels + chains * padded * 6 * d**3 / FLOPS
    if tables.right.device.type == "cpu" and chains * length * flops >= LOOP_MIN_FLOPS:
        costs["compiled"] = chains * length * flops / (LOOP_FLOPS * min(chains, LOOP_THREADS))
    return costs


def sequential(tables, observed, resets, previous, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`filtered_features` one token at a time, every chain at once."""
    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    like = tables.right
    out = torch.empty(length, num_hmms, rows, tables.num_features, dtype=like.dtype, device=like.device)
    likelihood = torch.empty(length, num_hmms, rows, 1, dtype=like.dtype, device=like.device)
    flat = resets.flatten(0, 1)
    reset_all, reset_any = flat.all(0).tolist(), flat.any(0).tolist()  # one device sync, not T
    work = None
    if tables.feature_step is None:
        work = torch.empty(2, num_hmms, rows, tables.right.shape[2], dtype=like.dtype, device=like.device)
    features = previous
    for t in range(length):
        if t == 0 and first is not None:
            out[t], likelihood[t] = first[0], first[1][..., None]
        else:
            _step(
                tables,
                features,
                observed[..., t],
                resets[..., t],
                out[t],
                likelihood[t],
                reset_all[t],
                reset_any[t],
                work,
            )
        features = out[t]
    return out.permute(1, 2, 0, 3), likelihood[..., 0].permute(1, 2, 0)


def compiled(tables, observed, resets, previous, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`filtered_features` as a compiled loop over the tokens, the chains in parallel (CPU only;
    `loop.filter_chains`)."""
    import numba

    from . import loop  # numba compiles (or loads) the kernel on first use

    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    like = tables.right
    out = torch.empty(num_hmms, rows, length, tables.num_features, dtype=like.dtype)
    likelihood = torch.empty(num_hmms, rows, length, dtype=like.dtype)

    def host(tensor, ndim):  # contiguous, so the kernel compiles once per dtype
        if tensor is None:
            return np.empty((0,) * ndim, dtype=out.numpy().dtype)
        return np.ascontiguousarray(tensor.numpy())

    first_features, first_likelihood = (None, None) if first is None else first
    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    tiny = torch.finfo(like.dtype).tiny
    try:
        loop.filter_chains(
            host(observed, 3),
            host(resets, 3),
            host(previous.expand(num_hmms, rows, -1), 3),
            host(first_features, 3),
            host(first_likelihood, 2),
            host(tables.feature_step, 4),
            host(tables.right, 3),
            host(tables.emitted, 3),
            host(tables.left, 3),
            host(tables.start_features, 3),
            host(tables.start_probs, 2),
            tiny,
            tiny**0.5,
            out.numpy(),
            likelihood.numpy(),
        )
    finally:  # numba's OpenMP layer sets the process's OpenMP threads, torch's too, when it starts
        torch.set_num_threads(threads)
    return out, likelihood


def _step(tables, features, token, resets, out, likelihood, reset_all=False, reset_any=True, work=None):
    """One token of every chain: `out` [M, R, d] = the normalised features after `token`
    ([1, R] or [M, R]) from `features`, or the segment's start where `resets` [M or 1, R];
    `likelihood` [M, R, 1] = the probability of the token. `reset_all` and `reset_any` say
    what `resets` holds (known on the host, so no device sync); `work`: `HMMTables.observe`'s."""
    if reset_all:
        out[:], likelihood[:] = _start(tables, token)
        return
    tables.observe(features, token, out, work)
    torch.sum(out, -1, keepdim=True, out=likelihood)
    flush_subnormal_(out.div_(positive(likelihood)))
    if reset_any:
        start, start_likelihood = _start(tables, token)
        out[:] = torch.where(resets[..., None], start, out)
        likelihood[:] = torch.where(resets[..., None], start_likelihood, likelihood)


def _start(tables: HMMTables, token: torch.Tensor):
    """Features and likelihood of the tokens `token` ([1, R] or [M, R]) opening a segment."""
    return by_token(tables.start_features, token), by_token(tables.start_probs[..., None], token)


def scan(tables, observed, resets, previous, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`filtered_features` by a parallel scan over the tokens (see the module's docstring).

    The tree's leaves are pairs of tokens, read from a table of the products of every two
    token classes (or composed, when the table would be the larger); the tree gives each
    pair's input, and the two tokens of every pair are then read by two steps of the
    sequential recursion over all pairs at once.
    """
    num_hmms, rows, length = tables.initial.shape[0], observed.shape[1], observed.shape[2]
    d, vocab = tables.num_features, tables.start_probs.shape[1]
    half = 2 ** math.ceil(math.log2(length)) // 2
    pad = 2 * half - length
    classes = torch.nn.functional.pad(observed, (0, pad), value=vocab)  # class V: the identity (padding)
    flags = torch.nn.functional.pad(resets, (0, pad), value=False).expand(num_hmms, rows, 2 * half)
    starts = None
    if first is not None:
        flags = flags.clone()
        flags[..., 0] = True
        starts = first[0].double()
    # the tree works in float64 whatever the tables: its row scales then rarely need the exact path
    pairs = _pair_nodes(tables, classes, flags, starts)  # [M R, half]
    levels = [pairs]
    while levels[-1][0].shape[1] > 2:  # pairwise products up the tree (the root is never read)
        below = levels[-1]
        levels.append(_compose(_pick(below, 0), _pick(below, 1)))
    vectors = previous.double().expand(num_hmms, rows, d).reshape(-1, 1, d)
    if half > 1:  # each node's input, down the tree: the right child reads its left sibling
        for level in reversed(levels):
            vectors = torch.stack([vectors, _apply(vectors, _pick(level, 0))], dim=2).flatten(1, 2)
    # the two tokens of every pair, from the pair's input
    dtype, width = tables.right.dtype, rows * half
    tokens = classes.clamp(max=vocab - 1)
    out = torch.empty(2, num_hmms, width, d, dtype=dtype, device=vectors.device)
    likelihood = torch.empty(2, num_hmms, width, 1, dtype=dtype, device=vectors.device)
    features = vectors.to(dtype).view(num_hmms, width, d)
    for parity in (0, 1):
        token = tokens[..., parity::2].reshape(tokens.shape[0], width)
        reset = flags[..., parity::2].reshape(num_hmms, width)
        _step(tables, features, token, reset, out[parity], likelihood[parity], reset_any=bool(reset.any()))
        if parity == 0 and first is not None:
            out[0].view(num_hmms, rows, half, d)[:, :, 0] = first[0]
            likelihood[0].view(num_hmms, rows, half)[:, :, 0] = first[1]
        features = out[parity]
    features = out.view(2, num_hmms, rows, half, d).permute(1, 2, 3, 0, 4).reshape(num_hmms, rows, -1, d)
    likelihood = likelihood.view(2, num_hmms, rows, half).permute(1, 2, 3, 0).reshape(num_hmms, rows, -1)
    return features[:, :, :length], likelihood[:, :, :length]


def _token_nodes(tables: HMMTables):
    """`(r [M, V+1, d], N [M, V+1, d, d])`: each token's step matrix F[v] as `diag(exp(r)) N`
    (rows of N scaled to a maximum of 1), and the identity as class V."""
    num_hmms = tables.start_probs.shape[0]
    steps = tables.token_steps().double()  # [M, V, d, d]
    eye = torch.eye(steps.shape[-1], dtype=steps.dtype, device=steps.device)
    steps = torch.cat([steps, eye.expand(num_hmms, 1, *eye.shape)], dim=1)
    top = steps.amax(-1)
    return torch.log(top), flush_subnormal_(steps / positive(top)[..., None])


def _pair_nodes(tables: HMMTables, classes, flags, starts) -> tuple:
    """The tree's first level: `(flags, r, N)` of F[x_2i] F[x_2i+1] for every chain, `[M R, half]`.

    classes [1 or M, R, 2 half] (V: the identity); flags [M, R, 2 half]: the token opens a
    segment, its matrix then the rank-1 matrix of the segment's start (`starts` [M, R, d] at
    token 0 when given, else `start_features`)."""
    num_hmms, rows, length = flags.shape
    r, n = _token_nodes(tables)
    num_classes = r.shape[1]
    even, odd = classes[..., 0::2], classes[..., 1::2]
    if num_classes**2 <= rows * length // 2:  # a table of every pair is the cheaper
        _, r_table, n_table = _compose(
            (None, r[:, :, None], n[:, :, None]), (None, r[:, None, :], n[:, None, :])
        )
        pair = even * num_classes + odd
        r_pairs, n_pairs = by_token(r_table.flatten(1, 2), pair), by_token(n_table.flatten(1, 2), pair)
    else:
        first_nodes = (None, by_token(r, even), by_token(n, even))
        _, r_pairs, n_pairs = _compose(first_nodes, (None, by_token(r, odd), by_token(n, odd)))
    paired_flags = flags[..., 0::2] | flags[..., 1::2]
    if bool(paired_flags.any()):  # pairs that open a segment, composed apart
        m, row, i = paired_flags.nonzero(as_tuple=True)
        left = _leaf_nodes(tables, r, n, classes, flags, starts, (m, row, 2 * i))
        right = _leaf_nodes(tables, r, n, classes, flags, starts, (m, row, 2 * i + 1))
        _, r_pairs[m, row, i], n_pairs[m, row, i] = _compose(left, right)
    return paired_flags.flatten(0, 1), r_pairs.flatten(0, 1), n_pairs.flatten(0, 1)


def _leaf_nodes(tables, r, n, classes, flags, starts, at) -> tuple:
    """`(flags, r, N)` of the tokens at `at` (indices into [M, R, 2 half]): their step matrix, or
    where flagged the rank-1 matrix whose rows are the segment's start."""
    m, row, t = at
    token = classes.expand(flags.shape)[m, row, t]
    flag = flags[m, row, t]
    r, n = r[m, token], n[m, token]
    start = tables.start_features.double()[m, token.clamp(max=tables.start_probs.shape[1] - 1)]
    if starts is not None:  # a window's first token
        start = torch.where((t == 0)[:, None], starts[m, row], start)
    top = start.amax(-1, keepdim=True)
    rank_one = flush_subnormal_(start / positive(top))[:, None, :].expand_as(n)
    n = torch.where(flag[:, None, None], rank_one, n)
    r = torch.where(flag[:, None], torch.log(top).expand_as(r), r)
    return flag, r, n


def _pick(level, parity: int):
    return tuple(part[:, parity::2] for part in level)


def _compose(first, then):
    """The product of two scaled matrices (flags, r, N) with the second applied after the first
    (flags None: neither holds a reset).

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
    if flags2 is None:  # no product is flagged
        return None, r, n
    if bool(flags2.any()):  # a reset forgets what came before it
        r, n = torch.where(flags2[..., None], r2, r), torch.where(flags2[..., None, None], n2, n)
    return flags1 | flags2, r, n


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
