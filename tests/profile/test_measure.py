"""The profiler times subgraphs as the runtime runs them: in place, on the processor's cores."""

from __future__ import annotations

import os
import threading
from typing import Any

import attrs
import numpy as np
import pytest

from sparseloom.core.processors import allowed_cores
from sparseloom.core.types import Processor
from sparseloom.profile.measure import ProfilerConfig, SubgraphJob, measure_task

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="thread pinning needs os.sched_setaffinity (Linux)")


@attrs.define(eq=False)
class ProbeModelForTest:
    """A loaded 'model' that records the thread and cores of every call made to it."""

    processor: Processor
    position: int
    calls: list[tuple[frozenset[int], str, str]] = attrs.field(factory=list)
    input_names: tuple[str, ...] = ("x",)
    memory_bytes: int = 0
    broken: bool = False

    def runner(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.broken:
            raise RuntimeError("probe failure")
        self.calls.append((frozenset(os.sched_getaffinity(0)),
                           threading.current_thread().name, "runner"))
        return {"x": inputs["x"] + 1}


@attrs.define
class ProbeBackendForTest:
    """A backend of probe models; ``infer`` records that it was called instead of ``runner``."""

    models: list[ProbeModelForTest] = attrs.field(factory=list)

    def compile(self, model: str, processor: Processor) -> str:
        return model

    def load(self, compiled: str, processor: Processor) -> ProbeModelForTest:
        model = ProbeModelForTest(processor, int(compiled.split("-")[1]))
        self.models.append(model)
        return model

    def infer(self, loaded: ProbeModelForTest, inputs: dict[str, np.ndarray]) -> Any:
        loaded.calls.append((frozenset(os.sched_getaffinity(0)),
                             threading.current_thread().name, "infer"))
        return {"x": inputs["x"] + 1}

    def unload(self, loaded: ProbeModelForTest) -> None:
        pass


def _processors() -> list[Processor]:
    cores = allowed_cores()
    second = cores[1] if len(cores) > 1 else cores[0]
    return [Processor("ov:CPU", "ov", "CPU", cores=(cores[0],)),
            Processor("ort:CPU", "ort", "CPU", cores=(second,))]


def _jobs(positions: int = 2, variants: int = 2) -> list[SubgraphJob]:
    return [SubgraphJob(j, v, f"probe-{j}-{v}", {"x": np.zeros((1, 4), np.float32)})
            for j in range(positions) for v in range(variants)]


def test_subgraphs_run_in_place_on_their_processors_cores() -> None:
    backend = ProbeBackendForTest()
    processors = _processors()
    caller = frozenset(os.sched_getaffinity(0))
    result = measure_task("probe", _jobs(), processors, lambda _: backend,
                          ProfilerConfig(warmup=2, repeats=3), chains=[((0, 1), (0, 1))])
    assert result.failures == []
    assert np.all(np.isfinite(result.latency_ms)) and np.all(result.latency_ms >= 0)
    assert np.isfinite(result.chain_ms).all()
    for model in backend.models:
        cores = {frozenset(model.processor.cores)}
        assert model.calls, model
        assert {affinity for affinity, _, _ in model.calls} == cores
        assert {thread for _, thread, _ in model.calls} == {
            f"sparseloom-profile-{model.processor.name}"}
        # Inputs are checked once through infer (the warm-up); the timed runs call the
        # model's runner in place, as the runtime's worker does.
        kinds = [kind for _, _, kind in model.calls]
        assert kinds[:2] == ["infer", "infer"] and set(kinds[2:]) == {"runner"}
    assert frozenset(os.sched_getaffinity(0)) == caller  # the caller is never pinned


def test_handoff_on_one_processor_costs_less_than_across_processors() -> None:
    if len(allowed_cores()) < 2:
        pytest.skip("needs two usable cores, one per processor")
    result = measure_task("probe", _jobs(), _processors(), lambda _: ProbeBackendForTest(),
                          ProfilerConfig(warmup=1, repeats=15))
    handoff = result.handoff_ms[0]
    assert handoff.shape == (2, 2) and np.all(handoff >= 0)
    # a -> a runs the next stage at once on the same thread; a -> b puts the tensors on b's
    # queue and wakes b's thread.
    for a, b in ((0, 1), (1, 0)):
        assert handoff[a, a] < handoff[a, b], handoff


def test_a_failing_runner_is_recorded_and_the_rest_is_kept() -> None:
    class FailingBackendForTest(ProbeBackendForTest):
        def load(self, compiled: str, processor: Processor) -> ProbeModelForTest:
            model = super().load(compiled, processor)
            if compiled == "probe-1-1" and processor.name == "ort:CPU":
                model.broken = True
            return model

    result = measure_task("probe", _jobs(), _processors(), lambda _: FailingBackendForTest(),
                          ProfilerConfig(warmup=1, repeats=3))
    assert [(f.position, f.variant, f.processor, f.operation) for f in result.failures] == [
        (1, 1, "ort:CPU", "infer")]
    assert "probe failure" in result.failures[0].error
    assert np.isnan(result.latency_ms[1, 1, 1])
    assert np.isfinite(np.delete(result.latency_ms.ravel(), 7)).all()


@attrs.define(eq=False)
class RecordingModelForTest(ProbeModelForTest):
    """A probe model that also records the input of every runner call."""

    seen: list[float] = attrs.field(factory=list)

    def runner(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen.append(float(inputs["x"][0, 0]))
        return super().runner(inputs)


@attrs.define
class RecordingBackendForTest(ProbeBackendForTest):
    """Loads recording models, by (position, variant, processor)."""

    loaded: dict[tuple[int, int, str], RecordingModelForTest] = attrs.field(factory=dict)

    def load(self, compiled: str, processor: Processor) -> ProbeModelForTest:
        _, position, variant = compiled.split("-")
        model = RecordingModelForTest(processor, int(position))
        self.loaded[int(position), int(variant), processor.name] = model
        return model


def test_a_burst_times_calls_back_to_back_each_fed_as_the_first() -> None:
    backend = RecordingBackendForTest()
    repeats, burst = 3, 4
    result = measure_task("probe", _jobs(), _processors(), lambda _: backend,
                          ProfilerConfig(warmup=1, repeats=repeats, burst=burst))
    assert result.failures == [] and np.all(np.isfinite(result.latency_ms))
    assert np.all(np.isfinite(result.handoff_ms)) and np.all(np.isfinite(result.cold_ms))
    for processor in ("ov:CPU", "ort:CPU"):
        # A variant no hand-off pair uses runs only alone: burst calls per round, every one
        # fed the job's inputs (zeros), never the previous call's outputs.
        assert backend.loaded[0, 1, processor].seen == [0.0] * (repeats * burst)
        # The second position's dense model also follows the first in the hand-off pairs:
        # there every run of the burst feeds it the first stage's output (1).
        assert set(backend.loaded[1, 0, processor].seen) == {0.0, 1.0}
    assert ProfilerConfig(burst=4).cache_key() != ProfilerConfig().cache_key()
