"""Layerwise analyses of HMMRoFormer checkpoints: activation and attention-logit capture,
linear probes with control tasks and bootstrap intervals, the shuffle test, attention maps.

    from probing.run import ProbeConfig, run_probing   # the whole analysis (scripts/probe.py)
    from probing import capture_hidden_states           # the pieces, on any HMMRoFormer

The modules imported here need only torch, numpy and the corpus package, so they also run
on a checkpoint loaded with `trust_remote_code=True` without the model plugin.
"""

from .capture import (
    attention_weights,
    capture_attention_logits,
    capture_hidden_states,
    check_hmm_roformer,
    load_hmm_roformer,
)
from .labels import position_labels, previous_token_labels, sample_positions, sample_probe_rows, split_rows
from .probes import ProbeSettings, control_labels, fit_linear_probe, probe_hits
from .shuffle import derangements, relative_logit_change, shuffle_demos, shuffle_test

__all__ = [
    "ProbeSettings",
    "attention_weights",
    "capture_attention_logits",
    "capture_hidden_states",
    "check_hmm_roformer",
    "control_labels",
    "derangements",
    "fit_linear_probe",
    "load_hmm_roformer",
    "position_labels",
    "previous_token_labels",
    "probe_hits",
    "relative_logit_change",
    "sample_positions",
    "sample_probe_rows",
    "shuffle_demos",
    "shuffle_test",
    "split_rows",
]
