"""The latency validation's usefulness figures: a constant-mean baseline and Pearson r."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.profile.report import _goals
from sparseloom.profile.validation import latency_figures, usefulness


def test_baseline_is_the_mape_of_always_predicting_the_mean() -> None:
    measured = np.array([10.0, 20.0, 30.0])
    figures = usefulness(measured, measured * 1.1)
    assert figures["mean_baseline_mape"] == pytest.approx((10 / 10 + 0 + 10 / 30) / 3)
    assert figures["pearson_r"] == pytest.approx(1.0)


def test_constant_estimates_have_no_correlation_and_empty_input_has_no_figures() -> None:
    assert usefulness(np.array([1.0, 2.0]), np.array([1.5, 1.5]))["pearson_r"] is None
    assert latency_figures(np.array([np.nan]), np.array([1.0]))["mean_baseline_mape"] is None


def _overall(mape: float, baseline: float) -> dict:
    return {"accuracy": {"top_k_recall": {"10": 0.95}},
            "latency": {"mape": mape, "mean_baseline_mape": baseline, "pearson_r": 0.2},
            "profiling": {"v10": {"reduction": 0.9}}}


def test_latency_goal_is_not_met_when_the_mean_predicts_better() -> None:
    # tiny's case: MAPE 6% below the paper's 8.9%, but the mean alone gets 5%.
    assert not _goals(_overall(0.06, 0.05))["latency_mape"]["met"]
    assert _goals(_overall(0.06, 0.20))["latency_mape"]["met"]


def test_latency_verdict_needs_a_third_better_than_the_mean_and_r_09() -> None:
    from sparseloom.profile.validation import latency_verdict

    rng = np.random.default_rng(0)
    measured = rng.uniform(1.0, 3.0, 200)
    quiet = np.full(200, 0.01)  # chains repeat to 0.01 ms: far below their 0.6 ms spread
    good = latency_verdict(latency_figures(measured, measured * 1.02), measured, quiet, 20)
    assert good["verdict"] == "MET" and good["r_ceiling"] > 0.99
    biased = measured * 1.2  # ranks perfectly, but no better than the mean on MAPE
    verdict = latency_verdict(latency_figures(measured, biased), measured, quiet, 20)
    assert verdict["verdict"] == "NOT MET" and verdict["pearson_ok"]
    assert not verdict["beats_mean_by_a_third"]
    scrambled = latency_figures(measured, rng.permutation(measured))
    assert latency_verdict(scrambled, measured, quiet, 20)["verdict"] == "NOT MET"


def test_latency_verdict_says_when_the_spread_is_within_noise() -> None:
    from sparseloom.profile.validation import latency_verdict

    measured = np.random.default_rng(1).normal(1.0, 0.01, 100)  # σ = 0.01 ms across chains
    noisy = np.full(100, 0.2)  # round-to-round IQR 0.2 ms: standard error 0.2 / √20 ≈ 0.045
    scrambled = latency_figures(measured, measured[::-1])
    verdict = latency_verdict(scrambled, measured, noisy, 20)
    assert verdict["verdict"] == "WITHIN NOISE" and verdict["within_noise"]
    assert verdict["noise_ms"] == pytest.approx(0.2 / np.sqrt(20))
    assert verdict["r_ceiling"] == 0.0
    unknown = latency_verdict(latency_figures(measured, measured), measured, None, 20)
    assert unknown["noise_ms"] is None and unknown["verdict"] == "MET"
    # a useful estimate is MET even when the noise estimate says it could not be
    wide = np.random.default_rng(2).uniform(1.0, 3.0, 100)
    met = latency_verdict(latency_figures(wide, wide * 1.01), wide, np.full(100, 20.0), 20)
    assert met["within_noise"] and met["verdict"] == "MET"
