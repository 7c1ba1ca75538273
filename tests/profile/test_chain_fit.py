"""The chain model's correction: fitted on chains timed with the subgraphs, read by policies."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ProfileError
from sparseloom.evaluation.synthetic import task_profile
from sparseloom.plan.orders import all_orders, best_per_order, latency_matrix
from sparseloom.profile.chain_fit import fit_chain_model
from sparseloom.profile.cost import random_chains
from sparseloom.profile.table import ProfileTable

PROCESSORS = ["ov:CPU", "ort:CPU"]


def _profile(seed: int = 0):
    rng = np.random.default_rng(seed)
    return task_profile("t", rng.uniform(0.5, 3.0, (2, 5, 2)),
                        handoff_ms=rng.uniform(0.0, 0.2, (1, 2, 2)))


def _measured(profile, chains, scale: float, offset: float, noise: float = 0.0, seed: int = 1):
    choices = np.array([c for c, _ in chains])
    orders = np.array([o for _, o in chains])
    additive = profile.latency(choices, orders, fitted=False)
    return scale * additive + offset + np.random.default_rng(seed).normal(0, noise, len(chains))


def test_recovers_a_known_correction_and_policies_read_it() -> None:
    profile = _profile()
    chains = random_chains(5, 2, 2, 10, seed=3)
    fit, check = fit_chain_model(profile, PROCESSORS, chains,
                                 _measured(profile, chains, 1.1, 0.25), "additive-fitted")
    np.testing.assert_allclose(fit, [1.1, 0.25], atol=1e-9)
    assert check["mode"] == "scale and offset" and check["chains"] == 10
    assert check["additive_bias_ms"] < 0 and check["fitted_mape_in_sample"] < 1e-9
    profile.chain_fit = fit
    orders = all_orders(2, [0, 1])
    rows = np.arange(profile.n_stitched)
    raw = latency_matrix(profile, rows, orders)
    profile_raw = profile.latency(profile.choices(rows), orders[1], fitted=False)
    np.testing.assert_allclose(raw[:, 1], 1.1 * profile_raw + 0.25)
    best, picked = best_per_order(profile, rows, orders)
    np.testing.assert_allclose(best, raw.min(axis=0))
    np.testing.assert_array_equal(picked, raw.argmin(axis=0))
    table = ProfileTable("w", PROCESSORS, {"t": profile})
    assert table.latency("t", (1, 2), (0, 1)) == pytest.approx(
        1.1 * table.latency("t", (1, 2), (0, 1), fitted=False) + 0.25)
    # The paper's pure sum stays uncorrected.
    assert table.latency("t", (1, 2), (0, 1), include_handoff=False) == pytest.approx(
        profile.latency_ms[0, 1, 0] + profile.latency_ms[1, 2, 1])


def test_a_noisy_flat_slope_falls_back_to_the_median_offset() -> None:
    profile = task_profile("t", np.full((2, 5, 2), 1.0) + np.linspace(0, 0.01, 5)[None, :, None])
    chains = random_chains(5, 2, 2, 10, seed=4)
    measured = _measured(profile, chains, 1.0, 0.2, noise=0.05)
    fit, check = fit_chain_model(profile, PROCESSORS, chains, measured, "additive-fitted")
    assert check["mode"].startswith("offset only")
    additive = profile.latency(np.array([c for c, _ in chains]),
                               np.array([o for _, o in chains]), fitted=False)
    np.testing.assert_allclose(fit, [1.0, np.median(measured - additive)])


def test_one_chain_timed_in_a_hiccup_does_not_move_the_offset() -> None:
    profile = task_profile("t", np.full((2, 5, 2), 1.0) + np.linspace(0, 0.01, 5)[None, :, None])
    chains = random_chains(5, 2, 2, 10, seed=4)
    measured = _measured(profile, chains, 1.0, 0.2, noise=0.01)
    measured[3] += 50.0  # a 50 ms stall during one chain's rounds
    fit, check = fit_chain_model(profile, PROCESSORS, chains, measured, "additive-fitted")
    assert check["mode"].startswith("offset only") and fit[1] == pytest.approx(0.2, abs=0.05)


def test_an_offset_larger_than_the_fastest_chain_never_gives_a_negative_latency() -> None:
    # Sub-millisecond stages with a fitted offset of −1.33 ms (seen on `tiny`): the line
    # extrapolates below zero, which made the SLO grid refuse a negative latency SLO.
    from sparseloom.plan.slo_grid import slo_grid
    from sparseloom.profile.chain_floor import CHAIN_FLOOR_MS, CHAIN_FLOOR_RATIO

    rng = np.random.default_rng(7)
    profile = task_profile("t", rng.uniform(0.01, 0.05, (2, 5, 2)),
                           handoff_ms=rng.uniform(-0.01, 0.01, (1, 2, 2)))
    profile.chain_fit = np.array([1.0, -1.33])
    orders = all_orders(2, [0, 1])
    rows = np.arange(profile.n_stitched)
    chained = latency_matrix(profile, rows, orders)
    additive = latency_matrix(profile, rows, orders, include_handoff=False) \
        + profile.handoff_ms[0][orders[:, 0], orders[:, 1]][None, :]
    assert np.all(chained > 0)
    np.testing.assert_allclose(chained, np.maximum(CHAIN_FLOOR_RATIO * additive, CHAIN_FLOOR_MS))
    # A faster additive sum is never estimated slower.
    by_sum = np.argsort(additive, axis=None)
    assert np.all(np.diff(chained.reshape(-1)[by_sum]) >= 0)
    assert all(slo.latency_ms > 0 for slo in slo_grid(profile))
    table = ProfileTable("w", PROCESSORS, {"t": profile})
    assert table.latency("t", (1, 2), (0, 1)) > 0
    # Where the line stays above the floor it is used as fitted.
    profile.chain_fit = np.array([1.1, 0.25])
    np.testing.assert_allclose(latency_matrix(profile, rows, orders), 1.1 * additive + 0.25)


def test_plain_additive_untimed_chains_and_too_few_chains_keep_the_identity() -> None:
    profile = _profile()
    chains = random_chains(5, 2, 2, 10, seed=5)
    measured = _measured(profile, chains, 1.1, 0.25)
    fit, check = fit_chain_model(profile, PROCESSORS, chains, measured, "additive")
    np.testing.assert_array_equal(fit, [1.0, 0.0])
    assert "scale" not in check and check["additive_mape"] > 0
    fit, check = fit_chain_model(profile, PROCESSORS, chains, np.full(10, np.nan),
                                 "additive-fitted")
    np.testing.assert_array_equal(fit, [1.0, 0.0])
    assert "no chain could be timed" in check["note"]
    few = np.where(np.arange(10) < 3, measured, np.nan)
    fit, check = fit_chain_model(profile, PROCESSORS, chains, few, "additive-fitted")
    np.testing.assert_array_equal(fit, [1.0, 0.0])
    assert "too few measured chains" in check["note"] and check["chains"] == 3


def test_a_table_refuses_a_non_positive_scale_and_old_tables_load(tmp_path) -> None:
    profile = _profile()
    with pytest.raises(ProfileError, match="chain_fit scale must be positive"):
        profile.chain_fit = np.array([0.0, 1.0])
        profile.check()
    profile.chain_fit = np.array([1.2, 0.1])
    table = ProfileTable("w", PROCESSORS, {"t": profile})
    table.save(tmp_path / "new")
    np.testing.assert_array_equal(ProfileTable.load(tmp_path / "new").task("t").chain_fit,
                                  [1.2, 0.1])
    # A table written before chain_fit existed loads with the plain additive model.
    data = dict(np.load(tmp_path / "new" / "profile.npz"))
    del data["t0.chain_fit"]
    np.savez(tmp_path / "new" / "profile.npz", **data)
    np.testing.assert_array_equal(ProfileTable.load(tmp_path / "new").task("t").chain_fit,
                                  [1.0, 0.0])
