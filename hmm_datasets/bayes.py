"""The exact Bayes-optimal next-token predictor of a mixture of HMMs, batched in torch.

The forward algorithm runs for every task at once. Its state is, per (task, row), the
distribution of the hidden state given the tokens so far (normalised at every step, so
any sequence length is safe) and the log-posterior of the task (renormalised at every
step). A delimiter resets the hidden state to the initial distribution and leaves the
task posterior alone. Delimiters are read from `input_ids`: the layout is fixed, so
their positions are known in advance, and the next-token distribution before a
delimiter is a point mass on it.

Every method takes `input_ids [batch, seq]` and returns, at position i, the
distribution of token i + 1 (at the last position: the next observation of the test
sequence), as `[batch, seq, V + 1]` with the delimiter last.

The recursion runs in the space of latent features of the transitions
`P = left @ right` (the paper's Assumption 1; a dense HMM is `left = I`, `right = P`).
With `z` the feature distribution after the last token,

    P(next token)   = z @ (right @ E)                               [d x V]
    z after token x = z @ (right @ diag(E[:, x]) @ left) / P(x)      [d x d]

so a rank-16 HMM with 128 states costs 2 d (d + V) instead of 2 S (S + V) flops per
step. The d x d "feature step" tables take K V d^2 floats; when they do not fit the
memory budget (dense HMMs with many states) the recursion goes through the states.

Shapes: K tasks, S states, V observation tokens, d features, B rows, L length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .forward import HMMTables, by_token, filtered_features, flush_subnormal_, positive
from .params import HMMParams
from .windows import MemoryWindows, delimiter_point_mass

MIN_BLOCK = 16  # tokens a row chunk leaves room for (longer blocks where the budget allows)
# floats of the working tensors of one block of tokens: larger blocks mean fewer calls, but
# beyond the cache every pass over them waits on memory
BLOCK_FLOATS = 2**22


@dataclass
class BayesPrediction:
    """`probs [B, L, V+1]`: next-token distributions (None: not asked for); `task_posterior
    [B, L, K]`: P(task | tokens 0..i); `states [B, L, S]` (the oracle's): P(state_i | task, tokens
    of the segment up to i), 0 at delimiters."""

    probs: torch.Tensor | None
    task_posterior: torch.Tensor | None = None
    states: torch.Tensor | None = None


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class BayesOptimalPredictor(MemoryWindows):
    """Exact next-token predictors of a mixture of HMMs: Bayes-optimal, oracle, and their L-memory versions.

    Args:
        params: the mixture (see `HMMParams`).
        device: where to compute (default: CUDA when available, else CPU).
        dtype: `torch.float32` (default) or `torch.float64` (for tests).
        memory_budget_bytes: working memory per call; rows are processed in chunks that
            fit (default: 2 GiB on CPU, half the free memory on a GPU).
        fuse: use the d x d feature-step tables ("auto": for low-rank HMMs, d < S, when the
            tables take at most a quarter of the memory budget).
    """

    def __init__(
        self,
        params: HMMParams,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        memory_budget_bytes: int | None = None,
        fuse: bool | str = "auto",
    ) -> None:
        self.params = params
        self.device = torch.device(device) if device is not None else default_device()
        self.dtype = dtype
        self.vocab_size = params.vocab_size
        self.delimiter = params.vocab_size
        self.num_tasks = params.num_tasks
        self.num_states = params.num_states
        self.memory_budget_bytes = memory_budget_bytes or _default_budget(self.device)

        def tensor(array):
            """Rows as `dtype` on the device, renormalised at that precision."""
            rows = torch.as_tensor(np.asarray(array, dtype=np.float64), device=self.device)
            return flush_subnormal_((rows / rows.sum(-1, keepdim=True)).to(dtype))

        low_rank = params.transition_left is not None
        self.num_features = params.transition_rank if low_rank else params.num_states
        if fuse == "auto":  # pays off when there are fewer features than states
            table_bytes = self.num_tasks * self.vocab_size * self.num_features**2 * self._float_bytes
            fuse = self.num_features < self.num_states and table_bytes <= self.memory_budget_bytes // 4
        self.hmms = HMMTables.build(
            initial=tensor(params.initial),
            emissions=tensor(params.emissions),
            left=tensor(params.transition_left) if low_rank else None,
            right=tensor(params.transition_right if low_rank else params.transitions),
            fuse=bool(fuse),
        )
        self.log_prior = torch.log(tensor(params.task_prior))

    # ---- public predictors ------------------------------------------------------
    def predict(self, input_ids, *, return_task_posterior: bool = False) -> BayesPrediction:
        """Bayes-optimal next-token distributions (and optionally the task posterior)."""
        return self._mixture_by_chunks(input_ids, return_task_posterior, want_probs=True)

    def next_token_probs(self, input_ids) -> torch.Tensor:
        """`[B, L, V+1]`: P(token i+1 | tokens 0..i) under the mixture."""
        return self.predict(input_ids).probs

    def task_posterior(self, input_ids) -> torch.Tensor:
        """`[B, L, K]`: P(task | tokens 0..i), from the filter alone: no prediction is made (at
        8,192 HMMs the predictions cost about as much as the filter)."""
        return self._mixture_by_chunks(input_ids, True, want_probs=False).task_posterior

    @torch.no_grad()
    def oracle_next_token_probs(self, input_ids, task_ids) -> torch.Tensor:
        """`[B, L, V+1]`: next-token distributions of a predictor told each row's task."""
        ids = self._as_ids(input_ids)
        tasks = self._as_tasks(task_ids, ids.shape[0])
        out = []
        per_row = self._row_floats(ids.shape[1], 1, False) + self._group_floats_per_hmm()
        for chunk in self._row_chunks(ids.shape[0], per_row):
            out.append(self._oracle_filter(ids[chunk], tasks[chunk]).probs)
        return torch.cat(out)

    @torch.no_grad()
    def oracle_state_filters(self, input_ids, task_ids) -> torch.Tensor:
        """`[B, L, S]`: P(state_i | task of the row, tokens of its segment up to i), the forward
        filter of the HMM `task_ids [B]` names, reset at every delimiter; 0 at delimiters."""
        ids = self._as_ids(input_ids)
        tasks = self._as_tasks(task_ids, ids.shape[0])
        out = []
        per_row = self._row_floats(ids.shape[1], 1, False) + self._group_floats_per_hmm()
        per_row += ids.shape[1] * self.num_states
        for chunk in self._row_chunks(ids.shape[0], per_row):
            out.append(
                self._oracle_filter(ids[chunk], tasks[chunk], want_states=True, want_probs=False).states
            )
        return torch.cat(out)

    # ---- the forward algorithm ----------------------------------------------------
    @torch.no_grad()
    def _mixture_by_chunks(self, input_ids, want_posterior: bool, want_probs: bool) -> BayesPrediction:
        """`_mixture_filter` over the rows, as many at a time as the memory budget holds."""
        ids = self._as_ids(input_ids)
        per_row = self._row_floats(ids.shape[1], self.num_tasks, want_posterior)
        parts = [
            self._mixture_filter(ids[chunk], want_posterior, want_probs=want_probs)
            for chunk in self._row_chunks(ids.shape[0], per_row)
        ]
        probs = torch.cat([part.probs for part in parts]) if want_probs else None
        posterior = torch.cat([part.task_posterior for part in parts]) if want_posterior else None
        return BayesPrediction(probs, posterior)

    def _mixture_filter(
        self, ids, want_posterior, start_states=None, predict_at=None, want_probs=True
    ) -> BayesPrediction:
        """Every HMM reads every row of `ids [R, L]`, weighted by its posterior; start_states [K, R, S]."""
        log_prior = self.log_prior[:, None].expand(self.num_tasks, ids.shape[0])
        return self._filter(
            self.hmms,
            ids[None],
            log_prior,
            start_states=start_states,
            want_posterior=want_posterior,
            predict_at=predict_at,
            want_probs=want_probs,
        )

    def _oracle_filter(
        self, ids, tasks, start_states=None, want_states=False, predict_at=None, want_probs=True
    ) -> BayesPrediction:
        """Row r of `ids [R, L]` read by the HMM of task `tasks[r]`; start_states [R, S].

        The rows run grouped by task, `[G, W, L]` (`task_grid`), so that one step is a product
        per group rather than a matrix-vector product per row."""
        group_tasks, grid, slot = task_grid(tasks)
        start = None if start_states is None else start_states[grid]
        out = self._filter(
            self.hmms.select(group_tasks),
            ids[grid],
            None,
            start,
            want_states=want_states,
            predict_at=predict_at,
            want_probs=want_probs,
        )
        probs = None if out.probs is None else out.probs[slot]
        return BayesPrediction(probs, None, None if out.states is None else out.states[slot])

    def _filter(
        self,
        hmms: HMMTables,
        tokens: torch.Tensor,
        log_weights: torch.Tensor | None,
        start_states: torch.Tensor | None = None,
        want_posterior: bool = False,
        want_states: bool = False,
        predict_at: list[int] | None = None,
        want_probs: bool = True,
    ) -> BayesPrediction:
        """Forward filter of M HMMs over their rows: the mixture's (the HMMs' predictions mixed
        by their posterior) or the oracle's (each chain alone).

        tokens [1, R, L] with log_weights [M, R] (every HMM reads every row: the mixture; an
        output row mixes the M chains that read it), or [M, R, L] with log_weights None (HMM m
        reads rows [m, :]: the oracle; an output row per chain, M R in all). start_states
        [M, R, S]: state distribution at the first token (default: initial). Returns next-token
        probabilities, [rows, L, V+1], the task posterior [rows, L, M] (`want_posterior`, the
        mixture's) and each chain's filtered state distribution, [M R, L, S] (`want_states`).
        With `predict_at` (increasing positions, the same in every row) the next-token
        probabilities after those positions only, [rows, len(predict_at), V+1]: the filter reads
        every token, and the predictions (a product with every HMM's table, then the mixing)
        are made where they are wanted (the fixed-memory windows read a few of each run). Without
        `want_probs` no prediction is made (`probs` None): the posterior or the states alone.

        The filtered features come from `forward.filtered_features`, a block of tokens at a
        time; what they imply (likelihoods, the task posterior, predictions) is read off the
        whole block at once.
        """
        num_hmms, vocab = hmms.start_probs.shape
        rows, length = tokens.shape[1], tokens.shape[2]
        mixing = log_weights is not None
        out_rows = rows if mixing else tokens.shape[0] * rows
        if predict_at is not None and (want_posterior or want_states):
            raise ValueError(
                "predict_at gives next-token probabilities only: ask for the posterior or states without it"
            )
        wanted = list(range(length)) if predict_at is None else list(predict_at)
        if wanted != sorted(set(wanted)) or not 0 <= wanted[0] <= wanted[-1] < length:
            raise ValueError(f"predict_at={predict_at} must be increasing positions in 0..{length - 1}")
        if not want_probs:
            wanted = []
        slot_of = {t: slot for slot, t in enumerate(wanted)}  # a position's place in `probs`
        probs = torch.empty(out_rows, len(wanted), vocab + 1, dtype=self.dtype, device=self.device)
        probs[..., vocab] = 0.0  # the rest is written block by block
        posterior = None
        if want_posterior:
            posterior = torch.empty(out_rows, length, num_hmms, dtype=self.dtype, device=self.device)
        states = None
        if want_states:
            states = torch.zeros(
                num_hmms, rows, length, self.num_states, dtype=self.dtype, device=self.device
            )
        is_delim = tokens == self.delimiter
        observed = tokens.clamp(max=vocab - 1)
        resets = torch.cat([torch.full_like(is_delim[..., :1], start_states is None), is_delim[..., :-1]], -1)
        delimiter_at = is_delim.flatten(0, 1).any(0).tolist()  # one device sync
        first = None if start_states is None else _window_start(hmms, start_states, observed[..., 0])
        log_w = log_weights.double() if mixing else None
        features = torch.zeros(num_hmms, rows, hmms.num_features, dtype=self.dtype, device=self.device)
        blocks = list(self._time_blocks(length, num_hmms * rows, want_states))
        # every block's chain predictions in one buffer (a fresh tensor this size costs its page
        # faults: at 512 HMMs as much as the product that fills it)
        chain_probs = torch.empty(
            num_hmms * rows * (blocks[0].stop - blocks[0].start) * vocab * bool(wanted),
            dtype=self.dtype,
            device=self.device,
        )
        for block in blocks:
            at = observed[..., block]
            after, likelihood = filtered_features(
                hmms,
                at,
                resets[..., block],
                features,
                first if block.start == 0 else None,
                self.memory_budget_bytes // 4 // self._float_bytes,
            )  # [M, R, T, d], [M, R, T]
            if mixing:
                weights, log_w = _block_weights(log_w, likelihood, is_delim[0, :, block], self.dtype)
                if want_posterior:
                    posterior[:, block] = weights.permute(1, 2, 0)
            kept = [t - block.start for t in range(block.start, block.stop) if t in slot_of]
            if kept:  # the wanted positions increase: the slots of a block's follow each other
                slot = slot_of[block.start + kept[0]]
                whole = len(kept) == block.stop - block.start
                self._write_predictions(
                    hmms,
                    probs[:, slot : slot + len(kept)],
                    after if whole else after[:, :, kept],
                    None if not mixing else weights if whole else weights[..., kept],
                    chain_probs,
                    [k for k, t in enumerate(kept) if delimiter_at[block.start + t]],
                    is_delim[..., block][..., kept],
                    rows,
                )
            if want_states:
                window_start = start_states if block.start == 0 else None
                previous = torch.cat([features[:, :, None], after[:, :, :-1]], dim=2)
                states[:, :, block] = self._filtered_states(
                    hmms, previous, window_start, resets[..., block], at, likelihood
                ).masked_fill(is_delim[..., block, None], 0.0)
            features = after[:, :, -1]
        inner = sum(t < length - 1 for t in wanted)  # the first slots: a next token in the row
        following = torch.tensor(wanted[:inner], dtype=torch.long, device=self.device) + 1
        next_is_delim = is_delim.reshape(out_rows, length)[:, following]
        probs[:, :inner][next_is_delim] = delimiter_point_mass(vocab, self.dtype, self.device)
        states = None if states is None else states.flatten(0, 1)
        return BayesPrediction(probs if want_probs else None, posterior, states)

    def _write_predictions(self, hmms, out, after, weights, chain_probs, ends, is_delim, rows) -> None:
        """The next-token probabilities after a block's kept positions into `out [rows, T, V+1]`:
        each chain's (`after [M, R, T, d]`: its features there) mixed by `weights [M, R, T]`
        (None: the oracle, a chain per output row); after a delimiter (`ends`, places among the
        kept positions; `is_delim [.., R, T]` says in which rows), the distribution that opens a
        segment."""
        vocab = hmms.start_probs.shape[1]
        token_probs = _token_probs(hmms, after, chain_probs)  # [M, R, T, V]
        if weights is not None:
            predicted = _mixed(token_probs, weights)
            opening = _mixed_start(hmms, weights[..., ends]) if ends else None
        else:
            predicted = token_probs.flatten(0, 1)
            opening = hmms.start_probs[:, None, None].expand(-1, rows, len(ends), -1).flatten(0, 1)
        out[..., :vocab] = predicted
        if ends:  # after a delimiter the next token opens a segment
            opens = is_delim[..., ends].reshape(out.shape[0], -1, 1)
            out[:, ends, :vocab] = torch.where(opens, opening, out[:, ends, :vocab])

    def _filtered_states(self, hmms, previous, window_start, resets, observed, likelihood) -> torch.Tensor:
        """`[M, R, T, S]`: each chain's state distribution at the tokens of a block: the state
        before a token (`initial` where it opens a segment, `window_start` at a window's first
        token, else one step from the previous token's features) conditioned on the token."""
        before = torch.where(resets[..., None], hmms.initial[:, None, None, :], hmms.to_states(previous))
        if window_start is not None:
            before[:, :, 0] = window_start
        emitted = by_token(hmms.emitted, observed)
        return before * emitted / positive(likelihood)[..., None]

    def _time_blocks(self, length: int, chains: int, want_states: bool):
        """Slices of the positions whose working tensors stay about cache-sized (`BLOCK_FLOATS`)."""
        per_token = chains * self._token_floats(want_states)
        size = max(1, min(length, BLOCK_FLOATS // max(per_token, 1)))
        for start in range(0, length, size):
            yield slice(start, min(start + size, length))

    # ---- plumbing -----------------------------------------------------------------
    def _as_ids(self, input_ids) -> torch.Tensor:
        ids = torch.as_tensor(np.asarray(input_ids) if not torch.is_tensor(input_ids) else input_ids)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(ids.shape)}.")
        if ids.numel() and (ids.min() < 0 or ids.max() > self.delimiter):
            raise ValueError(
                f"input_ids must lie in 0..{self.delimiter} (observations 0..{self.vocab_size - 1}, "
                f"delimiter {self.delimiter}); got {int(ids.min())}..{int(ids.max())}. Do these tokens "
                "come from a corpus with another vocabulary?"
            )
        return ids.to(device=self.device, dtype=torch.long)

    def _as_tasks(self, task_ids, num_rows: int) -> torch.Tensor:
        tasks = torch.as_tensor(task_ids if torch.is_tensor(task_ids) else np.asarray(task_ids))
        tasks = tasks.to(self.device).long().reshape(-1)
        if tasks.shape[0] != num_rows:
            raise ValueError(f"task_ids has {tasks.shape[0]} entries for {num_rows} rows.")
        if tasks.numel() and (tasks.min() < 0 or tasks.max() >= self.num_tasks):
            raise ValueError(f"task_ids must lie in 0..{self.num_tasks - 1}.")
        return tasks

    @property
    def _float_bytes(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    def _token_floats(self, want_states: bool = False) -> int:
        """Floats held per chain and token of a block while filtering."""
        floats = 5 * self.num_features + 8
        return floats + (3 * self.num_states if want_states else 0)

    def _row_floats(self, length: int, num_hmms: int, want_posterior: bool) -> int:
        """Floats held per row while filtering: a block of up to `MIN_BLOCK` tokens of every
        HMM, plus the outputs."""
        working = num_hmms * min(length, MIN_BLOCK) * self._token_floats(True)
        return working + length * (self.vocab_size + 1) + (length * num_hmms if want_posterior else 0)

    def _group_floats_per_hmm(self) -> int:
        """Floats of one HMM's tables, copied per row by the oracle."""
        hmms = self.hmms
        tables = [hmms.initial, hmms.emissions, hmms.left, hmms.right, hmms.start_probs]
        tables += [hmms.start_features, hmms.feature_probs, hmms.feature_step]
        return sum(t[0].numel() for t in tables if t is not None)

    def _row_chunks(self, num_rows: int, per_row: int):
        size = max(1, min(num_rows, self.memory_budget_bytes // max(per_row * self._float_bytes, 1)))
        for start in range(0, num_rows, size):
            yield slice(start, min(start + size, num_rows))


def _window_start(hmms: HMMTables, start_states: torch.Tensor, token: torch.Tensor):
    """`(features [M, R, d], likelihood [M, R])` after the first token of a window that starts
    inside a segment, from the state distribution there (computed as `start_features` and
    `start_probs` are from `initial`, so a window from `initial` equals a segment start exactly)."""
    num_hmms, rows, _ = start_states.shape
    token_probs = torch.bmm(start_states, hmms.emissions)
    likelihood = token_probs.gather(-1, token.expand(num_hmms, rows)[..., None])[..., 0]
    emitted = start_states * by_token(hmms.emitted, token)
    return flush_subnormal_(hmms.to_features(emitted / positive(likelihood)[..., None])), likelihood


def _block_weights(log_w, likelihood, is_delim, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`(weights [M, R, T], log_w [M, R])`: the posterior weights after each token of a block and
    the log-weights after its last token, from the log-weights before it (float64, [M, R]), the
    chains' likelihoods `[M, R, T]` and where the delimiters are (`[R, T]`: they tell nothing).

    Token by token (`[T, M, R]`, the order the sequential schedule writes), summed in float64,
    exponentiated at the predictions' precision `dtype` (in float32 a weight e^x comes out within
    |x| 6e-8 of itself, below 1e-19 as 0; the exp 6x faster at 512 HMMs than in float64)."""
    steps = torch.log(likelihood.permute(2, 0, 1).double())
    steps.masked_fill_(is_delim.T[:, None, :], 0.0)
    log_w = log_w + steps.cumsum(0)
    log_w -= log_w.amax(dim=1, keepdim=True)  # [T, M, R]: after each token
    return _weights(log_w.to(dtype), dim=1).permute(1, 2, 0), log_w[-1]


def _weights(log_w: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Normalised posterior weights over the HMMs (`dim`) from log-weights whose maximum is 0.

    Weights below sqrt(tiny) are set to zero (see `flush_subnormal_`); the log-weights
    themselves stay exact, so a task can still recover later.
    """
    floor = 0.5 * math.log(torch.finfo(log_w.dtype).tiny)
    # log-weights at or below the floor are set just below it and their weights then to zero: a
    # float32 exponential of -inf, or of anything whose result is subnormal, takes a slow path
    # (20-50x slower on an Intel Xeon), and most weights of a mixture are far below the floor
    raised = torch.nn.functional.threshold(log_w, floor, floor - 1.0)
    weights = torch.nn.functional.threshold_(torch.exp(raised), math.exp(floor - 0.5), 0.0)
    return weights.div_(weights.sum(dim, keepdim=True))


def _token_probs(hmms: HMMTables, features: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`[M, R, T, V]`: each chain's next-token distribution after each token, from its features
    `[M, R, T, d]` in the layout the schedule wrote (chain by chain, or token by token), written
    into the buffer `out` (at least M R T V floats).

    A token-by-token product copies every HMM's `[d, V]` table once per token; where that is
    more than the block's features (V > R: `paper`'s one row), the features are put chain by
    chain instead (one copy of `[M, R, T, d]`) and read by one product per HMM."""
    num_hmms, rows, length, d = features.shape
    vocab = hmms.feature_probs.shape[2]
    out = out[: num_hmms * rows * length * vocab]
    if features.is_contiguous() or vocab > rows:
        flat = features.reshape(num_hmms, -1, d)
        torch.bmm(flat, hmms.feature_probs, out=out.view(num_hmms, rows * length, vocab))
        return out.view(num_hmms, rows, length, vocab)
    by_token = features.permute(2, 0, 1, 3).reshape(length * num_hmms, rows, d)
    tables = hmms.feature_probs.expand(length, -1, -1, -1).reshape(length * num_hmms, d, vocab)
    torch.bmm(by_token, tables, out=out.view(length * num_hmms, rows, vocab))
    return out.view(length, num_hmms, rows, vocab).permute(1, 2, 0, 3)


def _mixed(token_probs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """`[R, T, V]`: the posterior-weighted next-token distribution, from each chain's `[M, R, T, V]`
    (weighted in place) and weights `[M, R, T]`, summed over the HMMs in the order the
    distributions lie in memory (chain by chain, or token by token)."""
    weighted = token_probs.mul_(weights[..., None])
    if weighted.is_contiguous():
        return weighted.sum(0)
    return weighted.permute(2, 0, 1, 3).sum(1).transpose(0, 1)


def _mixed_start(hmms: HMMTables, weights: torch.Tensor) -> torch.Tensor:
    """`[R, K, V]`: the posterior-weighted distribution of a segment's first token."""
    return (weights[..., None] * hmms.start_probs[:, None, None, :]).sum(0)


def task_grid(tasks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows grouped by task for the oracle: `(group_tasks [G], grid [G, W], slot [R])`.

    Group g holds up to W rows of task `group_tasks[g]`, `grid[g]` their indices (a group
    with fewer pads with its task's first row again); `slot[r]` is row r's place in
    `grid.flatten()`. A task with more than W rows takes several groups. W is the width with
    the fewest places among those that keep G within twice the number of tasks (W from half
    to twice the mean rows per task), so the grid has at most 2 R + (number of tasks) places."""
    order = torch.argsort(tasks, stable=True)
    present, counts = torch.unique_consecutive(tasks[order], return_counts=True)
    width = _grid_width(counts)
    groups = -(-counts // width)  # of each task
    task_start = torch.cumsum(counts, 0) - counts  # in `order`
    group_start = torch.cumsum(groups, 0) - groups
    task = torch.arange(len(present), device=tasks.device)
    rank = torch.arange(len(tasks), device=tasks.device) - task_start.repeat_interleave(counts)
    place = (group_start.repeat_interleave(counts) + rank // width) * width + rank % width
    grid = order[task_start[task.repeat_interleave(groups)]].repeat_interleave(width)  # the padding
    grid[place] = order
    slot = torch.empty_like(order)
    slot[order] = place
    return present.repeat_interleave(groups), grid.view(-1, width), slot


def _grid_width(counts: torch.Tensor) -> int:
    """The group width W of `task_grid` for tasks with `counts` rows each."""
    mean = -(-int(counts.sum()) // len(counts))
    widths = torch.arange(max(1, mean // 2), 2 * mean + 1, device=counts.device)
    groups = (-(-counts[None, :] // widths[:, None])).sum(1)  # [widths]
    places = torch.where(groups <= 2 * len(counts), groups * widths, torch.iinfo(groups.dtype).max)
    return int(widths[places.argmin()])


def _default_budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.5)
    return 2 * 1024**3


def state_filters(params: HMMParams, input_ids, task_ids, device=None) -> torch.Tensor:
    """`[B, L, S]` float64: `BayesOptimalPredictor.oracle_state_filters` of `params`, built over
    the rows' own HMMs only (not every HMM of a large mixture)."""
    tasks, row_tasks = np.unique(np.asarray(task_ids).reshape(-1), return_inverse=True)
    predictor = BayesOptimalPredictor(params.select(tasks), device=device, dtype=torch.float64)
    return predictor.oracle_state_filters(input_ids, row_tasks)


def oracle_state_estimates(params: HMMParams, input_ids, task_ids, device=None) -> np.ndarray:
    """`[B, L]`: the most probable hidden state at each position given the row's task and the
    observations of its segment so far (the argmax of `state_filters`), -1 at delimiters.

    The best any decoder of the hidden state can do from what precedes a position: the
    ceiling of a hidden-state probe.
    """
    ids = np.asarray(input_ids)
    estimates = state_filters(params, ids, task_ids, device).argmax(-1).cpu().numpy()
    return np.where(ids == params.vocab_size, -1, estimates)
