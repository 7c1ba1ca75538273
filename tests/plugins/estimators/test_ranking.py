"""The ranking accuracy estimators (``xgboost-rank``, ``xgboost-ndcg``, ``lightgbm-rank``)."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.core.registry import create_registry
from sparseloom.plugins.estimators.common import MIN_TRAINING_SAMPLES
from sparseloom.plugins.estimators.ranking import ScoreToMetric, relevance_grades
from sparseloom.profile.features import stitched_features
from sparseloom.profile.metrics import spearman, top_k_recall
from tests.plugins.estimators.test_accuracy_estimators import synthetic_zoo

RANKERS = ["xgboost-rank", "xgboost-ndcg", "lightgbm-rank"]


@pytest.mark.parametrize("name", RANKERS)
def test_ranker_by_name_orders_held_out_variants_on_the_metric_scale(name: str) -> None:
    registry = create_registry(autoload=False)
    assert "accuracy" in registry.get_estimator(name).capabilities
    estimator = registry.create("estimator", name)
    features, choices, truth = synthetic_zoo()
    x = stitched_features(features, choices)
    train = np.random.default_rng(1).choice(len(truth), size=32, replace=False)
    test = np.setdiff1d(np.arange(len(truth)), train)
    estimator.fit(x[train], truth[train])
    predicted = estimator.predict(x[test])
    assert predicted.shape == test.shape
    assert spearman(truth[test], predicted) > 0.8
    assert top_k_recall(truth[test], predicted, 10) >= 0.6
    # values live on the metric's scale: within the training metrics' range (± tie-break)
    assert truth[train].min() - 1e-3 <= predicted.min() <= predicted.max() <= (
        truth[train].max() + 1e-3)


@pytest.mark.parametrize("name", RANKERS)
def test_ranker_checks_its_data(name: str) -> None:
    estimator = create_registry(autoload=False).create("estimator", name)
    features, choices, truth = synthetic_zoo()
    x = stitched_features(features, choices)
    with pytest.raises(ProfileError, match="too few measured stitched variants"):
        estimator.fit(x[:MIN_TRAINING_SAMPLES - 1], truth[:MIN_TRAINING_SAMPLES - 1])
    with pytest.raises(ProfileError, match="before fit"):
        estimator.predict(x)


def test_grades_are_percentile_ranks_and_ties_share_one() -> None:
    grades = relevance_grades(np.array([0.5, 0.9, 0.7, 0.9, 0.1]), grades=4)
    assert grades.tolist() == [1, 3, 2, 3, 0]
    assert relevance_grades(np.array([0.3])).tolist() == [0]


def test_score_map_is_strictly_increasing_and_bounded() -> None:
    mapping = ScoreToMetric(np.array([-2.0, 0.0, 1.0, 5.0]), np.array([0.2, 0.9, 0.5, 0.8]))
    scores = np.linspace(-10, 10, 101)
    values = mapping(scores)
    assert np.all(np.diff(values) > 0)  # the table orders variants exactly as the ranker
    assert values.min() >= 0.2 - 1e-4 and values.max() <= 0.9 + 1e-4
    assert mapping(np.array([0.0]))[0] == pytest.approx(0.5, abs=1e-4)  # 2nd score → 2nd metric


class OvershootingModelForTest:
    """A regressor that extrapolates below 0 and above 1, as boosted trees can."""

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        self.n = x.shape[1]

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.linspace(-0.06, 1.2, x.shape[0])


def test_regression_overshoot_is_clipped_to_the_metric_range() -> None:
    from sparseloom.plugins.estimators.common import TreeAccuracyEstimator

    class Overshooting(TreeAccuracyEstimator):
        def make_model(self) -> OvershootingModelForTest:
            return OvershootingModelForTest()

    estimator = Overshooting({}, MIN_TRAINING_SAMPLES)
    estimator.fit(np.zeros((8, 2)), np.linspace(0, 1, 8))
    predicted = estimator.predict(np.zeros((5, 2)))
    assert predicted[0] == 0.0 and predicted[-1] == 1.0 and 0 < predicted[1] < 1
