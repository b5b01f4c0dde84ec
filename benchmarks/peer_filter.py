"""The exact forward filter against dynamax's (JAX), on the same computations, in one run.

    pip install -e ".[bench]"          # dynamax and JAX: this benchmark only
    python benchmarks/peer_filter.py [--rounds 2] [--repeats 5] [--shapes ...] [--before DIR] [--result NAME]

Shapes (float32, CPU):
- `mixture_small`: the Bayes-optimal predictor of `small` (32 HMMs, 12 states) on 512 test rows;
- `mixture_512`: the same with 512 HMMs;
- `oracle_small`: the predictor told each row's task, on the same 512 rows;
- `oracle_long`: one HMM of `small`, one row of 4,096 tokens drawn from it (no delimiter);
- `mixture_paper`: the `paper` preset's 8,192 HMMs of 128 states on one row's first 128 tokens.

dynamax runs each HMM over each segment (`hmm_filter` under `vmap`, one compiled program per
shape), its per-token likelihoods give the task posterior, and both sides output the next-token
distributions `[B, L, V+1]`; they are checked equal before anything is timed. The compile time
of each JAX program is reported apart. Each round times every side `--repeats` times,
alternating, so a busy neighbour hits both; the medians of the rounds are pooled. `--before DIR`
also times the `hmm_datasets` of another checkout (the code before a change) in this process;
its slow calls sit between dynamax's, and dynamax's short calls then come out slower (on one
row of 4,096 tokens 1.9-2.5x slower on 2 AMD cores), so time the peer without it too.
Writes results/peer_filter.json (or results/NAME.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import torch
from common import write_result

import hmm_datasets
from hmm_datasets.sampler import SamplingTables, generate_rows

SHAPES = ("mixture_small", "mixture_512", "oracle_small", "oracle_long", "mixture_paper")
TOLERANCE = 2e-5  # float32 on both sides


@dataclasses.dataclass
class Shape:
    """One computation: the mixture's HMMs, the rows, and each row's task (the oracle) or None."""

    params: hmm_datasets.HMMParams
    ids: np.ndarray
    tasks: np.ndarray | None


def build_shape(name: str) -> Shape:
    small = hmm_datasets.get_preset("small")
    if name == "mixture_512":
        small = dataclasses.replace(small, num_tasks=512)
    if name == "mixture_paper":
        config = hmm_datasets.get_preset("paper")
        params = hmm_datasets.sample_hmm_params(config)
        rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 1)
        return Shape(params, rows["input_ids"][:, :128].astype(np.int64), None)
    params = hmm_datasets.sample_hmm_params(small)
    if name == "oracle_long":
        row = sample_row(params, 0, 4096, np.random.default_rng(0))
        return Shape(params, row[None], np.zeros(1, dtype=np.int64))
    rows = generate_rows(small, SamplingTables.from_params(params), "test", 0, 512)
    tasks = rows["task_id"].astype(np.int64) if name == "oracle_small" else None
    return Shape(params, rows["input_ids"].astype(np.int64), tasks)


def sample_row(params, task: int, length: int, rng) -> np.ndarray:
    state = rng.choice(params.num_states, p=params.initial[task])
    row = np.empty(length, dtype=np.int64)
    for t in range(length):
        row[t] = rng.choice(params.vocab_size, p=params.emissions[task, state])
        state = rng.choice(params.num_states, p=params.transitions[task, state])
    return row


def ours(module, shape: Shape):
    """The call to time, with `module` the `hmm_datasets` package (this checkout's or another)."""
    predictor = module.BayesOptimalPredictor(shape.params, device="cpu")
    if shape.tasks is None:
        return lambda: predictor.next_token_probs(shape.ids)
    return lambda: predictor.oracle_next_token_probs(shape.ids, shape.tasks)


def segments(row: np.ndarray, delimiter: int) -> list[tuple[int, int]]:
    """(start, length) of the runs of observations between delimiters (every row shares them)."""
    bounds = [-1, *np.flatnonzero(row == delimiter).tolist(), len(row)]
    return [(a + 1, b - a - 1) for a, b in zip(bounds[:-1], bounds[1:]) if b - a - 1 > 0]


def dynamax_program(shape: Shape):
    """A jitted JAX function of the rows giving the same `[B, L, V+1]` as ours."""
    import jax
    import jax.numpy as jnp
    from dynamax.hidden_markov_model.inference import hmm_filter

    params, delimiter = shape.params, shape.params.vocab_size
    as32 = lambda a: jnp.asarray(a / a.sum(-1, keepdims=True), dtype=jnp.float32)  # noqa: E731
    initial, transitions, emissions = as32(params.initial), as32(params.transitions), as32(params.emissions)
    log_prior = jnp.log(as32(params.task_prior))
    runs = segments(shape.ids[0], delimiter)
    vocab = params.vocab_size

    def one_segment(pi, trans, emit, tokens):  # one HMM over one segment [T]
        post = hmm_filter(pi, trans, jnp.log(emit[:, tokens].T))
        likelihood = jnp.einsum("ts,st->t", post.predicted_probs, emit[:, tokens])
        following = jnp.concatenate([post.predicted_probs[1:], (post.filtered_probs[-1] @ trans)[None]])
        return likelihood, following @ emit  # P(token t), P(token t + 1 = v) after token t

    over_rows = jax.vmap(one_segment, in_axes=(None, None, None, 0))

    def per_hmm(pi, trans, emit, ids):  # one HMM over every row: [B, L], [B, L, V]
        start = pi @ emit
        likelihood = jnp.ones(ids.shape, dtype=jnp.float32)
        following = jnp.broadcast_to(start, (*ids.shape, vocab))
        for first, size in runs:
            lik, nxt = over_rows(pi, trans, emit, ids[:, first : first + size])
            likelihood = likelihood.at[:, first : first + size].set(lik)
            following = following.at[:, first : first + size].set(nxt)
        return likelihood, following

    def predictions(ids):
        if shape.tasks is None:  # the mixture: every HMM reads every row
            likelihood, following = jax.vmap(per_hmm, in_axes=(0, 0, 0, None))(
                initial, transitions, emissions, ids
            )
            log_w = log_prior[:, None, None] + jnp.cumsum(jnp.log(likelihood), axis=-1)
            probs = jnp.einsum("kbl,kblv->blv", jax.nn.softmax(log_w, axis=0), following)
        else:  # the oracle: row b read by the HMM of its task
            one_row = lambda pi, trans, emit, row: per_hmm(pi, trans, emit, row[None])[1][0]  # noqa: E731
            tasks = jnp.asarray(shape.tasks)
            probs = jax.vmap(one_row)(initial[tasks], transitions[tasks], emissions[tasks], ids)
        probs = jnp.concatenate([probs, jnp.zeros((*ids.shape, 1), dtype=probs.dtype)], axis=-1)
        before_delimiter = jnp.concatenate([ids[:, 1:] == delimiter, jnp.zeros((ids.shape[0], 1), bool)], 1)
        point_mass = jnp.zeros(vocab + 1, dtype=probs.dtype).at[vocab].set(1.0)
        return jnp.where(before_delimiter[..., None], point_mass, probs)

    program = jax.jit(predictions)
    ids = jnp.asarray(shape.ids, dtype=jnp.int32)
    return lambda: program(ids).block_until_ready()


def load_checkout(path: str):
    """The `hmm_datasets` package of another checkout, imported beside this one."""
    init = Path(path) / "hmm_datasets" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "hmm_datasets_before", init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["hmm_datasets_before"] = module
    spec.loader.exec_module(module)
    return module


def seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def bench(name: str, rounds: int, repeats: int, before) -> dict:
    shape = build_shape(name)
    sides = {"ours": ours(hmm_datasets, shape)}
    compile_seconds = seconds(dynamax_call := dynamax_program(shape))
    sides["dynamax"] = dynamax_call
    if before is not None:
        sides["before"] = ours(before, shape)
    reference = np.asarray(sides["ours"]())
    difference = {side: float(np.abs(np.asarray(call()) - reference).max()) for side, call in sides.items()}
    if max(difference.values()) > TOLERANCE:
        raise SystemExit(f"{name}: the sides disagree ({difference}); nothing was timed.")
    medians = {side: [] for side in sides}
    for _ in range(rounds):
        times = {side: [] for side in sides}
        for _ in range(repeats):
            for side, call in sides.items():
                times[side].append(seconds(call))
        for side in sides:
            medians[side].append(float(np.median(times[side])))
    tokens = int(shape.ids.size)
    rate = {side: tokens / float(np.median(values)) for side, values in medians.items()}
    result = {
        "rows": int(shape.ids.shape[0]),
        "tokens_per_row": int(shape.ids.shape[1]),
        "hmms": int(shape.params.num_tasks),
        "states": int(shape.params.num_states),
        "tokens_per_s": rate,
        "tokens_per_s_by_round": {side: [tokens / m for m in values] for side, values in medians.items()},
        "dynamax_compile_seconds": compile_seconds - min(medians["dynamax"]),
        "max_abs_difference_from_ours": difference,
        "ours_over_dynamax": rate["ours"] / rate["dynamax"],
    }
    if before is not None:
        result["ours_over_before"] = rate["ours"] / rate["before"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--before", help="another checkout whose hmm_datasets to time too (the code before a change)"
    )
    parser.add_argument(
        "--result", default="peer_filter", help="name of the results file (results/NAME.json)"
    )
    args = parser.parse_args()
    try:
        import dynamax  # noqa: F401
    except ImportError:
        raise SystemExit(
            'error: dynamax is not installed: pip install -e ".[bench]" (this benchmark only).'
        ) from None
    torch.set_num_threads(2)
    before = load_checkout(args.before) if args.before else None
    results = {}
    for name in args.shapes:
        results[name] = bench(name, args.rounds, args.repeats, before)
        r = results[name]
        line = f"{name:15} ours {r['tokens_per_s']['ours']:>12,.0f} tok/s  dynamax {r['tokens_per_s']['dynamax']:>12,.0f}"
        line += f"  ratio {r['ours_over_dynamax']:5.2f}x"
        if before is not None:
            line += f"  before {r['tokens_per_s']['before']:>12,.0f} ({r['ours_over_before']:.2f}x)"
        print(line, flush=True)
    path = write_result(args.result, {"rounds": args.rounds, "repeats": args.repeats, "shapes": results})
    print(f"results in {path}")


if __name__ == "__main__":
    main()
