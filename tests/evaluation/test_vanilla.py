"""The vanilla OpenVINO and ONNX Runtime runners on the tiny workload."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.evaluation.vanilla import VANILLA_RUNNERS, run_vanilla, violations


@pytest.fixture(scope="module")
def tiny():
    from sparseloom.workload.load import load_workload

    return load_workload("tiny", progress=False)


@pytest.fixture(scope="module")
def two_tasks(tiny, tmp_path_factory: pytest.TempPathFactory):
    """A file workload of two tasks: tiny's model, each on half of its eval rows."""
    from sparseloom.workload.load import load_workload

    task = tiny.task("tiny")
    folder: Path = tmp_path_factory.mktemp("two_tasks")
    lines = ['name = "pair"']
    for name, part in {"a": slice(0, 180), "b": slice(180, 360)}.items():
        arrays = {key: np.asarray(value)[part] for key, value in task.eval_inputs.items()}
        np.savez(folder / f"eval_{name}.npz", labels=task.labels[part], **arrays)
        lines += ["[[task]]", f'name = "digits_{name}"', f'model = "{task.model_path}"',
                  f'data = "eval_{name}.npz"']
    (folder / "pair.toml").write_text("\n".join(lines) + "\n")
    return load_workload(str(folder / "pair.toml"), progress=False)


@pytest.mark.parametrize("runner", VANILLA_RUNNERS)
def test_runner_serves_and_scores_every_request(tiny, runner: str) -> None:
    result = run_vanilla(tiny, runner, queries=12)
    (task,) = result.tasks
    assert task.task == "tiny" and task.completed == 12
    assert task.latency.count == 12 and task.latency.p50_ms > 0
    # The dense tiny model is accurate (its profile measures ~0.98 on the whole eval set).
    assert 0.5 <= task.accuracy <= 1.0
    verdict = violations(result.tasks, {"tiny": SLO(0.0, 1e6)})
    assert verdict == {"tiny": ""}
    verdict = violations(result.tasks, {"tiny": SLO(1.0, 1e-6)})
    assert "latency" in verdict["tiny"]


@pytest.mark.parametrize("runner", VANILLA_RUNNERS)
def test_throughput_is_all_tasks_completions_over_the_time_the_load_was_served(
        two_tasks, runner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparseloom.evaluation import stock

    # The oracle is a stopwatch around the load generator's call (the runners load their
    # models before it): the requests were served within that span, and the call returns
    # at most one poll (20 ms) and a drain after the last one ended, well under
    # ``slack_s``.
    slack_s, spans = 0.1, []
    offer = stock.offer

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return offer(*args, **kwargs)
        finally:
            spans.append(time.perf_counter() - started)

    monkeypatch.setattr(stock, "offer", timed)
    # 6,000 requests took 0.23 s on a quiet 2-vCPU AMD EPYC: four times that many.
    queries = 12_000
    result = run_vanilla(two_tasks, runner, queries=queries)
    assert [(t.task, t.completed) for t in result.tasks] == [("digits_a", queries),
                                                             ("digits_b", queries)]
    (span,) = spans
    # Long enough that the bounds below are within 1.5x of each other: a throughput of one
    # task's completions, or of twice the requests, falls outside them.
    assert span > 3 * slack_s, f"{2 * queries:,} requests served in {span:.3f} s: raise queries"
    assert span - slack_s <= result.wall_s <= span
    assert 2 * queries / span <= result.throughput_rps <= 2 * queries / (span - slack_s)


def test_unknown_runner_and_task_are_refused(tiny) -> None:
    with pytest.raises(EvaluationError, match="vanilla-ov or vanilla-ort"):
        run_vanilla(tiny, "vanilla-tf")
    with pytest.raises(EvaluationError, match="unknown task"):
        run_vanilla(tiny, "vanilla-ort", arrival_order=("nope",))
    assert not math.isnan(run_vanilla(tiny, "vanilla-ort", queries=2).tasks[0].accuracy)
