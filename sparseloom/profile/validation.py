"""Validate the profile's estimates against ground truth measured on this machine.

* Accuracy: every stitched variant's metric is measured exactly (prefix-shared evaluation);
  the estimator is trained the way the profiler trains it (the V originals plus N − V random
  stitched variants) and judged on the variants it did not see: top-K recall, Spearman's ρ,
  MAE. Training sets are redrawn ``repeats`` times and the figures averaged, so one lucky
  draw does not decide the verdict.
* Latency: random stitched variants under random processor orders are run end to end as the
  runtime runs an isolated request (every stage in place on its processor's pinned thread,
  boundary tensors handed between the threads' queues; interleaved rounds, the profile's
  statistic) and compared with the latency estimator: MAE and MAPE.
* Cost: the profiling wall time with estimators against exhaustive profiling, measured where
  it was run and extrapolated from measured unit costs (to V = 10 as in the paper's Fig. 12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sparseloom.core.registry import get_registry
from sparseloom.profile.features import (
    SubgraphFeatures,
    sample_training_rows,
    stitched_features,
)
from sparseloom.profile.metrics import mae, mape, spearman, top_k_recall

#: The K of the headline top-K recall figures.
HEADLINE_KS: tuple[int, ...] = (5, 10)


def _fit_predict(
    estimator_name: str, x: np.ndarray, truth: np.ndarray, train: np.ndarray, seed: int
) -> np.ndarray:
    from sparseloom.profile.estimate import create_accuracy_estimator, fit_and_predict

    estimator, registration = create_accuracy_estimator(estimator_name, seed)
    return fit_and_predict(estimator, registration, x[train], truth[train], x)


def accuracy_validation(
    features: SubgraphFeatures,
    truth: np.ndarray,
    *,
    estimator: str,
    n_samples: int,
    feature_set: str,
    repeats: int = 5,
    max_k: int = 20,
    seed: int = 0,
    tolerance: float = 0.0,
) -> dict[str, Any]:
    """Held-out accuracy-estimator figures for one task, averaged over ``repeats`` draws.

    :param truth: measured metric of every stitched variant, in table row order (V**S,).
    :param tolerance: also report top-K recall counting predictions within this much of the
        K-th best measured value (``top_k_recall_within_noise``).
    :returns: ``top_k_recall`` {K: fraction}, ``recall_curve`` (K = 1..max_k), ``spearman``,
        ``mae``, ``held_out`` (variants judged per draw), ``repeats``.
    """
    choices = np.stack(
        np.unravel_index(np.arange(truth.size), (features.n_variants,) * features.n_positions),
        axis=-1,
    )
    x = stitched_features(features, choices, feature_set)
    curves, rhos, errors, within = [], [], [], []
    held_out = 0
    for repeat in range(repeats):
        train = sample_training_rows(features.n_variants, features.n_positions, n_samples,
                                     seed + repeat)
        test = np.setdiff1d(np.arange(truth.size), train)
        if test.size == 0:
            break
        predicted = _fit_predict(estimator, x, truth, train, seed + repeat)[test]
        held_out = int(test.size)
        top = min(max_k, test.size)
        curves.append([top_k_recall(truth[test], predicted, k) for k in range(1, top + 1)])
        within.append([top_k_recall(truth[test], predicted, k, tolerance) for k in HEADLINE_KS
                       if k <= test.size])
        rhos.append(spearman(truth[test], predicted))
        errors.append(mae(truth[test], predicted))
    if not curves:
        return {"top_k_recall": {}, "recall_curve": [], "spearman": None, "mae": None,
                "held_out": 0, "repeats": 0,
                "note": "every stitched variant was measured; nothing is held out"}
    curve = np.mean(np.asarray(curves), axis=0)
    return {
        "top_k_recall": {str(k): float(curve[k - 1]) for k in HEADLINE_KS if k <= curve.size},
        "recall_curve": [float(v) for v in curve],
        "top_k_recall_within_noise": {str(k): float(v) for k, v in zip(
            HEADLINE_KS, np.mean(np.asarray(within), axis=0), strict=False)},
        "noise_tolerance": float(tolerance),
        "spearman": _nan_to_none(float(np.nanmean(rhos)) if np.any(np.isfinite(rhos))
                                 else math.nan),
        "mae": float(np.mean(errors)),
        "held_out": held_out,
        "repeats": len(curves),
    }


def learning_curve(
    features: SubgraphFeatures,
    truth: np.ndarray,
    *,
    estimator: str,
    feature_set: str,
    sample_counts: Sequence[int],
    repeats: int = 5,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Top-10 recall and Spearman ρ on held-out variants against the training size N."""
    points = []
    for count in sample_counts:
        result = accuracy_validation(features, truth, estimator=estimator, n_samples=count,
                                     feature_set=feature_set, repeats=repeats, seed=seed)
        if result["repeats"]:
            points.append({"n_samples": int(count),
                           "top_10_recall": result["top_k_recall"].get("10"),
                           "spearman": result["spearman"]})
    return points


