"""One model's numbers, and the corpus's yardsticks they are placed on: values in, values out
(no file is named here; `running.folders` reads and writes them):

    evaluation   Figure 1 against the Bayes-optimal predictor
    yardsticks   a model between retrieval and inference: mixture, prior-level, oracle, ladder
    ladder_gate  where a model sits on its in-context ladder, and whether its claims count
    development  a model over training: each kept network on the yardsticks, labelled
    memory       Lemma 1 and the model against fixed-memory Bayes predictors
    claims       the paper's claims as statistics of the network and of its floors
    record       one model's record (what a study commits of it): its fields, its JSON form
    summary      what a model folder holds, summarized for its card

Every module of this folder once (`tests/test_package_layers.py` checks it).
"""
