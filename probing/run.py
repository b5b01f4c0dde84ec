"""The whole layerwise analysis of one checkpoint on one corpus (what `scripts/probe.py` runs).

Probe rows: `rows_per_task` fresh rows of each of the first `num_probe_tasks` tasks, drawn
from the corpus's own HMMs with its sampler (a task-identity probe needs several rows of
each task it names; a test split of the `paper` corpus has fewer rows than tasks). Rows of
every task are split into probe-train and probe-test. The shuffle test and the attention
maps read the corpus's test split. The curves the claims read (`splits`: previous-token
accuracy, belief probes on the first demonstration) are measured again on `num_splits` seeded
splits, for the model (its last layer before the final norm), its twin and a token-only
baseline; `probing` returns curves and numbers, never a verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from hmm_datasets import SampleLayout
from hmm_datasets.bayes import oracle_state_estimates
from hmm_datasets.beliefs import belief_tasks, cached_belief_states
from hmm_datasets.corpus import Corpus, check_model_fits_corpus

from . import reuse
from .architecture import check_causal_lm, final_norm, shuffle_unavailable
from .belief import belief_ceiling, belief_records, check_belief_columns
from .capture import attention_weights, capture_hidden_states, model_device, resolve_layers
from .config import ProbeConfig
from .labels import (
    PREVIOUS_TOKEN_FLOOR,
    TOKEN_BLOCKS,
    check_distance,
    check_floor_free_of_label,
    position_group_mask,
    position_labels,
    probe_tasks,
    sample_positions,
    sample_probe_rows,
    split_rows,
    token_blocks,
)
from .layerwise import (
    BEFORE_NORM_METRIC,
    CEILINGS,
    accuracy_curves,
    counts_to_records,
    group_counts,
    headroom_records,
    hidden_state_and_task_patterns,
    layerwise_probes,
    previous_token_patterns,
    probe_targets,
    relative_depth,
)
from .probes import FitSettings
from .records import DECIDING_POSITIONS, POSITION_GROUPS, RECORDS_VERSION, Network, RecordSet
from .results import ProbeResults
from .shuffle import shuffle_patterns, shuffle_records, shuffle_test

DECIDED_ON_FIRST_DEMO = ("hidden_state", "task")  # Figure 3(a)'s targets: refitted on demonstration 1
HALVES_STREAM = 104729  # the seed stream that cuts each split's probe-test rows in two halves
TRAIN_HALVES_STREAM = 1299709  # the seed stream that cuts each split's probe-train rows in two halves


@dataclass
class ProbingRun:
    """What `run_probing` returns: its results (`ProbeResults`, probe_results.json) and the
    attention weights of the chosen rows (for Figure 7)."""

    results: ProbeResults
    attention: np.ndarray  # [layers, rows, heads, L, L]
    layout: SampleLayout


def run_probing(
    model, corpus: Corpus, config: ProbeConfig, *, untrained_model=None, progress: bool = True
) -> ProbingRun:
    """Figures 2, 3(a), 3(b) and 7 of the paper for `model` on `corpus` (module docstring).

    Beside the classification probes, the belief-state probes (`probing.belief`) on the same rows.
    With `untrained_model` (the same architecture at its initialisation), the same probes and
    belief probes on its activations are reported too (records of network "twin") and its
    shuffle test (`patterns["figure2_untrained"]`): what the
    architecture alone gives, the control every effect is measured against.
    """
    check_inputs(model, untrained_model, corpus, config)
    layers = resolve_layers(model, config.layers)
    test_ids = shuffle_test_rows(corpus, config)
    device = str(model_device(model))
    settings = FitSettings(config.l2, config.max_iter, device)
    timings: dict[str, float] = {}

    with timed(timings, "capture"):
        probe = probe_rows(corpus, config)
        # a pre-norm model's last layer is also probed as it leaves the residual stream
        before_norm = final_norm(model) is not None and model.config.num_hidden_layers in layers
        features = capture(model, probe, layers, config, progress, before_norm)
    with timed(timings, "probes"):
        common = probe_settings(probe, config, settings, progress)
        records, draws = network_records(features.layers, layers, probe, common)
        beliefs = probe_beliefs(corpus, probe)
        records += ceiling_records(corpus, probe, beliefs["task_posterior"], config, draws)
        records += belief_records(
            features.layers, layers, beliefs, probe.membership, POSITION_GROUPS, probe.split
        )
        records += [
            r for target in CEILINGS for r in headroom_records(draws, target, layers, POSITION_GROUPS)
        ]
        if before_norm:
            last = model.config.num_hidden_layers
            records += before_norm_records(features.before_norm, last, probe, common)
    networks = {"trained": features}
    if untrained_model is not None:
        with timed(timings, "untrained_probes"):
            networks["twin"] = capture(untrained_model, probe, layers, config, progress, before_norm)
            twin = networks["twin"].layers
            inputs = (twin, layers, probe, beliefs, {k: v for k, v in common.items() if k != "progress"})
            records += reuse.once("twin", inputs, lambda: twin_records(twin, layers, probe, beliefs, common))
    with timed(timings, "splits"):
        splits = claim_splits(networks, probe, beliefs, corpus, config, settings, progress)
    with timed(timings, "shuffle_test"):
        patterns, skipped, shuffled = shuffle_analysis(
            model, untrained_model, test_ids, corpus.layout, config, progress
        )
        records += shuffled
    with timed(timings, "attention_maps"):
        attention = attention_weights(model, test_ids[list(config.attention_rows)]).numpy()

    results = probe_results(
        model,
        corpus,
        config,
        layers,
        probe,
        records=records,
        draws=draws,
        splits=splits,
        patterns=patterns,
        skipped=skipped,
        num_shuffle_rows=int(test_ids.shape[0]),
        device=device,
        timings=timings,
    )
    return ProbingRun(results, attention, corpus.layout)


def probe_results(
    model,
    corpus: Corpus,
    config: ProbeConfig,
    layers: list[int],
    probe: ProbeRows,
    *,
    records: list[dict],
    draws,
    splits: dict,
    patterns: dict,
    skipped: dict,
    num_shuffle_rows: int,
    device: str,
    timings: dict,
) -> ProbeResults:
    """The results of a run (probe_results.json): what was probed, how, every record, the
    claims' split curves and the paper's patterns."""
    return ProbeResults(
        corpus=corpus.source,
        layout=dataclasses.asdict(corpus.layout),
        model={
            "num_hidden_layers": model.config.num_hidden_layers,
            "num_attention_heads": model.config.num_attention_heads,
            "hidden_size": model.config.hidden_size,
        },
        device=device,
        settings=config.to_dict(),
        layers=layers,
        relative_depth=relative_depth(layers, model.config.num_hidden_layers),
        probe_tasks=probe.tasks.tolist(),
        num_probe_rows={"train": int(probe.split[0].size), "test": int(probe.split[1].size)},
        probe_rows={"train": probe.split[0].tolist(), "test": probe.split[1].tolist()},
        num_shuffle_rows=num_shuffle_rows,
        model_type=model.config.model_type,
        skipped=skipped,  # analysis -> why it cannot run on this model
        records_version=RECORDS_VERSION,
        records=records,
        splits=splits,
        patterns={
            **patterns,
            "figure3a": hidden_state_and_task_patterns(
                draws, layers, POSITION_GROUPS, model.config.num_hidden_layers
            ),
            "figure3b": previous_token_patterns(draws, RecordSet(records), list(config.distances), layers),
        },
        timings_s=timings,
    )


def check_inputs(model, untrained_model, corpus: Corpus, config: ProbeConfig) -> None:
    """`ValueError` for a model that is not a causal LM, or that cannot read the corpus, or for
    settings the corpus cannot serve (distances, rows), before anything is computed."""
    check_causal_lm(model)
    for network in (model, untrained_model):
        if network is not None:
            check_model_fits_corpus(network.config, corpus.config)
    for distance in config.distances:
        check_distance(distance, corpus.layout)
    _check_rows(config, shuffle_row_count(corpus, config), len(corpus.split("test")))


def shuffle_row_count(corpus: Corpus, config: ProbeConfig) -> int:
    """The test rows the shuffle test and the attention maps read: `shuffle_rows`, or up to 256."""
    return config.shuffle_rows or min(256, len(corpus.split("test")))


def shuffle_test_rows(corpus: Corpus, config: ProbeConfig) -> np.ndarray:
    """`[rows, L]`: the first `shuffle_row_count` rows of the corpus's test split."""
    rows = corpus.split("test").select(range(shuffle_row_count(corpus, config)))
    return np.stack(rows.with_format("numpy")["input_ids"])


