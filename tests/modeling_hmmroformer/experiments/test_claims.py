"""The claims' statistics on planted curves (the claimed sign, the other sign, about 0 on flat
noise), the floors, and a model as its own twin: every effect over the twin is 0."""

import ast
import pathlib

import numpy as np
import pytest
import torch

import probing
from hmm_datasets.beliefs import belief_states, belief_tasks
from hmm_datasets.corpus import open_corpus
from modeling_hmmroformer.experiments.analyses.claims import (
    CLAIMS,
    decide_claims,
    figure1_profile,
    layer_one,
    model_statistics,
    profiles,
)
from modeling_hmmroformer.experiments.analyses.evaluation import Figure1Result
from probing.labels import (
    POSITION_GROUPS,
    PREVIOUS_TOKEN_FLOOR,
    TOKEN_BLOCKS,
    position_group_mask,
    position_labels,
    probe_tasks,
    sample_positions,
    sample_probe_rows,
    split_rows,
    token_features,
)
from probing.probes import FitSettings
from probing.run import FloorFeatures, ProbeConfig, SplitInputs, run_probing, split_curves

BY_KEY = {claim.key: claim for claim in CLAIMS}


def previous(curves: dict[str, list[float]]) -> dict:
    """Previous-token curves with both halves (fitted apart) equal to the whole."""
    return {d: {"all": c, "halves_apart": [c, c]} for d, c in curves.items()}


FLOOR_FEATURES = {  # what a version-3 token-only floor declares: no previous token, no bag
    "previous_tokens": ["current_token", "segment", "offset"],
    "beliefs": ["current_token", "previous_token", "segment", "offset", "segment_bag"],
}


def planted(depth=4, **changes) -> dict:
    """A profile whose statistics are known by construction (layers 0..4, attention layers 1..4)."""
    probe_depth = [layer / depth for layer in range(depth + 1)]
    profile = {
        "depth": depth,
        "probe_depth": probe_depth,
        "attention_depth": probe_depth[1:],
        "demo_gain": 0.04,
        "position_gain": 0.06,
        # layer 1 far off the line the other layers lie on: left out of the slope
        "shuffle_position_only": [5.0] + [1.0 - 0.5 * d for d in probe_depth[2:]],
        "shuffle_total": [1.0] * depth,
        "knockout_nll": [3.0] + [0.2 - 0.1 * d for d in probe_depth[2:]],
        "knockout_kl": [1.0] * depth,
        "beliefs": {
            "task_posterior": {"log_r2": [0.0, 0.0, 0.5, 1.0, 1.0]},  # rises at layers 2-3
            "state_filter_per_task": {"log_r2": [0.0, 1.0, 1.0, 1.0, 1.0]},  # inside layer 1
        },
        "previous_tokens": previous({"1": [0.2, 1.0, 0.9, 0.8, 0.6], "2": [0.2, 0.2, 0.5, 0.7, 0.5]}),
    }
    return {**profile, **changes}


def twin(depth=4) -> dict:
    """A flat untrained twin: curves that decay from the embeddings, no attention pattern."""
    return planted(
        depth,
        demo_gain=0.0,
        position_gain=0.0,
        shuffle_position_only=[1.0] * depth,
        knockout_nll=[0.0] * depth,
        beliefs={
            name: {"log_r2": [0.1, 0.1, 0.1, 0.1, 0.1]}
            for name in ("task_posterior", "state_filter_per_task")
        },
        previous_tokens=previous({"1": [0.2, 0.15, 0.1, 0.1, 0.1], "2": [0.2, 0.15, 0.1, 0.1, 0.1]}),
    )


def tokens(task=0.3, near=0.9, far=0.3, features=FLOOR_FEATURES) -> dict:
    return {
        "beliefs": {"task_posterior": {"log_r2": [task]}},
        "previous_tokens": previous({"1": [near], "2": [far]}),
        "features": features,
    }


