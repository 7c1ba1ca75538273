"""How the Ray executor splits a profile's work and merges the results back (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ConfigError, ProfileError
from sparseloom.core.types import Processor
from sparseloom.profile.measure import ProfileFailure, TaskMeasurement
from sparseloom.profile.ray_split import (
    device_groups,
    merge_measurements,
    merge_metrics,
    pack_by_first_choice,
)
from sparseloom.zoo.evaluate import prefix_passes

PROCESSORS = [Processor("ov:CPU", "ov", "CPU", cores=(0,)),
              Processor("ort:CPU", "ort", "CPU", cores=(1,)),
              Processor("ov:NPU", "ov", "NPU")]
CLUSTER = {"CPU": 4.0, "soc-a": 1.0, "memory": 1e9}


def test_processors_of_one_device_share_an_actor_the_rest_stay_on_the_driver_node() -> None:
    assert device_groups(PROCESSORS, {}, CLUSTER) == {None: [0, 1, 2]}
    assert device_groups(PROCESSORS, {"ov:NPU": "soc-a", "ov:CPU": "soc-a"}, CLUSTER) == {
        "soc-a": [0, 2], None: [1]}
    spec = "ort:CPU?threads=1&streams=1&cores=1"  # a full spec names the processor too
    assert device_groups(PROCESSORS, {spec: "soc-a"}, CLUSTER) == {None: [0, 2], "soc-a": [1]}


def test_unknown_processor_or_resource_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"processor 'ov:GPU', which is not profiled; "
                                          r"profiled processors: ov:CPU, ort:CPU, ov:NPU"):
        device_groups(PROCESSORS, {"ov:GPU": "soc-a"}, CLUSTER)
    with pytest.raises(ProfileError, match=r"advertises resource 'soc-b'.*CPU, memory, soc-a"
                                           r".*--resources '\{\"soc-b\": 1\}'"):
        device_groups(PROCESSORS, {"ov:NPU": "soc-b"}, CLUSTER)


def _measurement(count: int, value: float, failures: int = 0) -> TaskMeasurement:
    cells = (2, 3, count)
    return TaskMeasurement(
        latency_ms=np.full(cells, value), median_ms=np.full(cells, value + 1),
        spread_ms=np.full(cells, 0.1), compile_ms=np.full(cells, 5.0),
        load_ms=np.full(cells, 2.0), memory_bytes=np.full(cells, 7, dtype=np.int64),
        handoff_ms=np.full((1, count, count), value / 10),
        failures=[ProfileFailure("t", 0, 1, "ov:NPU", "load", "no")] * failures)


def test_groups_merge_into_the_processor_order_cross_device_handoffs_unmeasured() -> None:
    single = _measurement(3, 1.0)
    assert merge_measurements([single], [[0, 1, 2]], 3) is single
    merged = merge_measurements([_measurement(2, 1.0), _measurement(1, 2.0, failures=1)],
                                [[0, 2], [1]], 3)
    np.testing.assert_array_equal(merged.latency_ms[0, 0], [1.0, 2.0, 1.0])
    np.testing.assert_array_equal(merged.median_ms[1, 2], [2.0, 3.0, 2.0])
    assert merged.memory_bytes.dtype == np.int64 and (merged.memory_bytes == 7).all()
    handoff = merged.handoff_ms[0]
    assert handoff[0, 2] == handoff[2, 0] == handoff[0, 0] == 0.1 and handoff[1, 1] == 0.2
    assert np.isnan(handoff[0, 1]) and np.isnan(handoff[1, 2])  # between devices
    assert len(merged.failures) == 1


def test_variants_are_packed_by_first_choice_keeping_prefixes_together() -> None:
    requested = sorted({(a, b, c) for a in range(5) for b in range(3) for c in (0, 2)
                        if (a + b + c) % 3})
    chunks = pack_by_first_choice(requested, bins=2)
    assert len(chunks) == 2
    assert sorted(c for chunk in chunks for c in chunk) == requested
    firsts = [{c[0] for c in chunk} for chunk in chunks]
    assert not firsts[0] & firsts[1]  # a prefix never runs twice
    assert sum(map(prefix_passes, chunks)) == prefix_passes(requested)
    assert pack_by_first_choice(requested, bins=64) == [
        [c for c in requested if c[0] == a] for a in range(5)]
    assert pack_by_first_choice([], bins=2) == []


def test_merge_refuses_a_missing_or_duplicated_variant() -> None:
    chunks = [[(0, 0), (0, 1)], [(1, 0)]]
    requested = [(0, 0), (0, 1), (1, 0)]
    good = [{(0, 0): 0.5, (0, 1): 0.25}, {(1, 0): 0.75}]
    assert merge_metrics(requested, chunks, good, "t") == {(0, 0): 0.5, (0, 1): 0.25,
                                                            (1, 0): 0.75}
    with pytest.raises(ProfileError, match=r"missing \[\(0, 1\)\]"):
        merge_metrics(requested, chunks, [{(0, 0): 0.5}, {(1, 0): 0.75}], "t")
    with pytest.raises(ProfileError, match=r"returned twice \[\(0, 0\)\]"):
        merge_metrics(requested, [chunks[0], [(1, 0), (0, 0)]],
                       [good[0], {(1, 0): 0.75, (0, 0): 0.5}], "t")
    with pytest.raises(ProfileError, match=r"not asked for \[\(1, 1\)\]"):
        merge_metrics(requested, chunks, [good[0], {(1, 0): 0.75, (1, 1): 0.1}], "t")

