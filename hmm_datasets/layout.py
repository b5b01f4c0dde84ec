"""Where things sit in a row: `demo_1 <delim> ... demo_N <delim> test`.

All functions take and return arrays; positions are 0-based indices into a row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SampleLayout:
    """The fixed in-context layout of a row: N demonstrations of n tokens, then T test tokens."""

    num_demos: int
    demo_length: int
    test_length: int

    @classmethod
    def from_config(cls, config) -> SampleLayout:
        return cls(config.num_demos, config.demo_length, config.test_length)

    @property
    def test_start(self) -> int:
        """Index of the first test token."""
        return self.num_demos * (self.demo_length + 1)

    @property
    def sequence_length(self) -> int:
        return self.test_start + self.test_length

    def segment_ids(self) -> np.ndarray:
        """`[L]`: 0..N-1 for demonstrations (delimiter included), N for the test sequence."""
        demo = np.repeat(np.arange(self.num_demos), self.demo_length + 1)
        return np.concatenate([demo, np.full(self.test_length, self.num_demos)]).astype(np.int16)

    def position_in_segment(self) -> np.ndarray:
        """`[L]`: offset of each token inside its segment (a delimiter gets n)."""
        demo = np.tile(np.arange(self.demo_length + 1), self.num_demos)
        return np.concatenate([demo, np.arange(self.test_length)]).astype(np.int64)

    def delimiter_mask(self) -> np.ndarray:
        """`[L]` bool: True at delimiter positions."""
        demo = np.tile(np.arange(self.demo_length + 1) == self.demo_length, self.num_demos)
        return np.concatenate([demo, np.zeros(self.test_length, dtype=bool)])

    def test_prediction_positions(self) -> np.ndarray:
        """`[T]`: the position whose next-token prediction is test token j (j = 0..T-1).

        Test token 0 is predicted at the last delimiter; with no demonstrations it has no
        context and its entry is -1.
        """
        return np.arange(self.test_start - 1, self.sequence_length - 1)

    def with_demos(self, num_demos: int) -> SampleLayout:
        return SampleLayout(num_demos, self.demo_length, self.test_length)


def assemble_rows(demos: np.ndarray, test: np.ndarray, fill: int) -> np.ndarray:
    """Join demonstrations `[B, N, n]` and test `[B, T]` into rows `[B, N*(n+1)+T]`.

    Every demonstration is followed by `fill` (the delimiter id for tokens, -1 for states).
    """
    batch, num_demos, _ = demos.shape
    delims = np.full((batch, num_demos, 1), fill, dtype=demos.dtype)
    demo_part = np.concatenate([demos, delims], axis=2).reshape(batch, -1)
    return np.concatenate([demo_part, test.astype(demos.dtype)], axis=1)


def keep_last_demos(rows: np.ndarray, layout: SampleLayout, num_demos: int) -> np.ndarray:
    """Drop the first demonstrations of each row, keeping the last `num_demos` and the test.

    Demonstrations are i.i.d., so the result is distributed as a row of a corpus with
    `num_demos` demonstrations. Works for numpy arrays and torch tensors `[B, L]`.
    """
    if not 0 <= num_demos <= layout.num_demos:
        raise ValueError(f"num_demos={num_demos} must be between 0 and {layout.num_demos}.")
    start = (layout.num_demos - num_demos) * (layout.demo_length + 1)
    return rows[:, start:]
