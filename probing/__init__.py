"""Layerwise analyses of HMMRoFormer checkpoints: activation and attention-logit capture,
linear probes with token baselines and bootstrap intervals, the shuffle test, attention maps.

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
    pre_rotary_queries_and_keys,
)
from .labels import position_labels, previous_token_labels, sample_positions, sample_probe_rows, split_rows
from .probes import ProbeSettings, fit_linear_probe, probe_hits
from .shuffle import (
    derangements,
    lower_layers,
    relative_logit_change,
    shuffle_demos,
    shuffle_patterns,
    shuffle_records,
    shuffle_test,
    upper_layers,
)

__all__ = [
    "ProbeSettings",
    "attention_weights",
    "capture_attention_logits",
    "capture_hidden_states",
    "check_hmm_roformer",
    "derangements",
    "fit_linear_probe",
    "load_hmm_roformer",
    "lower_layers",
    "position_labels",
    "pre_rotary_queries_and_keys",
    "previous_token_labels",
    "probe_hits",
    "relative_logit_change",
    "sample_positions",
    "sample_probe_rows",
    "shuffle_demos",
    "shuffle_patterns",
    "shuffle_records",
    "shuffle_test",
    "split_rows",
    "upper_layers",
]
