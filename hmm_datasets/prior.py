"""The prior-level yardstick: the Bayes predictor under the HMM prior itself, estimated by Monte Carlo.

A model trained on a mixture of K HMMs can behave like the Bayes predictor over its K training
HMMs (`BayesOptimalPredictor(params)`: a learner that retrieves a stored HMM) or like the Bayes
predictor under the prior the HMMs were drawn from (a learner that infers a new HMM in context,
never told the training HMMs). The second integrates over every HMM the prior can draw, which
is intractable; its estimate here is the Bayes predictor over K' fresh draws from the same prior
(uniform weights: a Monte Carlo estimate of the prior integral), on a seed stream of its own
(`PRIOR_SEED_KEY`), so it shares no HMM with the mixture.

    probs = prior_level_predictor(config, num_draws=2048).next_token_probs(input_ids)  # [B, L, V+1]
    report = measure_convergence(config, input_ids, 2048, larger=8192)
    report["converged"], report["label"]

On a sparse prior (the presets' Dirichlet 0.03) this estimate does not converge in any number of
draws a machine holds (docs/bayes.md): `hmm_datasets.particle` estimates the same predictor by
particle learning, which does, and is the one the study's yardsticks use. An estimate decides
nothing until it has converged: `measure_convergence` runs two independent
draws of K' HMMs on the same rows and measures the KL between their predictions (the Monte
Carlo spread), and with `larger` the KL of a larger estimate to the K' one (its bias);
`converged` is the rule (spread below `CONVERGENCE_TOLERANCE`). Positions are scored as
everywhere else (`hmm_datasets.memory.scored_positions`: every position whose next token is an
observation). On `small`'s sparse prior it has not converged at K' = 8192 (two draws differ by
2.6 nats/token, shrinking like K'^-0.09: docs/bayes.md), so there this estimate decides nothing.

Shapes: B rows, L positions, V observation tokens, K' draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from .bayes import BayesOptimalPredictor, default_device
from .cache import cached
from .config import HMMMixtureConfig
from .memory import masked_mean, scored_positions
from .params import HMMParams, sample_hmm_params

# spawn key of the prior-level draws' stream, apart from the mixture's, the unseen HMMs' and the data's
PRIOR_SEED_KEY = 2_000_029
# Converged: two independent estimates differ by less than this, in nats per scored token. At most a
# seventh of every KL from a trained `small` model to the Bayes-optimal predictor in this repository's
# results (0.069 in results/small, 0.10-0.19 in results/depth) and about 1% of Bayes's own NLL on
# `small` (0.97-1.12 nats/token): Monte Carlo noise below it cannot decide which yardstick a model is
# nearer, unless the model is within 0.01 nats/token of equidistant (then nothing can).
CONVERGENCE_TOLERANCE = 0.01
_TINY = 1e-300  # as hmm_datasets.scoring: a zero probability costs -log(1e-300) = 690.8 nats


def prior_draws(config: HMMMixtureConfig, num_draws: int, draw: int = 0) -> HMMParams:
    """`num_draws` HMMs from the prior `config` describes (uniform weights over them), on the stream
    `(PRIOR_SEED_KEY, draw)`: other `draw`s give independent sets, the same `draw` the same set."""
    _check_count("num_draws", num_draws)
    _check_draw(draw)
    return sample_hmm_params(config, int(num_draws), stream=(PRIOR_SEED_KEY, int(draw)))


def predictor_over_draws(draws: HMMParams, **predictor_kwargs) -> BayesOptimalPredictor:
    """The Bayes predictor over the HMMs `draws` with a uniform prior over them (whatever
    `draws.task_prior` says): the Monte Carlo estimate of the prior-level predictor when `draws`
    come from the prior. `predictor_kwargs` go to `BayesOptimalPredictor` (device, dtype, ...)."""
    uniform = np.full(draws.num_tasks, 1.0 / draws.num_tasks, dtype=draws.task_prior.dtype)
    return BayesOptimalPredictor(replace(draws, task_prior=uniform), **predictor_kwargs)


def prior_level_predictor(
    config: HMMMixtureConfig, num_draws: int, draw: int = 0, **predictor_kwargs
) -> BayesOptimalPredictor:
    """The prior-level yardstick estimated with K' = `num_draws` HMMs of draw `draw`
    (`prior_draws`); it knows nothing of the mixture's HMMs."""
    return predictor_over_draws(prior_draws(config, num_draws, draw), **predictor_kwargs)