def twin_records(
    features: torch.Tensor, layers: list[int], probe: ProbeRows, beliefs, common: dict
) -> list[dict]:
    """The untrained twin's classification and belief probes (network "twin"), as the model's."""
    records = network_records(features, layers, probe, common, "twin")[0]
    return records + belief_records(
        features, layers, beliefs, probe.membership, POSITION_GROUPS, probe.split, "twin"
    )


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str):
    """`timings[name]`: the seconds the block took."""
    started = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - started


@dataclass
class ProbeRows:
    """The probe rows and what is read at their probed positions: `rows` (the sampled rows'
    columns), the probed `tasks`, `positions [R, P]`, `labels` (name -> `[R, P]`), `split` (the
    probe-train and probe-test rows), `membership [G, R, P]` (which positions belong to each of
    `POSITION_GROUPS`), each row's task, and `groups` (target -> `[R]`: rows whose probe is
    fitted apart)."""

    rows: dict
    tasks: np.ndarray
    positions: np.ndarray
    labels: dict[str, np.ndarray]
    split: tuple[np.ndarray, np.ndarray]
    membership: np.ndarray
    row_tasks: np.ndarray
    groups: dict[str, np.ndarray]

    @property
    def targets(self) -> list[str]:
        """What the classification probes read: the hidden state, the task, the previous tokens."""
        return list(self.groups)


