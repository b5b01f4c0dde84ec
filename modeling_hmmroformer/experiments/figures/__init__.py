"""Every figure, drawn from its results' plain data:

    model   one model's figures: Figure 1, its memory, Lemma 1, its development
    study   a study's figures by depth
    across  the figures across K and across architectures
    family  Lemma 1 on the family built to test it (scripts/lemma1.py)
    power   the rule's power against the number of HMM draws (benchmarks/power.py)

Every module of this folder once (`tests/test_package_layers.py` checks it).
"""
