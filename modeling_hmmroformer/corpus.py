"""Fit a model config to an HMM corpus, and refuse a model that cannot read it.

Kept apart from the two files that travel with checkpoints (they may not import the corpus
package).
"""

from __future__ import annotations

from .configuration_hmm_roformer import HMMRoFormerConfig


def config_for_corpus(corpus_config, preset: str = "small", **overrides) -> HMMRoFormerConfig:
    """A model config of a named size whose vocabulary and positions fit the corpus.

    `corpus_config` is an `hmm_datasets.HMMMixtureConfig` (anything with `model_vocab_size`
    and `sequence_length`).
    """
    base = HMMRoFormerConfig.from_preset(preset)
    positions = max(base.max_position_embeddings, corpus_config.sequence_length)
    values = {"vocab_size": corpus_config.model_vocab_size, "max_position_embeddings": positions, **overrides}
    config = HMMRoFormerConfig.from_preset(preset, **values)
    check_model_fits_corpus(config, corpus_config)
    return config


def check_model_fits_corpus(model_config: HMMRoFormerConfig, corpus_config) -> None:
    """Raise `ValueError` naming the values if the model cannot read rows of the corpus."""
    if model_config.vocab_size < corpus_config.model_vocab_size:
        raise ValueError(
            f"the model's vocab_size={model_config.vocab_size} is smaller than the corpus's "
            f"{corpus_config.model_vocab_size} tokens ({corpus_config.vocab_size} observations + the delimiter "
            f"{corpus_config.delimiter}): build the model with vocab_size={corpus_config.model_vocab_size}."
        )
    if model_config.max_position_embeddings < corpus_config.sequence_length:
        raise ValueError(
            f"the model's max_position_embeddings={model_config.max_position_embeddings} is shorter than the "
            f"corpus rows ({corpus_config.sequence_length} tokens): build the model with "
            f"max_position_embeddings>={corpus_config.sequence_length}."
        )
