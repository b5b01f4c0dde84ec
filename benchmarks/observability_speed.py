"""The exact observability coefficient of Lemma 1 at K = 8192: the emission maps found once for
all token sets, against once per chunk of token sets (as before 2026-11-28).

    python benchmarks/observability_speed.py [--preset diversity-8192] [--chunks 40] [--other-load TEXT]

`observability_exact` solves C(V, S - 2) small systems per HMM (8,008 at S = 12, V = 16) in chunks
sized to a fixed number of floats, so with 8,192 HMMs a chunk holds 6 token sets and there are
1,335 chunks. Each chunk used to compute the SVD of all K emission maps again. Both sides run
here, on the preset's own HMMs, one thread: the first `--chunks` chunks each way (the same
candidates, checked equal), and the new way over every chunk; the old whole is extrapolated
from its chunks (said so in the JSON). Writes results/observability_speed.json.
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
from common import write_result

from hmm_datasets import get_preset, sample_hmm_params
from hmm_datasets.observability import (
    _CHUNK_FLOATS,
    candidate_directions,
    exact_subsets,
    observability_exact,
    ratio,
    sum_zero_maps,
)


def chunk_minima(emissions: torch.Tensor, tokens: torch.Tensor, per_chunk: int, chunks: int, once: bool):
    """The smallest ratio per HMM over the first `chunks` chunks, the maps found `once` or per chunk."""
    in_token_space = emissions.shape[2] - emissions.shape[1] + 2 < emissions.shape[1] - 1
    maps = sum_zero_maps(emissions) if once else None
    smallest = torch.full((emissions.shape[0],), torch.inf, dtype=torch.float64)
    for start in range(0, chunks * per_chunk, per_chunk):
        these = maps if once else sum_zero_maps(emissions)
        x, emitted = candidate_directions(these, tokens[start : start + per_chunk], in_token_space)
        smallest = torch.minimum(smallest, ratio(emitted, x).nan_to_num(torch.inf).amin(1))
    return smallest


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="diversity-8192")
    parser.add_argument("--chunks", type=int, default=40, help="chunks timed both ways")
    parser.add_argument("--other-load", default="", help="what else ran on the machine, for the record")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = get_preset(args.preset)
    emissions = torch.as_tensor(sample_hmm_params(config).emissions, dtype=torch.float64)
    count, states, vocab = emissions.shape
    subsets = exact_subsets(states, vocab)
    tokens = torch.tensor(list(itertools.combinations(range(vocab), states - 2)))
    size = min(states - 1, vocab - states + 2) + 1
    per_chunk = max(1, _CHUNK_FLOATS // (count * size * max(size, states)))
    num_chunks = -(-subsets // per_chunk)
    timings = {}
    for name, once in (("per_chunk", False), ("once", True)):
        started = time.perf_counter()
        minima = chunk_minima(emissions, tokens, per_chunk, args.chunks, once)
        timings[name] = (time.perf_counter() - started, minima)
    assert torch.equal(timings["per_chunk"][1], timings["once"][1]), "the two ways disagree"
    started = time.perf_counter()
    observability_exact(emissions.numpy())
    whole = time.perf_counter() - started
    old_per_chunk = timings["per_chunk"][0] / args.chunks
    result = {
        "preset": args.preset,
        "hmms": count,
        "states": states,
        "vocab": vocab,
        "token_sets_per_hmm": subsets,
        "chunks": num_chunks,
        "token_sets_per_chunk": per_chunk,
        "chunks_timed_both_ways": args.chunks,
        "seconds_per_chunk": {"per_chunk_maps": old_per_chunk, "maps_once": timings["once"][0] / args.chunks},
        "seconds_whole": {
            "maps_once_measured": whole,
            "per_chunk_maps_extrapolated": old_per_chunk * num_chunks,
        },
        "speedup": old_per_chunk * num_chunks / whole,
        "threads": 1,
        "other_load": args.other_load,
    }
    path = write_result("observability_speed", result)
    print(
        f"{count} HMMs, {num_chunks} chunks of {per_chunk} token sets: maps once {whole:.1f} s in all; "
        f"per chunk {old_per_chunk * num_chunks:.0f} s (from {args.chunks} chunks), "
        f"{result['speedup']:.0f}x; wrote {path}"
    )


if __name__ == "__main__":
    main()
