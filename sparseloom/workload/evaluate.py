"""Run a model over a task's eval set on a processor and score it with the task's metric."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sparseloom.workload.inference import run_batched
from sparseloom.workload.task import Task

if TYPE_CHECKING:
    import onnx

__all__ = ["DEFAULT_PROCESSOR", "evaluate"]

#: The processor :func:`evaluate` runs on unless told otherwise.
DEFAULT_PROCESSOR = "ort:CPU"


def evaluate(
    task: Task,
    model: str | os.PathLike[str] | onnx.ModelProto | None = None,
    *,
    processor: str = DEFAULT_PROCESSOR,
    batch_size: int = 256,
) -> float:
    """The metric of ``model`` (default: the task's dense model) on the task's eval set."""
    outputs = run_batched(
        task.model_path if model is None else model,
        task.eval_inputs,
        processor=processor,
        batch_size=batch_size,
    )
    return task.score(outputs)
