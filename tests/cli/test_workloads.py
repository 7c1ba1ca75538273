"""``sparseloom workloads list|build``, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.workload.test_file import two_input_model


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "sparseloom", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_list_json_names_the_bundled_workloads_and_their_tasks():
    result = run_cli("workloads", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"default", "tiny"} <= set(rows)
    assert [t["name"] for t in rows["default"]["tasks"]] == [
        "vision", "sentiment", "activity", "speech"]
    assert rows["tiny"]["distribution"] == "sparseloom"
    assert all(row["error"] is None for row in rows.values())


def test_list_table():
    result = run_cli("workloads", "list")
    assert result.returncode == 0, result.stderr
    assert "default" in result.stdout and "vision, sentiment, activity, speech" in result.stdout


def test_build_tiny_json_reports_each_task():
    result = run_cli("workloads", "build", "tiny", "--json", "--no-progress")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["workload"] == "tiny"
    (task,) = report["tasks"]
    assert task["name"] == "tiny" and task["metric"] == "accuracy"
    assert 0.9 < task["dense_metric"] <= 1.0
    assert task["params"] > 1000 and task["model_bytes"] > 1000
    assert task["eval_size"] + task["held_out_size"] > 300 and task["calibration_size"] == 64
    assert task["held_out_size"] == round(0.3 * (task["eval_size"] + task["held_out_size"]))
    assert task["inputs"] == {"image": [1, 8, 8]} and task["outputs"] == ["logits"]
    assert task["build_seconds"] > 0
    # Built by the fixture-less run above or earlier: the next run is a hit.
    again = json.loads(run_cli("workloads", "build", "tiny", "--json").stdout)
    assert again["tasks"][0]["cache_hit"] is True
    assert again["tasks"][0]["dense_metric"] == task["dense_metric"]


@pytest.mark.slow
def test_build_default_reports_the_four_tasks_as_make_demo_does():
    """`make demo`'s second step on the bundled workload (its tasks' info lists class names)."""
    result = run_cli("workloads", "build", "default", "--json", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "chance level" not in result.stderr
    report = json.loads(result.stdout)
    metrics = {task["name"]: task["dense_metric"] for task in report["tasks"]}
    assert list(metrics) == ["vision", "sentiment", "activity", "speech"]
    assert all(0.5 < value <= 1.0 for value in metrics.values()), metrics


def test_build_a_user_file_table(tmp_path: Path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2, 20, 4)).astype(np.float32)
    two_input_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=x, y=y, labels=np.zeros(20, np.int64))
    (tmp_path / "w.toml").write_text(
        '[[task]]\nname = "own"\nmodel = "m.onnx"\ndata = "d.npz"\n')
    result = run_cli("workloads", "build", str(tmp_path / "w.toml"))
    assert result.returncode == 0, result.stderr
    assert "own" in result.stdout and "accuracy" in result.stdout
    assert "1 task(s) ready" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("workloads", "build", "nope"), "unknown workload 'nope'"),
        (("workloads", "build", "tiny", "--task", "vision"), "no task 'vision'"),
        (("workloads", "build", "missing.toml"), "not found"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, message):
    result = run_cli(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_toml_is_one_line_and_nonzero(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text('[[task]]\nname = "t"\nbuilder = "tiny"\nepochz = 1\n')
    result = run_cli("workloads", "build", str(path))
    assert result.returncode != 0
    assert "unknown key 'epochz'" in result.stderr and "Traceback" not in result.stderr
