"""Activation patching: at which layer a causal LM carries what moves its next-token prediction.

A site is a place in the residual stream: site 0 the embeddings (the input of layer 1), site l
(1..L-1) the output of layer l, site L the output of the last layer (before any final norm).
Patching row r at site l and position t puts there the residual stream of a donor row d at the
same position, and the network runs on from it: its next-token distribution at t moves. What
moves it depends on what the donor differs in:

    task    another task, the same token at t: what the context says of the task
    state   the same task, another token at t: what the recent tokens say of the state
    same    the row itself: the control that must move nothing (it moves 0, up to float rounding)

The move is read against the exact Bayes predictive of the donor row at t, `target` (the
mixture's, `hmm_datasets.bayes`): `moved_towards` = KL(target ‖ clean) - KL(target ‖ patched),
in nats. A site's share (`carried_shares`) is the sum over pairs of the move patching there makes
over the sum of the move the whole donor makes (its own clean output in place of the row's): 1
where the site carries all of the donor's effect, 0 where it carries none. Site L carries all
(the output is the donor's), and a task donor moves nothing at site 0 (its token is the row's),
by construction; the sites between say where the effect is carried. A random donor of the task
donor's norm at each site (`random_values`) is the control for any replacement's disruption.

    from probing.patching import run_patching                 # the whole analysis (scripts/patching.py)
    result = run_patching(model, corpus_config, params, PatchingConfig(), untrained_model=twin)

`patching_readings` is the analysis on given rows and their exact predictives, arrays in;
`run_patching` draws fresh rows of a few tasks (`labels.sample_probe_rows`) and computes the
mixture's predictive for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .architecture import check_causal_lm, decoder_layers
from .config import PatchingConfig

DONOR_KINDS = ("task", "state", "same")
NO_DONOR = -1  # `pick_donors`' mark of a row without a donor of its kind
TINY = 1e-30  # the floor of a probability inside a log


def num_sites(model) -> int:
    """L + 1: the embeddings and the output of each of the model's L layers."""
    return len(decoder_layers(model)) + 1


def site_name(site: int) -> str:
    return "embeddings" if site == 0 else f"layer {site}"


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    """The residual stream a decoder layer was called with (positionally or by keyword)."""
    return args[0] if args else kwargs["hidden_states"]


