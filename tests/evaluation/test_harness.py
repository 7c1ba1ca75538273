"""The harness on tiny (real runs), resumability, contenders from plugins, device files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from sparseloom.core.errors import EvaluationError, SimulationError
from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.evaluation.devices import apply_device, bundled_devices, load_device_file
from sparseloom.evaluation.harness import QUICK, arrival_orders, contenders
from sparseloom.plugins.policies.baselines import SvLoP


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    import sparseloom

    workload = sparseloom.load_workload("tiny", progress=False)
    return workload, sparseloom.build_profile(workload, progress=False)


class PolicyPlugin:
    @hookimpl
    def sparseloom_register_policies(self, register: RegisterFn) -> None:
        register("test-policy", SvLoP, description="a test plugin's policy")


def test_a_plugin_policy_appears_as_a_contender(register_plugin: Any) -> None:
    assert "test-policy" not in contenders(QUICK)
    register_plugin(PolicyPlugin())
    names = contenders(QUICK)
    assert "test-policy" in names and "sparseloom" in names and "vanilla-ov" in names
    assert "test-policy" not in contenders(attrs.evolve(QUICK, exclude=("test-policy",)))
    with pytest.raises(EvaluationError, match="unknown contender"):
        contenders(attrs.evolve(QUICK, contenders=("nope",)))


def test_arrival_orders_are_all_or_a_seeded_sample() -> None:
    assert len(arrival_orders("abcd", None)) == 24
    sample = arrival_orders("abcd", 5, seed=1)
    assert len(sample) == 5 and sample[0] == tuple("abcd") and len(set(sample)) == 5
    assert sample == arrival_orders("abcd", 5, seed=1)


def test_device_file_scales_the_reference_processor(tiny: tuple[Any, Any]) -> None:
    _, profile = tiny
    assert "core-ultra-soc" in bundled_devices()
    device = load_device_file("core-ultra-soc")
    soc = apply_device(profile, device)
    assert soc.processors == ("CPU", "GPU", "NPU")
    task, ref = soc.task("tiny"), profile.task("tiny").latency_ms[:, :, 0]
    kinds = list(task.variant_kinds)
    dense, int8 = kinds.index("dense"), kinds.index("int8")
    assert task.latency_ms[:, dense, 1] == pytest.approx(ref[:, dense] * 0.55)
    assert task.latency_ms[:, int8, 2] == pytest.approx(ref[:, int8] * 0.3)
    assert task.handoff_ms[0, 0, 0] == 0 and task.handoff_ms[0, 1, 2] == pytest.approx(0.65)
    with pytest.raises(SimulationError, match="not found"):
        load_device_file("no-such-soc")


@pytest.mark.slow
def test_quick_evaluation_end_to_end_and_resumes(tiny: tuple[Any, Any], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``sparseloom evaluate --quick`` (the CLI, in process): every table, figure and JSON key;
    then the same configuration through the Python API resumes and runs nothing."""
    from sparseloom.cli import main
    from sparseloom.evaluation.report import evaluate_workload

    names = ("sparseloom", "sv-lo-np", "vanilla-ort")
    assert main(["evaluate", "tiny", "--quick", *[a for n in names for a in ("--contender", n)],
                 "--queries", "10", "--budget", "1.0", "--out", str(tmp_path), "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    assert {"contenders", "budget", "orders", "stitching", "validation", "files"} <= set(tables)
    rows = {r["contender"]: r for r in tables["contenders"]}
    assert [r["contender"] for r in tables["contenders"]] == list(names)
    for name in ("sparseloom", "sv-lo-np"):
        assert rows[name]["cells_measured"] == 3 and rows[name]["cells_simulated"] == 22
        assert rows[name]["throughput_rps"] > 0
    assert rows["vanilla-ort"]["cells_measured"] == 25  # one run scored on every config
    assert all(0 <= r["violation_rate"] <= 1 for r in rows.values())
    for name in ("fig10_violation", "fig11_throughput", "fig13_orders", "fig14_budget",
                 "fig3_stitching"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    validation = json.loads((tmp_path / "validation.json").read_text())
    assert {"mean_abs_throughput_error", "mean_abs_violation_error_points", "rows"} <= set(
        validation)
    assert len(validation["rows"]) == 6
    cells = json.loads((tmp_path / "cells.json").read_text())["cells"]
    assert {c["source"] for c in cells} == {"measured", "simulated"}
    assert len(tables["stitching"]) == 25 and tables["orders"]
    # The same configuration through the API finds every run cached and runs nothing.
    workload, profile = tiny
    config = attrs.evolve(QUICK, contenders=names, queries=10, budgets=(1.0,))
    calls: list[str] = []
    again = evaluate_workload(workload, profile, tmp_path, config, figures=False,
                              progress=lambda done, total, label: calls.append(label))
    assert calls == []
    assert json.loads(json.dumps(again["contenders"])) == tables["contenders"]
