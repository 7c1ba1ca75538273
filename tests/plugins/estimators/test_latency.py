"""The ``additive`` and ``additive-fitted`` latency estimators, chosen by name."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.core.registry import create_registry
from sparseloom.core.types import StitchedVariant
from tests.core.test_profile_table import make_table


def test_latency_estimators_by_name() -> None:
    table = make_table()
    registry = create_registry(autoload=False)
    additive = registry.create("estimator", "additive")
    stitched = StitchedVariant("vision", (1, 2))
    order = ("ov:CPU", "ort:CPU")
    assert additive.predict(stitched, order, table) == pytest.approx(
        table.latency("vision", (1, 2), order))
    paper = registry.create("estimator", "additive", include_handoff=False)
    assert paper.predict(stitched, order, table) == pytest.approx(
        table.latency("vision", (1, 2), order) - 0.1)
    fitted = registry.create("estimator", "additive-fitted")
    choices = table.tasks["vision"].choices()
    orders = np.tile([0, 1], (len(choices), 1))
    base = table.latency("vision", choices, orders)
    fitted.fit("vision", choices, orders, 2 * base + 1, table)
    assert fitted.predict(stitched, order, table) == pytest.approx(
        2 * table.latency("vision", (1, 2), order) + 1)
    with pytest.raises(ProfileError, match="too few measured chains"):
        fitted.fit("vision", choices[:2], orders[:2], base[:2], table)