def measured(profile: dict, other: dict | None = None, token_floor: dict | None = None) -> dict:
    nets = {"trained": profile, "twin": twin() if other is None else other, "tokens": token_floor or tokens()}
    return {claim.key: claim.measured(nets) for claim in CLAIMS}


def test_every_statistic_on_planted_curves_has_the_claimed_sign():
    values = measured(planted())
    own = {key: value["own"] for key, value in values.items()}
    assert own["demonstrations"] == 0.04 and own["test_position"] == 0.06
    assert own["position_slope"] == pytest.approx(-0.5)
    assert own["rotary_knockout_slope"] == pytest.approx(-0.1)
    assert own["task_rises"] == pytest.approx(1.0)
    assert own["state_before_task"] == pytest.approx(np.sum([1, 1, 1, 1]) - np.sum([0, 0.5, 1, 1]))  # layers
    assert own["falls_with_distance"] == pytest.approx(1.0 - 0.7)
    assert own["rises_then_falls"] == pytest.approx(np.mean([1.0 - 0.6, 0.7 - 0.5]))
    # nearest reaches its gain at layer 1, the farthest at layer 3: shares 1,0.875,0.75,0.5 vs 0,0.6,1,0.6
    assert own["peak_moves_up"] > 0.2
    assert values["task_rises"]["floors"] == {"twin": 0.0, "tokens": pytest.approx(0.3)}
    assert values["falls_with_distance"]["floors"]["tokens"] == pytest.approx(0.6)
    assert layer_one(planted()) == {"shuffle_position_only": 5.0, "knockout_nll": 3.0, "task_rise": 0.0}


def test_the_opposite_patterns_give_the_other_sign():
    opposite = planted(
        shuffle_position_only=[5.0, 0.5, 0.75, 1.0],
        beliefs={
            "task_posterior": {"log_r2": [0.0, 1.0, 1.0, 1.0, 1.0]},
            "state_filter_per_task": {"log_r2": [0.0, 0.0, 0.5, 1.0, 1.0]},
        },
        previous_tokens=previous({"1": [0.2, 0.25, 0.3, 0.35, 0.9], "2": [0.2, 0.9, 0.6, 0.5, 0.5]}),
    )
    own = {key: value["own"] for key, value in measured(opposite, token_floor=tokens(near=0.5)).items()}
    assert own["position_slope"] > 0 and own["state_before_task"] < 0
    assert own["falls_with_distance"] == pytest.approx(0.0) and own["peak_moves_up"] < 0
    assert own["rises_then_falls"] == pytest.approx(np.mean([0.0, 0.4]))  # 1 back keeps rising: 0


def test_flat_noisy_curves_give_about_zero():
    rng = np.random.default_rng(0)
    values = {key: [] for key in ("position_slope", "task_rises", "rises_then_falls", "peak_moves_up")}
    untestable = []
    for _ in range(400):

        def noisy(n=5):
            return (0.5 + rng.normal(0, 0.01, n)).tolist()

        profile = planted(
            shuffle_position_only=noisy(4),
            beliefs={name: {"log_r2": noisy()} for name in ("task_posterior", "state_filter_per_task")},
            previous_tokens={d: {"all": noisy(), "halves_apart": [noisy(), noisy()]} for d in ("1", "2")},
        )
        flat_twin = twin()
        flat_twin["previous_tokens"] = previous({"1": [0.3] * 5, "2": [0.3] * 5})  # both distances testable
        found = measured(profile, flat_twin, tokens(near=0.3, far=0.3))
        for key in values:
            values[key].append(found[key]["own"])
        beliefs = [np.asarray(b["log_r2"]) for b in profile["beliefs"].values()]
        flat = all(b.max() - b[0] < 0.02 for b in beliefs)  # neither curve gains over the embeddings
        untestable.append((flat, found["state_before_task"]))
    means = {key: float(np.mean(v)) for key, v in values.items()}
    assert abs(means["position_slope"]) < 0.01 and abs(means["task_rises"]) < 0.003
    assert abs(means["peak_moves_up"]) < 0.05 * 4  # in layers, of 4
    assert abs(means["rises_then_falls"]) < 0.002
    # curves that gain nothing over the embeddings: "state before task" is not testable, never a
    # statistic >= 0 by construction (centred on 0 where noise lifts both: test_verdicts)
    assert any(flat for flat, _ in untestable)
    assert all(found["missing"]["kind"] == "not testable" for flat, found in untestable if flat)


