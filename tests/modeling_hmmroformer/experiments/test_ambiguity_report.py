"""`scripts/ambiguity.py`: a corpus family by emission mixing, measured and reported per level."""

from __future__ import annotations

import json

import pytest

from model_cards.ambiguity_report import level_table, token_share
from modeling_hmmroformer.experiments.commands import ambiguity


def test_the_family_is_measured_per_level_in_order_and_reported(tmp_path, capsys):
    out = tmp_path / "family"
    assert ambiguity.main(["--preset", "tiny", "--levels", "0.5", "0", "1", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    levels = result["levels"]
    assert [level["emission_mixing"] for level in levels] == [0.0, 0.5, 1.0]
    told = [level["parameters"]["token_information"] for level in levels]
    assert told[0] > told[1] > told[2] and abs(told[2]) < 1e-6  # the token tells less, then nothing
    assert token_share(levels[0]) > token_share(levels[1]) and token_share(levels[2]) is None
    report = (out / "REPORT.md").read_text()
    assert level_table(levels) in report and report.count("\n| ") == 1 + len(levels) + 1
    assert (out / ambiguity.FIGURE).stat().st_size > 0
    assert "wrote " in capsys.readouterr().out


def test_a_level_outside_0_1_or_a_preset_unknown_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        ambiguity.main(["--levels", "1.5", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and "1.5 is not a share between 0 and 1" in err
    assert ambiguity.main(["--preset", "nope", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "unknown preset 'nope'" in err
    assert not (tmp_path / "x").exists()  # nothing written