def probe_rows(corpus: Corpus, config: ProbeConfig) -> ProbeRows:
    """Fresh rows of the first `num_probe_tasks` tasks, their probed positions, labels and split."""
    layout = corpus.layout
    tasks = probe_tasks(corpus.params, config.num_probe_tasks)
    rows = sample_probe_rows(corpus.config, corpus.params, tasks, config.rows_per_task, config.seed)
    labels = position_labels(rows, layout, config.distances)
    positions = sample_positions(layout, len(rows["task_id"]), config.positions_per_row, config.seed)
    at_positions = {name: np.take_along_axis(np.asarray(v), positions, axis=1) for name, v in labels.items()}
    shape = (len(POSITION_GROUPS), *np.shape(rows["input_ids"]))
    membership = np.take_along_axis(
        np.broadcast_to(position_group_mask(layout)[:, None], shape),
        np.broadcast_to(positions, (len(POSITION_GROUPS), *positions.shape)),
        axis=2,
    )
    row_tasks = np.asarray(rows["task_id"]).astype(np.int64)
    groups = {target: np.zeros_like(row_tasks) for target in probe_targets(config.distances)}
    groups["hidden_state"] = row_tasks  # one probe per task: states of different HMMs share nothing
    split = split_rows(rows["task_id"], config.probe_train_fraction, config.seed)
    return ProbeRows(rows, tasks, positions, at_positions, split, membership, row_tasks, groups)


@dataclass
class Features:
    """A network's hidden states at the probed positions, `layers [layers, R, P, D]`, and its
    last layer before the final norm, `before_norm [1, R, P, D]` (empty: not captured so)."""

    layers: torch.Tensor
    before_norm: torch.Tensor

    def read_out(self) -> torch.Tensor:
        """The layers with the last one read before the final norm where it was captured so."""
        return (
            self.layers if self.before_norm.shape[0] == 0 else torch.cat([self.layers[:-1], self.before_norm])
        )


def capture(
    model, probe: ProbeRows, layers: list[int], config: ProbeConfig, progress: bool, before_norm: bool
):
    captured = capture_hidden_states(
        model,
        probe.rows["input_ids"],
        probe.positions,
        layers=layers,
        dtype=config.dtype,
        batch_size=config.batch_size,
        progress=progress,
        before_final_norm=before_norm,
    )
    return Features(captured[: len(layers)], captured[len(layers) :])


def probe_settings(probe: ProbeRows, config: ProbeConfig, settings: FitSettings, progress: bool) -> dict:
    """The keyword arguments every `layerwise_probes` call of a run shares."""
    return {
        "settings": settings,
        "membership": probe.membership,
        "groups": POSITION_GROUPS,
        "num_resamples": config.num_resamples,
        "seed": config.seed,
        "progress": progress,
    }


