"""The experiment around the model: run settings, training, the analyses, the one stage pipeline
behind `scripts/reproduce.py` and `scripts/study.py`, the reports and Hub publishing. None of it
travels with a checkpoint: `modeling_hmmroformer`'s root holds the model alone.

A map by kind, every module of this folder once (`tests/test_package_layers.py` checks it):

names and settings
    layout          the name of every file and folder of a run (a module of names)
    fields          every field of a run config, its checks, the reference --help prints
    settings        run configs, the override syntax, the table of named pipelines (PIPELINES)
running
    training        Trainer, data collator, checkpoints, the networks kept over training
    engine          the stage engine: a folder's state file, stages run once, under a lock
    plan            a pipeline before it runs: its folder, its models, its kind (a Plan)
    stages          the stages both plans share: corpus, Lemma 1, yardsticks, each model's
    reproduction_plan  the reproduction: one model, its checkpoint and model card, its report
    study_plan      the study: a grid of models, each one's record, the report from records
    pipeline        runs a plan's stages in order, its models side by side (--jobs)
    commands        the hmm-* commands, one main() each
analyses of one model
    evaluation      Figure 1 against the Bayes-optimal predictor
    yardsticks      a model between retrieval and inference: mixture, prior-level, oracle, ladder
    ladder_gate     where a model sits on its in-context ladder, and whether its claims count
    development     a model over training: each kept network on the yardsticks, labelled
    memory          Lemma 1 and the model cut to a fixed memory
    lemma1          Lemma 1 on the family built to test it
    claims          the paper's claims as statistics of the network and of its floors
    summary         what a model folder holds, summarized for its card
decisions and reports across models
    verdicts        the decision rule: holds / contradicted / not testable / undecided
    aggregate       a model's small record; a study's numbers across seeds and depths
    diversity       the studies across task diversity K, and each K over training
    architectures   studies that differ only in their architecture, side by side
    reports         the reports across studies, written
figures
    plots           one model's figures (Figure 1, its memory, Lemma 1, its development)
    study_plots     a study's figures by depth
    report_plots    the figures across K and across architectures
publishing
    hub             upload plans for a model folder or a corpus folder
"""
