"""The ``ray`` profile executor on a local 2-CPU Ray instance: the same profile as in-process,
a killed worker retried without a lost or duplicated result, clear errors from the workers."""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.profile.builder import ProfileOptions, build_profile
from sparseloom.profile.measure import ProfilerConfig, default_backend_resolver
from sparseloom.profile.table import ProfileTable
from sparseloom.zoo.types import Zoo

ray = pytest.importorskip("ray")
from sparseloom.profile.ray_executor import RayExecutor  # noqa: E402  (needs ray)

OPTIONS = ProfileOptions(config=ProfilerConfig(warmup=1, repeats=3), samples=8)
#: A custom resource the local instance advertises, as a device's node would.
DEVICE = "soc-test"


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    ray.init(address="local", num_cpus=2, resources={DEVICE: 1}, include_dashboard=False,
             log_to_driver=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_zoo(tiny_zoos: dict[str, Any]) -> Zoo:
    """The small zoo of tiny's one task (tests/profile/conftest.py)."""
    return tiny_zoos["tiny"]


def zoo_copy(zoo: Zoo, where: Path) -> Zoo:
    """The zoo's files in a folder of their own, without its store of measured metrics, so
    every profile built on it measures its accuracies itself."""
    shutil.copytree(zoo.directory, where, ignore=shutil.ignore_patterns("metrics"))
    return Zoo(where, zoo.manifest)


def build(tiny: Any, zoo: Zoo, where: Path, executor: Any = None,
          **kwargs: Any) -> ProfileTable:
    return build_profile(tiny, zoos={"tiny": zoo_copy(zoo, where / "zoo")}, options=OPTIONS,
                         progress=False, cache_root=where / "profiles", executor=executor,
                         **kwargs)


@pytest.fixture(scope="module")
def in_process(tiny: Any, tiny_zoo: Zoo, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build(tiny, tiny_zoo, tmp_path_factory.mktemp("in-process"))


def assert_same_profile(ray_table: ProfileTable, in_process: ProfileTable) -> None:
    """Accuracies and fidelities exactly equal; latencies measured for the same cells; the
    same cache keys (each build caches under its own root)."""
    got, expected = ray_table.task("tiny"), in_process.task("tiny")
    for folder in ("cache_directory", "accuracy_cache_directory", "table_directory"):
        assert Path(ray_table.meta[folder]).name == Path(in_process.meta[folder]).name
    np.testing.assert_array_equal(got.accuracy_measured, expected.accuracy_measured)
    np.testing.assert_array_equal(got.accuracy_estimated, expected.accuracy_estimated)
    np.testing.assert_array_equal(got.fidelity_error, expected.fidelity_error)
    np.testing.assert_array_equal(got.source_accuracy, expected.source_accuracy)
    assert got.latency_ms.shape == expected.latency_ms.shape == (2, 4, 2)
    assert got.handoff_ms.shape == expected.handoff_ms.shape == (1, 2, 2)
    assert np.isfinite(got.latency_ms).all() and (got.latency_ms > 0).all()
    assert np.isfinite(got.handoff_ms).all()
    assert ray_table.meta["executor"] == "ray" and ray_table.meta["failures"] == []


def test_ray_profile_equals_in_process(ray_instance: Any, tiny: Any, tiny_zoo: Zoo,
                                       in_process: Any, tmp_path: Path) -> None:
    # Latency on the actor of the node advertising the device's resource (this one).
    both = {"ov:CPU": DEVICE, "ort:CPU": DEVICE}
    with RayExecutor(latency_resources=both) as executor:
        table = build(tiny, tiny_zoo, tmp_path, executor)
        assert set(executor._actors) == {DEVICE}
    assert_same_profile(table, in_process)
    assert table.meta["samples"] == {"tiny": 8}


class KillOnceEvaluator:
    """A fault injector: the first accuracy task to call it kills its Ray worker process
    (``os._exit``) mid-profile; every later call evaluates normally. Calls are logged to a file,
    the only record a killed process leaves."""

    def __init__(self, folder: Path) -> None:
        self.marker, self.calls = folder / "killed", folder / "calls"

    def __call__(self, zoo: Any, task: Any, choices: Any, **options: Any) -> Any:
        from sparseloom.zoo.evaluate import evaluate_stitched

        with open(self.calls, "a") as log:
            log.write(f"{sorted(choices)}\n")
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return evaluate_stitched(zoo, task, choices, **options)
        os._exit(1)


def test_killed_accuracy_worker_loses_and_duplicates_nothing(
        ray_instance: Any, tiny: Any, tiny_zoo: Zoo, in_process: Any, tmp_path: Path) -> None:
    killer = KillOnceEvaluator(tmp_path)
    with RayExecutor(evaluator=killer) as executor:
        table = build(tiny, tiny_zoo, tmp_path, executor)
    assert killer.marker.exists()
    # One call per accuracy task, and the killed one's again: the same variants, retried once.
    calls = Counter(killer.calls.read_text().splitlines())
    assert len(calls) >= 2 and sorted(calls.values()) == [1] * (len(calls) - 1) + [2]
    assert_same_profile(table, in_process)


class KillOnceResolver:
    """A fault injector: the first backend lookup in the latency actor kills the actor's
    process; the restarted actor measures normally."""

    def __init__(self, folder: Path) -> None:
        self.marker = folder / "actor-killed"

    def __call__(self, processor: Any) -> Any:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return default_backend_resolver(processor)
        os._exit(1)


def test_killed_latency_actor_is_restarted_and_measures_everything(
        ray_instance: Any, tiny: Any, tiny_zoo: Zoo, in_process: Any, tmp_path: Path) -> None:
    killer = KillOnceResolver(tmp_path)
    with RayExecutor() as executor:
        table = build(tiny, tiny_zoo, tmp_path, executor, resolve_backend=killer)
    assert killer.marker.exists()
    assert_same_profile(table, in_process)


def test_worker_that_cannot_see_the_zoo_names_the_file(ray_instance: Any, tiny: Any,
                                                       tiny_zoo: Zoo, tmp_path: Path) -> None:
    elsewhere = Zoo(tmp_path / "not-shared", tiny_zoo.manifest)
    with RayExecutor() as executor, pytest.raises(ProfileError) as caught:
        executor.evaluate(elsewhere, tiny.task("tiny"), [(0, 0), (1, 2)], processor="ort:CPU")
    message = str(caught.value)
    assert str(tmp_path / "not-shared") in message and "SPARSELOOM_CACHE_DIR" in message
    assert "Traceback" not in message


def test_a_device_resource_no_node_advertises_is_refused(ray_instance: Any, tiny: Any,
                                                         tiny_zoo: Zoo, tmp_path: Path) -> None:
    with RayExecutor(latency_resources={"ov:CPU": "soc-absent"}) as executor, pytest.raises(
            ProfileError, match=r"no node of the Ray cluster advertises resource 'soc-absent'"):
        build(tiny, tiny_zoo, tmp_path, executor)
