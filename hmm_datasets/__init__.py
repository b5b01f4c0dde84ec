"""The mixture-of-HMMs corpus of arXiv 2506.01919 and its exact Bayes-optimal yardstick.

import hmm_datasets                      # registers load_dataset("hmm_mixture", ...)
from datasets import load_dataset
ds = load_dataset("hmm_mixture", "small", num_proc=2)
params = hmm_datasets.load_hmm_params(ds)
bayes = hmm_datasets.BayesOptimalPredictor(params)
"""

import warnings

from .bayes import BayesOptimalPredictor, BayesPrediction
from .ceiling import accuracy_table, format_accuracy_table
from .config import GENERATOR_VERSION, PRESETS, SPLITS, HMMMixtureConfig, get_preset
from .corpus import Corpus, check_model_fits_corpus, checkpoint_corpus, open_corpus
from .export import export_corpus, load_corpus_config, load_hmm_params, load_unseen_params
from .hmm_mixture import HMMMixture, builder_for, corpus_features, load_hmm_mixture, tables_for_split
from .layout import SampleLayout, keep_last_demos
from .params import HMMParams, check_disjoint, sample_hmm_params, task_diagnostics, unseen_task_params
from .registration import DATASET_NAME, RegistrationError, register
from .sampler import SamplingTables, generate_rows

try:
    register()
except RegistrationError as _error:
    warnings.warn(str(_error), stacklevel=2)

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
