"""The chance-level check of a task's dense metric, with the class facts tasks really carry."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.workload.checks import chance_level, class_count, warn_if_chance

BALANCED = np.repeat(np.arange(10), 5)


@pytest.mark.parametrize(("classes", "count"), [
    (10, 10), (["T-shirt", "Trouser", "Pullover"], 3), (("a", "b"), 2), (None, None), ([], None),
    (0, None), ("abc", None), (True, None)])
def test_class_count_takes_a_count_or_the_class_names(classes, count) -> None:
    assert class_count(classes) == count


def test_chance_level_is_the_majority_or_one_over_the_classes() -> None:
    assert chance_level("accuracy", BALANCED, None) == pytest.approx(0.1)
    # The bundled tasks' info lists class names (vision: ten Fashion-MNIST names).
    names = [f"class {i}" for i in range(20)]
    assert chance_level("accuracy", BALANCED, names) == pytest.approx(0.1)  # majority wins
    skewed = np.array([0] * 8 + [1] * 2)
    assert chance_level("accuracy", skewed, ["a", "b"]) == pytest.approx(0.8)
    assert chance_level("digit_accuracy", BALANCED, 10) is None


def test_warns_at_chance_and_not_above(capsys: pytest.CaptureFixture[str]) -> None:
    names = [f"class {i}" for i in range(10)]
    assert warn_if_chance("vision", "accuracy", 0.105, BALANCED, names)
    assert "at chance level" in capsys.readouterr().err
    assert not warn_if_chance("vision", "accuracy", 0.876, BALANCED, names)
