"""Accuracy estimators at the plugin boundary: build them, train them, check what they predict.

An estimator may come from any distribution, so everything it returns is checked here before
it reaches a profile table: one finite value per feature row, inside the metric's range
[0, 1] (every task metric lies there, see :mod:`sparseloom.workload.metrics`). A failure is one
:class:`~sparseloom.core.errors.ProfileError` line naming the estimator and its distribution.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sparseloom.core.errors import ProfileError, SparseloomError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import Registration
from sparseloom.profile.features import SubgraphFeatures, stitched_features

if TYPE_CHECKING:
    from sparseloom.profile.options import ProfileOptions

#: Every task metric lies in [0, 1]; predictions outside this range (by more than float noise)
#: are refused rather than stored.
METRIC_RANGE = (0.0, 1.0)
#: How far a regression estimator may overshoot the metric range before it counts as broken.
#: Boosted trees fitted to accuracies near 0 or 1 overshoot slightly: XGBoost predicted
#: -0.0003 for a speech variant scoring 0.0 here. Such values are clipped to the range; one
#: further out (the old example estimator's 2.58) is an error.
_RANGE_SLACK = 0.05
_PREDICT_CHUNK = 1 << 18


def _who(registration: Registration) -> str:
    return (f"accuracy estimator {registration.name!r} (distribution "
            f"{registration.distribution or '?'} {registration.version})").replace(" )", ")")


def takes_seed(factory: Any) -> bool:
    """Whether ``factory`` accepts a ``seed`` keyword (by name, or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): do not guess
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == "seed" and p.kind is not p.POSITIONAL_ONLY)
               for p in parameters)


def create_accuracy_estimator(name: str, seed: int) -> tuple[Any, Registration]:
    """Build the accuracy estimator ``name``, passing ``seed=`` only when its factory takes it.

    :raises ProfileError: the factory raised (naming the estimator and its distribution).
    """
    registration = get_registry().get_estimator(name)
    try:
        if takes_seed(registration.factory):
            return registration.factory(seed=seed), registration
        return registration.factory(), registration
    except SparseloomError:
        raise
    except Exception as error:
        raise ProfileError(f"{_who(registration)} could not be built: "
                           f"{type(error).__name__}: {error}") from error


def checked_predictions(predicted: Any, rows: int, registration: Registration) -> np.ndarray:
    """``predicted`` as a float array of ``rows`` values, or a :class:`ProfileError`.

    One value per row is required (a column vector of that length is accepted); every value
    must be finite and lie in the metric range [0, 1], give or take a slack of 0.05 that a
    regression may overshoot by; the values returned are clipped to the range.
    """
    try:
        values = np.asarray(predicted, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ProfileError(f"{_who(registration)}: predict() returned {type(predicted).__name__}"
                           f", not numbers ({error}); return one number per feature row"
                           ) from None
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (rows,):
        raise ProfileError(f"{_who(registration)}: predict() returned shape "
                           f"{list(values.shape)} for {rows} feature rows; return one number "
                           f"per row, shape [{rows}]")
    bad = ~np.isfinite(values)
    if bad.any():
        raise ProfileError(f"{_who(registration)}: predict() returned {int(bad.sum())} NaN or "
                           f"infinite value(s) of {rows} (first at row {int(np.argmax(bad))}); "
                           f"every prediction must be a finite metric")
    low, high = METRIC_RANGE
    outside = (values < low - _RANGE_SLACK) | (values > high + _RANGE_SLACK)
    if outside.any():
        first = int(np.argmax(outside))
        raise ProfileError(f"{_who(registration)}: predict() returned {values[first]:g} at row "
                           f"{first} ({int(outside.sum())} value(s) outside the metric range "
                           f"[{low:g}, {high:g}]); task metrics are fractions in [0, 1]")
    return np.clip(values, low, high)


def fit_and_predict(estimator: Any, registration: Registration, train_x: np.ndarray,
                    train_y: np.ndarray, predict_x: np.ndarray) -> np.ndarray:
    """Train ``estimator`` and predict ``predict_x``, both checked at the boundary."""
    try:
        estimator.fit(train_x, train_y)
        predicted = estimator.predict(predict_x)
    except SparseloomError:
        raise
    except Exception as error:
        raise ProfileError(f"{_who(registration)} failed: {type(error).__name__}: {error}"
                           ) from error
    return checked_predictions(predicted, predict_x.shape[0], registration)


def estimate_accuracy(
    features: SubgraphFeatures, measured: Mapping[tuple[int, ...], float],
    options: ProfileOptions,
) -> np.ndarray:
    """Train the named accuracy estimator on ``measured`` and predict every stitched variant."""
    estimator, registration = create_accuracy_estimator(options.accuracy_estimator,
                                                        options.seed)
    train_choices = np.asarray(list(measured), dtype=np.int64)
    train_x = stitched_features(features, train_choices, options.feature_set)
    train_y = np.asarray(list(measured.values()), dtype=np.float64)
    try:
        estimator.fit(train_x, train_y)
    except SparseloomError:
        raise
    except Exception as error:
        raise ProfileError(f"{_who(registration)}: fit() failed: {type(error).__name__}: "
                           f"{error}") from error
    total = features.n_variants**features.n_positions
    shape = (features.n_variants,) * features.n_positions
    estimated = np.empty(total, dtype=np.float32)
    for start in range(0, total, _PREDICT_CHUNK):
        rows = np.arange(start, min(total, start + _PREDICT_CHUNK))
        choices = np.stack(np.unravel_index(rows, shape), axis=-1)
        x = stitched_features(features, choices, options.feature_set)
        try:
            predicted = estimator.predict(x)
        except SparseloomError:
            raise
        except Exception as error:
            raise ProfileError(f"{_who(registration)}: predict() failed: "
                               f"{type(error).__name__}: {error}") from error
        estimated[rows] = checked_predictions(predicted, rows.size, registration)
    return estimated
