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