def usefulness(measured: np.ndarray, estimated: np.ndarray) -> dict[str, float | None]:
    """What makes a MAPE meaningful: the MAPE of always predicting the mean measured latency
    (``mean_baseline_mape``) and the Pearson correlation of estimates with measurements
    (``pearson_r``). An estimator whose MAPE is not below the baseline ranks nothing."""
    if measured.size == 0:
        return {"mean_baseline_mape": None, "pearson_r": None}
    baseline = mape(measured, np.full_like(measured, float(np.mean(measured))))
    spread = measured.size > 1 and np.std(measured) > 0 and np.std(estimated) > 0
    pearson = float(np.corrcoef(measured, estimated)[0, 1]) if spread else None
    return {"mean_baseline_mape": baseline, "pearson_r": pearson}


def latency_figures(measured_ms: np.ndarray, estimated_ms: np.ndarray) -> dict[str, Any]:
    """MAE (ms) and MAPE (fraction) of estimated against measured chain latencies, beside the
    constant-mean baseline's MAPE and the Pearson r (see :func:`usefulness`)."""
    measured = np.asarray(measured_ms, dtype=np.float64)
    estimated = np.asarray(estimated_ms, dtype=np.float64)
    ok = np.isfinite(measured) & np.isfinite(estimated) & (measured > 0)
    if not np.any(ok):
        return {"mae_ms": None, "mape": None, "count": 0, "mean_baseline_mape": None,
                "pearson_r": None}
    return {
        "mae_ms": mae(measured[ok], estimated[ok]),
        "mape": mape(measured[ok], estimated[ok]),
        "count": int(np.count_nonzero(ok)),
        "measured_mean_ms": float(np.mean(measured[ok])),
        "bias_ms": float(np.mean(estimated[ok] - measured[ok])),
        **usefulness(measured[ok], estimated[ok]),
    }


#: The latency estimate must beat always predicting the mean by this fraction of its MAPE.
USEFUL_MAPE_GAIN = 1 / 3
#: ... and correlate with the measurements at least this well (Pearson r).
USEFUL_PEARSON_R = 0.9


