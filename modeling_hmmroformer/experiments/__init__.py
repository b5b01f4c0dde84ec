"""The experiment around the model: run settings, training, the analyses, the one stage pipeline
behind `scripts/reproduce.py` and `scripts/study.py`, the reports and Hub publishing. None of it
travels with a checkpoint: `modeling_hmmroformer`'s root holds the model alone.

A map, every module and folder of this one once (`tests/test_package_layers.py` checks it, and
each folder's own map):

    names           the name of every file and folder of a run (a module of names)
    fields          every field of a run config, its checks, the reference --help prints
    settings        run configs, the override syntax, the table of named pipelines (PIPELINES)
    running         training, and the pipelines: engine, plans, stages, the runner
    analyses        one model's numbers: Figure 1, yardsticks, development, memory, claims
    decisions       the rule and the numbers across models: verdicts, records, studies side by side
    figures         every figure of a model, a study and the reports across studies
    reports         the reports across studies, read from the studies' folders and written
    hub             upload plans for a model folder or a corpus folder
    commands        the hmm-* commands, one main() each

A reproduction, from the command line to its report: `commands/reproduce.py` ->
`running/reproduction_plan.py` (its stages, in order) -> `running/pipeline.py` (runs them
through `running/engine.py`) -> `running/stages.py` (each stage: `running/training.py`, then
`analyses/` for the numbers and `figures/model.py` for the pictures) -> the report.
"""
