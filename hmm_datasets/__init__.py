"""The mixture-of-HMMs corpus of arXiv 2506.01919 and its exact Bayes-optimal yardstick.

import hmm_datasets                      # registers load_dataset("hmm_mixture", ...)
from datasets import load_dataset
ds = load_dataset("hmm_mixture", "small", num_proc=2)
params = hmm_datasets.load_hmm_params(ds)
bayes = hmm_datasets.BayesOptimalPredictor(params)

Generating the corpus needs no torch; the exact predictors import it on first use.
"""

import importlib
import warnings

from .config import GENERATOR_VERSION, PRESETS, SPLITS, HMMMixtureConfig, get_preset
from .hmm_mixture import HMMMixture, builder_for, corpus_features, load_hmm_mixture, tables_for_split
from .layout import SampleLayout, keep_last_demos
from .params import HMMParams, check_disjoint, sample_hmm_params, task_diagnostics, unseen_task_params
from .registration import DATASET_NAME, RegistrationError, register
from .sampler import SamplingTables, generate_rows

try:
    register()
except RegistrationError as _error:
    warnings.warn(str(_error), stacklevel=2)

# What needs torch is imported on first use, so that `import hmm_datasets` (and generating a
# corpus through `load_dataset`) needs none: name -> its module.
_ON_FIRST_USE = {
    **dict.fromkeys(("BayesOptimalPredictor", "BayesPrediction"), "bayes"),
    **dict.fromkeys(("accuracy_table", "format_accuracy_table"), "ceiling"),
    **dict.fromkeys(("Corpus", "check_model_fits_corpus", "checkpoint_corpus", "open_corpus"), "corpus"),
    **dict.fromkeys(
        ("export_corpus", "load_corpus_config", "load_hmm_params", "load_unseen_params"), "export"
    ),
}


def __getattr__(name: str):
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_ON_FIRST_USE[name]}", __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "DATASET_NAME",
    "GENERATOR_VERSION",
    "PRESETS",
    "SPLITS",
    "BayesOptimalPredictor",
    "BayesPrediction",
    "Corpus",
    "HMMMixture",
    "HMMMixtureConfig",
    "HMMParams",
    "RegistrationError",
    "SampleLayout",
    "SamplingTables",
    "accuracy_table",
    "builder_for",
    "check_disjoint",
    "check_model_fits_corpus",
    "checkpoint_corpus",
    "corpus_features",
    "export_corpus",
    "format_accuracy_table",
    "generate_rows",
    "get_preset",
    "keep_last_demos",
    "load_corpus_config",
    "load_hmm_mixture",
    "load_hmm_params",
    "load_unseen_params",
    "open_corpus",
    "register",
    "sample_hmm_params",
    "tables_for_split",
    "task_diagnostics",
    "unseen_task_params",
]
