"""The ``xgboost`` and ``lightgbm`` accuracy estimators, chosen by name through the registry."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError, UnknownNameError
from sparseloom.core.registry import create_registry
from sparseloom.plugins.estimators.common import MIN_TRAINING_SAMPLES
from sparseloom.profile.features import SubgraphFeatures, stitched_features
from sparseloom.profile.metrics import spearman, top_k_recall


def synthetic_zoo(seed: int = 0, variants: int = 8, positions: int = 2):
    """Per-variant accuracies and a stitched ground truth that is additive plus noise."""
    rng = np.random.default_rng(seed)
    drops = np.sort(rng.uniform(0.0, 0.3, size=(positions, variants)), axis=1)
    drops[:, 0] = 0.0
    source = 0.9 - drops.sum(axis=0) / positions
    features = SubgraphFeatures(source, ["dense"] + ["int8"] * (variants - 1),
                                np.linspace(0, 0.9, variants), positions,
                                fidelity_error=drops + 1e-3)
    grid = np.stack(np.meshgrid(*[np.arange(variants)] * positions, indexing="ij"), -1)
    choices = grid.reshape(-1, positions)
    truth = 0.9 - drops[np.arange(positions), choices].sum(axis=1)
    truth = truth + rng.normal(0, 0.003, size=truth.size)
    return features, choices, truth


@pytest.mark.parametrize("name", ["xgboost", "lightgbm"])
def test_estimator_by_name_ranks_held_out_variants(name: str) -> None:
    registry = create_registry(autoload=False)
    assert "accuracy" in registry.get_estimator(name).capabilities
    estimator = registry.create("estimator", name)
    features, choices, truth = synthetic_zoo()
    x = stitched_features(features, choices)
    rng = np.random.default_rng(1)
    train = rng.choice(len(truth), size=32, replace=False)
    test = np.setdiff1d(np.arange(len(truth)), train)
    estimator.fit(x[train], truth[train])
    predicted = estimator.predict(x[test])
    assert predicted.shape == test.shape
    assert spearman(truth[test], predicted) > 0.8
    assert top_k_recall(truth[test], predicted, 10) >= 0.6


@pytest.mark.parametrize("name", ["xgboost", "lightgbm"])
def test_too_few_samples_is_a_clear_error(name: str) -> None:
    estimator = create_registry(autoload=False).create("estimator", name)
    features, choices, truth = synthetic_zoo()
    x = stitched_features(features, choices)
    few = MIN_TRAINING_SAMPLES - 1
    with pytest.raises(ProfileError, match="too few measured stitched variants"):
        estimator.fit(x[:few], truth[:few])
    with pytest.raises(ProfileError, match="before fit"):
        estimator.predict(x)


def test_unknown_estimator_name_lists_the_known_ones() -> None:
    registry = create_registry(autoload=False)
    with pytest.raises(UnknownNameError, match="xgboost"):
        registry.get_estimator("catboost")


def test_paper_feature_set_is_the_source_accuracies() -> None:
    features, choices, _ = synthetic_zoo(variants=3)
    x = stitched_features(features, choices, "paper")
    assert x.shape == (9, 2)
    np.testing.assert_allclose(x[5], features.source_accuracy[[1, 2]])
    with pytest.raises(ProfileError, match="unknown feature set"):
        stitched_features(features, choices, "magic")
