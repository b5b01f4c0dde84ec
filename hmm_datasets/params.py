"""The parameters of a mixture of HMMs, sampled for all tasks at once.

Shapes: K tasks, S hidden states, V observation tokens, d transition rank.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from .config import HMMMixtureConfig
from .names import PARAMS_FILENAME

_PARAMS_SEED_KEY = 1_000_003  # spawn key of the parameter stream, apart from the data streams
UNSEEN_SEED_KEY = 1_000_033  # spawn key of the unseen HMMs' stream, apart from the mixture's and the data's
_ROW_SUM_TOLERANCE = 1e-4


@dataclass
class HMMParams:
    """Parameters of K HMMs sharing one vocabulary, as float32 arrays.

    task_prior  [K]       probability of each task
    initial     [K, S]    initial state distribution (also after every delimiter)
    transitions [K, S, S] row-stochastic state transitions
    emissions   [K, S, V] row-stochastic emission distributions
    transition_left [K, S, d], transition_right [K, d, S]: the rank-d factors with
        `transitions = left @ right`, when the HMMs are low rank (else None).
    """

    task_prior: np.ndarray
    initial: np.ndarray
    transitions: np.ndarray
    emissions: np.ndarray
    transition_left: np.ndarray | None = None
    transition_right: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_tasks(self) -> int:
        return self.initial.shape[0]

    @property
    def num_states(self) -> int:
        return self.initial.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.emissions.shape[2]

    @property
    def transition_rank(self) -> int | None:
        return None if self.transition_left is None else self.transition_left.shape[2]

    def select(self, tasks) -> HMMParams:
        """The HMMs `tasks` (indices) alone, their prior renormalised."""
        tasks = np.asarray(tasks, dtype=np.int64)
        prior = self.task_prior[tasks]
        factors = [None if f is None else f[tasks] for f in (self.transition_left, self.transition_right)]
        return HMMParams(
            prior / prior.sum(), self.initial[tasks], self.transitions[tasks], self.emissions[tasks], *factors
        )

    def validate(self) -> None:
        """Shapes agree and every distribution is non-negative and sums to one."""
        if self.initial.ndim != 2:
            raise ValueError(f"initial must be [K, S], got shape {self.initial.shape}.")
        k, s = self.initial.shape
        v = self.emissions.shape[-1] if self.emissions.ndim == 3 else -1
        expected = {
            "task_prior": (k,),
            "transitions": (k, s, s),
            "emissions": (k, s, v),
        }
        if (self.transition_left is None) != (self.transition_right is None):
            raise ValueError("transition_left and transition_right must be given together.")
        if self.transition_left is not None:
            d = self.transition_left.shape[-1]
            expected["transition_left"] = (k, s, d)
            expected["transition_right"] = (k, d, s)
        for name, shape in expected.items():
            actual = getattr(self, name).shape
            if actual != shape:
                raise ValueError(
                    f"HMMParams.{name} has shape {actual} but initial {self.initial.shape} "
                    f"implies {shape}: the parameter arrays disagree."
                )
        for name in (
            "task_prior",
            "initial",
            "transitions",
            "emissions",
            "transition_left",
            "transition_right",
        ):
            array = getattr(self, name)
            if array is None:
                continue
            if not np.all(np.isfinite(array)) or np.any(array < 0):
                raise ValueError(f"HMMParams.{name} has negative or non-finite entries.")
            row_sums = array.sum(axis=-1, dtype=np.float64)
            worst = float(np.max(np.abs(row_sums - 1.0)))
            if worst > _ROW_SUM_TOLERANCE:
                raise ValueError(
                    f"HMMParams.{name} rows must sum to 1 (worst row is off by {worst:.2e}); "
                    "normalise the last axis."
                )

    def check_matches(self, config: HMMMixtureConfig, unseen: bool = False) -> None:
        """Raise if these parameters cannot have generated a corpus with `config` (with `unseen`:
        its test_unseen split, whose HMMs number `num_test_unseen`)."""
        count = ("num_test_unseen", config.num_test_unseen) if unseen else ("num_tasks", config.num_tasks)
        loader = "load_unseen_params" if unseen else "load_hmm_params"
        pairs = {
            count[0]: (self.num_tasks, count[1]),
            "num_states": (self.num_states, config.num_states),
            "vocab_size": (self.vocab_size, config.vocab_size),
        }
        for name, (have, want) in pairs.items():
            if have != want:
                raise ValueError(
                    f"HMM parameters have {name}={have} but the corpus config says {name}={want}: "
                    "these parameters belong to another corpus. Load the parameters saved "
                    f"beside this corpus ({loader}(folder)) or regenerate them from its config."
                )

    # ---- I/O --------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write a safetensors file; with low-rank factors the dense transitions are omitted."""
        tensors = {
            "task_prior": self.task_prior,
            "initial": self.initial,
            "emissions": self.emissions,
        }
        if self.transition_left is None:
            tensors["transitions"] = self.transitions
        else:
            tensors["transition_left"] = self.transition_left
            tensors["transition_right"] = self.transition_right
        tensors = {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in tensors.items()}
        metadata = {
            "format": "hmm_params",
            "shapes": json.dumps({n: list(a.shape) for n, a in tensors.items()}),
        }
        save_file(tensors, str(path), metadata=metadata)

    @classmethod
    def load(cls, path: str | os.PathLike) -> HMMParams:
        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"no HMM parameters file at {path}: a corpus folder must hold {PARAMS_FILENAME} "
                "(written by export_corpus / scripts/generate.py)."
            )
        try:
            tensors = load_file(str(path))
        except SafetensorError as error:  # truncated or not a safetensors file
            raise ValueError(
                f"{path} is not a readable safetensors file ({' '.join(str(error).split())}): it is truncated "
                "or damaged; export the corpus again (scripts/generate.py --overwrite)."
            ) from error
        missing = {"task_prior", "initial", "emissions"} - set(tensors)
        if missing or ("transitions" not in tensors and "transition_left" not in tensors):
            raise ValueError(
                f"{path} is not an HMM parameters file (missing {sorted(missing) or 'transitions'})."
            )
        left, right = tensors.get("transition_left"), tensors.get("transition_right")
        transitions = tensors.get("transitions")
        if transitions is None:
            transitions = compose_transitions(left, right)
        return cls(tensors["task_prior"], tensors["initial"], transitions, tensors["emissions"], left, right)


