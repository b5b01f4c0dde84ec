"""The straightforward implementations our vectorised code is measured against.

Both follow what public code bases for HMM corpora do: one sample at a time, one time
step at a time, `numpy.random.choice` for every draw; and a forward algorithm run per
sequence and per task with NumPy vector-matrix products.
"""

from __future__ import annotations

import numpy as np

from hmm_datasets import HMMParams, SampleLayout


def choice_sampler_row(
    params: HMMParams, layout: SampleLayout, rng: np.random.RandomState
) -> tuple[list, list, int]:
    """One row, drawn token by token with `rng.choice`: (input_ids, hidden_states, task)."""
    num_tasks, num_states, vocab = params.emissions.shape
    prior = params.task_prior.astype(np.float64)
    task = rng.choice(num_tasks, p=prior / prior.sum())
    initial = params.initial[task].astype(np.float64)
    transitions = params.transitions[task].astype(np.float64)
    emissions = params.emissions[task].astype(np.float64)
    tokens, states = [], []
    lengths = [layout.demo_length] * layout.num_demos + [layout.test_length]
    for segment, length in enumerate(lengths):
        state = rng.choice(num_states, p=initial / initial.sum())
        for _ in range(length):
            row = emissions[state]
            tokens.append(rng.choice(vocab, p=row / row.sum()))
            states.append(state)
            row = transitions[state]
            state = rng.choice(num_states, p=row / row.sum())
        if segment < layout.num_demos:
            tokens.append(vocab)
            states.append(-1)
    return tokens, states, task


def per_task_forward_probs(params: HMMParams, input_ids: np.ndarray) -> np.ndarray:
    """Bayes-optimal next-token probabilities `[L, V+1]` of one sequence, one task at a time."""
    num_tasks, num_states, vocab = params.emissions.shape
    length = len(input_ids)
    token_probs = np.zeros((num_tasks, length, vocab))  # P_k(token i+1 | tokens 0..i)
    log_likelihood = np.zeros((num_tasks, length))  # log P_k(tokens 0..i)
    for task in range(num_tasks):
        initial = params.initial[task].astype(np.float64)
        transitions = params.transitions[task].astype(np.float64)
        emissions = params.emissions[task].astype(np.float64)
        pred, total = initial, 0.0
        for i, token in enumerate(input_ids):
            if token == vocab:
                pred = initial
            else:
                joint = pred * emissions[:, token]
                likelihood = joint.sum()
                total += np.log(likelihood)
                pred = (joint / likelihood) @ transitions
            token_probs[task, i] = pred @ emissions
            log_likelihood[task, i] = total
    log_posterior = np.log(params.task_prior.astype(np.float64))[:, None] + log_likelihood
    posterior = np.exp(log_posterior - log_posterior.max(0))
    posterior /= posterior.sum(0)
    out = np.zeros((length, vocab + 1))
    out[:, :vocab] = np.einsum("kl,klv->lv", posterior, token_probs)
    next_is_delim = np.append(input_ids[1:] == vocab, False)
    out[next_is_delim] = 0
    out[next_is_delim, vocab] = 1
    return out


def per_row_in_context_probs(row: np.ndarray, vocab: int, order: int, kind: str) -> np.ndarray:
    """The in-context n-gram (`kind="ngram"`) or PPM-C blending (`"ppm"`) of one row, position by
    position, with a dict of context counts updated as the row is read: `[L, V + 1]`."""
    counts: dict[tuple, np.ndarray] = {}
    seen = np.zeros(vocab)
    out = np.zeros((len(row), vocab + 1))
    for i, token in enumerate(row):
        if i > 0 and token < vocab:  # token i follows the contexts ending at i - 1
            for length in range(1, order):
                if i - length >= 0:
                    context = tuple(row[i - length : i])
                    counts.setdefault(context, np.zeros(vocab))[token] += 1
        if token < vocab:
            seen[token] += 1
        probs = (seen + 0.5) / (seen + 0.5).sum()
        unigram = probs
        for length in range(1, order):
            if i - length + 1 < 0:
                break
            found = counts.get(tuple(row[i - length + 1 : i + 1]))
            if found is None or found.sum() == 0:
                continue
            if kind == "ngram":
                probs = (found + unigram) / (found.sum() + 1)
            else:
                escape = (found > 0).sum()
                probs = (found + escape * probs) / (found.sum() + escape)
        out[i, :vocab] = probs
        if i + 1 < len(row) and row[i + 1] == vocab:
            out[i] = 0.0
            out[i, vocab] = 1.0
    return out
