"""``refresh_profile`` on ``tiny`` with real backends: injected drift is found and rescaled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.profile.builder import ProfileOptions, build_profile
from sparseloom.profile.measure import ProfilerConfig, default_backend_resolver
from sparseloom.profile.refresh import find_cached_table, refresh_profile, stratified_sample
from sparseloom.profile.store import ProfileStore
from sparseloom.profile.table import ProfileTable
from sparseloom.zoo.options import ZooOptions
from tests.profile.loaded_wrapper import WrappedLoaded
from tests.profile.small_zoo import VARIANTS

#: Each test times real models against a drift threshold; a test on another worker beside them
#: is load they would read as drift (a re-timed 2× cell read 2.33× on two workers).
pytestmark = pytest.mark.serial

OPTIONS = ProfileOptions(config=ProfilerConfig(warmup=1, repeats=5), samples=8, seed=5)
#: Every model call takes this much longer (wall clock): far above the tiny subgraphs' own
#: ~0.05 ms, so the latencies are steady even on a busy machine.
BASE_MS = 3.0


@attrs.define
class DelayingBackendForTest:
    """Wraps a real backend; every call of a loaded model busy-waits ``delay_ms`` more."""

    inner: Any
    delay_ms: float

    def compile(self, model: Any, processor: Any) -> Any:
        return self.inner.compile(model, processor)

    def load(self, compiled: Any, processor: Any) -> Any:
        return _Delayed(self.inner.load(compiled, processor), self)

    def infer(self, loaded: Any, inputs: Any) -> Any:
        return self.inner.infer(loaded.inner, inputs)

    def unload(self, loaded: Any) -> None:
        self.inner.unload(loaded.inner)


@attrs.define
class _Delayed(WrappedLoaded):
    backend: DelayingBackendForTest

    def runner(self, inputs: Any) -> Any:
        end = time.perf_counter() + self.backend.delay_ms / 1e3
        outputs = self.inner.runner(inputs)
        while time.perf_counter() < end:
            pass
        return outputs


def delaying(delays: dict[str, float]) -> Any:
    """A backend resolver whose models take ``delays[processor name]`` ms longer."""
    doubles: dict[str, DelayingBackendForTest] = {}

    def resolve(processor: Any) -> Any:
        if processor.name not in doubles:
            doubles[processor.name] = DelayingBackendForTest(
                default_backend_resolver(processor), delays[processor.name])
        return doubles[processor.name]

    return resolve


@pytest.fixture
def cached(tiny: Any, tiny_zoos: dict[str, Any], tmp_path: Path) -> ProfileTable:
    steady = delaying({"ov:CPU": BASE_MS, "ort:CPU": BASE_MS})
    return build_profile(tiny, zoos=tiny_zoos, options=OPTIONS, progress=False,
                         resolve_backend=steady, cache_root=tmp_path)


def refresh(tiny: Any, tmp_path: Path, delays: dict[str, float], **kwargs: Any
            ) -> tuple[ProfileTable, dict[str, Any]]:
    from sparseloom.zoo.build import build_zoo

    zoos = {task.name: build_zoo(task, ZooOptions(subgraphs=2, variants=VARIANTS),
                                 progress=False) for task in tiny.tasks}
    return refresh_profile(tiny, options=OPTIONS, resolve_backend=delaying(delays),
                           cache_root=tmp_path, zoos=zoos, **kwargs)


def test_no_drift_leaves_the_profile_unchanged(tiny: Any, cached: ProfileTable,
                                               tmp_path: Path) -> None:
    before = cached.task("tiny").latency_ms.copy()
    steady = {"ov:CPU": BASE_MS, "ort:CPU": BASE_MS}
    table, first = refresh(tiny, tmp_path, steady, threshold=0.25)
    assert first["calibrated"] and first["action"] == "none"  # the full table was re-timed
    table, record = refresh(tiny, tmp_path, steady, threshold=0.25)
    assert not record["calibrated"] and record["action"] == "none" and record["drifted"] == {}
    assert all(abs(f - 1) < 0.25 for f in record["factors"].values())
    np.testing.assert_array_equal(table.task("tiny").latency_ms, before)
    saved = ProfileTable.load(cached.meta["table_directory"])
    assert [r["action"] for r in saved.meta["refresh"]] == ["none", "none"]
    assert saved.meta["refresh_reference"]["tiny"]["cells"] == record["sample"]["tiny"]


def test_injected_drift_on_one_processor_is_rescaled(tiny: Any, tiny_zoos: dict[str, Any],
                                                     cached: ProfileTable,
                                                     tmp_path: Path) -> None:
    refresh(tiny, tmp_path, {"ov:CPU": BASE_MS, "ort:CPU": BASE_MS}, sample=3, threshold=0.25)
    before = ProfileTable.load(cached.meta["table_directory"]).task("tiny")
    table, record = refresh(tiny, tmp_path, {"ov:CPU": BASE_MS, "ort:CPU": 2 * BASE_MS},
                            sample=3, threshold=0.25)
    assert record["drifted"] == {"tiny": ["ort:CPU"]} and record["action"] == "rescaled"
    assert record["task_factors"]["tiny"]["ort:CPU"] == record["factors"]["ort:CPU"]
    factor = record["factors"]["ort:CPU"]
    assert 1.6 < factor < 2.3 and abs(record["factors"]["ov:CPU"] - 1) < 0.25
    after = table.task("tiny")
    assert record["sample"]["tiny"][:2] == [[0, 0], [1, 0]]  # the dense subgraphs first
    np.testing.assert_allclose(after.latency_ms[:, :, 1], before.latency_ms[:, :, 1] * factor,
                               rtol=1e-3)
    np.testing.assert_array_equal(after.latency_ms[:, :, 0], before.latency_ms[:, :, 0])
    assert after.handoff_ms[0, 0, 1] == pytest.approx(before.handoff_ms[0, 0, 1] * factor,
                                                      rel=1e-3)
    # where the table lives and what build_profile reads next time both hold the new values
    saved = ProfileTable.load(cached.meta["table_directory"])
    np.testing.assert_allclose(saved.task("tiny").latency_ms, after.latency_ms)
    assert saved.meta["refresh"][-1]["factors"]["ort:CPU"] == pytest.approx(factor, abs=1e-3)
    rebuilt = build_profile(tiny, zoos=tiny_zoos, options=OPTIONS, progress=False,
                            cache_root=tmp_path)
    np.testing.assert_allclose(rebuilt.task("tiny").latency_ms, after.latency_ms)
    partial = ProfileStore(cached.meta["cache_directory"]).load("latency-tiny")
    assert partial is not None and partial[1]["refresh"][-1]["action"] == "rescaled"
    # the drifted processor's reference moved with it: the same load again is no drift
    _, again = refresh(tiny, tmp_path, {"ov:CPU": BASE_MS, "ort:CPU": 2 * BASE_MS},
                       sample=3, threshold=0.25)
    assert again["action"] == "none" and abs(again["factors"]["ort:CPU"] - 1) < 0.25


def test_full_refresh_and_a_drifted_first_refresh_retime_every_cell(
        tiny: Any, cached: ProfileTable, tmp_path: Path) -> None:
    slow_ov = {"ov:CPU": 2 * BASE_MS, "ort:CPU": BASE_MS}
    table, first = refresh(tiny, tmp_path, slow_ov, threshold=0.25)
    assert first["calibrated"] and first["drifted"] == {"tiny": ["ov:CPU"]}
    assert first["action"] == "retimed"
    ratio = table.task("tiny").latency_ms[:, :, 0] / cached.task("tiny").latency_ms[:, :, 0]
    # every cell re-timed: about 2× (a busy shared machine adds to single cells, never less)
    assert 1.7 < np.median(ratio) < 2.3 and np.all(ratio > 1.5)
    table, record = refresh(tiny, tmp_path, {"ov:CPU": BASE_MS, "ort:CPU": BASE_MS},
                            threshold=0.25, mode="full")
    assert not record["calibrated"] and record["action"] == "retimed"
    assert record["drifted"] == {"tiny": ["ov:CPU"]} and record["factors"]["ov:CPU"] < 0.75
    ratio = table.task("tiny").latency_ms[:, :, 0] / cached.task("tiny").latency_ms[:, :, 0]
    assert 0.8 < np.median(ratio) < 1.25 and np.all(ratio > 0.75)


def test_stratified_sample_spreads_over_positions_and_latencies(cached: ProfileTable) -> None:
    profile = cached.task("tiny")
    assert stratified_sample(profile, 1) == [(0, 0)]
    cells = stratified_sample(profile, 5)
    assert cells[:2] == [(0, 0), (1, 0)] and len(set(cells)) == 5
    assert len(stratified_sample(profile, 100)) == 8  # never more than S·V


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"threshold": 0.0}, "drift threshold must be > 0"),
    ({"threshold": -0.1}, "drift threshold must be > 0"),
    ({"sample": 0}, "at least 1 subgraph per task"),
    ({"mode": "sometimes"}, "unknown refresh mode 'sometimes'; choose one of rescale, full"),
])
def test_bad_inputs_are_clear_errors(tiny: Any, tmp_path: Path, kwargs: dict[str, Any],
                                     message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        refresh_profile(tiny, options=OPTIONS, cache_root=tmp_path, **kwargs)


def test_no_cached_profile_says_how_to_make_one(tiny: Any, tmp_path: Path) -> None:
    from sparseloom.profile.builder import resolve_processors

    with pytest.raises(ProfileError, match="run `sparseloom profile tiny` first"):
        refresh_profile(tiny, options=OPTIONS, cache_root=tmp_path / "empty")
    with pytest.raises(ProfileError, match="no cached profile of workload 'tiny'"):
        find_cached_table("tiny", resolve_processors(None, tiny), OPTIONS, tmp_path)


def test_refresh_waits_for_another_profile_and_records_the_load_it_timed_under(
        tiny: Any, cached: ProfileTable, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from sparseloom.profile import timing_guard
    from sparseloom.profile.timing_guard import profile_lock

    held, release = threading.Event(), threading.Event()

    def other_profile() -> None:  # a build of tiny, holding its profile lock for a second
        with profile_lock(tmp_path / "tiny", "tiny"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=other_profile)
    holder.start()
    assert held.wait(10)
    threading.Timer(1.0, release.set).start()
    monkeypatch.setattr(timing_guard, "FOREIGN_CORES_LIMIT", -1.0)  # every timing is "busy"
    capsys.readouterr()
    started = time.perf_counter()
    _, record = refresh(tiny, tmp_path, {"ov:CPU": BASE_MS, "ort:CPU": BASE_MS},
                        threshold=0.25)
    holder.join(10)
    assert time.perf_counter() - started > 0.5  # it waited for the other profile
    err = capsys.readouterr().err.splitlines()
    waiting = [line for line in err if line.startswith("waiting")]
    assert len(waiting) == 1 and "waiting for another profile of tiny (pid " in waiting[0], err
    warnings = [line for line in err if line.startswith("Warning:")]
    assert len(warnings) == 1 and "task 'tiny'" in warnings[0], warnings
    assert "sparseloom profile tiny --no-cache" in warnings[0]
    load = record["timing_load"]["tiny"]
    assert load["busy"] is True and load["executor"] == "local" and load["seconds"] > 0
    saved = ProfileTable.load(cached.meta["table_directory"])
    assert saved.meta["refresh"][-1]["timing_load"] == {"tiny": load}
    assert record["load_average"] is None or record["load_average"] >= 0