def compose_transitions(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Dense float32 transitions `[K, S, S]` from rank-d factors `[K, S, d] @ [K, d, S]`.

    torch's batched matmul: 13x faster than numpy's on these many small matrices (imported here:
    `import hmm_datasets` needs no torch).
    """
    import torch

    dense = torch.bmm(torch.as_tensor(left, dtype=torch.float32), torch.as_tensor(right, dtype=torch.float32))
    return (dense / dense.sum(-1, keepdim=True)).numpy()


def _dirichlet_rows(rng: np.random.Generator, concentration: float, shape: tuple[int, ...]) -> np.ndarray:
    """Independent symmetric Dirichlet rows over the last axis, as float32.

    Drawn as normalised Gamma variates (what `Generator.dirichlet` does, vectorised over
    all rows). With small concentrations a row can underflow to all zeros; such rows
    put their mass on one random entry, the limit of a vanishing concentration.
    """
    gamma = rng.standard_gamma(concentration, size=shape)
    sums = gamma.sum(-1, keepdims=True)
    empty = sums[..., 0] == 0
    if np.any(empty):
        picks = rng.integers(0, shape[-1], size=int(empty.sum()))
        gamma[empty] = np.eye(shape[-1])[picks]
        sums = gamma.sum(-1, keepdims=True)
    rows = (gamma / sums).astype(np.float32)
    # Re-normalise in float32 so that every row sums to one at the stored precision.
    return rows / rows.sum(-1, keepdims=True, dtype=np.float32)


def mixed_emission_rows(emissions: np.ndarray, mixing: float) -> np.ndarray:
    """Emission rows `[..., V]` with the share `mixing` of each moved to the uniform distribution,
    `(1 - mixing) * rows + mixing / V`, as float32 rows summing to one; the rows themselves at 0
    (so corpora without mixing keep their bytes). The state distribution does not depend on the
    emissions, so the token's information about the state, I(state; token), only falls as the
    mixing grows (mutual information is convex in the channel and 0 at the uniform one)."""
    if mixing == 0:
        return emissions
    rows = ((1.0 - mixing) * emissions.astype(np.float64) + mixing / emissions.shape[-1]).astype(np.float32)
    return rows / rows.sum(-1, keepdims=True, dtype=np.float32)


def sample_hmm_params(
    config: HMMMixtureConfig, num_tasks: int | None = None, stream: tuple[int, ...] = (_PARAMS_SEED_KEY,)
) -> HMMParams:
    """Draw the parameters of `num_tasks` HMMs (default: every task of `config`) from the prior
    `config` describes, at once; deterministic in `config.seed` and `stream` (the mixture's own
    stream by default: other streams draw other HMMs from the same prior). The task prior is
    `config`'s for the mixture's own draw, uniform for any other number of HMMs."""
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=tuple(stream)))
    k = config.num_tasks if num_tasks is None else int(num_tasks)
    s, v = config.num_states, config.vocab_size
    initial = _dirichlet_rows(rng, config.initial_concentration, (k, s))
    emissions = mixed_emission_rows(
        _dirichlet_rows(rng, config.emission_concentration, (k, s, v)), config.emission_mixing
    )
    if config.transition_rank is None:
        left = right = None
        transitions = _dirichlet_rows(rng, config.transition_concentration, (k, s, s))
    else:
        d = config.transition_rank
        left = _dirichlet_rows(rng, config.transition_concentration, (k, s, d))
        right = _dirichlet_rows(rng, config.transition_concentration, (k, d, s))
        transitions = compose_transitions(left, right)
    own = num_tasks is None and tuple(stream) == (_PARAMS_SEED_KEY,)
    prior = (config.task_prior_array() if own else np.full(k, 1.0 / k)).astype(np.float32)
    return HMMParams(prior, initial, transitions, emissions, left, right)


def unseen_task_params(config: HMMMixtureConfig) -> HMMParams | None:
    """The `num_test_unseen` HMMs of the test_unseen split (uniform prior over them), drawn from
    the mixture's prior on their own stream (`UNSEEN_SEED_KEY`); None when the config has none."""
    if config.num_test_unseen == 0:
        return None
    return sample_hmm_params(config, config.num_test_unseen, stream=(UNSEEN_SEED_KEY,))


def check_disjoint(mixture: HMMParams, unseen: HMMParams) -> None:
    """`ValueError` if an unseen HMM is one of the mixture's (same initial, transitions and emissions
    arrays) or the two sets do not share states and vocabulary. Candidates are found by their
    initial distribution `[S]`, so K mixture and U unseen HMMs cost O((K + U) S), not K * U HMMs."""
    if (unseen.num_states, unseen.vocab_size) != (mixture.num_states, mixture.vocab_size):
        raise ValueError(
            f"the unseen HMMs have S={unseen.num_states}, V={unseen.vocab_size} but the mixture's "
            f"S={mixture.num_states}, V={mixture.vocab_size}: draw them from the mixture's config."
        )
    by_initial: dict[bytes, list[int]] = {}
    for task in range(mixture.num_tasks):
        by_initial.setdefault(mixture.initial[task].tobytes(), []).append(task)
    for index in range(unseen.num_tasks):
        for task in by_initial.get(unseen.initial[index].tobytes(), []):
            if all(
                np.array_equal(getattr(unseen, name)[index], getattr(mixture, name)[task])
                for name in ("transitions", "emissions")
            ):
                raise ValueError(
                    f"unseen HMM {index} equals HMM {task} of the mixture (same initial, transitions and "
                    "emissions): the test_unseen split would hold a seen task. Draw the unseen HMMs on "
                    "their own stream (unseen_task_params)."
                )


# ---- per-task diagnostics ------------------------------------------------------------
def stationary_distribution(params: HMMParams, squarings: int = 48) -> np.ndarray:
    """Stationary state distribution of each task's chain, reached from its initial one, `[K, S]`.

    The lazy chain `(I + P) / 2` has the same stationary distributions as `P` and
    converges from any start, periodic chains included; `squarings` repeated squarings
    run it for 2**squarings steps. A rank-d chain `P = left @ right` is solved through
    its d x d feature chain `right @ left` (pi = mu @ right), so the paper's sizes take
    a second.
    """
    if params.transition_left is not None:
        left = params.transition_left.astype(np.float64)
        right = params.transition_right.astype(np.float64)
        start = np.matmul(params.initial.astype(np.float64)[:, None, :], left)[:, 0]  # features after step 1
        features = _lazy_limit(np.matmul(right, left), start, squarings)
        return np.matmul(features[:, None, :], right)[:, 0]
    return _lazy_limit(params.transitions.astype(np.float64), params.initial.astype(np.float64), squarings)


def _lazy_limit(transitions: np.ndarray, start: np.ndarray, squarings: int) -> np.ndarray:
    """`start @ ((I + P) / 2) ** (2 ** squarings)` for every task: [K, S, S], [K, S] -> [K, S]."""
    size = transitions.shape[-1]
    lazy = 0.5 * (np.eye(size) + transitions / transitions.sum(-1, keepdims=True))
    for _ in range(squarings):
        lazy = np.matmul(lazy, lazy)
        lazy /= lazy.sum(-1, keepdims=True)
    dist = np.matmul(start[:, None, :], lazy)[:, 0]
    return dist / dist.sum(-1, keepdims=True)


def _row_entropy(rows: np.ndarray) -> np.ndarray:
    """Entropy in nats of each distribution on the last axis."""
    rows = rows.astype(np.float64)
    return -np.sum(np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0), axis=-1)


def state_entropy_rate(params: HMMParams, stationary: np.ndarray | None = None) -> np.ndarray:
    """Entropy rate of each task's hidden chain, nats per step, `[K]`: sum_s pi_s H(P[s, :])."""
    stationary = stationary_distribution(params) if stationary is None else stationary
    return np.sum(stationary * _row_entropy(params.transitions), axis=-1)


def emission_entropy(params: HMMParams, stationary: np.ndarray | None = None) -> np.ndarray:
    """Mean entropy of the emission given the state, under the stationary distribution, `[K]`."""
    stationary = stationary_distribution(params) if stationary is None else stationary
    return np.sum(stationary * _row_entropy(params.emissions), axis=-1)


def task_diagnostics(params: HMMParams) -> dict[str, np.ndarray]:
    """Per-task numbers for a dataset card: entropies (nats) and the stationary distribution."""
    stationary = stationary_distribution(params)
    return {
        "stationary": stationary,
        "state_entropy_rate": state_entropy_rate(params, stationary),
        "emission_entropy": emission_entropy(params, stationary),
        "top_emission_probability": np.sum(stationary * params.emissions.max(-1), axis=-1),
        "top_transition_probability": np.sum(stationary * params.transitions.max(-1), axis=-1),
    }
