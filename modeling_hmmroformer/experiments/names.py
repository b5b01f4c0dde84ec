"""The folder-layout contract: the name of every file and folder a run writes (a module of names:
it imports only the other modules of names; `hmm_datasets.files` writes them whole or not at all).

A reproduction (`scripts/reproduce.py`) is one model in its own folder; a study
(`scripts/study.py`) is a grid of models, each in a model folder under `models/`:

    <reproduction>/                    <study>/
      corpus/                            corpus/
      training/                          lemma1/
      figure1/ probes/ memory/ knockout/ models/depth<L>-seed<s>/
      model/                               training/ figure1/ probes/ memory/ knockout/
      run_config.yaml                      run_config.yaml record.json
      REPORT.md results.json             figures/
      reproduce_state.json               REPORT.md results.json study_state.json

A model folder (the reproduction itself, or `models/depth<L>-seed<s>/`) holds `training/`
(the Trainer's output: checkpoints and the final model) and one folder per analysis. The
corpus folder's own files (Parquet shards, HMM parameters, its config) are named by
`hmm_datasets.names`; the probes' by `probing.names`.
"""

from __future__ import annotations

import re
from pathlib import Path

# the names of the corpus folder's and the probes' files, where they are named
from hmm_datasets.names import CONFIG_FILENAME as CORPUS_CONFIG_JSON  # noqa: F401
from hmm_datasets.names import PARAMS_FILENAME  # noqa: F401
from probing.names import PATCHING_FIGURE, PATCHING_JSON, PROBE_FIGURES, PROBES_JSON

# transformers' own names for a checkpoint's files (the library writes them; we only read them;
# a test checks them against transformers.utils)
MODEL_CONFIG_JSON = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"

# ---- folders of a run ---------------------------------------------------------------------
CORPUS = "corpus"
TRAINING = "training"
DEVELOPMENT = "development"  # in training/: the networks kept over training (step-<N>/); in a model folder: their places
FIGURE1 = "figure1"
YARDSTICKS = "yardsticks"  # a corpus's yardstick predictions (corpora with an unseen-task split)
YARDSTICKS_JSON = "yardsticks.json"  # in yardsticks/: the ladder and facts; in a model's figure1/: its place
YARDSTICKS_TENSORS = "yardsticks.safetensors"  # in yardsticks/: every yardstick's predictions
PROBES = "probes"
MEMORY = "memory"
KNOCKOUT = "knockout"  # a model's rotary knock-out, layer by layer
PATCHING = "patching"  # a model's activation patching, site by site (studies that ask for it)
MODEL = "model"  # a reproduction's publishable checkpoint
LEMMA1 = "lemma1"  # a study's Lemma 1 on the corpus (a reproduction keeps it in memory/)
MODELS = "models"  # a study's model folders
FIGURES = "figures"  # a study's figures against relative depth

# ---- files ----------------------------------------------------------------------------------
RUN_CONFIG_YAML = "training_config.yaml"  # the resolved run config, in every checkpoint
RUN_CONFIG_COPY = "run_config.yaml"  # the run config a model folder's training used
TRAIN_RESULTS_JSON = "train_results.json"
ICL_SCORES_JSON = "icl_scores.json"
FIGURE1_JSON = "figure1.json"
FIGURE1_PNG = "figure1.png"
LEMMA1_JSON = "lemma1.json"
LEMMA1_PNG = "lemma1.png"
MEMORY_JSON = "memory.json"
MEMORY_PNG = "memory.png"
KNOCKOUT_JSON = "knockout.json"
DEVELOPMENT_JSON = "development.json"
DEVELOPMENT_PROBES = "development_probes"  # in a model folder: step-<N>/, the probes of a kept network
DEVELOPMENT_PNG = "development.png"
KNOCKOUT_PNG = "knockout.png"
RECORD_JSON = (
    "record.json"  # a study model's small record: what the report reads (models/<name>.json in --records)
)
REPORT_MD = "REPORT.md"
RESULTS_JSON = "results.json"


def state_file(kind: str) -> str:
    """`reproduce_state.json` or `study_state.json`: complete stages, their times, the fingerprint."""
    return f"{kind}_state.json"


def model_folder_name(depth: int, seed: int) -> str:
    return f"depth{depth}-seed{seed}"


MODEL_FOLDER_NAME = re.compile(r"depth(\d+)-seed(\d+)")  # `model_folder_name`'s, read back: depth, seed


# Where a model folder keeps the files its card and report read, relative to it.
ANALYSIS_FILES = {
    "figure1": Path(FIGURE1) / FIGURE1_JSON,
    "probes": Path(PROBES) / PROBES_JSON,
    "lemma1": Path(MEMORY) / LEMMA1_JSON,
    "model_memory": Path(MEMORY) / MEMORY_JSON,
    "knockout": Path(KNOCKOUT) / KNOCKOUT_JSON,
    "yardsticks": Path(FIGURE1) / YARDSTICKS_JSON,
    "development": Path(DEVELOPMENT) / DEVELOPMENT_JSON,
    "patching": Path(PATCHING) / PATCHING_JSON,
}
STUDY_FIGURES = {  # figure -> file in a study's figures/
    name: f"{FIGURES}/{name}.png"
    for name in (
        "distance_to_bayes",
        "figure2_by_depth",
        "beliefs_by_depth",
        "previous_tokens_by_depth",
        "memory_by_depth",
    )
}
CARD_FIGURES = {
    "figure1": f"{FIGURE1}/{FIGURE1_PNG}",
    **{name: f"{PROBES}/{file}" for name, file in PROBE_FIGURES.items()},
    "lemma1": f"{MEMORY}/{LEMMA1_PNG}",
    "memory": f"{MEMORY}/{MEMORY_PNG}",
    "knockout": f"{KNOCKOUT}/{KNOCKOUT_PNG}",
    "development": f"{DEVELOPMENT}/{DEVELOPMENT_PNG}",
    "patching": f"{PATCHING}/{PATCHING_FIGURE}",
}
