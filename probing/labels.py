"""What the probes predict, aligned with positions, and the rows they are measured on.

Every label is an array `[B, L]` with one entry per position of a row and -1 where the
label does not exist (a delimiter; a token k back that lies before the segment start).
"""

from __future__ import annotations

import numpy as np

from hmm_datasets import HMMMixtureConfig, HMMParams, SampleLayout, SamplingTables
from hmm_datasets.sampler import sample_rows

from .records import POSITION_GROUPS

CORPUS_COLUMNS = ("input_ids", "hidden_states", "task_id")
PROBE_ROWS_STREAM = 7919  # the probing rows' seed stream, apart from every corpus split's


def previous_token_labels(input_ids: np.ndarray, layout: SampleLayout, distance: int) -> np.ndarray:
    """`[B, L]`: the observation `distance` positions back, when it lies in the same segment."""
    check_distance(distance, layout)
    ids = np.asarray(input_ids)
    labels = np.full(ids.shape, -1, dtype=np.int64)
    labels[:, distance:] = ids[:, :-distance]
    in_segment = layout.position_in_segment() >= distance
    keep = in_segment & ~layout.delimiter_mask()
    labels[:, ~keep] = -1
    return labels


def check_distance(distance: int, layout: SampleLayout) -> None:
    if not isinstance(distance, (int, np.integer)) or not 1 <= distance < layout.demo_length:
        raise ValueError(
            f"distance={distance!r}: a previous-token probe needs 1 <= distance < demo_length="
            f"{layout.demo_length} (the token k back lies inside a demonstration only for k < "
            f"{layout.demo_length}). Choose distances from 1..{layout.demo_length - 1}."
        )


def position_labels(rows: dict[str, np.ndarray], layout: SampleLayout, distances) -> dict[str, np.ndarray]:
    """Every probe target and position attribute of `rows` (data-contract columns), `[B, L]` each.

    Targets: `hidden_state`, `task`, `previous_token_<k>`. Attributes: `token` (the input
    token, the "word type" of the control task), `segment`, `position_in_segment`.
    """
    check_columns(rows, CORPUS_COLUMNS, "probing")
    ids = np.asarray(rows["input_ids"]).astype(np.int64)
    observation = ~layout.delimiter_mask()
    task = np.broadcast_to(np.asarray(rows["task_id"]).astype(np.int64)[:, None], ids.shape).copy()
    task[:, ~observation] = -1
    labels = {
        "hidden_state": np.asarray(rows["hidden_states"]).astype(np.int64),
        "task": task,
        "token": ids,
        "segment": np.broadcast_to(layout.segment_ids().astype(np.int64), ids.shape),
        "position_in_segment": np.broadcast_to(layout.position_in_segment(), ids.shape),
    }
    for distance in distances:
        labels[f"previous_token_{distance}"] = previous_token_labels(ids, layout, distance)
    return labels


def check_columns(rows: dict, columns: tuple[str, ...], needed_by: str) -> None:
    """`ValueError` naming the `columns` that `rows` lacks and what needs them."""
    missing = [name for name in columns if name not in rows]
    if missing:
        raise ValueError(
            f"the rows lack the column(s) {missing}: {needed_by} needs the corpus's {list(columns)} "
            "(hidden states and task ids are kept by the hmm_mixture builder; regenerate or re-export the "
            "corpus with scripts/generate.py)."
        )


def sample_positions(layout: SampleLayout, num_rows: int, per_row: int | None, seed: int) -> np.ndarray:
    """`[B, P]` sorted observation positions per row (all of them when `per_row` is None)."""
    observations = np.flatnonzero(~layout.delimiter_mask())
    if per_row is None or per_row >= observations.size:
        return np.broadcast_to(observations, (num_rows, observations.size)).copy()
    rng = np.random.default_rng(seed)
    keys = rng.random((num_rows, observations.size))
    chosen = np.sort(np.argsort(keys, axis=1)[:, :per_row], axis=1)
    return observations[chosen]