def network_records(
    features: torch.Tensor, layers: list[int], probe: ProbeRows, common: dict, network: Network = "trained"
) -> tuple[list[dict], dict]:
    """The classification probes of one network at every layer and position group, its
    hidden-state and task probes on the first demonstration refitted there: records and draws."""
    records, draws = layerwise_probes(
        features, layers, probe.labels, probe.targets, probe.groups, probe.split, network=network, **common
    )
    records = refit_on_deciding_positions(
        records, draws, features, layers, probe.labels, probe.groups, probe.split, common, network
    )
    return records, draws


def probe_beliefs(corpus: Corpus, probe: ProbeRows):
    """The exact belief states (`hmm_datasets.beliefs`) of the probe rows at their positions,
    computed once for every network read on these rows."""
    check_belief_columns(probe.rows)
    kept_tasks = belief_tasks(corpus.params, probe.tasks)
    return cached_belief_states(
        corpus.params, probe.rows["input_ids"], probe.rows["task_id"], probe.positions, kept_tasks
    )


def before_norm_records(
    features: torch.Tensor, last_layer: int, probe: ProbeRows, common: dict
) -> list[dict]:
    """The classification probes of a pre-norm model's last layer as it leaves the residual
    stream (before the final norm)."""
    return layerwise_probes(
        features,
        [last_layer],
        probe.labels,
        probe.targets,
        probe.groups,
        probe.split,
        metric=BEFORE_NORM_METRIC,
        **common,
    )[0]


def claim_splits(
    networks: dict[str, Features],
    probe: ProbeRows,
    beliefs: dict[str, np.ndarray],
    corpus: Corpus,
    config: ProbeConfig,
    settings: FitSettings,
    progress: bool,
) -> dict:
    """The curves the claims read on each of `config.split_seeds`' probe splits, for each network
    read out at its last layer before the final norm, and the token-only baseline (`token_floor`)."""
    targets = [f"previous_token_{d}" for d in config.distances]
    features: dict = {name: network.read_out() for name, network in networks.items()}
    features["tokens"] = token_floor(probe, corpus, targets)
    deciding = POSITION_GROUPS.index(DECIDING_POSITIONS)
    inputs = SplitInputs(
        labels=probe.labels,
        targets=targets,
        beliefs=beliefs,
        membership=probe.membership[deciding : deciding + 1],
        row_tasks=probe.row_tasks,
    )
    curves = [
        split_curves(
            features,
            inputs,
            split_rows(probe.rows["task_id"], config.probe_train_fraction, seed),
            seed,
            settings,
            progress,
        )
        for seed in config.split_seeds
    ]
    return {"seeds": list(config.split_seeds), "positions": DECIDING_POSITIONS, "curves": curves}


@dataclass
class FloorFeatures:
    """A token-only floor's features `[1, R, P, F]`, one set for the previous-token probes and
    one for the belief probes, and the names of the blocks each holds (`probing.labels.TOKEN_BLOCKS`)."""

    previous_tokens: torch.Tensor
    beliefs: torch.Tensor
    blocks: dict[str, list[str]]


def token_floor(probe: ProbeRows, corpus: Corpus, targets: list[str]) -> FloorFeatures:
    """The token-only baseline of the claims: for the previous-token probes the blocks of
    `PREVIOUS_TOKEN_FLOOR` (neither the previous token nor the segment's bag of tokens, which
    hold the answer; checked for every target in `targets`), for the belief probes all blocks."""
    read = (probe.rows["input_ids"], probe.positions, corpus.layout, corpus.config.vocab_size)
    blocks = token_blocks(*read, TOKEN_BLOCKS)
    floor = {name: blocks[name] for name in PREVIOUS_TOKEN_FLOOR}
    for target in targets:
        check_floor_free_of_label(floor, probe.labels[target], target)

    def stacked(names) -> torch.Tensor:
        return torch.as_tensor(np.concatenate([blocks[name] for name in names], -1))[None]

    return FloorFeatures(
        stacked(PREVIOUS_TOKEN_FLOOR),
        stacked(TOKEN_BLOCKS),
        {"previous_tokens": list(PREVIOUS_TOKEN_FLOOR), "beliefs": list(TOKEN_BLOCKS)},
    )


