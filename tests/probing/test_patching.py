"""Activation patching (`probing.patching`): its sites, its donors, its shares and its controls,
on a network built by hand whose one layer holds the task, and on the tiny HMMRoFormer."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from probing.patching import (
    NO_DONOR,
    carried_lower,
    carried_shares,
    moved_towards,
    num_sites,
    patched_residual,
    patching_readings,
    pick_donors,
    random_values,
    residual_sites,
)


class Identity(torch.nn.Module):
    def forward(self, hidden_states, **kwargs):
        return hidden_states


class TaskPosterior(torch.nn.Module):
    """Replaces the residual stream [one-hot token (V) | K slots] by [0 | P(task | tokens 0..t)]
    of tasks that emit i.i.d. tokens from the rows of `emissions` [K, V] under `prior` [K]."""

    def __init__(self, emissions: torch.Tensor, prior: torch.Tensor):
        super().__init__()
        self.register_buffer("log_emissions", emissions.log())
        self.register_buffer("log_prior", prior.log())

    def forward(self, hidden_states, **kwargs):
        vocab = self.log_emissions.shape[1]
        log_likelihood = (hidden_states[..., :vocab] @ self.log_emissions.T).cumsum(dim=1)
        posterior = torch.softmax(self.log_prior + log_likelihood, dim=-1)
        return torch.cat([torch.zeros_like(hidden_states[..., :vocab]), posterior], dim=-1)


class TaskLayerNetwork(torch.nn.Module):
    """A causal LM built by hand: `num_layers` layers, the `task_layer`-th (1-based) writing the
    exact task posterior and nothing else, the others passing the residual on; its head predicts
    sum_k P(task k | tokens 0..t) emissions[k]: the exact Bayes predictive of the i.i.d. tasks."""

    def __init__(self, emissions: torch.Tensor, prior: torch.Tensor, num_layers: int, task_layer: int):
        super().__init__()
        num_tasks, vocab = emissions.shape
        self.config = SimpleNamespace(
            model_type="hmm_roformer",
            num_hidden_layers=num_layers,
            hidden_size=vocab + num_tasks,
            num_attention_heads=1,
        )
        self.register_buffer("emissions", emissions)
        self.scale = torch.nn.Parameter(torch.ones(()), requires_grad=False)  # the model's device
        self.layers = torch.nn.ModuleList(
            TaskPosterior(emissions, prior) if index + 1 == task_layer else Identity()
            for index in range(num_layers)
        )

    @property
    def base_model(self):
        return self

    def forward(self, input_ids, use_cache=False):
        vocab = self.emissions.shape[1]
        hidden = torch.nn.functional.one_hot(input_ids, vocab + self.emissions.shape[0]).double()
        for layer in self.layers:
            hidden = layer(hidden)
        probs = hidden[..., vocab:] @ self.emissions
        return SimpleNamespace(logits=probs.clamp_min(1e-300).log())


def iid_rows(emissions: np.ndarray, tasks: np.ndarray, length: int, rng) -> np.ndarray:
    return np.stack([rng.choice(emissions.shape[1], size=length, p=emissions[task]) for task in tasks])


def iid_bayes(emissions: np.ndarray, prior: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`[B, T, V]`: the exact next-token predictive of i.i.d. tasks after tokens 0..t."""
    log_likelihood = np.log(emissions.T)[ids].cumsum(axis=1) + np.log(prior)
    posterior = np.exp(log_likelihood - log_likelihood.max(-1, keepdims=True))
    posterior /= posterior.sum(-1, keepdims=True)
    return posterior @ emissions


@pytest.fixture
def hand_built():
    """(network, ids, task ids, Bayes probs, positions, V) with the task written at layer 3 of 5."""
    rng = np.random.default_rng(0)
    num_tasks, vocab = 4, 5
    emissions = rng.dirichlet(np.ones(vocab) * 0.5, size=num_tasks)
    prior = np.full(num_tasks, 1 / num_tasks)
    tasks = np.repeat(np.arange(num_tasks), 12)
    ids = iid_rows(emissions, tasks, 20, rng)
    network = TaskLayerNetwork(
        torch.tensor(emissions), torch.tensor(prior), num_layers=5, task_layer=3
    ).eval()
    positions = rng.integers(4, 20, size=len(ids))
    return network, ids, tasks, iid_bayes(emissions, prior, ids), positions, vocab


