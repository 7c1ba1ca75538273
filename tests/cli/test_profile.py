"""``sparseloom profile``: the table summary, the ``--validate`` report, plots, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from click.testing import CliRunner, Result

from sparseloom.cli import cli
from sparseloom.profile.table import ProfileTable
from sparseloom.zoo.options import zoo_directory
from sparseloom.zoo.variants import DEFAULT_VARIANTS
from tests.zoo.zoo_support import chain_metrics_with_onnxruntime, tiny_task

#: The fewest rounds and samples that still exercise every part of the report.
QUICK = ("--repeats", "3", "--warmup", "1", "--samples", "12")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _recall(truth: np.ndarray, estimated: np.ndarray, k: int) -> float:
    """Top-k recall, a measured tie with the k-th best counting as a top-k item."""
    kth_best = sorted(truth, reverse=True)[k - 1]
    picked = sorted(range(len(estimated)), key=lambda i: (-estimated[i], i))[:k]
    return sum(truth[i] >= kth_best for i in picked) / k


def test_validate_json_report_and_plots(tmp_path: Path) -> None:
    result = invoke("profile", "tiny", "--validate", "--json", *QUICK, "--latency-samples",
                    "8", "--exhaustive-chains", "0", "--redraws", "1", "--no-ablation",
                    "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    task = report["tasks"]["tiny"]
    assert task["positions"] == 2 and task["latency"]["count"] == 8
    # One task: the overall figures are that task's.
    overall = report["overall"]
    for key in ("top_k_recall", "spearman", "mae", "table_top_k_recall"):
        assert overall["accuracy"][key] == task["accuracy"][key]
    for key in ("mae_ms", "mape", "count"):
        assert overall["latency"][key] == pytest.approx(task["latency"][key])

    # Accuracy figures against truth from plain ONNX Runtime chains and the saved table: with
    # one redraw at the default seed the held-out rows are those the table did not measure,
    # and the table's estimates there are the held-out predictions.
    table = ProfileTable.load(tmp_path / "profile").task("tiny")
    meta = json.loads((tmp_path / "profile" / "profile.json").read_text())["meta"]
    variants = len(DEFAULT_VARIANTS)
    every = [(a, b) for a in range(variants) for b in range(variants)]  # table row order
    truth = np.array(chain_metrics_with_onnxruntime(
        zoo_directory(meta["zoo_hashes"]["tiny"]), every, tiny_task()))
    measured = ~np.isnan(table.accuracy_measured)
    assert measured.sum() == 12
    np.testing.assert_array_equal(table.accuracy_measured[measured],
                                  truth[measured].astype(table.accuracy_measured.dtype))
    held_out = ~measured
    estimated = table.accuracy_estimated.astype(np.float64)
    accuracy = task["accuracy"]
    assert accuracy["held_out"] == held_out.sum() == variants**2 - 12
    for k in (5, 10):
        assert accuracy["top_k_recall"][str(k)] == _recall(truth[held_out],
                                                           estimated[held_out], k)
        assert accuracy["table_top_k_recall"][str(k)] == _recall(truth, table.accuracy(), k)
    assert accuracy["spearman"] == pytest.approx(
        scipy.stats.spearmanr(truth[held_out], estimated[held_out]).statistic)
    assert accuracy["mae"] == pytest.approx(np.abs(estimated - truth)[held_out].mean())

    # Latency figures recomputed from the timed chains the report lists.
    latency = task["latency"]
    points = [(p["measured_ms"], p["estimated_ms"]) for p in latency["points"]]
    assert len(points) == 8 and all(m is not None and e is not None for m, e in points)
    measured_ms, estimated_ms = np.array(points).T
    assert latency["mae_ms"] == pytest.approx(np.abs(estimated_ms - measured_ms).mean())
    assert latency["mape"] == pytest.approx(
        (np.abs(estimated_ms - measured_ms) / measured_ms).mean())
    assert latency["bias_ms"] == pytest.approx((estimated_ms - measured_ms).mean())
    # Per task: is the estimate useful (a third better than the mean, r >= 0.9), or is the
    # spread within noise; every chain keeps its round-to-round spread, the re-timed cells too.
    useful = latency["usefulness"]
    assert useful["verdict"] in ("MET", "NOT MET", "WITHIN NOISE")
    assert useful["beats_mean_by_a_third"] == (
        latency["mape"] <= 2 / 3 * latency["mean_baseline_mape"])
    assert all(p["spread_ms"] is not None and p["spread_ms"] >= 0 for p in latency["points"])
    assert np.asarray(latency["profile_now"]["latency_ms"]).shape == (2, variants, 2)

    # Profiling cost: the phases add up, and the reduction is against the exhaustive estimate.
    cost = task["profiling"]
    assert cost["seconds"] == pytest.approx(sum(cost["phases"].values()))
    assert cost["reduction"] == pytest.approx(
        1 - cost["seconds"] / cost["exhaustive_seconds_estimate"])

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
        (("--samples", "2"), f"fewer than the zoo's {len(DEFAULT_VARIANTS)} original variants"),
    ],
)
def test_bad_options_are_one_line_errors(args: tuple[str, ...], fragment: str) -> None:
    result = invoke("profile", "tiny", "--repeats", "3", *args)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: ") and fragment in lines[-1], result.output
