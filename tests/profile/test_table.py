"""The profile table: indexing, vectorised latency and accuracy, NPZ + JSON round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.profile.table import ProfileTable, TaskProfile


def make_table(positions: int = 2, variants: int = 3, processors: int = 2) -> ProfileTable:
    rng = np.random.default_rng(0)
    shape = (positions, variants, processors)
    stitched = variants**positions
    measured = np.full(stitched, np.nan)
    measured[0] = 0.95
    profile = TaskProfile(
        task="vision", metric="accuracy",
        variant_names=[f"v{i}" for i in range(variants)],
        variant_kinds=["dense"] + ["int8"] * (variants - 1),
        variant_levels=np.zeros(variants), source_accuracy=np.linspace(0.9, 0.7, variants),
        latency_ms=rng.uniform(1, 5, shape), latency_spread_ms=np.zeros(shape),
        compile_ms=np.ones(shape), load_ms=np.ones(shape),
        memory_bytes=np.full(shape, 1024), handoff_ms=np.full((positions - 1, processors,
                                                                processors), 0.1),
        accuracy_estimated=rng.uniform(0.6, 0.9, stitched), accuracy_measured=measured,
    )
    return ProfileTable("tiny", ["ov:CPU", "ort:CPU"][:processors], {"vision": profile},
                        {"zoo_hash": "abc"})


def test_latency_is_additive_plus_handoff() -> None:
    table = make_table()
    lat = table.tasks["vision"].latency_ms
    expected = lat[0, 1, 0] + lat[1, 2, 1] + 0.1
    assert table.latency("vision", (1, 2), ("ov:CPU", "ort:CPU")) == pytest.approx(expected)
    assert table.latency("vision", (1, 2), [0, 1], include_handoff=False) == pytest.approx(
        expected - 0.1)
    many = table.latency("vision", [[1, 2], [0, 0]], [[0, 1], [1, 1]])
    assert many[1] == pytest.approx(lat[0, 0, 1] + lat[1, 0, 1] + 0.1)


def test_latency_all_matches_rowwise() -> None:
    table = make_table(positions=3, variants=4)
    profile = table.tasks["vision"]
    order = np.array([1, 0, 1])
    every = profile.latency_all(order)
    rows = profile.latency(profile.choices(), order)
    np.testing.assert_allclose(every, rows)
    assert profile.index((1, 2, 3)) == 1 * 16 + 2 * 4 + 3
    np.testing.assert_array_equal(profile.choices([27]), [[1, 2, 3]])


def test_accuracy_prefers_measured() -> None:
    table = make_table()
    assert table.accuracy("vision", (0, 0)) == pytest.approx(0.95)
    assert table.accuracy("vision").shape == (9,)


def test_round_trip(tmp_path: Path) -> None:
    table = make_table()
    table.save(tmp_path)
    loaded = ProfileTable.load(tmp_path)
    assert loaded.processors == table.processors and loaded.meta == table.meta
    for field in ("latency_ms", "handoff_ms", "accuracy_estimated", "memory_bytes"):
        np.testing.assert_array_equal(getattr(loaded.tasks["vision"], field),
                                      getattr(table.tasks["vision"], field))


def test_cold_calls_round_trip_and_default_to_the_stage_times(tmp_path: Path) -> None:
    import attrs

    table = make_table()
    hot = table.tasks["vision"].latency_ms
    np.testing.assert_array_equal(table.tasks["vision"].latency_cold_ms, hot)  # not recorded
    cold = ProfileTable(table.workload, table.processors,
                        {"vision": attrs.evolve(table.tasks["vision"], latency_cold_ms=hot * 2)},
                        table.meta)
    cold.save(tmp_path)
    loaded = ProfileTable.load(tmp_path).tasks["vision"]
    np.testing.assert_array_equal(loaded.latency_cold_ms, hot * 2)
    np.testing.assert_array_equal(loaded.latency_ms, hot)
    np.testing.assert_array_equal(loaded.cold().latency_ms, hot * 2)
    with pytest.raises(ProfileError, match="latency_cold_ms"):
        attrs.evolve(loaded, latency_cold_ms=hot[:, :, :1])


def test_bad_queries_say_what_is_known(tmp_path: Path) -> None:
    table = make_table()
    with pytest.raises(ProfileError, match="profiled processors: ov:CPU, ort:CPU"):
        table.latency("vision", (0, 0), ("ov:GPU", "ov:CPU"))
    with pytest.raises(ProfileError, match="profiled tasks: vision"):
        table.latency("audio", (0, 0), (0, 1))
    with pytest.raises(ProfileError, match="2 positions"):
        table.latency("vision", (0, 0, 0), (0, 1))
    with pytest.raises(ProfileError, match="cannot read a profile table"):
        ProfileTable.load(tmp_path / "missing")
