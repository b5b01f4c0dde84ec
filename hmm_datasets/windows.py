"""The fixed-memory predictors of Lemma 1: the Bayes-optimal and oracle predictors that see only
the last L tokens, for several memories at the cost of the longest one.

At position i the memory-L predictor conditions on tokens i-L+1..i and knows their positions:
the hidden state at the window's first token is given its exact marginal `initial @ P^j` for a
token j steps into its segment, and (without the task) the task starts from the prior. The
windows of every memory that start at one token share one run of the forward filter.
`MemoryWindows` adds these predictors to `bayes.BayesOptimalPredictor`, whose filter they run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def check_memories(memories: Sequence[int]) -> list[int]:
    """The memories as a list of ints; `ValueError` naming the bad value otherwise."""
    values = list(memories)
    if not values:
        raise ValueError("memories is empty: give at least one memory length L >= 1, e.g. (1, 2, 4, 8).")
    seen = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"memories contains {value!r}: every memory must be an integer >= 1 (tokens).")
        if int(value) in seen:
            raise ValueError(f"memories contains {value!r} twice: give each memory length once.")
        seen.add(int(value))
    return [int(value) for value in values]


def position_in_segment(ids: torch.Tensor, delimiter: int) -> torch.Tensor:
    """`[B, L]`: tokens since the last delimiter before each position (0 at a segment start; a
    delimiter counts the tokens of the segment it closes)."""
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    last_delim = torch.where(ids == delimiter, positions, torch.full_like(positions, -1))
    previous = torch.cummax(last_delim, dim=1).values
    # A delimiter belongs to the segment it closes: measure it from the one before.
    previous = torch.cat([torch.full_like(previous[:, :1], -1), previous[:, :-1]], dim=1)
    return positions - previous - 1


def delimiter_point_mass(vocab: int, dtype, device) -> torch.Tensor:
    mass = torch.zeros(vocab + 1, dtype=dtype, device=device)
    mass[vocab] = 1.0
    return mass


class MemoryWindows:
    """The memory-L predictors of `BayesOptimalPredictor` (its base class): they run its forward
    filter (`_mixture_filter`, `_oracle_filter`) over windows."""

    def truncated_next_token_probs(self, input_ids, memory: int) -> torch.Tensor:
        """`[B, L, V+1]`: the Bayes predictor that sees only the last `memory` tokens.

        At position i it conditions on tokens i-memory+1..i (and knows their positions):
        the hidden state at the window's first token is given its exact marginal
        `initial @ P^j` for a token j steps into its segment, and the task starts from the
        prior. This is the fixed-length-memory predictor of Lemma 1 of the paper; it equals
        the full predictor wherever the window reaches back to the first token. Costs
        `memory` times the full predictor (`truncated_by_memory` for several memories).
        """
        [memory] = check_memories([memory])
        return self.truncated_by_memory(input_ids, [memory])[memory]

    @torch.no_grad()
    def truncated_by_memory(self, input_ids, memories: Sequence[int]) -> dict[int, torch.Tensor]:
        """`{L: [B, L, V+1]}`: `truncated_next_token_probs` for every memory L, at the cost of
        the longest alone (the windows of all memories that start at one token share a run)."""
        memories = check_memories(memories)
        ids = self._as_ids(input_ids)

        def run_predictions(runs, start_states, rows, at):  # start_states [W, K, S] -> [K, W, S]
            starts = start_states.transpose(0, 1)
            return self._mixture_filter(runs, False, start_states=starts, predict_at=at).probs

        per_run = self._row_floats(max(memories), self.num_tasks, False) + self.num_tasks * self.num_states
        return self._windowed(ids, memories, self.next_token_probs(ids), per_run, run_predictions)

    def truncated_oracle_next_token_probs(self, input_ids, task_ids, memory: int) -> torch.Tensor:
        """`[B, L, V+1]`: the predictor told each row's task that sees only the last `memory` tokens.

        As `truncated_next_token_probs`, with the task known instead of inferred: at position
        i it runs the row's HMM over tokens i-memory+1..i from the exact marginal of the
        state at the window's first token. Equals `oracle_next_token_probs` wherever the
        window reaches back to the first token. The gap to the full oracle is what the
        tokens before the window say about the hidden state alone.
        """
        [memory] = check_memories([memory])
        return self.truncated_oracle_by_memory(input_ids, task_ids, [memory])[memory]

    @torch.no_grad()
    def truncated_oracle_by_memory(
        self, input_ids, task_ids, memories: Sequence[int]
    ) -> dict[int, torch.Tensor]:
        """`{L: [B, L, V+1]}`: `truncated_oracle_next_token_probs` for every memory L at once."""
        memories = check_memories(memories)
        ids = self._as_ids(input_ids)
        tasks = self._as_tasks(task_ids, ids.shape[0])

        def run_predictions(runs, start_states, rows, at):  # start_states [W, K, S]
            run_tasks = tasks[rows]
            starts = start_states[torch.arange(len(rows), device=self.device), run_tasks]
            return self._oracle_filter(runs, run_tasks, start_states=starts, predict_at=at).probs

        per_run = self._row_floats(max(memories), 1, False) + self._group_floats_per_hmm()
        per_run += self.num_tasks * self.num_states
        full = self.oracle_next_token_probs(ids, tasks)
        return self._windowed(ids, memories, full, per_run, run_predictions)

    def _windowed(
        self, ids, memories: Sequence[int], full: torch.Tensor, per_run: int, run_predictions
    ) -> dict[int, torch.Tensor]:
        """Per memory L, the fixed-memory version of a predictor whose full-context output is
        `full [B, L_row, V+1]`.

        Position i >= L sees the window of tokens i-L+1..i (positions before keep `full`: their
        window is the whole prefix). One run per start s >= 1 reads tokens s..s+max(L)-1 from
        the exact marginal of every task's state at s: its prediction after its L-th token is
        the window of memory L that ends at s+L-1. `run_predictions(runs [W, longest],
        start_states [W, K, S], rows [W], at) -> [W, len(at), V+1]` predicts after the tokens
        `at` (increasing) of a run, where windows end; `rows` are the runs' rows in `ids`. Before
        a delimiter the prediction is the point mass on it.
        Runs go in chunks of `per_run` floats each; past the row end a run reads padding, which
        no prediction inside the row depends on.
        """
        batch, length = ids.shape
        windowed = {memory: full for memory in memories if memory >= length}
        inside = [memory for memory in memories if memory < length]
        if not inside:
            return windowed
        longest = max(inside)
        padded = torch.nn.functional.pad(ids, (0, longest - 1))
        runs = padded.unfold(1, longest, 1)[:, 1:length].reshape(-1, longest)  # starts 1..L_row-1
        offsets = position_in_segment(ids, self.delimiter)[:, 1:].reshape(-1)
        rows = torch.arange(batch, device=self.device).repeat_interleave(length - 1)
        marginals = self._state_marginals(int(offsets.max()))  # [J, K, S]
        at = sorted(memory - 1 for memory in inside)  # the run offsets where windows end
        order = [at.index(memory - 1) for memory in inside]
        out = []
        for chunk in self._row_chunks(runs.shape[0], per_run):
            out.append(run_predictions(runs[chunk], marginals[offsets[chunk]], rows[chunk], at)[:, order])
        by_start = torch.cat(out).reshape(batch, length - 1, len(inside), -1)
        point_mass = delimiter_point_mass(self.vocab_size, self.dtype, self.device)
        for k, memory in enumerate(inside):  # windows start at 1..L_row-memory
            last = by_start[:, : length - memory, k]
            # a run's last token does not see the next one: before a delimiter, its point mass
            last[:, :-1][ids[:, memory + 1 :] == self.delimiter] = point_mass
            windowed[memory] = torch.cat([full[:, :memory], last], dim=1)
        return windowed

    def _state_marginals(self, max_offset: int) -> torch.Tensor:
        """`[max_offset + 1, K, S]`: distribution of the state j steps into a segment."""
        marginals = [self.hmms.initial]
        for _ in range(max_offset):
            marginals.append(self.hmms.state_step(marginals[-1][:, None, :])[:, 0])
        return torch.stack(marginals)
