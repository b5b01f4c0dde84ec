"""The forward recursion as a compiled loop (numba): the CPU schedule of `forward.filtered_features`.

Each chain (one HMM reading one row) runs token by token in machine code, and the chains run
in parallel; a step costs nanoseconds, where a framework call costs microseconds. The loop is
the recursion of `forward`'s docstring written out:

    z_t = z_{t-1} @ F[x_t] / sum(...)       fused tables: F [M, V, d, d]
    z_t = ((z_{t-1} @ right) * E[:, x_t]) @ left / sum(...)     through the states
    z_t = start_features[x_t]                where token t opens a segment

with the same floors as the framework schedules (a total of 0 divides as the smallest normal
number; a probability below sqrt(smallest normal) is flushed to 0).

The kernel is compiled on its first call and cached beside this file (`cache=True`), so a
later process loads it in a fraction of a second.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def filter_chains(
    observed,
    resets,
    previous,
    first_features,
    first_likelihood,
    step,
    right,
    emitted,
    left,
    start_features,
    start_probs,
    tiny,
    floor,
    out,
    likelihood,
):
    """Write `out [M, R, T, d]` and `likelihood [M, R, T]` for every chain.

    observed (int), resets (bool): [1 or M, R, T] (1: every HMM reads the same rows);
    previous [M, R, d]: the features before the first token; first_features [M, R, d] and
    first_likelihood [M, R]: what the first token gives, or empty arrays (none given);
    step [M, V, d, d]: the fused tables, or an empty array (through the states: right
    [M, d, S], emitted [M, V, S] (emissions by token), left [M, S, d] or an empty array for
    the identity); start_features [M, V, d], start_probs [M, V]; tiny: the smallest normal
    number; floor: sqrt(tiny).
    """
    num_hmms, rows, length, d = out.shape
    num_states = emitted.shape[2]
    fused = step.shape[0] > 0
    low_rank = left.shape[0] > 0
    given_first = first_features.shape[0] > 0
    for chain in numba.prange(num_hmms * rows):
        m, r = chain // rows, chain % rows
        mo = m if observed.shape[0] > 1 else 0
        mr = m if resets.shape[0] > 1 else 0
        z = previous[m, r].copy()
        new = np.empty(d, dtype=out.dtype)
        states = np.empty(num_states, dtype=out.dtype)
        for t in range(length):
            x = observed[mo, r, t]
            if t == 0 and given_first:
                new[:] = first_features[m, r]
                total = first_likelihood[m, r]
            elif resets[mr, r, t]:
                new[:] = start_features[m, x]
                total = start_probs[m, x]
            else:
                if fused:
                    new[:] = 0.0
                    for i in range(d):
                        if z[i] != 0.0:
                            for j in range(d):
                                new[j] += z[i] * step[m, x, i, j]
                else:
                    states[:] = 0.0
                    for i in range(d):
                        if z[i] != 0.0:
                            for k in range(num_states):
                                states[k] += z[i] * right[m, i, k]
                    for k in range(num_states):
                        states[k] *= emitted[m, x, k]
                    if low_rank:
                        new[:] = 0.0
                        for k in range(num_states):
                            if states[k] != 0.0:
                                for j in range(d):
                                    new[j] += states[k] * left[m, k, j]
                    else:
                        new[:] = states
                total = new.sum()
                for j in range(d):
                    value = new[j] / max(total, tiny)
                    new[j] = value if value > floor else 0.0
            out[m, r, t] = new
            likelihood[m, r, t] = total
            z[:] = new