def prior_level_probs(
    config: HMMMixtureConfig, input_ids, num_draws: int, draw: int = 0, **predictor_kwargs
) -> torch.Tensor:
    """`[B, L, V+1]`: `prior_level_predictor(...).next_token_probs(input_ids)`, computed once per
    process for the same draws, rows, dtype and device (`hmm_datasets.cache`: an estimate is
    compared with several others on the same rows). Do not modify the result in place."""
    draws = prior_draws(config, num_draws, draw)
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    dtype = predictor_kwargs.get("dtype", torch.float32)
    device = torch.device(predictor_kwargs.get("device") or default_device())
    compute = lambda: predictor_over_draws(draws, **predictor_kwargs).next_token_probs(ids)  # noqa: E731
    return cached(f"prior-level-{dtype}-{device}", draws, ids, compute)


def convergence(predictions_a: torch.Tensor, predictions_b: torch.Tensor, scored=None) -> dict[str, float]:
    """How far two estimates' next-token distributions are apart on the same rows (JSON-ready).

    predictions_a, predictions_b `[B, L, V+1]`; scored `[B, L-1]` bool: the positions i whose
    prediction of token i + 1 counts (`scored_positions(input_ids, delimiter)`; None: all of
    0..L-2, as `next_token_scores`). Returns the means over scored positions of `kl_a_b` =
    KL(a || b) and `kl_b_a` (nats/token), `kl_symmetric` (their mean), `agreement` (same
    argmax) and `num_positions`. Two identical estimates give exactly 0 and 1.
    """
    a, b = torch.as_tensor(predictions_a), torch.as_tensor(predictions_b)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(
            f"predictions must both be [B, L, V+1] on the same rows, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}: predict the same input_ids with both estimates."
        )
    b = b.to(a.device)
    scored = torch.ones(a.shape[0], a.shape[1] - 1, dtype=torch.bool) if scored is None else scored
    scored = torch.as_tensor(scored, dtype=torch.bool, device=a.device)
    if tuple(scored.shape) != (a.shape[0], a.shape[1] - 1):
        raise ValueError(
            f"scored has shape {tuple(scored.shape)} but predictions {tuple(a.shape)} need "
            f"{(a.shape[0], a.shape[1] - 1)}: one entry per predicted token 1..L-1 (scored_positions)."
        )
    kl_a_b, kl_b_a = masked_mean(per_position_kl(a, b), scored), masked_mean(per_position_kl(b, a), scored)
    same = (a[:, :-1].argmax(-1) == b[:, :-1].argmax(-1)).double()
    return {
        "kl_a_b": kl_a_b,
        "kl_b_a": kl_b_a,
        "kl_symmetric": 0.5 * (kl_a_b + kl_b_a),
        "agreement": masked_mean(same, scored),
        "num_positions": int(scored.sum()),
    }


