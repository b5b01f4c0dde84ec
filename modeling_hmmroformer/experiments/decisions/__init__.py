"""The decision rule and the numbers across models:

    verdicts       the rule: holds / contradicted / not testable / undecided
    aggregate      a model's small record; a study's numbers across seeds and depths
    diversity      the studies across task diversity K, and each K over training
    architectures  studies that differ only in their architecture, side by side
    power          what a study design can decide, simulated through the rule's own code

Every module of this folder once (`tests/test_package_layers.py` checks it).
"""
