"""Top-K recall, Spearman, MAE and MAPE."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.profile.metrics import mae, mape, spearman, top_k_recall


def test_top_k_recall() -> None:
    truth = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    assert top_k_recall(truth, truth, 2) == 1.0
    assert top_k_recall(truth, -truth, 2) == 0.0
    assert top_k_recall(truth, [0.9, 0.1, 0.7, 0.6, 0.5], 2) == 0.5
    # tied measured values are interchangeable
    assert top_k_recall([0.9, 0.8, 0.8, 0.1], [1.0, 0.0, 0.5, 0.1], 2) == 1.0
    assert top_k_recall(truth, truth, 50) == 1.0


def test_errors() -> None:
    assert mae([1, 2], [2, 2]) == 0.5
    assert mape([10, 20], [11, 18]) == pytest.approx(0.1)
    assert spearman([1, 2, 3], [3, 4, 9]) == pytest.approx(1.0)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ProfileError, match="differ in length"):
        mae([1, 2], [1])
    with pytest.raises(ProfileError, match="positive"):
        mape([0, 1], [0, 1])
