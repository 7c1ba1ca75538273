"""The small ``tiny`` zoo the profile tests build on (S = 2 positions × V = 4 variants)."""

from __future__ import annotations

from typing import Any

import pytest

from sparseloom.zoo.options import ZooOptions
from tests.profile.small_zoo import VARIANTS


@pytest.fixture(scope="module")
def tiny() -> Any:
    """The ``tiny`` workload, loaded (built once, then from the cache)."""
    from sparseloom.workload.load import load_workload

    return load_workload("tiny", progress=False)


@pytest.fixture(scope="module")
def tiny_zoos(tiny: Any) -> dict[str, Any]:
    """Each of tiny's tasks' zoo of :data:`VARIANTS` over 2 positions, by task name."""
    from sparseloom.zoo.build import build_zoo

    return {task.name: build_zoo(task, ZooOptions(subgraphs=2, variants=VARIANTS), progress=False)
            for task in tiny.tasks}


@pytest.fixture(scope="module")
def tiny_activations(tiny: Any, tiny_zoos: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
    """tiny's first task, its zoo, and the dense prefix's activations at every position on
    16 calibration rows (what the numerics check feeds each subgraph)."""
    from sparseloom.zoo.evaluate import SubgraphRunner
    from sparseloom.zoo.tensors import dense_activations, take_batch

    task = tiny.tasks[0]
    zoo = tiny_zoos[task.name]
    with SubgraphRunner() as runner:
        activations, _ = dense_activations(zoo, take_batch(task.calibration_inputs, 0, 16),
                                           runner.run)
    return task, zoo, activations
