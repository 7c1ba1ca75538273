"""While a runtime serves, the heap that existed before is frozen (no full collection walks it);
after the last one stops it is unfrozen and its garbage collected: nothing is lost. An
application's own freeze is left as it was.

The suite freezes the survivors of every full collection (tests/conftest.py); these tests
pause that and start from an unfrozen heap, as an application that never froze it does."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from sparseloom.core.types import SLO
from sparseloom.runtime.heap import SERVING_HEAP, SURVIVOR_FREEZE, SurvivorFreeze
from sparseloom.runtime.server import Server
from tests.runtime.support import eval_row

LOOSE = SLO(0.0, 1000.0)


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """No survivor freeze and an unfrozen heap for the test; the suite's freeze after it."""
    installed = SURVIVOR_FREEZE.installed
    SURVIVOR_FREEZE.remove()
    gc.unfreeze()
    try:
        yield
    finally:
        if installed:
            SURVIVOR_FREEZE.install()


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


def test_with_freeze_heap_off_nothing_is_frozen_while_serving(two_tasks: tuple[Any, Any]
                                                              ) -> None:
    from sparseloom.runtime.options import RuntimeOptions

    workload, profile = two_tasks
    names = list(profile.tasks)
    garbage = _Cycle()
    alive = weakref.ref(garbage)
    del garbage
    survivors = SurvivorFreeze(floor=1)
    try:
        with Server(workload, profile, slos=dict.fromkeys(names, LOOSE),
                    options=RuntimeOptions(freeze_heap=False)) as server:
            assert server.infer(names[0], eval_row(workload.task(names[0]), 0)) is not None
            assert SERVING_HEAP.serving == 1 and gc.get_freeze_count() == 0
            survivors.install()  # as the console script installs its own
            gc.collect()  # walks the whole heap: the cycle from before serving is freed now
            assert alive() is None
            # It serves, so the survivor freeze froze nothing after that collection either.
            assert gc.get_freeze_count() == 0 and survivors.compactions == 0
    finally:
        survivors.remove()
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


def test_an_application_that_froze_its_heap_keeps_it_frozen() -> None:
    gc.freeze()  # the application's own, before any runtime serves
    kept = gc.get_freeze_count()
    assert kept > 0
    SERVING_HEAP.enter()
    made_while_serving = [_Cycle() for _ in range(10)]
    SERVING_HEAP.leave()
    assert gc.get_freeze_count() >= kept  # nothing of the application's unfrozen
    gc.unfreeze()
    assert made_while_serving and SERVING_HEAP.serving == 0


def test_survivors_are_frozen_and_walked_again_once_the_frozen_heap_doubled() -> None:
    policy = SurvivorFreeze(floor=1)
    policy.install()
    try:
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        gc.collect()  # survivors, the cycle among them, are frozen after the collection
        frozen = gc.get_freeze_count()
        assert frozen > 0 and policy.compactions == 0
        del cycle  # garbage now, but frozen: this collection does not walk it
        gc.collect()
        assert alive() is not None
        assert policy.compactions == 1 and gc.get_freeze_count() == 0  # over the floor: unfrozen
        gc.collect()  # walks everything once: the cycle is freed, the survivors frozen again
        assert alive() is None and 0 < gc.get_freeze_count() < 2 * frozen
        gc.collect()
        assert policy.compactions == 1  # not doubled since
    finally:
        policy.remove()
    assert not policy.installed


def test_while_a_runtime_serves_the_survivor_freeze_does_nothing() -> None:
    policy = SurvivorFreeze(floor=1)
    policy.install()
    SERVING_HEAP.enter()
    try:
        frozen = gc.get_freeze_count()
        made_while_serving = [_Cycle() for _ in range(100)]
        for _ in range(3):
            gc.collect()
        # neither walked again nor frozen further: what serving makes stays collectable
        assert policy.compactions == 0 and gc.get_freeze_count() == frozen > 0
        assert made_while_serving
    finally:
        SERVING_HEAP.leave()
        policy.remove()
        gc.unfreeze()
