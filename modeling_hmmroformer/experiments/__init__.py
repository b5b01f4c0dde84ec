"""The experiment around the model: run settings, training, Figure 1, the model's memory, the
one stage pipeline behind `scripts/reproduce.py` and `scripts/study.py`, summaries and Hub
publishing. None of it travels with a checkpoint: `modeling_hmmroformer`'s root holds the
model alone.

    settings    run configs, the override syntax, the table of named pipelines (PIPELINES)
    fields      every field of a run config, its checks, the reference --help prints
    layout      the name of every file and folder of a run, and the one atomic writer
    training    Trainer, data collator, checkpoints
    evaluation  Figure 1 against the Bayes-optimal predictor
    memory      Lemma 1 and the model cut to a fixed memory
    summary     what a model folder holds, and the paper's claims it shows
    aggregate   a study's numbers across seeds and depths
    plots       a study's figures
    pipeline    the stages, the engine that runs them, the reports
    hub         publishing a model or a corpus
"""
