"""How much the current token tells about the hidden state, exactly, for a corpus's HMMs.

On `small`'s sparse prior each state emits few tokens, so the current token nearly names the
state and a probe's layer 0 already holds it: "the hidden state is decoded before the task" has
nothing to read. `HMMMixtureConfig.emission_mixing` m moves a share m of every emission row to
the uniform distribution (`params.mixed_emission_rows`), hiding the state behind the token; this
module measures by how much, on the parameters alone and on rows through the exact filter.

On the parameters, with q_k(s) the state distribution of task k averaged over a row's
observation positions (`position_state_marginals`: every segment restarts from the initial
distribution) and the joint P_k(s, o) = q_k(s) E_k[s, o]:

- H(state | token) = -sum_{s,o} P_k(s, o) log P_k(s | o), per task (nats; `state_given_token_entropy`);
- the token rule's accuracy sum_o max_s P_k(s, o): the best guess of the state from the task and
  the current token alone (`token_rule_accuracy`).

Both are exact. Since q_k does not depend on the emissions, I(state; token) = H(q_k) - H(state |
token) is convex along (1 - m) E + m U and 0 at m = 1, so H(state | token) never falls as m grows.

On rows, through the exact per-task filter f_i(s) = P(state_i = s | task, tokens of the segment
up to i) (`filter_measures`): H(state | history), the filter's argmax accuracy against the
sampled states beside the token rule's on the same positions, and the share of the filter's
variance within a task that the current token explains (a token-only floor's best R²: what any
function of the task and the current token reads of the state posterior beyond the task).
"""

from __future__ import annotations

import numpy as np
import torch

from .bayes import BayesOptimalPredictor
from .config import HMMMixtureConfig
from .hmm_mixture import tables_for_split
from .layout import SampleLayout
from .params import HMMParams, sample_hmm_params
from .predictors import IN_CONTEXT, reference_predictors
from .sampler import SamplingTables, generate_rows, sample_rows
from .scoring import next_token_scores, on_test_tokens

AMBIGUITY_ROWS_STREAM = (
    3_000_017  # the seed stream of the rows the filter measures read, apart from every other
)


def position_state_marginals(params: HMMParams, layout: SampleLayout) -> tuple[np.ndarray, np.ndarray]:
    """`[T, K, S]` float64: each task's state distribution at each offset of a segment (every
    segment restarts from the initial distribution), up to the longest segment, and `[T]` the
    share of a row's observation positions at each offset (demonstrations' and test's)."""
    transitions = params.transitions.astype(np.float64)
    current = params.initial.astype(np.float64)
    longest = max(layout.demo_length, layout.test_length)
    marginals = []
    for _ in range(longest):
        marginals.append(current)
        current = np.einsum("ks,kst->kt", current, transitions)
    offsets = np.arange(longest)
    weights = layout.num_demos * (offsets < layout.demo_length) + (offsets < layout.test_length)
    return np.stack(marginals), weights / weights.sum()


def state_token_joint(emissions: np.ndarray, marginal: np.ndarray) -> np.ndarray:
    """`[..., S, V]` float64: P(state, token) = the state distribution `[..., S]` times the
    emission rows `[..., S, V]`."""
    return marginal[..., None] * emissions.astype(np.float64)


def state_given_token_entropy(joint: np.ndarray) -> np.ndarray:
    """`[...]`: H(state | token) in nats of joints `[..., S, V]`."""
    token = joint.sum(-2, keepdims=True)
    ratio = np.divide(joint, token, out=np.ones_like(joint), where=joint > 0)
    return -(joint * np.log(ratio)).sum((-2, -1))


def state_entropy(marginal: np.ndarray) -> np.ndarray:
    """`[...]`: H(state) in nats of state distributions `[..., S]`."""
    logs = np.log(marginal, out=np.zeros_like(marginal), where=marginal > 0)
    return -(marginal * logs).sum(-1)


def token_rule_accuracy(joint: np.ndarray) -> np.ndarray:
    """`[...]`: the accuracy of guessing the state as argmax_s P(s | token), of joints `[..., S, V]`."""
    return joint.max(-2).sum(-1)


