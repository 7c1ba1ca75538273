"""The ``additive`` and ``additive-fitted`` latency estimators, chosen by name.

Expectations are hand sums over a table of known latencies: each (position, variant,
processor) cell and each hand-off direction has its own value, so a mixed-up axis, a missed
hand-off or a hand-off read the wrong way round gives a different total.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.core.registry import create_registry
from sparseloom.core.types import StitchedVariant
from sparseloom.profile.table import ProfileTable, TaskProfile

#: latency_ms[position][variant] = (ov:CPU, ort:CPU)
LATENCY_MS = [
    [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
    [[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]],
]
#: handoff_ms[boundary][from][to]: ov→ov 0.125, ov→ort 0.25, ort→ov 0.5, ort→ort 0.75
HANDOFF_MS = [[[0.125, 0.25], [0.5, 0.75]]]
PROCESSORS = ("ov:CPU", "ort:CPU")


def known_table() -> ProfileTable:
    shape = (2, 3, 2)
    profile = TaskProfile(
        task="vision", metric="accuracy", variant_names=["v0", "v1", "v2"],
        variant_kinds=["dense", "int8", "int8"], variant_levels=np.zeros(3),
        source_accuracy=np.array([0.9, 0.8, 0.7]), latency_ms=np.array(LATENCY_MS),
        latency_spread_ms=np.zeros(shape), compile_ms=np.ones(shape), load_ms=np.ones(shape),
        memory_bytes=np.full(shape, 1024), handoff_ms=np.array(HANDOFF_MS),
        accuracy_estimated=np.full(9, 0.8), accuracy_measured=np.full(9, np.nan),
    )
    return ProfileTable("test", PROCESSORS, {"vision": profile}, {})


def hand_sum(choices: tuple[int, int], order: tuple[int, int], handoff: bool = True) -> float:
    first, second = order
    total = LATENCY_MS[0][choices[0]][first] + LATENCY_MS[1][choices[1]][second]
    return total + (HANDOFF_MS[0][first][second] if handoff else 0.0)


@pytest.fixture
def registry():
    return create_registry(autoload=False)


def test_additive_is_the_sum_of_subgraphs_and_handoff(registry) -> None:
    table = known_table()
    additive = registry.create("estimator", "additive")
    stitched = StitchedVariant("vision", (1, 2))
    assert additive.predict(stitched, ("ov:CPU", "ort:CPU"), table) == pytest.approx(
        3.0 + 60.0 + 0.25)
    assert additive.predict(stitched, ("ort:CPU", "ov:CPU"), table) == pytest.approx(
        4.0 + 50.0 + 0.5)
    assert additive.predict(stitched, ("ort:CPU", "ort:CPU"), table) == pytest.approx(
        4.0 + 60.0 + 0.75)
    choices = [(a, b) for a in range(3) for b in range(3)]
    orders = [(a % 2, (a + b) % 2) for a, b in choices]
    np.testing.assert_allclose(
        additive.predict_many("vision", choices, orders, table),
        [hand_sum(c, o) for c, o in zip(choices, orders, strict=True)])


def test_paper_additive_leaves_out_the_handoff(registry) -> None:
    paper = registry.create("estimator", "additive", include_handoff=False)
    stitched = StitchedVariant("vision", (2, 0))
    assert paper.predict(stitched, ("ort:CPU", "ov:CPU"), known_table()) == pytest.approx(
        6.0 + 10.0)


def test_fitted_learns_a_linear_correction(registry) -> None:
    table = known_table()
    fitted = registry.create("estimator", "additive-fitted")
    stitched = StitchedVariant("vision", (1, 2))
    # Until fitted it predicts like additive.
    assert fitted.predict(stitched, ("ov:CPU", "ort:CPU"), table) == pytest.approx(63.25)
    choices = [(a, b) for a in range(3) for b in range(3)]
    orders = [(a % 2, 1 - b % 2) for a, b in choices]
    measured = [2 * hand_sum(c, o) + 1 for c, o in zip(choices, orders, strict=True)]
    fitted.fit("vision", choices, orders, measured, table)
    assert fitted.predict(stitched, ("ov:CPU", "ort:CPU"), table) == pytest.approx(
        2 * 63.25 + 1)
    assert fitted.predict(stitched, ("ort:CPU", "ov:CPU"), table) == pytest.approx(
        2 * 54.5 + 1)
    with pytest.raises(ProfileError, match="too few measured chains"):
        fitted.fit("vision", choices[:2], orders[:2], measured[:2], table)
