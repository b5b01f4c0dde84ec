"""Linear probes: multinomial logistic regression in torch, majority baselines, bootstrap intervals.

A probe reads one layer's activations at a set of positions and predicts a label. It is
fitted on the probe-train rows and scored on the probe-test rows (disjoint samples); its
accuracy carries a bootstrap confidence interval over test rows (positions of one row are
not independent, so rows are what is resampled).

Baselines: the majority label (chance) and the majority label of each current token (what
a probe that only sees the token knows). The Hewitt-Liang control task (random labels per
token type) is gone: a linear probe memorises any token -> label map from the embeddings, so
its accuracy was 0.994-1.000 at every layer of the `small` model, a constant that carried no
layer information.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .config import ProbeConfig


@dataclass(frozen=True)
class FitSettings:
    """How a probe is fitted: L2 penalty on the weights, L-BFGS iterations (both a probing run's
    own, `ProbeConfig`'s, by default), device, and when its batched fit counts as converged: its
    loss changes by less than `tolerance` relative to it on a step that decreased it enough, while
    its gradient has fallen below `grad_tolerance` times its first one (or the gradient alone has
    fallen below `tolerance` times that)."""

    l2: float = ProbeConfig.l2
    max_iter: int = ProbeConfig.max_iter
    device: str = "cpu"
    tolerance: float = 1e-6
    grad_tolerance: float = 1e-3


def standardize(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero mean, unit variance per feature, with the train statistics."""
    mean = train.mean(0, keepdim=True)
    std = train.std(0, keepdim=True).clamp_min(1e-6)
    return (train - mean) / std, (test - mean) / std


def fit_linear_probe(features: torch.Tensor, labels: torch.Tensor, num_classes: int, settings: FitSettings):
    """A `nn.Linear` fitted by L-BFGS to minimise cross-entropy + l2/2 |W|^2 (full batch)."""
    torch.manual_seed(0)
    probe = nn.Linear(features.shape[1], num_classes).to(features.device)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    optimizer = torch.optim.LBFGS(
        probe.parameters(), lr=1.0, max_iter=settings.max_iter, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(probe(features), labels)
        loss = loss + 0.5 * settings.l2 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return probe.requires_grad_(False)


# ---- many probes in one batched fit ------------------------------------------------------
@dataclass
class Probes:
    """B fitted probes: weights `[B, D + 1, C]` on standardised features (the last row is the
    bias), the standardisation `mean, scale [B, D]` (z = (x - mean) * scale, where scale is
    1 / std, and 0 for a feature that is constant on the probe's positions), and which of the
    C classes each may answer (`allowed [B, C]`: a probe of fewer classes than C has the rest
    masked out)."""

    weights: torch.Tensor
    mean: torch.Tensor
    scale: torch.Tensor
    allowed: torch.Tensor

    def logits(self, features: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """`[B, C, N]` logits (classes before positions: a softmax over a few classes runs
        faster across than along memory) of `features` `[N, D]` shared by every probe (read by
        one matrix product for all probes) or `[B, N, D]`.

        The standardisation is folded into the weights: (x - mean) * scale @ W + b
        = x @ (W * scale) + (b - mean * scale @ W). Masked classes get -inf.
        """
        weights = self.weights if weights is None else weights
        scaled = weights[:, :-1] * self.scale[..., None]  # [B, D, C]
        bias = weights[:, -1] - torch.einsum("bd,bdc->bc", self.mean, scaled)
        bias = bias.masked_fill(~self.allowed, float("-inf"))[..., None]
        if features.dim() == 2:
            batch, dim, classes = scaled.shape
            out = scaled.permute(0, 2, 1).reshape(batch * classes, dim) @ features.T
            return out.view(batch, classes, -1) + bias
        return torch.bmm(scaled.transpose(1, 2), features.transpose(1, 2)) + bias

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """`[B, N]` class index each probe answers."""
        return self.logits(features).argmax(1)


def masked_moments(features: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Of features `[N, D]` or `[B, N, D]` over the positions `valid [B, N]` of each probe: the
    mean and the scale `[B, D]` (1 / standard deviation, as `standardize` computes it on those
    positions alone) and the correlation matrix `[B, D, D]` (the covariance of the standardised
    features).

    A feature whose spread on a probe's positions is at the level of the rounding of its mean
    (constant there: a zero column, a saturated unit) gets scale 0 and drops out of that probe.
    Dividing by such a spread would turn the last bits of every product into the largest
    feature of the fit, a different one with every BLAS code path.
    """
    weight = valid.to(features.dtype)
    count = weight.sum(1, keepdim=True).clamp_min(1.0)  # [B, 1]
    if features.dim() == 2:
        mean = weight @ features / count
        # two passes (centre, then multiply): no cancellation on near-constant features
        scatter = torch.stack([((features - m).T * w) @ (features - m) for m, w in zip(mean, weight)])
    else:
        mean = torch.einsum("bn,bnd->bd", weight, features) / count
        centred = features - mean[:, None]
        scatter = torch.bmm(centred.transpose(1, 2) * weight[:, None], centred)  # sums of centred products
    std = (torch.diagonal(scatter, dim1=1, dim2=2) / (count - 1).clamp_min(1.0)).clamp_min(0).sqrt()
    constant = std <= CONSTANT_SPREAD * torch.finfo(features.dtype).eps * mean.abs() + 1e-30
    scale = torch.where(constant, 0.0, 1.0 / std.clamp_min(1e-30))
    return mean, scale, scatter / count[..., None] * scale[:, :, None] * scale[:, None]


# A feature varies on a probe's positions only if its standard deviation exceeds this many
# units of rounding of its mean (float32: 1.2e-5 of it).
CONSTANT_SPREAD = 100


def fit_probes(
    features: torch.Tensor, labels: torch.Tensor, num_classes: torch.Tensor, settings: FitSettings
) -> Probes:
    """B multinomial logistic probes fitted at once, each minimising what `fit_linear_probe`
    minimises on its own positions: mean cross-entropy + l2/2 |W|^2 on standardised features
    (a feature constant on its positions left out, `masked_moments`).

    `features` `[N, D]` (shared) or `[B, N, D]`; `labels [B, N]` class indices, -1 where a
    position is not one of the probe's; `num_classes [B]`. The probes are independent: the
    batched L-BFGS (`batched_lbfgs`) keeps a history and a step size per probe.
    """
    valid = labels >= 0
    mean, scale, correlation = masked_moments(features, valid)
    classes = int(num_classes.max())
    allowed = torch.arange(classes, device=labels.device)[None] < num_classes[:, None]
    probes = Probes(
        features.new_zeros(labels.shape[0], features.shape[-1] + 1, classes), mean, scale, allowed
    )
    weight = (valid.to(features.dtype) / valid.sum(1, keepdim=True).clamp_min(1))[:, None]  # [B, 1, N]
    index = labels.clamp_min(0)[:, None]
    # L-BFGS runs on whitened coordinates: W = P U (`whitening`), the same minimum, far better
    # conditioned (a residual stream's features are strongly correlated).
    precondition = whitening(correlation, settings.l2)  # [B, D, D]

    def objective(rows: torch.Tensor):
        """The loss and gradient in whitened coordinates of the probes `rows` (indices into
        the B), their tensors selected once for every step they run together."""
        every = rows.numel() == labels.shape[0]
        pick = (lambda t: t) if every else (lambda t: t[rows])
        x = features if features.dim() == 2 else pick(features)
        m, s, a, w, at, p = (pick(t) for t in (mean, scale, allowed, weight, index, precondition))
        shape = (rows.numel(), *probes.weights.shape[1:])

        def loss_and_grad(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            u = flat.view(shape)
            these = Probes(torch.cat([p @ u[:, :-1], u[:, -1:]], 1), m, s, a)
            loss, grad = probe_loss_and_grad(these, x, w, at, settings.l2)
            return loss, torch.cat([p.transpose(1, 2) @ grad[:, :-1], grad[:, -1:]], 1).flatten(1)

        return loss_and_grad

    flat = batched_lbfgs(
        objective,
        probes.weights.flatten(1),
        settings.max_iter,
        settings.tolerance,
        grad_tolerance=settings.grad_tolerance,
    )
    u = flat.view_as(probes.weights)
    probes.weights = torch.cat([precondition @ u[:, :-1], u[:, -1:]], 1)
    return probes


def probe_loss_and_grad(
    probes: Probes, x: torch.Tensor, weight: torch.Tensor, index: torch.Tensor, l2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(loss [b], grad [b, D + 1, C])` of b probes: the weighted cross-entropy of their labels
    `index [b, 1, N]` (positions weighted by `weight [b, 1, N]`, 0 off a probe's positions) on
    features `x` (`[N, D]` shared or `[b, N, D]`) + l2/2 |W|^2, the gradient in the weights."""
    log_probs = probes.logits(x).log_softmax(1)  # [b, C, N]
    loss = -(weight * log_probs.gather(1, index)).sum((1, 2))
    loss = loss + 0.5 * l2 * probes.weights[:, :-1].square().sum((1, 2))
    residual = log_probs.exp_().mul_(weight)  # dL/dlogits: weight * (softmax - one-hot)
    residual.scatter_add_(1, index, -weight)
    if x.dim() == 2:
        batch, classes, positions = residual.shape
        by_class = (residual.view(batch * classes, positions) @ x).view(batch, classes, -1)
    else:
        by_class = torch.bmm(residual, x)  # [b, C, D]
    summed = residual.sum(2)  # [b, C]
    grad = torch.empty_like(probes.weights)
    grad[:, :-1] = (by_class.transpose(1, 2) - probes.mean[..., None] * summed[:, None]) * probes.scale[
        ..., None
    ]
    grad[:, :-1] += l2 * probes.weights[:, :-1]
    grad[:, -1] = summed
    return loss, grad


# An eigendirection of a correlation matrix whose eigenvalue is below this fraction of the
# largest is a null direction: what is left there is the rounding of the matrix, not data.
NULL_EIGENVALUE = 1e-5


def whitening(correlation: torch.Tensor, l2: float) -> torch.Tensor:
    """`[B, D, D]`: the fit's change of coordinates W = P U, P = (correlation + l2)^(-1/2)
    on the directions the features span and 0 on their null directions (`NULL_EIGENVALUE`).

    Along a null direction the features do not vary, so the minimum puts no weight there (the
    L2 penalty is all it would add): dropping those directions keeps the minimum and leaves the
    fit no direction in which only rounding moves the loss. On the rest, the Hessian of the
    loss is about the correlation times the softmax's curvature plus l2: P makes it well
    conditioned. The eigendecomposition runs in float64."""
    values, vectors = torch.linalg.eigh(correlation.double())
    kept = values > NULL_EIGENVALUE * values[:, -1:].clamp_min(0)
    gains = torch.where(kept, (values.clamp_min(0) + l2).clamp_min(1e-300).rsqrt(), 0.0)
    return ((vectors * gains[:, None]) @ vectors.transpose(1, 2)).to(correlation.dtype)


def batched_lbfgs(
    objective,
    start: torch.Tensor,
    max_iter: int,
    tolerance: float,
    history: int = 20,
    grad_tolerance: float = 1e-3,
) -> torch.Tensor:
    """Minimise B independent smooth functions at once. `objective(rows [b])` (indices into
    the B) returns `loss_and_grad(x [b, P]) -> (loss [b], grad [b, P])` of those functions; it
    is called again only when rows stop. L-BFGS per row (its own history, two-loop recursion
    and backtracking Armijo step, the first step scaled as torch's L-BFGS does).

    A row stops, and leaves the batch (the rows still running are all that is computed), when:
    - a step that decreased its loss enough changed it by less than `tolerance` relative to
      it, with its largest gradient entry below `grad_tolerance` times its first one;
    - or that gradient has fallen below `tolerance` times its first one (or to 0);
    - or no step along steepest descent decreases its loss: the arithmetic's floor.
    A line search that fails on an L-BFGS direction does not stop a row: the row stays where it
    was, forgets its history and tries steepest descent."""
    out = start.clone()
    rows = torch.arange(start.shape[0], device=start.device)
    x = start.clone()
    loss_and_grad = objective(rows)
    loss, grad = loss_and_grad(x)
    first_grad = grad.abs().amax(1)
    # the pairs (step, change of gradient) of the last `history` steps, in a ring: iteration i
    # stores its pair in slot i % history; rho = 1 / curvature, 0 for a pair not kept
    steps, changes = x.new_zeros(history, *x.shape), x.new_zeros(history, *x.shape)
    rho = x.new_zeros(history, x.shape[0])
    scale = x.new_ones(x.shape[0])  # the initial inverse-Hessian scale s.y / y.y of the newest pair
    fresh = torch.ones_like(scale, dtype=torch.bool)  # no history: steepest descent, a short first step
    running = first_grad > 0
    for iteration in range(max_iter):
        if not bool(running.all()):  # the rows that stopped leave the batch
            out[rows[~running]] = x[~running]
            x, loss, grad, scale, rows, fresh, first_grad = (
                t[running] for t in (x, loss, grad, scale, rows, fresh, first_grad)
            )
            steps, changes, rho = steps[:, running], changes[:, running], rho[:, running]
            if rows.numel() == 0:
                break
            loss_and_grad = objective(rows)
        direction = lbfgs_direction(grad, steps, changes, rho, scale, iteration)
        slope = (grad * direction).sum(1)
        uphill = slope >= 0  # a lost direction: start again from steepest descent
        direction[uphill], slope[uphill] = -grad[uphill], -(grad[uphill] ** 2).sum(1)
        fresh = fresh | uphill
        step_size = torch.where(fresh, (1.0 / grad.abs().sum(1)).clamp(max=1.0), 1.0)
        new_x, new_loss, new_grad, decreased = backtrack(loss_and_grad, x, loss, direction, slope, step_size)
        step, change = new_x - x, new_grad - grad
        curvature = (step * change).sum(1)
        keep = decreased & (curvature > 1e-10)
        slot = iteration % history
        steps[slot] = torch.where(keep[:, None], step, 0.0)
        changes[slot] = torch.where(keep[:, None], change, 0.0)
        rho[slot] = torch.where(keep, 1.0 / curvature.clamp_min(1e-10), 0.0)
        scale = torch.where(keep, curvature / (change * change).sum(1).clamp_min(1e-30), scale)
        # a failed line search: stay, forget the history, try steepest descent; if that was
        # steepest descent already, nothing decreases the loss any more
        stalled = ~decreased & fresh
        rho[:, ~decreased] = 0.0
        scale = torch.where(decreased, scale, 1.0)
        settled = decreased & ((loss - new_loss).abs() <= tolerance * new_loss.abs().clamp_min(1.0))
        x = torch.where(decreased[:, None], new_x, x)
        loss = torch.where(decreased, new_loss, loss)
        grad = torch.where(decreased[:, None], new_grad, grad)
        fresh = ~decreased
        largest = grad.abs().amax(1)
        flat = largest <= grad_tolerance * first_grad
        running = ~(settled & flat) & ~stalled & (largest > tolerance * first_grad)
    out[rows] = x
    return out


def lbfgs_direction(grad, steps, changes, rho, scale, iteration: int) -> torch.Tensor:
    """`[b, P]`: the L-BFGS two-loop recursion's direction -H grad from the ring of the last
    pairs (`steps, changes [history, b, P]`, `rho [history, b]`, 0 for an empty slot; slot
    i % history holds iteration i's pair) and the initial inverse-Hessian scale `[b]`."""
    history = steps.shape[0]
    newest_first = [(iteration - 1 - j) % history for j in range(min(iteration, history))]
    direction = -grad
    alphas = []
    for k in newest_first:
        alpha = rho[k] * (steps[k] * direction).sum(1)
        direction -= alpha[:, None] * changes[k]
        alphas.append(alpha)
    direction *= scale[:, None]
    for k, alpha in zip(reversed(newest_first), reversed(alphas)):
        beta = rho[k] * (changes[k] * direction).sum(1)
        direction += (alpha - beta)[:, None] * steps[k]
    return direction


def backtrack(loss_and_grad, x, loss, direction, slope, step_size, halvings: int = 30):
    """Backtracking Armijo line search per row from `step_size [b]` along `direction [b, P]`
    (`slope` = grad . direction < 0): `(new_x, new_loss, new_grad, decreased [b])`, where a
    row whose step never decreased its loss enough after `halvings` halvings has
    `decreased` False (its new values are then not to be used)."""
    new_x = x + step_size[:, None] * direction
    new_loss, new_grad = loss_and_grad(new_x)
    for _ in range(halvings):
        short = ~(new_loss <= loss + 1e-4 * step_size * slope)
        if not short.any():
            break
        step_size = torch.where(short, step_size / 2, step_size)
        new_x = torch.where(short[:, None], x + step_size[:, None] * direction, new_x)
        trial_loss, trial_grad = loss_and_grad(new_x)
        new_loss = torch.where(short, trial_loss, new_loss)
        new_grad = torch.where(short[:, None], trial_grad, new_grad)
    return new_x, new_loss, new_grad, new_loss <= loss + 1e-4 * step_size * slope


def probe_hits(
    train_x: torch.Tensor,
    train_y: np.ndarray,
    test_x: torch.Tensor,
    test_y: np.ndarray,
    settings: FitSettings,
) -> np.ndarray:
    """`[N_test]` bool: which test positions a probe fitted on the train positions gets right.

    Labels are any integers; a test label never seen in training counts as wrong.
    """
    classes, train_classes = np.unique(train_y, return_inverse=True)
    if classes.size == 1:
        return test_y == classes[0]
    device = torch.device(settings.device)
    x_train, x_test = standardize(train_x.to(device).float(), test_x.to(device).float())
    target = torch.as_tensor(train_classes, device=device)
    probe = fit_linear_probe(x_train, target, classes.size, settings)
    predicted = classes[probe(x_test).argmax(-1).cpu().numpy()]
    return predicted == test_y


def token_majority_hits(
    train_tokens: np.ndarray, train_y: np.ndarray, test_tokens: np.ndarray, test_y: np.ndarray
) -> np.ndarray:
    """`[N_test]` bool: the most frequent train label of each test position's token (the
    overall majority for a token never seen in training): what the token alone tells."""
    classes, labels = np.unique(train_y, return_inverse=True)
    tokens, token_index = np.unique(train_tokens, return_inverse=True)
    counts = np.zeros((tokens.size, classes.size), dtype=np.int64)
    np.add.at(counts, (token_index, labels), 1)
    overall = classes[np.argmax(counts.sum(0))]
    answer = np.full(test_y.shape, overall)
    seen = np.isin(test_tokens, tokens)
    answer[seen] = classes[np.argmax(counts[np.searchsorted(tokens, test_tokens[seen])], axis=1)]
    return answer == test_y


def majority_hits(train_y: np.ndarray, test_y: np.ndarray) -> np.ndarray:
    """`[N_test]` bool: the chance baseline, always answering the most frequent train label."""
    values, counts = np.unique(train_y, return_counts=True)
    return test_y == values[np.argmax(counts)]


def per_row_counts(hits: np.ndarray, rows: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Correct answers and scored positions per row, `[num_rows]` each."""
    correct = np.bincount(rows, weights=hits.astype(np.float64), minlength=num_rows)
    total = np.bincount(rows, minlength=num_rows).astype(np.float64)
    return correct, total


@functools.lru_cache(maxsize=8)
def resample_counts(num_rows: int, num_resamples: int, seed: int) -> np.ndarray:
    """`[num_resamples, num_rows]` (read-only): how often each row is drawn in each bootstrap
    resample of `num_rows` rows with replacement (`seed`'s draws). Every bootstrap of a run
    uses the same resamples, so they are counted once; a sum over a resample is a product."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, num_rows, size=(num_resamples, num_rows))
    flat = (np.arange(num_resamples)[:, None] * num_rows + index).ravel()
    counts = np.bincount(flat, minlength=num_resamples * num_rows).reshape(num_resamples, num_rows)
    counts = counts.astype(np.float64)
    counts.flags.writeable = False
    return counts


def bootstrap_accuracies(correct: np.ndarray, total: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    """`[num_resamples, M]`: accuracies of M scores `correct, total [R, M]` on row resamples
    (the same resampled rows for every score, so differences of scores are paired)."""
    counts = resample_counts(correct.shape[0], num_resamples, seed)
    return (counts @ correct) / np.maximum(counts @ total, 1.0)


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)
