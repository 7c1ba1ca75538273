"""``default_sample_count``: N = ⌈4·S·V⌉, at most 80% of V**S, never fewer than V or 6."""

from __future__ import annotations

import pytest

from sparseloom.profile.features import default_sample_count


@pytest.mark.parametrize(("variants", "positions", "expected"), [
    (10, 2, 80),    # the bundled zoos: 80 of 100 (docs/results.md, *Estimator routes*)
    (10, 3, 120),   # the paper's S = 3: 120 of 1,000, linear in S·V
    (4, 2, 12),     # capped at 80% of 16
    (3, 2, 7),      # capped at 80% of 9, but never below 6
    (2, 2, 4),      # fewer than 6 stitched variants: all of them
    (10, 1, 10),    # S = 1: every original, nothing stitched
])
def test_default_sample_count(variants: int, positions: int, expected: int) -> None:
    assert default_sample_count(variants, positions) == expected