def latency_verdict(figures: dict[str, Any], measured_ms: np.ndarray,
                    chain_spread_ms: np.ndarray | None, rounds: int) -> dict[str, Any]:
    """Is a task's latency estimate *useful*, not only close on average?

    ``MET`` needs a MAPE at most ``(1 − 1/3)`` of the constant-mean baseline's and Pearson
    r ≥ 0.9. Measurement noise caps r: a chain's figure (a statistic of ``rounds`` rounds)
    has a standard error of about its round-to-round IQR / √rounds (``noise_ms``: the median
    over the chains), so even a perfect estimator reaches at most
    ``r_ceiling = √(1 − noise² / var(measured))``. When the estimate is not useful and that
    ceiling is below 0.9, the task's true latencies differ too little to be ranked and the
    verdict is ``WITHIN NOISE`` instead of ``NOT MET``. (The ceiling is conservative: rounds
    with pre-emption bursts widen the IQR more than they move the p25 a chain records.)

    :param figures: :func:`latency_figures` of the task.
    :param chain_spread_ms: round-to-round IQR of each measured chain (``None``: unknown).
    :param rounds: timed rounds per chain.
    """
    measured = np.asarray(measured_ms, dtype=np.float64)
    measured = measured[np.isfinite(measured)]
    spreads = (np.asarray(chain_spread_ms, dtype=np.float64) if chain_spread_ms is not None
               else np.zeros(0))
    spreads = spreads[np.isfinite(spreads)]
    spread = float(np.std(measured)) if measured.size > 1 else None
    noise = float(np.median(spreads)) / math.sqrt(max(rounds, 1)) if spreads.size else None
    ceiling = (math.sqrt(max(0.0, 1 - noise**2 / spread**2))
               if spread and noise is not None else None)
    mape_value, baseline, pearson = (figures.get("mape"), figures.get("mean_baseline_mape"),
                                     figures.get("pearson_r"))
    beats = (mape_value is not None and baseline is not None
             and mape_value <= (1 - USEFUL_MAPE_GAIN) * baseline)
    correlated = pearson is not None and pearson >= USEFUL_PEARSON_R
    within_noise = ceiling is not None and ceiling < USEFUL_PEARSON_R
    # MET wins: heavy-tailed rounds (pre-emption bursts) overstate the noise, and an estimate
    # that reaches r >= 0.9 has shown the spread was measurable after all
    verdict = "MET" if beats and correlated else "WITHIN NOISE" if within_noise else "NOT MET"
    return {"verdict": verdict, "beats_mean_by_a_third": bool(beats),
            "pearson_at_least": USEFUL_PEARSON_R, "pearson_ok": bool(correlated),
            "spread_ms": spread, "noise_ms": noise, "r_ceiling": ceiling,
            "within_noise": bool(within_noise)}


def _nan_to_none(value: float) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


#: Above this many stitched variants the exact ground truth is not measured.
MAX_TRUTH_VARIANTS = 4096


def task_features(profile: Any) -> SubgraphFeatures:
    """The accuracy-estimator inputs recorded in a task's profile."""
    return SubgraphFeatures(profile.source_accuracy, profile.variant_kinds,
                            profile.variant_levels, profile.n_positions,
                            fidelity_error=profile.fidelity_error, dense_variant=0)


def ground_truth(task: Any, zoo: Any, store: Any, evaluation_processor: str,
                 progress: bool) -> tuple[np.ndarray, float] | None:
    """Exact metric of every stitched variant (cached) and the seconds it took to measure."""
    from sparseloom.zoo.evaluate import evaluate_all

    total = len(zoo.variants) ** zoo.positions
    if total > MAX_TRUTH_VARIANTS:
        return None
    name = f"truth-{task.name}"
    cached = store.load(name)
    if cached is None:
        report = evaluate_all(zoo, task, processor=evaluation_processor, progress=progress)
        shape = (len(zoo.variants),) * zoo.positions
        truth = np.full(total, np.nan)
        for choices, value in report.metrics.items():
            truth[np.ravel_multi_index(choices, shape)] = value
        store.save(name, {"truth": truth}, {"seconds": report.cost_seconds})
        cached = ({"truth": truth}, {"seconds": report.cost_seconds})
    return cached[0]["truth"], float(cached[1]["seconds"])


