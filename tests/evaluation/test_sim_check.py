"""``bench serve``'s simulator check: simulated beside measured, against hand-computed figures."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from sparseloom.evaluation.contender import Contender
from sparseloom.evaluation.serve_figures import BenchOptions
from sparseloom.evaluation.serve_report import render_markdown
from sparseloom.evaluation.sim_check import compare, measured_slowdown, simulated_closed
from sparseloom.evaluation.simulator import REQUEST_OVERHEAD_MS
from sparseloom.evaluation.synthetic import task_profile
from sparseloom.profile.table import ProfileTable


def _measured(median_rps: float, violation: float) -> dict:
    return {"contender": "sv-lo-np", "n": 2, "median": median_rps,
            "figures": {"violation_rate": {"median": violation, "n": 2}}}


def test_errors_are_percent_of_measured_and_points_with_the_goals() -> None:
    # 230 simulated vs 200 measured: +15 % (the goal's edge, met); violation 0.25 vs 0.5:
    # -25 points (goal 10, missed).
    row = compare(230.0, 0.25, _measured(200.0, 0.5))
    assert row["throughput_error_pct"] == pytest.approx(15.0)
    assert row["throughput_within_goal"] is True
    assert row["violation_error_points"] == pytest.approx(-25.0)
    assert row["violation_within_goal"] is False
    # 100 vs 200: -50 %, missed; equal violation, met.
    row = compare(100.0, 0.5, _measured(200.0, 0.5))
    assert row["throughput_error_pct"] == pytest.approx(-50.0)
    assert (row["throughput_within_goal"], row["violation_within_goal"]) == (False, True)


def test_nothing_measured_gives_no_verdict() -> None:
    row = compare(230.0, 0.0, {"contender": "x", "n": 0, "median": math.nan, "figures": {}})
    assert math.isnan(row["throughput_error_pct"]) and row["throughput_within_goal"] is None
    assert row["violation_within_goal"] is None


def _context() -> SimpleNamespace:
    # One task, S = 2, one variant: 2 + 1 ms on A, 9 + 9 ms on B; dense metric 1.0, so the
    # closed scenario's SLO is accuracy 0.99, latency unconstrained. A variant always right
    # is right on every request served: no violation in any draw.
    table = ProfileTable("hand", ("A", "B"))
    table.tasks["x"] = task_profile("x", np.array([[[2.0, 9.0]], [[1.0, 9.0]]]),
                                    accuracy=np.array([1.0]))
    zoo = SimpleNamespace(manifest={"metric": {"dense": 1.0}})
    workload = SimpleNamespace(task_names=("x",),
                               task=lambda name: SimpleNamespace(num_eval=100))
    return SimpleNamespace(profile=table, workload=workload, zoos={"x": zoo})


def test_policy_contenders_are_simulated_and_stock_runtimes_skipped() -> None:
    # sv-lo-np puts x's whole chain on its fastest processor, A: 3 ms + the request overhead
    # per request, one request in flight: 1000 / (3 + overhead) requests/s, no violation.
    contenders = [Contender("sv-lo-np", "policy"), Contender("stock-ort", "stock")]
    closed = {"contenders": [_measured(300.0, 0.0)]}
    result = simulated_closed(_context(), contenders, BenchOptions(rounds=2, closed_queries=50),
                              closed)
    (row,) = result["contenders"]
    expected = 1000.0 / (3.0 + REQUEST_OVERHEAD_MS)
    assert row["contender"] == "sv-lo-np"
    assert row["simulated_throughput_rps"] == pytest.approx(expected)
    assert row["throughput_error_pct"] == pytest.approx(100 * (expected - 300.0) / 300.0)
    assert row["simulated_violation_rate"] == 0.0
    assert row["simulated_utilisation"]["A"] == pytest.approx(1.0)
    assert row["simulated_utilisation"]["B"] == 0.0


def test_the_report_shows_simulated_figures_in_their_own_section_only() -> None:
    measured_row = {**_measured(300.0, 0.0), "kind": "policy", "rounds": [290.0, 310.0],
                    "min": 290.0, "max": 310.0, "invalid_runs": 0}
    closed = {"figure": "throughput_rps", "unit": "requests/s", "seconds": 60.0,
              "contenders": [measured_row], "ratios": {}}
    closed["simulated"] = simulated_closed(
        _context(), [Contender("sv-lo-np", "policy")], BenchOptions(rounds=1, closed_queries=20),
        closed)
    report = {"workload": "hand", "processors": ["A", "B"], "stock_configurations": {},
              "machine": {"cpu": "?", "cores": [0, 1], "onnxruntime": "?", "openvino": "?"},
              "load": {"before_first": 0.1, "foreign_cores_mean": 0.01,
                       "foreign_cores_max": 0.02, "foreign_threshold": 0.2, "quiet": True,
                       "threshold": 0.5},
              "scenarios": {"closed": closed}}
    text = render_markdown(report)
    measured, simulated = text.split("### Simulated (not measured)")
    simulated_rps = f"{1000.0 / (3.0 + REQUEST_OVERHEAD_MS):.1f}"
    assert simulated_rps not in measured and "| sv-lo-np | 300.0 [290.0–310.0] |" in measured
    assert f"| sv-lo-np | {simulated_rps} | 300.0 |" in simulated
    assert "| yes |" in simulated  # violation: 0 simulated, 0 measured


def test_slowdown_is_measured_over_simulated_call_time_per_request() -> None:
    # Measured: A busy 50 % at 100 requests/s = 5 ms of calls per request. Simulated: 80 % at
    # 400 requests/s = 2 ms. Slowdown 2.5. B is idle in the simulation: no figure to scale.
    measured = {"n": 2, "median": 100.0, "figures": {
        "utilisation.A": {"median": 0.5, "n": 2}, "utilisation.B": {"median": 0.1, "n": 2}}}
    assert measured_slowdown(measured, 400.0, {"A": 0.8, "B": 0.0}) == pytest.approx(
        {"A": 2.5})


def test_calibrated_simulation_scales_the_stage_times_by_the_measured_slowdown() -> None:
    # Measured: A busy 90 % at 150 requests/s = 6 ms a request. Simulated: A busy all the
    # time at 1000 / (3 + overhead) requests/s = 3 ms + overhead a request (the overhead runs
    # on A too): slowdown 6 / (3 + overhead). Calibrated: each request's 3 ms of stages ×
    # slowdown + the unscaled overhead.
    row = {**_measured(150.0, 0.0), "figures": {"violation_rate": {"median": 0.0, "n": 1},
                                               "utilisation.A": {"median": 0.9, "n": 1}}}
    result = simulated_closed(_context(), [Contender("sv-lo-np", "policy")],
                              BenchOptions(rounds=1, closed_queries=40), {"contenders": [row]})
    (out,) = result["contenders"]
    slowdown = 6.0 / (3.0 + REQUEST_OVERHEAD_MS)
    assert out["slowdown"] == pytest.approx({"A": slowdown})
    expected = 1000.0 / (3.0 * slowdown + REQUEST_OVERHEAD_MS)
    assert out["calibrated"]["simulated_throughput_rps"] == pytest.approx(expected)
    assert out["calibrated"]["throughput_error_pct"] == pytest.approx(
        100 * (expected - 150.0) / 150.0)
