"""Accuracy estimators from another distribution are checked at the boundary.

Each estimator here is a plugin defined in the test, registered like a third-party one. A bad
prediction (wrong length, NaN, out of the metric's range) or a failing ``fit`` is one
:class:`ProfileError` naming the estimator and its distribution, never a numpy traceback or a
silently stored value; ``seed=`` is passed exactly when the factory takes it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.core.hookspecs import hookimpl
from sparseloom.profile.builder import ProfileOptions
from sparseloom.profile.estimate import create_accuracy_estimator, estimate_accuracy, takes_seed
from sparseloom.profile.validation import accuracy_validation
from tests.plugins.estimators.test_accuracy_estimators import synthetic_zoo


class FaultyPredictions:
    """Test double: an estimator whose ``predict`` returns what the test injects."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        if self.fault == "fit raises":
            raise ValueError("singular matrix")

    def predict(self, features: np.ndarray) -> Any:
        rows = np.asarray(features).shape[0]
        return {
            "short": np.full(rows - 1, 0.5),
            "nan": np.r_[np.full(rows - 1, 0.5), np.nan],
            "above one": np.full(rows, 2.58),
            "negative": np.full(rows, -0.2),
            "column": np.full((rows, 1), 0.5),
            "fit raises": np.full(rows, 0.5),
        }[self.fault]


class SeedlessMean:
    """An estimator whose factory takes no seed; predicts the mean training metric."""

    def __init__(self) -> None:
        self.mean = 0.0

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        self.mean = float(np.mean(accuracies))

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(features).shape[0], self.mean)


class RejectsSeedInside:
    """Takes ``seed`` but raises a TypeError of its own: must not be retried without it."""

    def __init__(self, seed: int = 0) -> None:
        raise TypeError("bad config inside the estimator")


def _register(register_plugin, name: str, factory: Any) -> None:
    register_plugin(SimpleNamespace(sparseloom_register_estimators=hookimpl(
        lambda register: register(name, factory, capabilities=["accuracy"]))), f"plugin-{name}")


def _estimate(name: str) -> np.ndarray:
    features, choices, truth = synthetic_zoo(variants=4, positions=2)
    measured = {tuple(int(c) for c in row): float(t)
                for row, t in zip(choices[:10], truth[:10], strict=True)}
    return estimate_accuracy(features, measured, ProfileOptions(accuracy_estimator=name))


@pytest.mark.parametrize(("fault", "message"), [
    ("short", r"predict\(\) returned shape \[15\] for 16 feature rows"),
    ("nan", r"returned 1 NaN or infinite value\(s\) of 16 \(first at row 15\)"),
    ("above one", r"returned 2.58 at row 0 \(16 value\(s\) outside the metric range \[0, 1\]\)"),
    ("negative", r"returned -0.2 at row 0"),
    ("fit raises", r"fit\(\) failed: ValueError: singular matrix"),
])
def test_a_bad_estimator_is_one_line_naming_it(register_plugin, fault: str,
                                               message: str) -> None:
    _register(register_plugin, "faulty", lambda: FaultyPredictions(fault))
    with pytest.raises(ProfileError, match=message) as caught:
        _estimate("faulty")
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("accuracy estimator 'faulty' (distribution test 0)")


def test_a_column_vector_of_the_right_length_is_accepted(register_plugin) -> None:
    _register(register_plugin, "column", lambda: FaultyPredictions("column"))
    assert np.allclose(_estimate("column"), 0.5)


def test_seed_is_passed_only_when_the_factory_takes_it(register_plugin) -> None:
    _register(register_plugin, "seedless", SeedlessMean)
    estimated = _estimate("seedless")
    assert estimated.shape == (16,) and np.ptp(estimated) == 0.0 and 0.0 < estimated[0] < 1.0
    assert not takes_seed(SeedlessMean) and takes_seed(RejectsSeedInside)
    assert takes_seed(lambda **options: None)
    xgb, registration = create_accuracy_estimator("xgboost", 7)
    assert registration.distribution == "sparseloom" and xgb.params["random_state"] == 7


def test_a_factory_error_is_not_hidden_by_a_retry(register_plugin) -> None:
    _register(register_plugin, "strict", RejectsSeedInside)
    with pytest.raises(ProfileError, match=r"'strict' \(distribution test 0\) could not be "
                                           r"built: TypeError: bad config inside"):
        create_accuracy_estimator("strict", 0)


def test_validation_checks_the_same_boundary(register_plugin) -> None:
    _register(register_plugin, "faulty", lambda: FaultyPredictions("nan"))
    features, _, truth = synthetic_zoo(variants=4, positions=2)
    with pytest.raises(ProfileError, match=r"accuracy estimator 'faulty'.*NaN"):
        accuracy_validation(features, truth, estimator="faulty", n_samples=8,
                            feature_set="extended", repeats=1)