def _output_hidden(output):
    """The residual stream a decoder layer returned (a tensor, or the first of a tuple)."""
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def residual_sites(model, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream `[B, T, D]` at each site 0..L of `input_ids [B, T]`, one forward pass."""
    check_causal_lm(model)
    layers = decoder_layers(model)
    seen: list[torch.Tensor | None] = [None] * (len(layers) + 1)

    def before(index: int):
        def record(module, args, kwargs):
            seen[index] = _hidden_of(args, kwargs).detach()

        return record

    def after(module, args, output):
        seen[len(layers)] = _output_hidden(output).detach()

    handles = [layer.register_forward_pre_hook(before(i), with_kwargs=True) for i, layer in enumerate(layers)]
    handles.append(layers[-1].register_forward_hook(after))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen


@contextmanager
def patched_residual(model, site: int, positions: torch.Tensor, values: torch.Tensor) -> Iterator[None]:
    """Within the block, the residual stream of row b at site `site` and position `positions[b]`
    is `values[b]` (`values [B, D]`) in every forward pass of `B`-row batches; the hook is removed
    on exit, also when the block raises."""
    layers = decoder_layers(model)
    if not 0 <= site <= len(layers):
        raise ValueError(f"site {site} is not one of this model's sites 0..{len(layers)}")
    rows = torch.arange(len(positions), device=positions.device)

    def replaced(hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden.clone()
        hidden[rows.to(hidden.device), positions.to(hidden.device)] = values.to(
            device=hidden.device, dtype=hidden.dtype
        )
        return hidden

    def before(module, args, kwargs):
        if args:
            return (replaced(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": replaced(kwargs["hidden_states"])}

    def after(module, args, output):
        if isinstance(output, tuple):
            return (replaced(output[0]), *output[1:])
        return replaced(output)

    if site < len(layers):
        handle = layers[site].register_forward_pre_hook(before, with_kwargs=True)
    else:
        handle = layers[-1].register_forward_hook(after)
    try:
        yield
    finally:
        handle.remove()


def next_token_probs_at(
    model, input_ids: torch.Tensor, positions: torch.Tensor, num_tokens: int
) -> torch.Tensor:
    """`[B, num_tokens]` float64: the model's next-token distribution at `positions[b]` of each
    row, over the first `num_tokens` of its vocabulary (softmax over the whole of it)."""
    logits = model(input_ids=input_ids, use_cache=False).logits
    rows = torch.arange(len(positions), device=logits.device)
    return _probs(logits[rows, positions.to(logits.device)], num_tokens)


@torch.no_grad()
def patched_probs(
    model, input_ids: torch.Tensor, positions: torch.Tensor, site_values: list[torch.Tensor], num_tokens: int
) -> torch.Tensor:
    """`[L+1, B, num_tokens]`: the next-token distribution at `positions` with the residual stream
    patched at each site in turn, row b's there replaced by `site_values[site][b]` (`[B, D]`)."""
    out = []
    for site, values in enumerate(site_values):
        with patched_residual(model, site, positions, values):
            out.append(next_token_probs_at(model, input_ids, positions, num_tokens))
    return torch.stack(out)


def pick_donors(
    input_ids: np.ndarray, task_ids: np.ndarray, positions: np.ndarray, kind: str, rng: np.random.Generator
) -> np.ndarray:
    """`[B]`: a donor row for each row (`NO_DONOR` where none qualifies), drawn uniformly among
    those of its `kind` (`DONOR_KINDS`): "task", a row of another task with the same token at the
    row's position; "state", another row of the same task with another token there; "same", the
    row itself."""
    if kind not in DONOR_KINDS:
        raise ValueError(f"donor kind {kind!r} is not one of {', '.join(DONOR_KINDS)}")
    rows = np.arange(len(task_ids))
    if kind == "same":
        return rows.copy()
    donors = np.full(len(task_ids), NO_DONOR)
    for row, position in zip(rows, positions):
        same_task = task_ids == task_ids[row]
        same_token = input_ids[:, position] == input_ids[row, position]
        allowed = (~same_task & same_token) if kind == "task" else (same_task & ~same_token)
        candidates = np.flatnonzero(allowed & (rows != row))
        if len(candidates):
            donors[row] = rng.choice(candidates)
    return donors


def kl(target: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """KL(target ‖ probs) over the last axis, in nats (0 log 0 = 0)."""
    target, probs = target.double(), probs.double()
    terms = target * (torch.log(target.clamp_min(TINY)) - torch.log(probs.clamp_min(TINY)))
    return torch.where(target > 0, terms, 0.0).sum(-1)


def moved_towards(target: torch.Tensor, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """How far `after` lies nearer `target` than `before` does: KL(target ‖ before) - KL(target ‖
    after), in nats, per row (positive: moved towards it; 0: no move)."""
    return kl(target, before) - kl(target, after)


def carried_shares(
    target: torch.Tensor, clean: torch.Tensor, donor_clean: torch.Tensor, patched: torch.Tensor
) -> np.ndarray:
    """`[L+1]`: each site's share of the donor's effect, sum over pairs of `moved_towards(target,
    clean, patched[site])` over the sum of `moved_towards(target, clean, donor_clean)` (the whole
    donor's move); NaN at every site where the donor moves nothing in sum (no effect to share).
    `target`, `clean`, `donor_clean` `[B, V]`, `patched` `[L+1, B, V]`."""
    whole = float(moved_towards(target, clean, donor_clean).sum())
    moved = moved_towards(target[None], clean[None], patched).sum(-1).numpy()
    if whole <= 0:
        return np.full(len(moved), np.nan)
    return moved / whole


def random_values(site_values: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """Per site, a random direction of each row's norm there (`[B, D]` each): a donor that
    carries nothing of any row, its size matched."""
    out = []
    for values in site_values:
        noise = torch.randn(values.shape, generator=generator, dtype=torch.float64)
        norms = values.double().norm(dim=-1, keepdim=True)
        out.append((noise / noise.norm(dim=-1, keepdim=True) * norms).to(values.dtype))
    return out


def carried_lower(first: np.ndarray, second: np.ndarray) -> float:
    """How much lower in the network `first`'s effect is carried than `second`'s: the mean over
    the inner sites 1..L-1 of share(first) - share(second) (both shares are fixed at site L, and a
    task donor's at site 0, by construction). 0 for equal curves, positive where `first` is
    carried lower; NaN without inner sites or shares."""
    inner = np.asarray(first, float)[1:-1] - np.asarray(second, float)[1:-1]
    return float(np.mean(inner)) if len(inner) and np.isfinite(inner).all() else float("nan")


@dataclass(frozen=True)
class DonorReading:
    """One kind of donor on one model: how many rows found a donor, each site's share of the
    donor's effect (`carried_shares`), the whole donor's mean move towards the target (nats), and
    (for the task donor) the random donor's shares of the same effect; None for a share of no
    effect and for the effect of no pairs."""

    kind: str
    pairs: int
    shares: list[float | None]
    effect_nats: float | None
    random_shares: list[float | None]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PatchingReadings:
    """A model patched site by site (`site_names`), one `DonorReading` per donor kind, and the
    same-donor control's largest |move| in nats."""

    site_names: list[str]
    donors: dict[str, DonorReading]
    same_donor_max_nats: float

    def to_dict(self) -> dict:
        return {
            "site_names": self.site_names,
            "donors": {kind: reading.to_dict() for kind, reading in self.donors.items()},
            "same_donor_max_nats": self.same_donor_max_nats,
            "state_carried_lower": _number(self.state_carried_lower),
        }

    @property
    def state_carried_lower(self) -> float:
        """`carried_lower` of the state donor's shares against the task donor's."""
        shares = [np.array(self.donors[kind].shares, dtype=float) for kind in ("state", "task")]
        return carried_lower(*shares)


def patch_positions(layout, rows: int, rng: np.random.Generator) -> np.ndarray:
    """`[rows]`: a position per row, drawn uniformly among the test tokens that predict a test
    token (test tokens 0..T-2: a token of the row's own at t, where the last delimiter is every
    row's)."""
    return rng.integers(layout.test_start, layout.sequence_length - 1, size=rows)


@torch.no_grad()
def patching_readings(
    model,
    input_ids: np.ndarray,
    task_ids: np.ndarray,
    bayes_probs: np.ndarray | torch.Tensor,
    positions: np.ndarray,
    num_tokens: int,
    rng: np.random.Generator,
    batch_size: int = 64,
) -> PatchingReadings:
    """A model patched at every site (`patched_probs`) with a task, a state and the same donor per
    row (`pick_donors`) at `positions [B]`, read against `bayes_probs [B, T, num_tokens]`, the
    exact Bayes predictive of each row at each position; and the random donor of the task donor's
    norm (`random_values`, seeded from `rng`)."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    at = torch.as_tensor(positions, dtype=torch.long)
    bayes = torch.as_tensor(np.asarray(bayes_probs), dtype=torch.float64)
    if bayes.shape[:2] != ids.shape or len(at) != len(ids) or bayes.shape[-1] != num_tokens:
        raise ValueError(
            f"input_ids {tuple(ids.shape)}, positions {tuple(at.shape)} and bayes_probs {tuple(bayes.shape)} "
            f"must be [B, T], [B] and [B, T, {num_tokens}] for the same rows B and length T"
        )
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    clean = torch.cat(
        [_full_probs(model, ids[s].to(device), num_tokens) for s in _batches(len(ids), batch_size)]
    )
    readings, same_max = {}, 0.0
    for kind in DONOR_KINDS:
        donor = pick_donors(input_ids, task_ids, positions, kind, rng)
        found = np.flatnonzero(donor != NO_DONOR)
        if not len(found):
            readings[kind] = DonorReading(kind, 0, [], None, [])
            continue
        patched, randomized = [], []
        for s in _batches(len(found), batch_size):
            rows, given = torch.as_tensor(found[s]), torch.as_tensor(donor[found[s]])
            where = at[rows]
            sites = residual_sites(model, ids[given].to(device))
            values = [
                site[torch.arange(len(rows), device=site.device), where.to(site.device)] for site in sites
            ]
            recipients = ids[rows].to(device)
            patched.append(patched_probs(model, recipients, where.to(device), values, num_tokens))
            if kind == "task":
                noise = random_values(values, generator)
                randomized.append(patched_probs(model, recipients, where.to(device), noise, num_tokens))
        patched = torch.cat(patched, dim=1)
        rows, given = torch.as_tensor(found), torch.as_tensor(donor[found])
        where = at[rows]
        target, before, whole = bayes[given, where], clean[rows, where], clean[given, where]
        if kind == "same":
            same_max = float(moved_towards(target[None], before[None], patched).abs().max())
        random_shares = (
            carried_shares(target, before, whole, torch.cat(randomized, dim=1)) if randomized else []
        )
        readings[kind] = DonorReading(
            kind=kind,
            pairs=len(found),
            shares=[_number(x) for x in carried_shares(target, before, whole, patched)],
            effect_nats=_number(moved_towards(target, before, whole).mean()),
            random_shares=[_number(x) for x in random_shares],
        )
    sites = [site_name(site) for site in range(num_sites(model))]
    return PatchingReadings(sites, readings, same_max)


def _full_probs(model, input_ids: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """`[B, T, num_tokens]` float64 on the CPU: the model's next-token distribution at every position."""
    return _probs(model(input_ids=input_ids, use_cache=False).logits, num_tokens)


def _probs(logits: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """float64 on the CPU: the first `num_tokens` of the softmax of `logits` over its last axis."""
    return torch.log_softmax(logits.float(), dim=-1)[..., :num_tokens].double().exp().cpu()


def _number(value: float) -> float | None:
    """A float for JSON: None where it is not finite (a share of no effect)."""
    value = float(value)
    return value if np.isfinite(value) else None


def _batches(count: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]


@dataclass(frozen=True)
class PatchingResult:
    """A patching run: its settings, the tasks and rows it patched, the model's readings and the
    untrained twin's (None without one), and its seconds."""

    config: dict
    tasks: list[int]
    rows: int
    model: PatchingReadings
    control: PatchingReadings | None
    seconds: float

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "tasks": self.tasks,
            "rows": self.rows,
            "model": self.model.to_dict(),
            "control": None if self.control is None else self.control.to_dict(),
            "seconds": self.seconds,
        }


def run_patching(
    model, corpus_config, params, config: PatchingConfig, untrained_model=None
) -> PatchingResult:
    """The patching analysis of `model` on `config.rows_per_task` fresh rows of `config.num_tasks`
    tasks of the mixture (`params`, drawn by `config.seed`) at one test position per row, read
    against the mixture's exact predictive (`hmm_datasets.bayes`), and of `untrained_model` (the
    control) on the same rows, positions and donors."""
    import time

    from hmm_datasets import SampleLayout
    from hmm_datasets.bayes import BayesOptimalPredictor

    from .labels import sample_probe_rows

    started = time.perf_counter()
    if config.num_tasks > params.num_tasks:
        raise ValueError(f"num_tasks={config.num_tasks} is more than the corpus's {params.num_tasks} tasks")
    rng = np.random.default_rng(config.seed)
    tasks = np.sort(rng.choice(params.num_tasks, size=config.num_tasks, replace=False))
    rows = sample_probe_rows(corpus_config, params, tasks, config.rows_per_task, config.seed)
    ids, task_ids = rows["input_ids"].astype(np.int64), np.repeat(tasks, config.rows_per_task)
    layout = SampleLayout.from_config(corpus_config)
    positions = patch_positions(layout, len(ids), rng)
    bayes = BayesOptimalPredictor(params, device="cpu").next_token_probs(ids)
    num_tokens = bayes.shape[-1]
    readings = [
        patching_readings(
            network,
            ids,
            task_ids,
            bayes,
            positions,
            num_tokens,
            np.random.default_rng(config.seed),
            config.batch_size,
        )
        for network in (model, untrained_model)
        if network is not None
    ]
    return PatchingResult(
        config=config.to_dict(),
        tasks=[int(t) for t in tasks],
        rows=len(ids),
        model=readings[0],
        control=readings[1] if len(readings) > 1 else None,
        seconds=time.perf_counter() - started,
    )
