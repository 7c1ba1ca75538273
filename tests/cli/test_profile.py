"""``sparseloom profile``: the table summary, the ``--validate`` report, plots, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sparseloom.cli import cli

#: The fewest rounds and samples that still exercise every part of the report.
QUICK = ("--repeats", "3", "--warmup", "1", "--samples", "12")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_validate_json_report_and_plots(tmp_path: Path) -> None:
    result = invoke("profile", "tiny", "--validate", "--json", *QUICK, "--latency-samples",
                    "8", "--exhaustive-chains", "0", "--redraws", "1", "--no-ablation",
                    "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    for scope in [*report["tasks"].values(), report["overall"]]:
        accuracy, latency, cost = scope["accuracy"], scope["latency"], scope["profiling"]
        assert set(accuracy["top_k_recall"]) == {"5", "10"}
        assert all(0.0 <= v <= 1.0 for v in accuracy["top_k_recall"].values())
        assert -1.0 <= accuracy["spearman"] <= 1.0
        assert latency["mae_ms"] >= 0 and 0 <= latency["mape"] < 5
        assert cost["seconds"] > 0 and cost["exhaustive_seconds_estimate"] > 0
    task = report["tasks"]["tiny"]
    assert task["positions"] == 2 and task["latency"]["count"] == 8
    assert report["command"].startswith("sparseloom profile tiny ")
    assert "--validate" in report["command"]
    assert {"top_10_recall", "latency_mape"} <= set(report["goals"])
    for name in ("latency_scatter.png", "recall_vs_k.png", "report.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "profile" / "profile.npz").is_file()


def test_plain_profile_prints_a_table() -> None:
    result = invoke("profile", "tiny", *QUICK)
    assert result.exit_code == 0, result.output
    assert "tiny" in result.output and "profile table:" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--accuracy-estimator", "catboost"), "unknown estimator 'catboost'"),
        (("--latency-estimator", "xgboost"), "cannot estimate latency"),
        (("--samples", "2"), "fewer than the zoo's 10 original variants"),
    ],
)
def test_bad_options_are_one_line_errors(args: tuple[str, ...], fragment: str) -> None:
    result = invoke("profile", "tiny", "--repeats", "3", *args)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: ") and fragment in lines[-1], result.output
