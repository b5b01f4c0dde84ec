"""Layerwise analyses of causal LM checkpoints (HMMRoFormer, Llama, Qwen2, GPT-2, ...): activation and attention-logit capture,
linear probes with token baselines and bootstrap intervals, the shuffle test, attention maps.

    from probing.run import ProbeConfig, run_probing   # the whole analysis (scripts/probe.py)
    from probing import capture_hidden_states           # the pieces, on any causal LM

The names below need only torch, numpy and the corpus package, so they also run on a
checkpoint loaded with `trust_remote_code=True` without the model plugin. They are imported on
first use: `import probing.config` (the settings of a run) stays light, so `scripts/probe.py
--help` imports no torch.
"""

import importlib

_EXPORTS = {  # name -> the module of this package that defines it
    "FitSettings": "probes",
    "attention_weights": "capture",
    "capture_attention_logits": "capture",
    "capture_hidden_states": "capture",
    "check_hmm_roformer": "capture",
    "derangements": "shuffle",
    "fit_linear_probe": "probes",
    "load_hmm_roformer": "capture",
    "lower_layers": "shuffle",
    "position_labels": "labels",
    "pre_rotary_queries_and_keys": "capture",
    "previous_token_labels": "labels",
    "recording_attention": "recording",
    "probe_hits": "probes",
    "relative_logit_change": "shuffle",
    "rotary_knocked_out": "knockout",
    "rotary_knockout": "knockout",
    "sample_positions": "labels",
    "sample_probe_rows": "labels",
    "scored_test_positions": "knockout",
    "shuffle_demos": "shuffle",
    "shuffle_patterns": "shuffle",
    "shuffle_records": "shuffle",
    "shuffle_test": "shuffle",
    "split_rows": "labels",
    "upper_layers": "shuffle",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import a public name's module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
