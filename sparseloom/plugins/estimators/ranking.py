"""Ranking accuracy estimators: trained to *order* stitched variants, not to regress their metric.

What a placement policy needs from the accuracy estimate is mostly the order of the stitched
variants near the top (top-K recall), and a regression's squared loss spends its few dozen
training rows on the broken variants far below. A learning-to-rank objective is judged on
pairs instead:

* ``xgboost-rank``: :class:`xgboost.XGBRanker`, ``rank:pairwise`` (RankNet loss on every pair of
  training variants of a task, one query group);
* ``xgboost-ndcg``: ``rank:ndcg`` (LambdaMART weighted by the NDCG change of a swap);
* ``lightgbm-rank``: :class:`lightgbm.LGBMRanker`, ``lambdarank``.

NDCG objectives need integer relevance grades: a training variant's grade is its percentile
rank among the training variants, in ``GRADES`` steps (ties share a grade).

A ranker's scores are not metrics, and the profile table stores metrics in [0, 1]. The score is
mapped to the metric scale by quantile matching on the training rows (the i-th lowest training
score to the i-th lowest training metric, interpolated between them), plus a tie-breaking term
``1e-4 · tanh(z)`` of the standardised score, so the mapping is strictly increasing: the table
orders the variants exactly as the ranker does, and its values stay on the metric's scale (MAE
comparable with the regressions'). See ``benchmarks/estimator_routes.py`` and
``docs/results.md`` for how they compare with the regressions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.estimators.common import (
    MIN_TRAINING_SAMPLES,
    lightgbm_params,
    prediction_data,
    training_data,
    xgboost_params,
)

#: Relevance grades of the NDCG objectives (LightGBM's default label gains go up to 30).
GRADES = 30
#: Size of the tie-breaking term added to the quantile-mapped score (metric units).
TIE_BREAK = 1e-4


def relevance_grades(accuracies: np.ndarray, grades: int = GRADES) -> np.ndarray:
    """Integer grades 0..``grades`` from percentile ranks of ``accuracies`` (ties share one)."""
    from scipy.stats import rankdata

    values = np.asarray(accuracies, dtype=np.float64)
    if values.size < 2:
        return np.zeros(values.size, dtype=np.int64)
    ranks = rankdata(values, method="min") - 1
    return np.floor(grades * ranks / (values.size - 1)).astype(np.int64)


class ScoreToMetric:
    """Strictly increasing map from ranker scores to the metric scale of the training rows."""

    def __init__(self, scores: np.ndarray, accuracies: np.ndarray) -> None:
        self.scores = np.sort(np.asarray(scores, dtype=np.float64))
        self.metrics = np.sort(np.asarray(accuracies, dtype=np.float64))
        self.center = float(np.mean(self.scores))
        self.scale = float(np.std(self.scores)) or 1.0

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        values = np.asarray(scores, dtype=np.float64)
        mapped = np.interp(values, self.scores, self.metrics)
        return mapped + TIE_BREAK * np.tanh((values - self.center) / self.scale)


class RankingAccuracyEstimator:
    """Shared ``fit``/``predict`` of the ranking estimators (one query group per fit)."""

    name = "ranking"

    def __init__(self, params: dict[str, Any], min_samples: int, graded: bool) -> None:
        self.params = params
        self.min_samples = min_samples
        self.graded = graded
        self._model: Any = None
        self._map: ScoreToMetric | None = None
        self._n_features: int | None = None

    def make_model(self) -> Any:
        """A fresh, unfitted ranker with ``fit(x, y, group=...)`` and ``predict(x)``."""
        raise NotImplementedError

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Train the ranker on measured stitched variants, then the score-to-metric map."""
        x, y = training_data(features, accuracies, estimator=self.name, minimum=self.min_samples)
        labels = relevance_grades(y) if self.graded else y
        model = self.make_model()
        model.fit(x, labels, group=[x.shape[0]])
        self._model, self._n_features = model, x.shape[1]
        self._map = ScoreToMetric(model.predict(x), y)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The metric scale value of each row's ranking score (ordered as the scores)."""
        x = prediction_data(features, self._n_features, estimator=self.name)
        assert self._map is not None
        return self._map(np.asarray(self._model.predict(x), dtype=np.float64))


class XGBoostRankingEstimator(RankingAccuracyEstimator):
    """XGBoost learning to rank (``rank:pairwise`` by default; ``rank:ndcg`` as ``xgboost-ndcg``).

    The tree settings are the ``xgboost`` regression's, from the same
    :func:`~sparseloom.plugins.estimators.common.xgboost_params` (400 × depth 3, lr 0.05, one
    thread); other keyword options go to :class:`xgboost.XGBRanker`.
    """

    name = "xgboost-rank"

    def __init__(self, *, objective: str = "rank:pairwise",
                 min_samples: int = MIN_TRAINING_SAMPLES, **options: Any) -> None:
        params = xgboost_params(objective=objective, **{"min_child_weight": 0.0, **options})
        super().__init__(params, min_samples, graded=objective != "rank:pairwise")

    def make_model(self) -> Any:
        """An unfitted :class:`xgboost.XGBRanker` with this estimator's parameters."""
        import xgboost

        return xgboost.XGBRanker(**self.params)


class XGBoostNDCGEstimator(XGBoostRankingEstimator):
    """``xgboost-rank`` with the ``rank:ndcg`` (LambdaMART) objective on percentile grades."""

    name = "xgboost-ndcg"

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"objective": "rank:ndcg", **options})


class LightGBMRankingEstimator(RankingAccuracyEstimator):
    """LightGBM ``lambdarank`` on percentile grades, with the ``lightgbm`` regression's small-data
    settings from the same :func:`~sparseloom.plugins.estimators.common.lightgbm_params` (8
    leaves, ``min_child_samples=2``); other options go to ``LGBMRanker``."""

    name = "lightgbm-rank"

    def __init__(self, *, min_samples: int = MIN_TRAINING_SAMPLES, **options: Any) -> None:
        super().__init__(lightgbm_params(**options), min_samples, graded=True)

    def make_model(self) -> Any:
        """An unfitted :class:`lightgbm.LGBMRanker` with this estimator's parameters."""
        import lightgbm

        return lightgbm.LGBMRanker(objective="lambdarank", **self.params)


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ranking accuracy estimators."""
    for factory, description in (
        (XGBoostRankingEstimator, "stitched variants ranked by XGBoost rank:pairwise"),
        (XGBoostNDCGEstimator, "stitched variants ranked by XGBoost rank:ndcg"),
        (LightGBMRankingEstimator, "stitched variants ranked by LightGBM lambdarank"),
    ):
        register(factory.name, factory, description=description, capabilities=("accuracy",))