def per_position_kl(reference: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """`[B, L-1]`: KL(reference || probs) of the predictions `[B, L, V+1]` of tokens 1..L-1, in
    float64, as `hmm_datasets.scoring.next_token_scores` computes its `kl`."""
    reference, probs = reference[:, :-1].double(), probs[:, :-1].double()
    log_ratio = torch.log(reference.clamp_min(_TINY)) - torch.log(probs.clamp_min(_TINY))
    return torch.where(reference > 0, reference * log_ratio, 0.0).sum(-1)


def measure_convergence(
    config: HMMMixtureConfig,
    input_ids,
    num_draws: int,
    draws: Sequence[int] = (0, 1),
    larger: int | None = None,
    *,
    tolerance: float = CONVERGENCE_TOLERANCE,
    **predictor_kwargs,
) -> dict:
    """Has the K' = `num_draws` estimate of the prior-level yardstick converged on rows `input_ids [B, L]`?

    Predicts the rows with the two independent draws `draws` of K' HMMs (`prior_level_probs`) and
    returns (JSON-ready) `num_draws`, `draws`, `num_rows`, `num_positions` (scored: next token an
    observation), `spread` (`convergence` of the two: the Monte Carlo spread), with `larger` (e.g.
    8 * num_draws) `bias` (`convergence` of the estimate of `larger` HMMs, draw `max(draws) + 1`,
    as a, to the K' estimate of `draws[0]` as b: `kl_a_b` is KL(larger || K')) and `larger`
    (`num_draws`, `draw`), else both None; then `tolerance`, `converged` (`converged`) and `label`.
    """
    _check_count("num_draws", num_draws)
    draws = [_check_draw(draw) for draw in draws]
    if len(draws) != 2 or draws[0] == draws[1]:
        raise ValueError(
            f"draws={draws} must be two different draw numbers, e.g. (0, 1): the spread needs two."
        )
    if larger is not None:
        _check_count("larger", larger)
        if larger <= num_draws:
            raise ValueError(f"larger={larger} must exceed num_draws={num_draws}, e.g. 8 * num_draws.")
    ids = torch.as_tensor(input_ids if torch.is_tensor(input_ids) else np.asarray(input_ids)).long().cpu()
    scored = scored_positions(ids, config.delimiter)
    first, second = (prior_level_probs(config, ids, num_draws, draw, **predictor_kwargs) for draw in draws)
    report = {
        "num_draws": int(num_draws),
        "draws": draws,
        "num_rows": int(ids.shape[0]),
        "num_positions": int(scored.sum()),
        "spread": convergence(first, second, scored),
        "bias": None,
        "larger": None,
    }
    if larger is not None:
        reference = {"num_draws": int(larger), "draw": max(draws) + 1}
        larger_probs = prior_level_probs(
            config, ids, reference["num_draws"], reference["draw"], **predictor_kwargs
        )
        report.update(bias=convergence(larger_probs, first, scored), larger=reference)
    report["tolerance"] = float(tolerance)
    report["converged"] = converged(report, tolerance)
    report["label"] = convergence_label(report)
    return report


def converged(report: dict, tolerance: float = CONVERGENCE_TOLERANCE) -> bool:
    """The rule: a `measure_convergence` report has converged when the symmetric KL between its two
    independent draws (`spread`) is below `tolerance` nats/token (`CONVERGENCE_TOLERANCE`: see there
    why 0.01). NaN (nothing scored) has not converged."""
    if not tolerance > 0:
        raise ValueError(
            f"tolerance={tolerance} must be a positive KL in nats/token, e.g. {CONVERGENCE_TOLERANCE}."
        )
    return bool(report["spread"]["kl_symmetric"] < tolerance)


def convergence_label(report: dict) -> str:
    """`"converged"`, or `"NOT CONVERGED: ..."` with the spread and the tolerance it misses, for tables."""
    spread, tolerance = report["spread"]["kl_symmetric"], report["tolerance"]
    if converged(report, tolerance):
        return "converged"
    return (
        f"NOT CONVERGED: two draws of K'={report['num_draws']} differ by {spread:.4f} nats/token "
        f"(tolerance {tolerance}); use more draws"
    )


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive number of HMMs (an integer >= 1).")


def _check_draw(draw) -> int:
    if isinstance(draw, bool) or not isinstance(draw, (int, np.integer)) or draw < 0:
        raise ValueError(f"draw={draw!r} must be a non-negative integer naming a set of draws (0, 1, ...).")
    return int(draw)