def parameter_measures(params: HMMParams, layout: SampleLayout) -> dict[str, float]:
    """The exact measures of a corpus's HMMs, each averaged over a row's observation positions
    and the tasks (weighted by the task prior): H(state), H(state | token), their difference
    I(state; token) and the token rule's accuracy (`token_rule_accuracy`). One offset at a time:
    `[K, S, V]` floats are held at once."""
    marginals, weights = position_state_marginals(params, layout)  # [T, K, S], [T]
    prior = params.task_prior.astype(np.float64) / params.task_prior.sum()
    totals = dict.fromkeys(("state_entropy", "state_given_token_entropy", "token_rule_accuracy"), 0.0)
    for marginal, weight in zip(marginals, weights):
        joint = state_token_joint(params.emissions, marginal)
        totals["state_entropy"] += weight * float(state_entropy(marginal) @ prior)
        totals["state_given_token_entropy"] += weight * float(state_given_token_entropy(joint) @ prior)
        totals["token_rule_accuracy"] += weight * float(token_rule_accuracy(joint) @ prior)
    information = totals["state_entropy"] - totals["state_given_token_entropy"]
    return {name: float(value) for name, value in {**totals, "token_information": information}.items()}


def filter_measures(
    params: HMMParams, rows: dict[str, np.ndarray], vocab_size: int, fitted: np.ndarray
) -> dict[str, float]:
    """The state as the exact per-task filter reads it on `rows` (columns input_ids, hidden_states,
    task_id), on the observation positions of the rows not `fitted [B]`: H(state | history) in
    nats, the filter's argmax accuracy, the (task, token) rule's (each pair's most frequent state
    on the `fitted` rows), and the share of the filter's variance within a task that the token
    explains out of sample (`token_explained_variance`)."""
    ids = np.asarray(rows["input_ids"])
    tasks = np.asarray(rows["task_id"])
    filters = BayesOptimalPredictor(params, dtype=torch.float64).oracle_state_filters(ids, tasks).numpy()
    observed = ids < vocab_size
    pairs = (tasks[:, None] * vocab_size + ids)[observed]
    truth = np.asarray(rows["hidden_states"])[observed]
    belief = filters[observed]  # [P, S]
    fit = np.broadcast_to(np.asarray(fitted, dtype=bool)[:, None], ids.shape)[observed]
    held = belief[~fit]
    logs = np.log(held, out=np.zeros_like(held), where=held > 0)
    return {
        "state_given_history_entropy": float(-(held * logs).sum(-1).mean()),
        "filter_accuracy": float((held.argmax(-1) == truth[~fit]).mean()),
        "token_rule_accuracy": held_out_majority_accuracy(pairs, truth, fit),
        "token_explained_variance": token_explained_variance(belief, pairs // vocab_size, pairs, fit),
        "num_positions": int((~fit).sum()),
    }


def group_index(groups: np.ndarray, fit: np.ndarray) -> tuple[np.ndarray, int]:
    """Each position's index among the groups the `fit` positions have (`[P]`; -1 for a group
    none of them has), and how many groups they have."""
    known = np.unique(groups[fit])
    found = np.minimum(np.searchsorted(known, groups), known.size - 1)
    return np.where(known[found] == groups, found, -1), known.size


def held_out_majority_accuracy(groups: np.ndarray, labels: np.ndarray, fit: np.ndarray) -> float:
    """The accuracy on the positions not `fit` of predicting each label `[P]` by its group's most
    frequent label on the `fit` positions (the most frequent overall for a group they lack)."""
    at, num_groups = group_index(groups, fit)
    counts = np.zeros((num_groups, labels.max() + 1), dtype=np.int64)
    np.add.at(counts, (at[fit], labels[fit]), 1)
    overall = np.bincount(labels[fit], minlength=labels.max() + 1).argmax()
    guess = np.where(at >= 0, counts.argmax(1)[at.clip(min=0)], overall)
    return float((guess[~fit] == labels[~fit]).mean())


def token_explained_variance(
    belief: np.ndarray, tasks: np.ndarray, pairs: np.ndarray, fit: np.ndarray
) -> float:
    """The share of the variance of the filter `belief [P, S]` left by its task (`tasks [P]`)
    that the (task, token) pair (`pairs [P]`) explains, out of sample: (R²(pair) - R²(task)) /
    (1 - R²(task)) of `held_out_explained_variance`; 0 where the token tells nothing beyond the
    task, 1 where it fixes the filter."""
    by_task = held_out_explained_variance(belief, tasks, fit)
    by_pair = held_out_explained_variance(belief, pairs, fit)
    return (by_pair - by_task) / (1 - by_task) if by_task < 1 else 0.0


def held_out_explained_variance(targets: np.ndarray, groups: np.ndarray, fit: np.ndarray) -> float:
    """The share of the variance of `targets [P, D]` on the positions not `fit` explained by their
    group's mean on the `fit` positions (the overall mean for a group they lack): the held-out
    R² of the best function of the group alone, 1 where the group fixes the target, 0 or below
    where it tells nothing."""
    at, num_groups = group_index(groups, fit)
    sums = np.zeros((num_groups, targets.shape[1]))
    np.add.at(sums, at[fit], targets[fit])
    means = sums / np.bincount(at[fit], minlength=num_groups)[:, None]
    predicted = np.where((at >= 0)[:, None], means[at.clip(min=0)], targets[fit].mean(0))
    held, guess = targets[~fit], predicted[~fit]
    total = ((held - held.mean(0)) ** 2).sum()
    return float(1.0 - ((held - guess) ** 2).sum() / total) if total > 0 else 0.0


# ---- one level of a family: the parameters, the filter, and the predictors on test rows ----------
def level_measures(config: HMMMixtureConfig, probe_tasks: int, rows_per_task: int, num_rows: int) -> dict:
    """Everything the family's table says of one corpus config: `parameter_measures` of its HMMs;
    `filter_measures` on `rows_per_task` fresh rows of each of its first `probe_tasks` tasks (the
    first half of each task's rows fit the token rule, the second half measure); and top-1
    accuracy on test tokens 1..T-1 of the first `num_rows` test rows of the oracle, mixture Bayes
    and the in-context ladder (`predictor_accuracies`; all the test rows where there are fewer)."""
    params = sample_hmm_params(config)
    layout = SampleLayout.from_config(config)
    tasks = np.arange(min(probe_tasks, params.num_tasks))
    row_tasks = np.repeat(np.arange(tasks.size), rows_per_task)
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(AMBIGUITY_ROWS_STREAM,)))
    probed = params.select(tasks)
    rows = sample_rows(SamplingTables.from_params(probed), layout, config.delimiter, row_tasks, rng)
    fitted = np.arange(row_tasks.size) % rows_per_task < rows_per_task // 2
    num_rows = min(num_rows, config.num_rows("test"))
    test = generate_rows(config, tables_for_split(config, "test"), "test", 0, num_rows)
    return {
        "emission_mixing": config.emission_mixing,
        "parameters": parameter_measures(params, layout),
        "filter": filter_measures(probed, rows, config.vocab_size, fitted),
        "predictors": predictor_accuracies(params, test, layout),
        "rows": {"probe_tasks": int(tasks.size), "rows_per_task": rows_per_task, "test": num_rows},
    }


def predictor_accuracies(params: HMMParams, rows: dict[str, np.ndarray], layout: SampleLayout) -> dict:
    """On test tokens 1..T-1 of `rows`: the top-1 accuracy of the oracle, mixture Bayes and every
    rung of the in-context ladder, each rung's KL(Bayes ‖ rung) in nats/token, and the best rung
    (the one nearest Bayes, as the ladder gate picks it)."""
    ids, tasks = torch.as_tensor(np.asarray(rows["input_ids"])), np.asarray(rows["task_id"])
    predictors = reference_predictors(params)
    probs = {name: predictor.next_token_probs(ids, tasks) for name, predictor in predictors.items()}

    def test_mean(values: torch.Tensor) -> float:
        return float(np.nanmean(on_test_tokens(values, layout)[:, 1:].numpy()))

    accuracy = {name: test_mean(next_token_scores(p, ids)["correct"]) for name, p in probs.items()}
    kl = {name: test_mean(next_token_scores(probs[name], ids, probs["bayes"])["kl"]) for name in IN_CONTEXT}
    return {"accuracy": accuracy, "kl_bayes": kl, "best_in_context": min(kl, key=kl.get)}
