"""The names of a corpus folder's files (`hmm_datasets.export` writes them): a module of names,
which imports nothing.

    folder/
      README.md                       CARD_FILENAME
      data/*.parquet                  DATA_DIR
      hmm_params.safetensors          PARAMS_FILENAME
      hmm_params_unseen.safetensors   UNSEEN_PARAMS_FILENAME
      hmm_mixture_config.json         CONFIG_FILENAME
      bayes_accuracy.json             TABLE_FILENAME
      corpus_manifest.json            MANIFEST_FILENAME
"""

CONFIG_FILENAME = "hmm_mixture_config.json"
TABLE_FILENAME = "bayes_accuracy.json"
MANIFEST_FILENAME = "corpus_manifest.json"
CARD_FILENAME = "README.md"  # not in the manifest: publishing renders the card again for its repo
DATA_DIR = "data"
PARAMS_FILENAME = "hmm_params.safetensors"
UNSEEN_PARAMS_FILENAME = "hmm_params_unseen.safetensors"  # the test_unseen split's HMMs, same format