def test_the_task_moves_the_output_at_its_layer_and_above_and_nothing_below(hand_built):
    network, ids, tasks, bayes, positions, vocab = hand_built
    readings = patching_readings(network, ids, tasks, bayes, positions, vocab, np.random.default_rng(1))
    task = readings.donors["task"]
    assert readings.site_names == ["embeddings", *(f"layer {i}" for i in range(1, 6))]
    assert task.pairs > len(ids) // 2 and task.effect_nats > 0
    np.testing.assert_allclose(
        task.shares[:3], 0.0, atol=1e-12
    )  # sites 0..2: the token, the donor's = the row's
    np.testing.assert_allclose(
        task.shares[3:], 1.0, atol=1e-9
    )  # sites 3..5: the posterior, the donor's Bayes
    state = readings.donors["state"]  # another token at t: below the task layer it moves part of the way
    assert state.pairs == len(ids) and 0 < state.shares[0] < 1
    np.testing.assert_allclose(state.shares[3:], 1.0, atol=1e-9)
    assert readings.same_donor_max_nats < 1e-12
    assert (
        readings.state_carried_lower > 0
    )  # the state's token moves the output below layer 3, the task's not


def test_the_patch_at_the_task_layer_gives_the_donors_bayes_predictive_itself(hand_built):
    network, ids, tasks, bayes, positions, vocab = hand_built
    donors = pick_donors(ids, tasks, positions, "task", np.random.default_rng(2))
    rows = np.flatnonzero(donors != NO_DONOR)
    at = torch.as_tensor(positions[rows])
    values = residual_sites(network, torch.as_tensor(ids[donors[rows]]))[3][torch.arange(len(rows)), at]
    with patched_residual(network, 3, at, values):
        logits = network(torch.as_tensor(ids[rows])).logits[torch.arange(len(rows)), at]
    np.testing.assert_allclose(logits.exp().numpy(), bayes[donors[rows], positions[rows]], atol=1e-12)


def test_donors_are_of_their_kind_and_none_where_none_qualifies():
    rng = np.random.default_rng(0)
    tasks = np.repeat(np.arange(3), 5)
    ids = rng.integers(0, 4, size=(15, 10))
    ids[:, 6] = np.arange(15)  # at position 6 every row's token is its own: no task donor there
    positions = rng.integers(0, 10, size=15)
    for kind in ("task", "state"):
        donors = pick_donors(ids, tasks, positions, kind, rng)
        for row, donor in enumerate(donors):
            t = positions[row]
            if donor == NO_DONOR:
                if kind == "task":
                    assert not ((tasks != tasks[row]) & (ids[:, t] == ids[row, t])).any()
                continue
            assert donor != row
            assert (tasks[donor] != tasks[row]) == (kind == "task")
            assert (ids[donor, t] == ids[row, t]) == (kind == "task")
    positions[:] = 6
    assert (pick_donors(ids, tasks, positions, "task", rng) == NO_DONOR).all()
    assert (pick_donors(ids, tasks, positions, "same", rng) == np.arange(15)).all()
    with pytest.raises(ValueError, match="not one of"):
        pick_donors(ids, tasks, positions, "layer", rng)


def test_shares_run_from_no_move_to_the_whole_donors_move():
    rng = np.random.default_rng(0)
    target, clean, donor = (torch.tensor(rng.dirichlet(np.ones(6), size=8)) for _ in range(3))
    assert torch.equal(moved_towards(target, clean, clean), torch.zeros(8, dtype=torch.float64))
    donor = 0.5 * target + 0.5 * clean  # nearer the target than the clean output
    patched = torch.stack([clean, 0.5 * clean + 0.5 * donor, donor])
    shares = carried_shares(target, clean, donor, patched)
    assert shares[0] == 0 and shares[2] == pytest.approx(1.0) and 0 < shares[1] < 1
    assert np.isnan(carried_shares(target, clean, clean, patched)).all()  # the donor moves nothing: no share