def shuffle_analysis(
    model, untrained_model, test_ids: np.ndarray, layout: SampleLayout, config: ProbeConfig, progress: bool
) -> tuple[dict, dict, list[dict]]:
    """Figure 2: the shuffle test of the model, and of its twin on the same rows and
    derangements, as `(patterns, skipped, records)`; a model without rotary positions skips it,
    saying why."""
    refused = shuffle_unavailable(model)
    if refused is not None:
        return {}, {"shuffle_test": refused}, []

    def shuffled(of_model) -> dict[str, np.ndarray]:
        batch_size = max(1, config.batch_size // 4)
        return shuffle_test(
            of_model, test_ids, layout, seed=config.seed, batch_size=batch_size, progress=progress
        )

    changes = shuffled(model)
    patterns = {"figure2": shuffle_patterns(changes, config.num_resamples, config.seed)}
    if untrained_model is not None:
        patterns["figure2_untrained"] = shuffle_patterns(
            shuffled(untrained_model), config.num_resamples, config.seed
        )
    return patterns, {}, shuffle_records(changes, config.num_resamples, config.seed)


def refit_on_deciding_positions(
    records, draws, features, layers, labels, row_groups, split, common: dict, network: Network = "trained"
) -> list[dict]:
    """`records` with the hidden-state and task probes of `DECIDING_POSITIONS` (the first
    demonstration) fitted on those positions alone, not on all positions and scored there:
    their accuracy, baselines and draws replaced (`draws` updated in place)."""
    deciding = POSITION_GROUPS.index(DECIDING_POSITIONS)
    membership = common["membership"][deciding : deciding + 1]
    masked = {**labels, **{t: np.where(membership[0], labels[t], -1) for t in DECIDED_ON_FIRST_DEMO}}
    settings = {**common, "membership": membership, "groups": (DECIDING_POSITIONS,), "network": network}
    own, own_draws = layerwise_probes(
        features, layers, masked, list(DECIDED_ON_FIRST_DEMO), row_groups, split, **settings
    )
    draws.update(own_draws)
    replaced = {(r["target"], r["metric"], r["layer"]) for r in own}
    kept = [
        r
        for r in records
        if r.get("positions") != DECIDING_POSITIONS or (r["target"], r["metric"], r["layer"]) not in replaced
    ]
    return kept + own


@dataclass
class SplitInputs:
    """What the claim curves are fitted to, at the probed positions: the labels (`[R, P]` each),
    the previous-token targets, the exact beliefs, the deciding segment's membership `[1, R, P]`
    and each row's task."""

    labels: dict[str, np.ndarray]
    targets: list[str]
    beliefs: dict[str, np.ndarray]
    membership: np.ndarray
    row_tasks: np.ndarray


def split_curves(
    networks: dict[str, torch.Tensor | FloorFeatures],
    inputs: SplitInputs,
    split,
    seed: int,
    settings: FitSettings,
    progress: bool,
) -> dict:
    """The curves the claims read, on one probe split, for every network (`networks`: name ->
    features `[layers, R, P, D]`, or a token-only floor's `FloorFeatures`, one "layer"):
    previous-token accuracy on all probe-test rows and on each half of them with its own probe
    fitted on a half of the probe-train rows (`accuracy_curves`, `half_splits`), and the belief
    probes on the deciding segment (per-task state-filter maps included); a floor's entry says
    which blocks each probe read (`features`). And the beliefs' ceiling (the exact log beliefs
    as features)."""
    out = {
        name: reuse.once(
            "split-curves",
            (network, inputs, split, seed, settings),
            lambda network=network: network_split_curves(network, inputs, split, seed, settings, progress),
        )
        for name, network in networks.items()
    }
    groups = (DECIDING_POSITIONS,)
    out["ceiling"] = {
        "beliefs": belief_curves(
            belief_ceiling(inputs.beliefs, inputs.membership, groups, split, inputs.row_tasks)
        )
    }
    return out


def network_split_curves(
    network: torch.Tensor | FloorFeatures,
    inputs: SplitInputs,
    split,
    seed: int,
    settings: FitSettings,
    progress: bool,
) -> dict:
    """One network's entry of `split_curves` (a network read again on the same rows, as the
    twin is at every kept network of a model, is computed once: `probing.reuse`)."""
    halves = half_splits(split, seed)
    floor = network if isinstance(network, FloorFeatures) else None
    previous, features = (network, network) if floor is None else (floor.previous_tokens, floor.beliefs)
    beliefs = belief_records(
        features,
        list(range(features.shape[0])),
        inputs.beliefs,
        inputs.membership,
        (DECIDING_POSITIONS,),
        split,
        row_tasks=inputs.row_tasks,
    )
    out = {
        "previous_tokens": {
            target[len("previous_token_") :]: curve
            for target, curve in accuracy_curves(
                previous, inputs.labels, inputs.targets, split, halves, settings, progress
            ).items()
        },
        "beliefs": belief_curves(beliefs),
    }
    if floor is not None:
        out["features"] = {key: list(names) for key, names in floor.blocks.items()}
    return out


def row_halves(num_rows: int, seed: int, stream: int = HALVES_STREAM) -> np.ndarray:
    """`[num_rows]` bool: a seeded half of the rows (True), the other half False."""
    halves = np.zeros(num_rows, dtype=bool)
    halves[np.random.default_rng([seed, stream]).permutation(num_rows)[: num_rows // 2]] = True
    return halves


def half_splits(split: tuple[np.ndarray, np.ndarray], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two disjoint `(probe-train rows, probe-test rows)` halves of `split`: half A the True rows
    of `row_halves` of the probe-train rows (stream `TRAIN_HALVES_STREAM`) and of the probe-test
    rows (`HALVES_STREAM`), half B the rest of each."""
    train, test = (np.asarray(rows) for rows in split)
    in_train, in_test = row_halves(train.size, seed, TRAIN_HALVES_STREAM), row_halves(test.size, seed)
    return [(train[in_train], test[in_test]), (train[~in_train], test[~in_test])]


def belief_curves(records: list[dict]) -> dict[str, dict[str, list[float]]]:
    """`belief -> metric -> [values in layer order]` of belief-probe records."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        belief, metric = r["target"][len("belief_") :], r["metric"]
        out.setdefault(belief, {}).setdefault(metric, []).append(r["value"])
    return out


def _check_rows(config: ProbeConfig, shuffle_rows: int, num_test_rows: int) -> None:
    if shuffle_rows > num_test_rows:
        raise ValueError(
            f"shuffle_rows={shuffle_rows} but the corpus's test split has {num_test_rows} rows: "
            f"use shuffle_rows <= {num_test_rows} (or leave it out: up to 256)."
        )
    bad = [row for row in config.attention_rows if not 0 <= row < shuffle_rows]
    if bad:
        raise ValueError(f"attention_rows {bad} must index the first shuffle_rows={shuffle_rows} test rows.")


def ceiling_records(
    corpus: Corpus, probe: ProbeRows, task_posterior: np.ndarray, config: ProbeConfig, draws
) -> list[dict]:
    """What the best decoder could reach on the probe-test positions, per position group: the
    Bayes-optimal task posterior (argmax over the probed tasks of the exact beliefs'
    `task_posterior [R, P, K']`, `probe_beliefs`) and the oracle's filtered hidden state.
    Bootstrapped on the probes' row resamples (their draws go to `draws`)."""
    test_rows, tasks = probe.split[1], probe.tasks
    ids, row_task = np.asarray(probe.rows["input_ids"])[test_rows], probe.row_tasks[test_rows]
    where = probe.positions[test_rows]
    kept_tasks = belief_tasks(corpus.params, tasks)
    task_guess = posterior_task_guesses(task_posterior[test_rows], kept_tasks, tasks)
    state_guess = np.take_along_axis(oracle_state_estimates(corpus.params, ids, row_task), where, axis=1)
    out = []
    for target, guess in (("task", task_guess), ("hidden_state", state_guess)):
        truth = probe.labels[target][test_rows]
        hits = np.where(truth >= 0, (guess == truth).astype(np.int8), np.int8(-1))[None]
        correct, total = group_counts(hits, probe.membership[:, test_rows])
        out += counts_to_records(
            target,
            None,
            (CEILINGS[target],),
            correct,
            total,
            POSITION_GROUPS,
            config.num_resamples,
            config.seed,
            draws,
            "ceiling",
        )
    return out


def posterior_task_guesses(task_posterior: np.ndarray, kept_tasks, tasks: np.ndarray) -> np.ndarray:
    """`[R, P]`: the task of `tasks` that the task posterior `[R, P, K']` over `kept_tasks` (None:
    every task, in order; a remainder entry last is never a guess) ranks first."""
    kept = list(range(task_posterior.shape[-1])) if kept_tasks is None else list(kept_tasks)
    columns = [kept.index(task) for task in tasks]
    return np.asarray(tasks)[task_posterior[..., columns].argmax(-1)]