def test_missing_curves_and_failed_preconditions_are_said():
    no_curves = planted(knockout_nll=None, demo_gain=None, position_gain=None)
    found = measured(no_curves)
    assert found["rotary_knockout_slope"]["missing"] == {"kind": "n/a", "why": "no knock-out"}
    assert found["demonstrations"]["missing"]["why"] == "no figure 1"
    shallow = measured(
        planted(depth=2, probe_depth=[0, 0.5, 1], attention_depth=[0.5, 1.0]), planted(depth=2)
    )
    assert shallow["position_slope"]["missing"]["why"] == "fewer than 3 layers"
    untestable = measured(planted(), planted())  # the twin's peaks equal the model's: no distance testable
    assert untestable["peak_moves_up"]["missing"]["kind"] == "not testable"
    assert untestable["rises_then_falls"]["missing"]["why"].startswith("0 distances")
    rows = decide_claims([model_statistics([{"trained": no_curves, "twin": twin(), "tokens": tokens()}])])
    labels = {row["key"]: row["label"] for row in rows}
    assert (
        labels["rotary_knockout_slope"] == "n/a (no knock-out)"
        and labels["task_rises"] == "undecided (1 seed)"
    )


def test_test_position_gain_leaves_out_where_a_demonstration_would_end():
    accuracy = np.full(32, 0.6)
    accuracy[1:8] = 0.4
    spiked = accuracy.copy()
    spiked[[8, 16, 24]] = 0.0  # a model that expects a delimiter there
    figure1 = Figure1Result(
        num_rows=1,
        layout={"demo_length": 8},
        demo_counts=[0, 4],
        early_tokens=7,
        by_num_demos={"model": {"accuracy": [0.5, 0.6]}},
        by_test_position={"model": spiked.tolist()},
        model_vs_bayes={},
    )
    assert figure1_profile(figure1, "model")["position_gain"] == pytest.approx(0.2)


def small_split_inputs(num_tasks=4, rows_per_task=16):
    corpus = open_corpus("tiny")
    tasks = probe_tasks(corpus.params, num_tasks)
    rows = sample_probe_rows(corpus.config, corpus.params, tasks, rows_per_task, seed=0)
    layout = corpus.layout
    positions = sample_positions(layout, len(rows["task_id"]), None, 0)
    labels = {
        k: np.take_along_axis(np.asarray(v), positions, axis=1)
        for k, v in position_labels(rows, layout, (1, 2)).items()
    }
    beliefs = belief_states(
        corpus.params, rows["input_ids"], rows["task_id"], positions, belief_tasks(corpus.params, tasks)
    )
    group = POSITION_GROUPS.index("demo1")
    membership = np.take_along_axis(
        np.broadcast_to(position_group_mask(layout)[group][None], np.shape(rows["input_ids"])),
        positions,
        axis=1,
    )[None]
    inputs = SplitInputs(
        labels, ["previous_token_1", "previous_token_2"], beliefs, membership, np.asarray(rows["task_id"])
    )
    features = torch.as_tensor(token_features(rows["input_ids"], positions, layout, corpus.config.vocab_size))
    return inputs, features, split_rows(np.asarray(rows["task_id"]), 0.5, 0)