def accuracy_report(
    profile: Any, truth: np.ndarray, *, estimator: str, feature_set: str, n_samples: int,
    repeats: int, seed: int, ablation: bool, curve: bool, eval_rows: int | None = None,
) -> dict[str, Any]:
    """Held-out figures of the chosen estimator, plus ablations and the table's own recall.

    With ``eval_rows`` (the eval set's size) the noise tolerance of the K-th best metric a
    is its binomial standard error ``sqrt(a (1 − a) / eval_rows)``.
    """
    features = task_features(profile)
    best = float(np.nanmax(truth))
    tolerance = math.sqrt(max(best * (1 - best), 0.0) / eval_rows) if eval_rows else 0.0
    result = accuracy_validation(features, truth, estimator=estimator, n_samples=n_samples,
                                 feature_set=feature_set, repeats=repeats, seed=seed,
                                 tolerance=tolerance)
    table_accuracy = profile.accuracy()
    result["table_top_k_recall"] = {
        str(k): top_k_recall(truth, table_accuracy, k) for k in HEADLINE_KS}
    result["n_samples"] = int(n_samples)
    if ablation:
        others: dict[str, Any] = {}
        for registration in get_registry().estimators("accuracy"):
            if registration.name not in ("xgboost", "lightgbm", estimator):
                continue
            for features_name in ("extended", "paper"):
                if (registration.name, features_name) == (estimator, feature_set):
                    continue
                figures = accuracy_validation(
                    features, truth, estimator=registration.name, n_samples=n_samples,
                    feature_set=features_name, repeats=repeats, seed=seed)
                others[f"{registration.name}/{features_name}"] = {
                    key: figures[key] for key in ("top_k_recall", "spearman", "mae")}
        result["ablation"] = others
    if curve:
        v, s = profile.n_variants, profile.n_positions
        counts = sorted({min(v**s - 1, c)
                         for c in (v + 4, 2 * s * v, n_samples, 3 * s * v, 4 * s * v)})
        result["learning_curve"] = learning_curve(
            features, truth, estimator=estimator, feature_set=feature_set,
            sample_counts=[c for c in counts if c > v], repeats=repeats, seed=seed)
    return result


def sample_chains(profile: Any, n_processors: int, count: int, seed: int
                  ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``count`` random (stitched choices, processor order) pairs; all of them if fewer."""
    from sparseloom.profile.cost import random_chains

    return random_chains(profile.n_variants, profile.n_positions, n_processors, count, seed + 3)


def latency_report(
    table: Any, task: str, chains: Sequence[tuple[Sequence[int], Sequence[int]]],
    measured_ms: np.ndarray, estimator: str,
) -> dict[str, Any]:
    """Figures of the chosen latency estimator and of the paper's pure additive model."""
    choices = np.asarray([c for c, _ in chains], dtype=np.int64)
    orders = np.asarray([o for _, o in chains], dtype=np.int64)
    chosen = get_registry().create("estimator", estimator)
    profiled_fit = tuple(float(x) for x in table.task(task).chain_fit) != (1.0, 0.0)
    if hasattr(chosen, "fit") and not profiled_fit:
        # learned corrections are judged on chains they did not see (here: half of these);
        # a correction fitted by the profiler is judged as the table gives it to policies
        half = np.arange(len(chains)) % 2 == 0
        estimated = np.empty(len(chains))
        for train in (half, ~half):
            fresh = get_registry().create("estimator", estimator)
            fresh.fit(task, choices[train], orders[train], measured_ms[train], table)
            estimated[~train] = _predict(fresh, table, task, choices[~train], orders[~train])
    else:
        estimated = _predict(chosen, table, task, choices, orders)
    paper = table.latency(task, choices, orders, include_handoff=False)
    result = latency_figures(measured_ms, estimated)
    result["paper_additive"] = latency_figures(measured_ms, paper)
    result["additive"] = latency_figures(measured_ms, table.latency(task, choices, orders,
                                                                    fitted=False))
    result["points"] = [
        {"choices": list(map(int, c)), "order": [table.processors[int(p)] for p in o],
         "measured_ms": _nan_to_none(m), "estimated_ms": _nan_to_none(e)}
        for c, o, m, e in zip(choices, orders, measured_ms, estimated, strict=True)]
    return result


def _predict(estimator: Any, table: Any, task: str, choices: np.ndarray, orders: np.ndarray
             ) -> np.ndarray:
    if hasattr(estimator, "predict_many"):
        return np.asarray(estimator.predict_many(task, choices, orders, table), dtype=float)
    from sparseloom.core.types import StitchedVariant

    names = [[table.processors[int(p)] for p in order] for order in orders]
    return np.array([estimator.predict(StitchedVariant(task, c), o, table)
                     for c, o in zip(choices, names, strict=True)], dtype=float)
