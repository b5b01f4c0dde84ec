"""The exact beliefs of the mixture at every position: what a belief-state probe regresses on.

At position i of a row, after tokens 0..i:

- the task posterior P(task | tokens 0..i) (`BayesOptimalPredictor.task_posterior`);
- the state filter of the row's own task, P(state_i | task, tokens of the segment up to i):
  the forward filter of that HMM, reset at every delimiter (a segment starts afresh);
- the joint posterior P(task, state_i | tokens 0..i) = P(task | ...) P(state_i | task, ...),
  with every task's filter.

`belief_states` returns them at chosen positions; `cached_belief_states` computes them once for
every network read on the same rows (a model's kept networks, a study's models). For a mixture
of many tasks the task and joint beliefs keep `tasks` (e.g. the probed ones) and one last entry
with the mass of all the others, so that every belief is still a distribution.

Shapes: B rows, L positions, P chosen positions per row, K tasks, S states.
"""

from __future__ import annotations

import numpy as np
import torch

from .bayes import BayesOptimalPredictor, default_device
from .cache import cached
from .params import HMMParams

BELIEFS = ("task_posterior", "state_filter", "joint_posterior")
ROWS_PER_CHUNK = 64  # rows whose filters under every task are computed at once


def belief_tasks(params: HMMParams, tasks, max_tasks: int = 64) -> np.ndarray | None:
    """The tasks the task and joint beliefs keep: all (None) when there are at most
    `max_tasks`, else `tasks` (a remainder entry holds the others' mass)."""
    return None if params.num_tasks <= max_tasks else np.asarray(tasks, dtype=np.int64)


def belief_states(
    params: HMMParams, input_ids, task_ids, positions, kept_tasks=None, device=None, dtype=torch.float32
) -> dict[str, np.ndarray]:
    """The three beliefs of `BELIEFS` at `positions [B, P]` of every row, float32:
    `task_posterior [B, P, K']`, `state_filter [B, P, S]`, `joint_posterior [B, P, K' * S]`
    (task-major), where K' = K, or `len(kept_tasks) + 1` with the remainder last.

    The filters run at `dtype`: float32 (the exact predictors' own precision; the task
    posterior's log-weights are summed in float64 either way) or float64. Stored as float32
    and floored at 1e-6 before a log (`probing.belief`), float32's beliefs are within about 1e-6
    of float64's, and twice as fast to compute (at 8,192 HMMs most of a model's probe stage)."""
    ids, positions = np.asarray(input_ids), np.array(positions)
    rows, num_tasks = ids.shape[0], params.num_tasks
    kept = np.arange(num_tasks) if kept_tasks is None else np.asarray(kept_tasks, dtype=np.int64)
    predictor = BayesOptimalPredictor(params, device=device, dtype=dtype)
    at = torch.as_tensor(positions, dtype=torch.long)
    out = {name: [] for name in BELIEFS}
    for chunk in np.array_split(np.arange(rows), max(1, -(-rows // ROWS_PER_CHUNK))):
        where = at[chunk]
        posterior = predictor.task_posterior(ids[chunk]).cpu()  # [b, L, K]
        posterior = torch.take_along_dim(posterior, where[..., None], dim=1)  # [b, P, K]
        own = predictor.oracle_state_filters(ids[chunk], np.asarray(task_ids)[chunk]).cpu()
        out["state_filter"].append(torch.take_along_dim(own, where[..., None], dim=1))
        every = predictor.oracle_state_filters(
            np.repeat(ids[chunk], kept.size, axis=0), np.tile(kept, chunk.size)
        )
        every = every.cpu().reshape(chunk.size, kept.size, *every.shape[1:])  # [b, K', L, S]
        every = torch.take_along_dim(every, where[:, None, :, None], dim=2).transpose(1, 2)  # [b, P, K', S]
        kept_posterior = posterior[..., torch.as_tensor(kept)]
        joint = (kept_posterior[..., None] * every).flatten(2)
        if kept_tasks is not None:  # the other tasks' mass, as one last entry
            rest = (1 - kept_posterior.sum(-1, keepdim=True)).clamp_min(0)
            kept_posterior, joint = torch.cat([kept_posterior, rest], -1), torch.cat([joint, rest], -1)
        out["task_posterior"].append(kept_posterior)
        out["joint_posterior"].append(joint)
    return {name: torch.cat(parts).float().numpy() for name, parts in out.items()}


def cached_belief_states(
    params: HMMParams, input_ids, task_ids, positions, kept_tasks=None, device=None, dtype=torch.float32
) -> dict[str, np.ndarray]:
    """`belief_states`, computed once per process for the same mixture, rows, tasks, positions
    and kept tasks, and shared by the processes of a study (`hmm_datasets.cache`)."""
    device = torch.device(device) if device is not None else default_device()
    kept = np.array([-1]) if kept_tasks is None else np.asarray(kept_tasks, dtype=np.int64)
    keys = (np.asarray(task_ids), np.asarray(positions), kept)
    computed: dict[str, np.ndarray] = {}

    def compute(name: str) -> torch.Tensor:
        if not computed:
            computed.update(belief_states(params, input_ids, task_ids, positions, kept_tasks, device, dtype))
        return torch.from_numpy(computed[name])

    return {
        name: cached(f"beliefs-{name}-{device}-{dtype}", params, input_ids, lambda n=name: compute(n), keys)
        .numpy()
        .copy()
        for name in BELIEFS
    }
