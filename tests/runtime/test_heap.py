"""While a runtime serves, the heap that existed before is frozen (no full collection walks it);
after the last one stops it is unfrozen and its garbage collected: nothing is lost."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from sparseloom.core.types import SLO
from sparseloom.runtime.heap import SERVING_HEAP
from sparseloom.runtime.server import Server
from tests.runtime.support import eval_row

LOOSE = SLO(0.0, 1000.0)


class _Cycle:
    """A reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_the_heap_is_frozen_while_any_runtime_serves(two_tasks: tuple[Any, Any]) -> None:
    workload, profile = two_tasks
    names = list(profile.tasks)
    assert gc.get_freeze_count() == 0 and SERVING_HEAP.serving == 0
    with Server(workload, profile, slos=dict.fromkeys(names, LOOSE)) as server:
        assert SERVING_HEAP.serving == 1 and gc.get_freeze_count() > 0
        assert server.infer(names[0], eval_row(workload.task(names[0]), 0)) is not None
        with Server(workload, profile, slos=dict.fromkeys(names, LOOSE)):
            assert SERVING_HEAP.serving == 2
        assert SERVING_HEAP.serving == 1 and gc.get_freeze_count() > 0  # one still serves
    assert SERVING_HEAP.serving == 0 and gc.get_freeze_count() == 0


def test_garbage_from_before_serving_is_collected_after_it() -> None:
    garbage = _Cycle()
    alive = weakref.ref(garbage)
    del garbage  # unreachable, but a cycle: it waits for the collector
    SERVING_HEAP.enter()
    try:
        gc.collect()  # a full collection while serving does not walk the frozen heap
        assert alive() is not None
    finally:
        SERVING_HEAP.leave()
    gc.collect()
    assert alive() is None  # unfrozen with the last runtime, then collected
    SERVING_HEAP.leave()  # leaving more often than entering is harmless
    assert SERVING_HEAP.serving == 0 and gc.get_freeze_count() == 0
