"""Training and the pipelines that run it with its analyses:

    training           Trainer, data collator, checkpoints, the networks kept over training
    engine             the stage engine: a folder's state file, stages run once, under a lock
    plan               a pipeline before it runs: its folder, its models, its kind (a Plan)
    folders            what the folders hold, read and written: yardsticks, kept networks, a model's summary
    stages             the stages both plans share: corpus, Lemma 1, yardsticks, each model's
    reproduction_plan  the reproduction: one model, its checkpoint and model card, its report
    study_plan         the study: a grid of models, each one's record, the report from records
    pipeline           runs a plan's stages in order, its models side by side (--jobs)

Every module of this folder once (`tests/test_package_layers.py` checks it).
"""
