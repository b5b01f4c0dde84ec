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

from .params import HMMParams
from .windows import MemoryWindows, delimiter_point_mass

_TINY = 1e-30


def flush_subnormal_(probs: torch.Tensor) -> torch.Tensor:
    """Set probabilities below sqrt(smallest normal number) to zero, in place.

    Sparse HMMs produce tiny probabilities all the time, and CPU arithmetic that reads or
    writes subnormal numbers is 10-20x slower. With every factor either zero or above
    sqrt(tiny) (1e-19 in float32, 1e-154 in float64), no product is subnormal. Such
    values are far below anything a prediction can show.
    """
    return torch.nn.functional.threshold_(probs, torch.finfo(probs.dtype).tiny ** 0.5, 0.0)


def _by_token(table: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """`table[m, observed[m, r]]` for every HMM m and row r: `[M, V, ...] -> [M, R, ...]`.

    observed is [1, R] (every HMM reads the same rows) or [M, 1] (HMM m reads row m).
    """
    if observed.shape[0] == 1:
        return table.index_select(1, observed[0])
    return table[torch.arange(observed.shape[0], device=observed.device), observed[:, 0]][:, None]


@dataclass
class _HMMGroup:
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
    def build(cls, initial, emissions, left, right, fuse: bool) -> _HMMGroup:
        start_probs = torch.einsum("ms,msv->mv", initial, emissions)
        start_states = initial[:, None, :] * emissions.transpose(1, 2)  # [M, V, S]
        start_features = start_states if left is None else torch.bmm(start_states, left)
        start_features = flush_subnormal_(start_features / start_probs[..., None].clamp_min(_TINY))
        feature_probs = torch.bmm(right, emissions)
        feature_step = None
        if fuse:  # right[m] diag(E[m, :, v]) left[m] for every v: [M, V, d, d]
            steps = []
            for token in range(emissions.shape[2]):
                weighted = right * emissions[:, None, :, token]  # [M, d, S]
                steps.append(weighted if left is None else torch.bmm(weighted, left))
            feature_step = flush_subnormal_(torch.stack(steps, dim=1))
        return cls(initial, emissions, left, right, start_probs, start_features, feature_probs, feature_step)

    def select(self, index: torch.Tensor) -> _HMMGroup:
        """The HMMs `index` [M'] as a new group (for the oracle: one HMM per row)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return _HMMGroup(**{name: None if t is None else t[index] for name, t in fields.items()})

    def state_step(self, states: torch.Tensor) -> torch.Tensor:
        """Propagate state distributions `[M, R, S]` one step."""
        return flush_subnormal_(torch.bmm(self.to_features(states), self.right))

    def to_features(self, states: torch.Tensor) -> torch.Tensor:
        return states if self.left is None else flush_subnormal_(torch.bmm(states, self.left))

    def token_probs(self, features: torch.Tensor) -> torch.Tensor:
        """`[M, R, d] -> [M, R, V]`: next-token distribution of each HMM."""
        return torch.bmm(features, self.feature_probs)

    def observe(self, features: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """Unnormalised feature distribution after the tokens `observed` ([1, R] or [M, 1])."""
        if self.feature_step is None:
            states = torch.bmm(features, self.right) * _by_token(self.emissions.transpose(1, 2), observed)
            return self.to_features(states)
        if observed.shape[0] != 1:  # HMM m reads row m
            return torch.bmm(features, _by_token(self.feature_step, observed)[:, 0])
        out = torch.empty_like(features)
        for token in observed[0].unique().tolist():  # rows that read the same token share a matrix
            rows = (observed[0] == token).nonzero()[:, 0]
            out.index_copy_(1, rows, torch.bmm(features.index_select(1, rows), self.feature_step[:, token]))
        return out


@dataclass
class BayesPrediction:
    """`probs [B, L, V+1]`: next-token distributions; `task_posterior [B, L, K]`: P(task | tokens 0..i);
    `states [B, L, S]` (the oracle's): P(state_i | task, tokens of the segment up to i), 0 at delimiters."""

    probs: torch.Tensor
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
        self.hmms = _HMMGroup.build(
            initial=tensor(params.initial),
            emissions=tensor(params.emissions),
            left=tensor(params.transition_left) if low_rank else None,
            right=tensor(params.transition_right if low_rank else params.transitions),
            fuse=bool(fuse),
        )
        self.log_prior = torch.log(tensor(params.task_prior))

    # ---- public predictors ------------------------------------------------------
    @torch.no_grad()
    def predict(self, input_ids, *, return_task_posterior: bool = False) -> BayesPrediction:
        """Bayes-optimal next-token distributions (and optionally the task posterior)."""
        ids = self._as_ids(input_ids)
        probs, posteriors = [], []
        per_row = self._row_floats(ids.shape[1], self.num_tasks, return_task_posterior)
        for chunk in self._row_chunks(ids.shape[0], per_row):
            out = self._mixture_filter(ids[chunk], return_task_posterior)
            probs.append(out.probs)
            posteriors.append(out.task_posterior)
        return BayesPrediction(torch.cat(probs), torch.cat(posteriors) if return_task_posterior else None)

    def next_token_probs(self, input_ids) -> torch.Tensor:
        """`[B, L, V+1]`: P(token i+1 | tokens 0..i) under the mixture."""
        return self.predict(input_ids).probs

    def task_posterior(self, input_ids) -> torch.Tensor:
        """`[B, L, K]`: P(task | tokens 0..i)."""
        return self.predict(input_ids, return_task_posterior=True).task_posterior

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
            out.append(self._oracle_filter(ids[chunk], tasks[chunk], want_states=True).states)
        return torch.cat(out)

    # ---- the forward algorithm ----------------------------------------------------
    def _mixture_filter(self, ids, want_posterior, start_states=None) -> BayesPrediction:
        log_prior = self.log_prior[:, None].expand(self.num_tasks, ids.shape[0])
        return self._filter(
            self.hmms,
            ids[None],
            log_prior,
            mix_dim=0,
            start_states=start_states,
            want_posterior=want_posterior,
        )

    def _oracle_filter(self, ids, tasks, start_states=None, want_states=False) -> BayesPrediction:
        """Row r of `ids [R, L]` read by the HMM of task `tasks[r]`; start_states [R, 1, S]."""
        zeros = torch.zeros(len(tasks), 1, dtype=self.dtype, device=self.device)
        return self._filter(
            self.hmms.select(tasks),
            ids[:, None, :],
            zeros,
            mix_dim=1,
            start_states=start_states,
            want_states=want_states,
        )

    def _filter(
        self,
        hmms: _HMMGroup,
        tokens: torch.Tensor,
        log_weights: torch.Tensor,
        mix_dim: int,
        start_states: torch.Tensor | None = None,
        want_posterior: bool = False,
        want_states: bool = False,
    ) -> BayesPrediction:
        """Forward filter of M HMMs over R rows, mixed over `mix_dim`.

        tokens [1, R, L] (every HMM reads every row: the mixture, mix_dim=0) or
        [M, 1, L] (HMM m reads row m: the oracle, mix_dim=1); log_weights [M, R];
        start_states [M, R, S]: state distribution at the first token (default: initial).
        Returns next-token probabilities for the rows, [rows, L, V+1], and with `want_states`
        (the oracle only) each row's filtered state distribution, [rows, L, S].
        """
        num_hmms, vocab = hmms.start_probs.shape
        rows, length = tokens.shape[1], tokens.shape[2]
        out_rows = max(tokens.shape[0], rows)
        probs = torch.zeros(out_rows, length, vocab + 1, dtype=self.dtype, device=self.device)
        posterior = None
        if want_posterior:
            posterior = torch.empty(out_rows, length, num_hmms, dtype=self.dtype, device=self.device)
        states = None
        if want_states:
            states = torch.zeros(num_hmms, length, self.num_states, dtype=self.dtype, device=self.device)
        point_mass = delimiter_point_mass(vocab, self.dtype, self.device)
        delimiter_steps = (tokens == self.delimiter).flatten(0, 1).any(0).tolist()  # one sync, not L
        log_w = log_weights
        features = None  # [M, R, d]: feature distribution after the last token
        # does the next token open a segment (its state distribution is `initial`)?
        at_start = torch.full_like(tokens[:, :, 0], start_states is None, dtype=torch.bool)
        for t in range(length):
            token = tokens[:, :, t]  # [M or 1, R or 1]
            observed = token.clamp(max=vocab - 1)
            # does some row open a segment here (known without a device sync)?
            opens = delimiter_steps[t - 1] if t > 0 else start_states is None
            if t == 0 and start_states is not None:  # a window that starts inside a segment
                token_probs = torch.bmm(start_states, hmms.emissions)
                new = hmms.to_features(start_states * _by_token(hmms.emissions.transpose(1, 2), observed))
            elif t == 0:
                token_probs = hmms.start_probs[:, None, :].expand(num_hmms, rows, vocab)
                new = None
            else:
                token_probs = hmms.token_probs(features)
                if opens:
                    token_probs = torch.where(at_start[..., None], hmms.start_probs[:, None, :], token_probs)
                new = hmms.observe(features, observed)
                probs[:, t - 1, :vocab] = _mix(token_probs, log_w, mix_dim)
                if delimiter_steps[t]:
                    probs[(token == self.delimiter).reshape(-1), t - 1] = point_mass
            likelihood = token_probs.gather(2, observed.expand(num_hmms, rows)[..., None])[..., 0]  # [M, R]
            if want_states:  # the oracle's: M = rows
                before = _states_before(hmms, features, start_states, at_start, num_hmms, rows)
                after = before * _by_token(hmms.emissions.transpose(1, 2), observed)
                filtered = after / likelihood.clamp_min(_TINY)[..., None]
                states[:, t] = torch.where((token == self.delimiter)[..., None], 0.0, filtered)[:, 0]
            if new is None:
                features = _by_token(hmms.start_features, observed).contiguous()
            else:
                features = flush_subnormal_(new.div_(likelihood.clamp_min(_TINY)[..., None]))
                if opens:
                    features = torch.where(
                        at_start[..., None], _by_token(hmms.start_features, observed), features
                    )
            is_delim = token == self.delimiter
            log_w = log_w + torch.where(is_delim, 0.0, torch.log(likelihood))
            log_w = log_w - log_w.amax(dim=mix_dim, keepdim=True)
            at_start = is_delim
            if want_posterior:
                posterior[:, t] = _weights(log_w, mix_dim).transpose(0, 1)
        last = hmms.token_probs(features)
        if delimiter_steps[-1]:
            last = torch.where(at_start[..., None], hmms.start_probs[:, None, :], last)
        probs[:, length - 1, :vocab] = _mix(last, log_w, mix_dim)
        return BayesPrediction(probs, posterior, states)

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

    def _row_floats(self, length: int, num_hmms: int, want_posterior: bool) -> int:
        """Floats held per row while filtering: HMM-by-row temporaries, plus the outputs."""
        working = num_hmms * (4 * self.num_features + 3 * self.vocab_size)
        if self.hmms.feature_step is None:  # the state-space recursion
            working += num_hmms * 3 * self.num_states
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


def _states_before(
    hmms: _HMMGroup, features, start_states, at_start, num_hmms: int, rows: int
) -> torch.Tensor:
    """`[M, R, S]`: each HMM's state distribution before the next token: `initial` where it opens
    a segment (`at_start`), else the step from the features of the last token (`start_states` at
    a window's first token)."""
    initial = hmms.initial[:, None, :].expand(num_hmms, rows, -1)
    if features is None:
        return initial if start_states is None else start_states
    return torch.where(at_start[..., None], initial, torch.bmm(features, hmms.right))


def _weights(log_w: torch.Tensor, mix_dim: int) -> torch.Tensor:
    """Normalised posterior weights from log-weights whose maximum is 0.

    Weights below sqrt(tiny) are set to zero (see `flush_subnormal_`); the log-weights
    themselves stay exact, so a task can still recover later.
    """
    floor = 0.5 * math.log(torch.finfo(log_w.dtype).tiny)
    weights = torch.exp(torch.nn.functional.threshold(log_w, floor, -math.inf))
    return weights / weights.sum(mix_dim, keepdim=True)


def _mix(token_probs: torch.Tensor, log_w: torch.Tensor, mix_dim: int) -> torch.Tensor:
    """Posterior-weighted mixture of per-HMM next-token distributions -> [rows, V]."""
    return (_weights(log_w, mix_dim)[..., None] * token_probs).sum(mix_dim)


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
