"""The vanilla OpenVINO and ONNX Runtime runners on the tiny workload."""

from __future__ import annotations

import math

import pytest

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.evaluation.vanilla import VANILLA_RUNNERS, run_vanilla, violations


@pytest.fixture(scope="module")
def tiny():
    from sparseloom.workload.load import load_workload

    return load_workload("tiny", progress=False)


@pytest.mark.parametrize("runner", VANILLA_RUNNERS)
def test_runner_serves_and_scores_every_request(tiny, runner: str) -> None:
    result = run_vanilla(tiny, runner, queries=12)
    (task,) = result.tasks
    assert task.task == "tiny" and task.completed == 12
    assert task.latency.count == 12 and task.latency.p50_ms > 0
    assert result.throughput_rps == pytest.approx(12 / result.wall_s)
    # The dense tiny model is accurate (its profile measures ~0.98 on the whole eval set).
    assert 0.5 <= task.accuracy <= 1.0
    verdict = violations(result.tasks, {"tiny": SLO(0.0, 1e6)})
    assert verdict == {"tiny": ""}
    verdict = violations(result.tasks, {"tiny": SLO(1.0, 1e-6)})
    assert "latency" in verdict["tiny"]


def test_unknown_runner_and_task_are_refused(tiny) -> None:
    with pytest.raises(EvaluationError, match="vanilla-ov or vanilla-ort"):
        run_vanilla(tiny, "vanilla-tf")
    with pytest.raises(EvaluationError, match="unknown task"):
        run_vanilla(tiny, "vanilla-ort", arrival_order=("nope",))
    assert not math.isnan(run_vanilla(tiny, "vanilla-ort", queries=2).tasks[0].accuracy)
