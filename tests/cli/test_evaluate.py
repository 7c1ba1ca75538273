"""``sparseloom evaluate`` and ``sparseloom simulate`` on tiny."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparseloom.cli import main


def test_simulate_prints_every_policy_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "tiny", "--policy", "sparseloom", "--policy", "sv-lo-p",
                 "--queries", "20", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["processors"] == ["CPU", "GPU", "NPU"]
    assert set(document["results"]) == {"sparseloom", "sv-lo-p"}
    assert document["results"]["sparseloom"]["tasks"][0]["completed"] == 20


def test_unknown_device_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "tiny", "--device-file", "nope"]) == 1
    assert "device file 'nope' not found" in capsys.readouterr().err


def test_unknown_contender_is_one_line(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "tiny", "--quick", "--contender", "nope",
                 "--out", str(tmp_path)]) == 1
    assert "unknown contender" in capsys.readouterr().err


def test_sweep_prints_a_row_per_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--workload", "", "--policy", "av-p", "--queries", "5",
                 "--out", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in rows] == ["T=4 S=3 V=10 P=3", "T=16", "V=20", "S=4", "P=4"]
    assert rows[1]["tasks"] == 16 and rows[4]["processors"] == 4
    assert (tmp_path / "sweep.csv").exists()