def small_rows() -> tuple:
    """The rows and positions of `small_split_inputs`, as `token_features` reads them."""
    corpus = open_corpus("tiny")
    rows = sample_probe_rows(corpus.config, corpus.params, probe_tasks(corpus.params, 4), 16, seed=0)
    positions = sample_positions(corpus.layout, len(rows["task_id"]), None, 0)
    return rows["input_ids"], positions, corpus.layout, corpus.config.vocab_size


def test_a_network_holding_only_token_features_is_the_floor_where_the_floor_holds_them_too():
    inputs, features, split = small_split_inputs()
    floor_blocks = list(PREVIOUS_TOKEN_FLOOR)
    floor = FloorFeatures(
        previous_tokens=torch.as_tensor(token_features(*small_rows(), blocks=PREVIOUS_TOKEN_FLOOR))[None],
        beliefs=features[None],
        blocks={"previous_tokens": floor_blocks, "beliefs": list(TOKEN_BLOCKS)},
    )
    networks = {"trained": features[None].repeat(3, 1, 1, 1), "tokens": floor}
    curves = split_curves(networks, inputs, split, 0, FitSettings(1e-3, 50, "cpu"), progress=False)
    assert curves["ceiling"]["beliefs"]["task_posterior"]["log_r2"][0] > 0.99  # the exact log posterior
    nets = {
        name: {"depth": 2, "probe_depth": [0, 0.5, 1], "attention_depth": [0.5, 1.0], **curves[name]}
        for name in ("trained", "tokens")
    }
    task = BY_KEY["task_rises"].measured(nets)  # the same features for the beliefs: no effect
    assert task["own"] - task["floors"]["tokens"] == pytest.approx(0.0, abs=1e-6)
    # the network holds the previous token, the floor (free of the label) does not: it is a floor
    # a network can beat, and it is not refused
    assert curves["trained"]["previous_tokens"]["1"]["all"][0] == pytest.approx(1.0)
    assert curves["tokens"]["previous_tokens"]["1"]["all"][0] < 0.8
    assert BY_KEY["falls_with_distance"].measured(nets)["floors"]["tokens"] is not None


def test_a_model_as_its_own_twin_has_no_effect_over_it(tiny_model):
    model = tiny_model()
    config = ProbeConfig(
        distances=(1, 2), num_probe_tasks=4, rows_per_task=12, positions_per_row=None, num_resamples=50
    )
    probes = run_probing(model, open_corpus("tiny"), config, untrained_model=model, progress=False).results
    assert len(probes.splits["curves"]) == 3 and probes.splits["seeds"] == [0, 1, 2]
    assert no_booleans(probes.patterns)  # numbers and curves, no yes/no of its own
    splits = profiles(None, probes, None, model.config.num_hidden_layers)
    statistics = model_statistics(splits)
    effects = [v["own"] - v["floors"]["twin"] for v in statistics.values() if "twin" in v["floors"]]
    assert len(effects) >= 2 and np.allclose(effects, 0.0, atol=0.0)
    assert statistics["peak_moves_up"]["missing"]["kind"] == "not testable"  # no distance beats itself
    assert len(statistics["task_rises"]["own_by_split"]) == 3


def returned_strings(tree: ast.AST) -> list[str]:
    """The string constants a function's return values or a dict's values can hold (those only
    compared against, as in `x in ("1", "yes")`, left out)."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Compare):
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            visit(node.value)
        if isinstance(node, ast.Dict):
            for value in node.values:
                visit(value)
    return found


def test_probing_returns_no_verdict_words():
    """`probing` computes curves and records; the claims module alone decides."""
    words = {"holds", "contradicted", "yes", "no", "undecided", "not testable"}
    for path in pathlib.Path(probing.__file__).parent.glob("*.py"):
        strings = returned_strings(ast.parse(path.read_text()))
        assert not words & {s.strip().lower() for s in strings}, path.name


def no_booleans(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, dict):
        return all(no_booleans(v) for v in value.values())
    if isinstance(value, list):
        return all(no_booleans(v) for v in value)
    return True
