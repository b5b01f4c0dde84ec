"""The Lemma 1 family's writer: every file, and a report whose table has a row per γ level."""

import json

from hmm_datasets.lemma1_family import ObservabilityFamily, measure_family
from modeling_hmmroformer.experiments.commands.lemma1 import write_lemma1_family


def test_writes_report_json_and_figures(tmp_path):
    family = ObservabilityFamily(levels=(0.3, 0.8), hmms_per_level=1)
    result = measure_family(family, memories=range(1, 5), rows=16, length=12)
    result["runtime_s"] = 0.0
    paths = write_lemma1_family(result, tmp_path / "lemma1")
    assert all(path.stat().st_size > 0 for path in paths.values())
    assert json.loads(paths["json"].read_text())["family"]["levels"] == [0.3, 0.8]
    report = paths["report"].read_text()
    assert report.count("| 0.3 |") == 2 and report.count("| 0.8 |") == 2  # both variants' tables