def probe_tasks(params: HMMParams, num_tasks: int) -> np.ndarray:
    """The tasks the task and hidden-state probes cover: the first `num_tasks` of the mixture, or
    all of them when it has fewer (`hmm-probe`'s default of 16 on a corpus of 8; a study refuses
    such a corpus before training).

    The mixture's tasks are i.i.d. draws, so the first k are a random subset of them.
    """
    if num_tasks < 2:
        raise ValueError(f"num_probe_tasks={num_tasks}: a task-identity probe needs at least 2 tasks.")
    return np.arange(min(num_tasks, params.num_tasks))


def sample_probe_rows(
    config: HMMMixtureConfig, params: HMMParams, tasks: np.ndarray, rows_per_task: int, seed: int
) -> dict[str, np.ndarray]:
    """`rows_per_task` fresh rows of each task, drawn from the corpus's HMMs with its sampler.

    Rows come task-major (all rows of `tasks[0]`, then `tasks[1]`, ...); they are new samples
    of the corpus's distribution conditioned on the task, apart from every split's rows.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE_ROWS_STREAM,)))
    layout = SampleLayout.from_config(config)
    row_tasks = np.repeat(np.asarray(tasks, dtype=np.int64), rows_per_task)
    return sample_rows(SamplingTables.from_params(params), layout, config.delimiter, row_tasks, rng)


def split_rows(row_tasks: np.ndarray, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of probe-train and probe-test: disjoint samples, the same share of every task."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for task in np.unique(row_tasks):
        rows = rng.permutation(np.flatnonzero(row_tasks == task))
        cut = int(round(rows.size * train_fraction))
        if cut == 0 or cut == rows.size:
            raise ValueError(
                f"task {task} has {rows.size} rows: probe_train_fraction={train_fraction} leaves its probe-train "
                "or probe-test set empty. Use more rows per task or a fraction strictly between 0 and 1."
            )
        train.append(rows[:cut])
        test.append(rows[cut:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def position_group_mask(layout: SampleLayout) -> np.ndarray:
    """`[G, L]` bool: which observation positions of a row belong to each of `POSITION_GROUPS`
    (every observation; the first, the second, the later demonstrations; every
    demonstration; the test sequence)."""
    segment, observation = layout.segment_ids(), ~layout.delimiter_mask()
    test = layout.num_demos
    masks = {
        "all": np.ones_like(observation),
        "demo1": segment == 0,
        "demo2": segment == 1,
        "later": (segment >= 2) & (segment < test),
        "demos": segment < test,
        "test": segment == test,
    }
    return np.stack([masks[group] & observation for group in POSITION_GROUPS])


TOKEN_BLOCKS = ("current_token", "previous_token", "segment", "offset", "segment_bag")
# The previous-token probes' token-only floor: neither the previous token nor the bag of the
# segment's tokens (which holds the token d back among its members), so it does not hold the answer.
PREVIOUS_TOKEN_FLOOR = ("current_token", "segment", "offset")


def token_features(
    input_ids: np.ndarray,
    positions: np.ndarray,
    layout: SampleLayout,
    vocab_size: int,
    blocks: tuple[str, ...] = TOKEN_BLOCKS,
) -> np.ndarray:
    """`[R, P, F]` float32: the token-only baseline's features at `positions [R, P]` of the rows
    `input_ids [R, L]` (observations 0..V-1, the delimiter V = `vocab_size`): nothing but local
    token information, the `blocks` named (`token_blocks`; default: all of them) concatenated in
    the order named. All of them, in this order:

    - `current_token`: the current token, one-hot (V + 1: the observations and the delimiter);
    - `previous_token`: the previous token, one-hot (V + 2: the observations, the delimiter,
      "none" at position 0);
    - `segment`: the segment (`layout.segment_ids()`), one-hot (N + 1);
    - `offset`: the offset in the segment (`layout.position_in_segment()`), one-hot
      (max(n + 1, T));
    - `segment_bag`: the bag of the segment's observations up to and including the position, as
      frequencies (V, summing to 1, or zeros before the first observation); a delimiter ends its
      demonstration and sees all of it, and is not counted itself.
    """
    return np.concatenate(list(token_blocks(input_ids, positions, layout, vocab_size, blocks).values()), -1)


def token_blocks(
    input_ids: np.ndarray,
    positions: np.ndarray,
    layout: SampleLayout,
    vocab_size: int,
    blocks: tuple[str, ...] = TOKEN_BLOCKS,
) -> dict[str, np.ndarray]:
    """`name -> [R, P, F_name]` float32: the named blocks of `token_features`, in the order named."""
    unknown = [name for name in blocks if name not in TOKEN_BLOCKS]
    if unknown or not blocks or len(set(blocks)) != len(blocks):
        raise ValueError(
            f"blocks={tuple(blocks)!r}: name each token-feature block at most once, from {TOKEN_BLOCKS}."
        )
    ids, at = np.asarray(input_ids).astype(np.int64), np.asarray(positions).astype(np.int64)
    check_token_ids(ids, vocab_size)
    segment, offset = layout.segment_ids().astype(np.int64), layout.position_in_segment()
    makers = {
        "current_token": lambda: one_hot(np.take_along_axis(ids, at, 1), vocab_size + 1),
        "previous_token": lambda: one_hot(
            np.take_along_axis(
                np.concatenate([np.full((ids.shape[0], 1), vocab_size + 1), ids[:, :-1]], 1), at, 1
            ),
            vocab_size + 2,
        ),
        "segment": lambda: one_hot(segment[at], layout.num_demos + 1),
        "offset": lambda: one_hot(offset[at], max(layout.demo_length + 1, layout.test_length)),
        "segment_bag": lambda: segment_bags(ids, at, layout, vocab_size),
    }
    return {name: makers[name]() for name in blocks}


def check_floor_free_of_label(blocks: dict[str, np.ndarray], labels: np.ndarray, target: str) -> None:
    """`ValueError` when a one-hot block of a floor's features (`name -> [R, P, F]`) holds the
    label `labels [R, P]` (-1: unlabelled) outright: its argmax equals the label at every
    labelled position. A floor that contains the answer is beaten by no network."""
    labels = np.asarray(labels)
    labelled = labels >= 0
    if not labelled.any():
        return
    for name, block in blocks.items():
        block = np.asarray(block)
        one_hot_block = block.shape[-1] > 0 and np.isin(block, (0, 1)).all() and (block.sum(-1) == 1).all()
        if one_hot_block and (block.argmax(-1)[labelled] == labels[labelled]).all():
            raise ValueError(
                f"the floor's block {name!r} holds the label of {target} (its argmax equals it at all "
                f"{int(labelled.sum())} labelled positions): a floor must not contain the answer; leave {name!r} out."
            )


def check_token_ids(ids: np.ndarray, vocab_size: int) -> None:
    if ids.size and (ids.min() < 0 or ids.max() > vocab_size):
        raise ValueError(
            f"token ids span {ids.min()}..{ids.max()}: the token features need observations 0..{vocab_size - 1} "
            f"and the delimiter {vocab_size} (vocab_size={vocab_size}); pass the corpus's number of observations."
        )


def one_hot(values: np.ndarray, size: int) -> np.ndarray:
    """`[..., size]` float32: the one-hot code of integer `values [...]` in 0..size-1."""
    return (values[..., None] == np.arange(size)).astype(np.float32)


def segment_bags(ids: np.ndarray, at: np.ndarray, layout: SampleLayout, vocab_size: int) -> np.ndarray:
    """`[R, P, V]` float32: the frequencies of the observations of each position's segment, from
    its start up to and including the position (zeros where there are none yet), from
    cumulative counts along the row: the count up to the position minus the count before the
    segment starts."""
    counts = one_hot(np.where(layout.delimiter_mask(), -1, ids), vocab_size).cumsum(1)  # [R, L, V]
    counts = np.concatenate([np.zeros_like(counts[:, :1]), counts], 1)  # [R, L + 1, V]: before position i
    start = (np.arange(layout.sequence_length) - layout.position_in_segment())[at]
    bag = np.take_along_axis(counts, at[..., None] + 1, 1) - np.take_along_axis(counts, start[..., None], 1)
    total = bag.sum(-1, keepdims=True)
    return np.divide(bag, total, out=np.zeros_like(bag), where=total > 0)
