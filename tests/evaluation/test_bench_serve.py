"""``bench serve``'s fairness properties, on real runs of the tiny workload."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.evaluation.contenders import ServeContext, all_contenders, select_contenders
from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
from sparseloom.evaluation.stock import STOCK_RUNTIMES


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    import sparseloom
    from sparseloom.cli.profile import profile_options

    workload = sparseloom.load_workload("tiny", progress=False)
    return workload, sparseloom.build_profile(workload, options=profile_options(workload),
                                              progress=False)


@pytest.fixture(scope="module")
def context(tiny: tuple[Any, Any]) -> ServeContext:
    from sparseloom.runtime.session import profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = tiny
    zoos = {name: load_zoo(zoo_directory(profile.meta["zoo_hashes"][name]), verify=False)
            for name in profile.tasks}
    cores = tuple(sorted({c for p in profile_processors(profile) for c in p.cores}))
    return ServeContext(workload, profile, zoos, cores)


def test_every_policy_and_stock_runtime_contends_once() -> None:
    from sparseloom.core.registry import get_registry

    names = [c.name for c in all_contenders()]
    assert names[0] == "sparseloom"
    assert set(names) == {r.name for r in get_registry().policies()} | set(STOCK_RUNTIMES)
    assert len(names) == len(set(names))
    with pytest.raises(ConfigError, match="more than once"):
        select_contenders(["stock-ort", "stock-ort"])
    with pytest.raises(ConfigError, match=r"unknown contender.*'nosuch'"):
        select_contenders(["sparseloom", "nosuch"])


def test_matched_stock_runtimes_run_on_sparseloom_cores_threads_and_precision() -> None:
    from sparseloom.plugins.backends.openvino import OpenVinoBackend

    cores = (0, 1)
    for name in ("stock-ort-matched", "stock-ov-matched"):
        processor = STOCK_RUNTIMES[name].processor("t", cores)
        assert processor.threads == 1 and processor.cores == cores, name
    matched = OpenVinoBackend()._config(STOCK_RUNTIMES["stock-ov-matched"].processor("t", cores))
    assert matched["INFERENCE_PRECISION_HINT"] == "f32"
    assert matched["INFERENCE_NUM_THREADS"] == 1 and matched["NUM_STREAMS"] == 1
    # Out of the box: OpenVINO's own defaults, with the THROUGHPUT hint a user would set.
    stock = OpenVinoBackend()._config(STOCK_RUNTIMES["stock-ov"].processor("t", cores))
    assert stock["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert not {"INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
                "ENABLE_CPU_PINNING", "stock"} & set(stock)


def test_stock_ort_leaves_threads_at_onnxruntime_defaults() -> None:
    from sparseloom.plugins.backends.onnxruntime import OnnxRuntimeBackend

    backend = OnnxRuntimeBackend()
    stock = backend._session_options(STOCK_RUNTIMES["stock-ort"].processor("t", (0, 1)))
    matched = backend._session_options(STOCK_RUNTIMES["stock-ort-matched"].processor("t", (0,)))
    assert stock.intra_op_num_threads == 0  # ONNX Runtime picks: the machine's cores
    assert matched.intra_op_num_threads == 1


def test_closed_rounds_give_medians_and_per_round_ratios(context: ServeContext) -> None:
    from sparseloom.evaluation.serve_scenarios import closed
    from sparseloom.runtime.models import keep_loaded

    contenders = select_contenders(["sparseloom", "stock-ort", "picks-ort"])
    recorder = Recorder()
    with keep_loaded():
        result = closed(context, contenders, BenchOptions(rounds=2, queries=100), recorder)
    runs = recorder.runs_of("closed")
    assert len(runs) == 6 and all(r["valid"] for r in runs), [r["reasons"] for r in runs]
    # Round r runs every contender once, in an order rotated by r.
    assert [r["contender"] for r in runs] == ["sparseloom", "stock-ort", "picks-ort",
                                              "stock-ort", "picks-ort", "sparseloom"]
    for run in runs:  # same load for everyone: 100 requests of the one task, all completed
        summary = run["summary"]
        assert summary.submitted == summary.completed == 100
    by = {(r["contender"], r["round"]): r["figures"]["throughput_rps"] for r in runs}
    rows = {row["contender"]: row for row in result["contenders"]}
    for name in ("sparseloom", "stock-ort"):
        values = sorted(by[(name, r)] for r in range(2))
        assert rows[name]["n"] == 2
        assert rows[name]["median"] == pytest.approx(sum(values) / 2)
        assert (rows[name]["min"], rows[name]["max"]) == (values[0], values[1])
    expected = sorted(by[("sparseloom", r)] / by[("stock-ort", r)] for r in range(2))
    assert sorted(result["ratios"]["vs_best_stock"]["rounds"]) == pytest.approx(expected)
    picks = sorted(by[("sparseloom", r)] / by[("picks-ort", r)] for r in range(2))
    assert sorted(result["ratios"]["vs_picks_on_stock"]["rounds"]) == pytest.approx(picks)


def test_invalid_runs_never_enter_a_median(context: ServeContext) -> None:
    from sparseloom.evaluation.serve_scenarios import closed

    contenders = select_contenders(["sparseloom", "stock-ort"])
    recorder = Recorder()
    # 20 queries per task: below the run summary's 100 for a p99, so every run is INVALID.
    result = closed(context, contenders, BenchOptions(rounds=1, queries=20), recorder)
    assert all(not r["valid"] for r in recorder.runs)
    for row in result["contenders"]:
        assert row["n"] == 0 and math.isnan(row["median"]) and row["invalid_runs"] == 1
    assert result["ratios"]["vs_best_stock"]["n"] == 0


def test_cli_writes_the_report(tmp_path: Path, tiny: tuple[Any, Any]) -> None:
    out = tmp_path / "bench"
    completed = subprocess.run(
        [sys.executable, "-m", "sparseloom", "bench", "serve", "tiny", "--quick",
         "--scenario", "closed", "--contender", "sparseloom", "--contender", "stock-ort",
         "--rounds", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    closed = report["scenarios"]["closed"]
    assert {row["contender"] for row in closed["contenders"]} == {"sparseloom", "stock-ort"}
    for row in closed["contenders"]:
        assert {"contender", "median", "min", "max", "rounds"} <= set(row)
    assert {"vs_best_stock", "vs_best_baseline"} <= set(closed["ratios"])
    assert "sparseloom ÷ best stock runtime" in completed.stdout
    assert (out / "report.md").is_file() and (out / "serve_closed.png").is_file()


def test_foreign_load_counts_other_processes_not_this_one() -> None:
    from sparseloom.evaluation.serve_figures import ForeignLoad

    probe = ForeignLoad()
    total = sum(i * i for i in range(2_000_000))  # this process busy: not foreign
    own = probe.cores()
    probe = ForeignLoad()
    burn = "import time\nt = time.time()\nwhile time.time() - t < 1.0:\n    pass\n"
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)
    assert total > 0 and own < 0.5
    assert probe.cores() >= 0.6  # the child kept a core busy for the whole second


def test_k_chooses_the_latency_multipliers(tiny: tuple[Any, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from sparseloom.cli import main

    # A stock runtime's grid run does not depend on the SLOs: one run, judged at every cell.
    assert main(["bench", "serve", "tiny", "--quick", "--scenario", "grid", "--k", "3",
                 "--k", "7.5", "--contender", "stock-ort", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    grid = report["scenarios"]["grid"]
    assert set(grid["k"]) == {"3", "7.5"}
    iso = grid["isolated_dense_ms"]["tiny"]
    assert report["options"]["ks"] == [3.0, 7.5] and iso > 0
    # The floor is a lower bound of every contender's violation rate, and its line says so.
    floor = grid["floor"]["violation_rate"]
    assert all(row["median"] >= floor for row in grid["contenders"] if row["n"])
    assert main(["bench", "serve", "tiny", "--k", "5", "--k", "5"]) == 2
    assert "--k repeats a value: 5, 5" in capsys.readouterr().err


def test_the_grid_floor_counts_the_cells_no_variant_reaches(context: ServeContext) -> None:
    from sparseloom.evaluation.serve_report import _floor_lines
    from sparseloom.evaluation.serve_scenarios import violation_floor

    profile = context.profile.task("tiny")
    dense = float(profile.source_accuracy[0])  # what every stock runtime serves
    # Level 0 asks nothing, level 1 what the dense model scores, level 2 more than a metric in
    # [0, 1] can be: only level 2 is out of everyone's reach, one cell of three.
    axis = {"tiny": [0.0, dense, 1.5]}
    floor = violation_floor(context, axis)
    assert floor["unreachable"] == {"tiny": [2]}
    assert floor["violation_rate"] == pytest.approx(1 / 3)
    assert dense <= floor["best_accuracy"]["tiny"] <= 1.0
    text = " ".join(_floor_lines({"floor": floor, "accuracy_axis": axis}))
    assert "**0.33**" in text and "tiny at level 2 (SLO 1.5000" in text
    assert violation_floor(context, {"tiny": [0.0, dense]})["violation_rate"] == 0.0
