"""Pinned chains: stages on their processors' threads, boundary tensors handed along."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from sparseloom.core.processors import allowed_cores
from sparseloom.core.types import Processor
from sparseloom.profile.pinned import PinnedThreads, Stage


def _processors() -> list[Processor]:
    cores = allowed_cores()
    return [Processor("ov:CPU", "ov", "CPU", cores=(cores[0],)),
            Processor("ort:CPU", "ort", "CPU", cores=(cores[-1],))]


def test_a_chain_runs_each_stage_on_its_thread_and_carries_outputs() -> None:
    seen: list[tuple[int, str, Any]] = []

    def stage(position: int) -> Any:
        def call(inputs: dict[str, Any]) -> dict[str, Any]:
            seen.append((position, threading.current_thread().name, inputs["x"]))
            return {"x": inputs["x"] + 1, "unused": position}
        return call

    processors = _processors()
    with PinnedThreads(processors) as threads:
        timing = threads.run([Stage(0, stage(0), ("x",)), Stage(1, stage(1), ("x",)),
                              Stage(1, stage(2), ("x",))], {"x": 10})
    assert [(p, x) for p, _, x in seen] == [(0, 10), (1, 11), (2, 12)]
    assert [name for _, name, _ in seen] == [
        "sparseloom-profile-ov:CPU", "sparseloom-profile-ort:CPU", "sparseloom-profile-ort:CPU"]
    assert len(timing.starts) == len(timing.ends) == 3
    assert all(end >= start for start, end in zip(timing.starts, timing.ends, strict=True))
    # The chain is its stages plus the gaps between them, nothing else.
    parts = sum(timing.stage_ms(j) for j in range(3)) + sum(timing.handoff_ms(j) for j in range(2))
    assert timing.total_ms == pytest.approx(parts)
    assert all(timing.handoff_ms(j) >= 0 for j in range(2))


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs thread affinity")
def test_threads_are_pinned_and_errors_reach_the_caller() -> None:
    processors = _processors()

    def affinity(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"cores": frozenset(os.sched_getaffinity(0))}

    def broken(inputs: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("stage exploded")

    seen: list[frozenset[int]] = []

    def record(inputs: dict[str, Any]) -> dict[str, Any]:
        seen.append(inputs["cores"])
        return {}

    with PinnedThreads(processors) as threads:
        with pytest.raises(ValueError, match="stage exploded"):
            threads.run([Stage(0, broken, ())], {})
        for index, processor in enumerate(processors):  # still serving after the error
            threads.run([Stage(index, affinity, ()), Stage(index, record, ("cores",))], {})
            assert seen[-1] == frozenset(processor.cores)
