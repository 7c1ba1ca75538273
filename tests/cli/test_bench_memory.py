"""``sparseloom bench memory`` in a subprocess: per-session costs and the server's budget."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.cli.test_plan import sparseloom


def _initializer_bytes(path: str) -> int:
    """Bytes of a model's initializers, read with onnx (weights loaded from external data)."""
    from onnx import numpy_helper

    model = onnx.load(path)
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


@pytest.mark.slow
def test_bench_memory_reports_sessions_and_a_server_within_its_budget() -> None:
    result = sparseloom("bench", "memory", "tiny", "--budget", "1.0", "--budget", "0.5",
                        "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["workload"] == "tiny" and report["policy"] == "sparseloom-loaded"
    sessions = report["sessions"]
    assert {row["processor"].partition("?")[0] for row in sessions} == {"ov:CPU", "ort:CPU"}
    for row in sessions:
        assert row["task"] == "tiny" and row["weights_bytes"] > 0
        assert all(value >= 0 for value in (*row["mapped"], *row["embedded"]))
    full, half = report["serving"]
    assert (full["budget"], half["budget"]) == (1.0, 0.5)
    assert 0 < half["loaded_bytes"] <= half["budget_bytes"] < full["budget_bytes"]
    assert half["models"] <= full["models"]
    assert full["weights_bytes"] > 0 and full["rss_growth_bytes"] >= 0


def test_weights_of_a_batch_one_copy_are_its_sources(tmp_path) -> None:
    """The batch-1 copy holds the source's weights (external data), byte for byte."""
    from sparseloom.workload.load import load_workload
    from sparseloom.zoo.batch_one import batch_one_path, weight_bytes

    task = load_workload("tiny", progress=False).task("tiny")
    copy = batch_one_path(task.model_path, ["batch"])
    assert copy.suffixes[-2:] == [".ref", ".onnx"]
    assert weight_bytes(copy) == _initializer_bytes(str(copy)) \
        == _initializer_bytes(str(task.model_path)) == weight_bytes(task.model_path)