def test_carried_lower_is_zero_for_equal_curves_and_signed_by_the_inner_sites():
    flat = np.array([0.0, 0.3, 0.6, 1.0])
    assert carried_lower(flat, flat) == 0.0
    lower = np.array([0.9, 0.9, 0.9, 1.0])  # the first carried early
    assert carried_lower(lower, flat) > 0 > carried_lower(flat, lower)
    assert carried_lower(lower, flat) == pytest.approx(np.mean([0.6, 0.3]))
    ends_only = np.array([0.5, 0.3, 0.6, 0.0])  # the ends (sites 0 and L) are not read
    assert carried_lower(ends_only, flat) == 0.0
    assert np.isnan(carried_lower(np.array([0.0, 1.0]), np.array([0.0, 1.0])))  # no inner site
    assert np.isnan(carried_lower(np.array([0.0, np.nan, 1.0]), np.array([0.0, 0.5, 1.0])))


def test_random_donors_keep_each_rows_norm():
    values = [torch.randn(7, 16) * scale for scale in (0.1, 1.0, 30.0)]
    noise = random_values(values, torch.Generator().manual_seed(0))
    for given, drawn in zip(values, noise):
        torch.testing.assert_close(drawn.norm(dim=-1), given.norm(dim=-1))
        assert not torch.allclose(drawn, given)


def test_the_sites_of_an_hmmroformer_are_its_hidden_states_and_the_row_itself_moves_nothing(
    tiny_model, layout
):
    model = tiny_model(num_hidden_layers=3)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 6, size=(12, layout.sequence_length))
    sites = residual_sites(model, torch.as_tensor(ids))
    hidden = model(input_ids=torch.as_tensor(ids), output_hidden_states=True).hidden_states
    assert num_sites(model) == len(sites) == 4
    for site in range(3):  # a post-norm model: every hidden state is a site's residual stream
        torch.testing.assert_close(sites[site], hidden[site])
    tasks = np.repeat(np.arange(3), 4)
    bayes = (
        torch.softmax(model(input_ids=torch.as_tensor(ids)).logits.double(), -1).detach().numpy()
    )  # its own
    positions = rng.integers(layout.test_start, layout.sequence_length - 1, size=12)
    readings = patching_readings(
        model, ids, tasks, bayes, positions, 7, np.random.default_rng(3), batch_size=5
    )
    assert readings.same_donor_max_nats < 1e-9
    assert readings.donors["state"].pairs == 12 and len(readings.donors["state"].shares) == 4
    assert readings.donors["state"].shares[-1] == pytest.approx(1.0, abs=1e-6)  # site L: the donor's output
    assert len(readings.donors["task"].random_shares) == 4


def test_the_patch_is_gone_after_the_block_even_when_it_raises(tiny_model):
    model = tiny_model(num_hidden_layers=2)
    ids = torch.randint(0, 6, (2, 9))
    before = model(input_ids=ids).logits
    zeros = torch.zeros(2, model.config.hidden_size)
    with pytest.raises(RuntimeError, match="inside"), patched_residual(model, 1, torch.tensor([3, 4]), zeros):
        assert not torch.equal(model(input_ids=ids).logits, before)
        raise RuntimeError("inside")
    assert torch.equal(model(input_ids=ids).logits, before)
    with (
        pytest.raises(ValueError, match="sites 0..2"),
        patched_residual(model, 3, torch.tensor([0, 0]), zeros),
    ):
        pass


def test_the_command_patches_a_checkpoint_and_refuses_bad_settings_in_one_line(
    reproduced_tiny, tmp_path, capsys
):
    from modeling_hmmroformer.experiments.commands import patching

    out, _ = reproduced_tiny
    folder = tmp_path / "patching"
    arguments = [
        "--model",
        str(out / "model"),
        "--num_tasks",
        "2",
        "--rows_per_task",
        "6",
        "--out",
        str(folder),
    ]
    assert patching.main(arguments) == 0
    printed = capsys.readouterr().out
    assert "| embeddings |" in printed and "same-donor control moves at most" in printed
    result = json.loads((folder / "patching.json").read_text())
    assert result["rows"] == 12 and result["control"] is not None
    assert result["model"]["same_donor_max_nats"] < 1e-6
    assert (folder / "patching.png").stat().st_size > 0
    assert patching.main([*arguments[:-2], "--rows_per_task", "1", "--out", str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error:") and "rows_per_task=1" in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
