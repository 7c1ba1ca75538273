"""``bench serve``'s fairness properties, on real runs of the tiny workload; its medians and
ratios on a hand-made benchmark whose every figure is worked by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.evaluation.contender import all_contenders, select_contenders
from sparseloom.evaluation.contenders import ServeContext, profile_context
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
    from sparseloom.zoo.load import profiled_zoos

    workload, profile = tiny
    return profile_context(workload, profile, profiled_zoos(profile))


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


def test_each_policy_s_pick_is_judged_in_the_precision_of_each_position(
        context: ServeContext) -> None:
    from sparseloom.core.processors import openvino_cpu_precision
    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.plan.api import make_plan

    precisions = {"ov:CPU": "bf16", "ort:CPU": "f32"}
    mixed = attrs.evolve(context, processor_precisions=precisions)
    slos = dense_slos(mixed)
    for policy in ("sparseloom", "sparseloom-loaded", "sv-ao-np"):
        route = make_plan(mixed.profile, policy=policy, slos=slos).plan.processors_of("tiny")
        computed = [precisions[p] for p in route]
        want = computed[0] if len(set(computed)) == 1 else ">".join(computed)
        assert mixed.served_precisions(slos, policy) == {"tiny": want}, policy
    # A processor set without the table: OpenVINO in the set's precision, ORT in f32.
    bare = attrs.evolve(context, precision="f32", processor_precisions={})
    assert set(bare.served_precisions(slos, "sparseloom").values()) == {"f32"}
    # The profile's own (default) processors: OpenVINO in bf16 where this CPU computes it.
    ov = "bf16" if openvino_cpu_precision() == "bf16" else "f32"
    assert context.processor_precisions == {"ov:CPU": ov, "ort:CPU": "f32"}


def test_closed_rounds_rotate_the_contenders_on_the_same_load(context: ServeContext) -> None:
    from sparseloom.evaluation.serve_scenarios import closed
    from sparseloom.runtime.kept import keep_loaded

    contenders = select_contenders(["sparseloom", "stock-ort", "picks-ort"])
    recorder = Recorder()
    with keep_loaded():
        result = closed(context, contenders, BenchOptions(rounds=2, closed_queries=100,
                                                         closed_min_s=None), recorder)
    runs = recorder.runs_of("closed")
    assert len(runs) == 6 and all(r["valid"] for r in runs), [r["reasons"] for r in runs]
    # Round r runs every contender once, in an order rotated by r.
    assert [r["contender"] for r in runs] == ["sparseloom", "stock-ort", "picks-ort",
                                              "stock-ort", "picks-ort", "sparseloom"]
    for run in runs:  # same load for everyone: 100 requests of the one task, all completed
        summary = run["summary"]
        assert summary.submitted == summary.completed == 100
    # Each contender's row holds its own runs' throughputs, round by round, and every round
    # gave each ratio (their arithmetic: the hand-made case below).
    rows = {row["contender"]: row for row in result["contenders"]}
    for name in ("sparseloom", "stock-ort", "picks-ort"):
        own = sorted((r for r in runs if r["contender"] == name), key=lambda r: r["round"])
        assert rows[name]["rounds"] == [r["figures"]["throughput_rps"] for r in own]
        assert rows[name]["n"] == 2
    assert result["ratios"]["vs_best_stock"]["n"] == 2
    assert result["ratios"]["vs_best_stock"]["against"] == ["stock-ort"]
    assert result["ratios"]["vs_picks_on_stock"]["n"] == 2
    # Each task's own rate per contender, and sparseloom's slowest task against the one
    # stock runtime of each round.
    own = {(r["contender"], r["round"]): {t.task: t.own_throughput_rps
                                          for t in r["summary"].tasks} for r in runs}
    (task,) = own["sparseloom", 0]
    assert result["task_rates"]["stock-ort"][task]["n"] == 2
    worst = result["worst_task"]["sparseloom"]
    assert worst["tasks"] == [task, task]
    assert worst["rounds"] == pytest.approx(
        [own["sparseloom", r][task] / own["stock-ort", r][task] for r in (0, 1)])


#: A hand-made closed benchmark, req/s per contender and round. ``INVALID``: the run's summary
#: is INVALID; ``BELOW``: its variants miss the accuracy SLO on the whole eval set.
INVALID, BELOW = "invalid", "below the accuracy SLO"
HAND_MADE: dict[str, list[tuple[float, str]]] = {
    "sparseloom": [(120.0, ""), (100.0, ""), (90.0, "")],
    "sparseloom-loaded": [(96.0, ""), (75.0, ""), (120.0, "")],
    "stock-ort": [(40.0, ""), (500.0, INVALID), (30.0, "")],
    "stock-ov": [(48.0, ""), (50.0, ""), (60.0, "")],
    "picks-ort": [(100.0, ""), (80.0, ""), (60.0, "")],
    "adms": [(60.0, ""), (50.0, ""), (30.0, "")],
    "av-p": [(80.0, ""), (40.0, ""), (200.0, BELOW)],
}


def _hand_made_summary(throughput_rps: float, flaw: str) -> Any:
    from sparseloom.runtime.records import LatencyStats
    from sparseloom.runtime.summary import RunSummary, TaskResult

    # One task "t" whose accuracy SLO is 0.80: served variants scoring 0.90 on the whole eval
    # set meet it, 0.70 do not.
    whole = 0.70 if flaw == BELOW else 0.90
    task = TaskResult("t", 0.80, 1e9, "t[0]", {"t[0]": 100}, "accuracy", whole, whole,
                      LatencyStats(100, 1.0, 1.0, 1.0, 1.0), throughput_rps, 100, 100, 0, "")
    return RunSummary(
        scenario="closed", settings={}, tasks=(task,), violation_rate=0.0,
        latency_statistic="p90", wall_s=100 / throughput_rps, throughput_rps=throughput_rps,
        pipeline_bound_rps=math.nan, pipeline_share=math.nan, busiest_processor="p",
        utilisation={}, switches=0, switch_loads=0, switch_load_ms=0.0, preload_ms=0.0,
        memory={}, submitted=100, completed=100, failed=0, injected_faults=0,
        processors_down=(), valid=flaw != INVALID,
        reasons=("a hand-made INVALID run",) if flaw == INVALID else (), notes=())


def test_closed_ratios_are_taken_per_round_against_the_best_valid_equal_accuracy_rival(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from sparseloom.evaluation import serve_scenarios

    served: list[tuple[str, int, Any]] = []

    def scripted(context: Any, contender: Any, spec: Any, slos: Any) -> Any:
        round_index = spec.seed  # the round's eval rows are seeded seed + round (seed 0)
        served.append((contender.name, round_index, slos))
        return _hand_made_summary(*HAND_MADE[contender.name][round_index])

    monkeypatch.setattr(serve_scenarios, "serve_contender", scripted)
    # The one task's dense model scores 0.81: at equal accuracy its SLO is 0.80.
    context = ServeContext(SimpleNamespace(task_names=("t",)), None,
                           {"t": SimpleNamespace(manifest={"metric": {"dense": 0.81}})}, (0,))
    contenders = select_contenders(list(HAND_MADE))
    result = serve_scenarios.closed(context, contenders, BenchOptions(rounds=3), Recorder())
    assert len(served) == 21
    assert all(s[2]["t"].accuracy == pytest.approx(0.80) for s in served)
    ratios = result["ratios"]
    # sparseloom ÷ the best stock runtime, by hand: round 0 stock-ov's 48 beats stock-ort's
    # 40: 120 / 48 = 2.5; round 1 stock-ort's 500 is INVALID: 100 / 50 = 2.0; round 2
    # stock-ov again: 90 / 60 = 1.5. (Against the first stock runtime listed: 3.0, -, 3.0.)
    stock = ratios["vs_best_stock"]
    assert stock["against"] == ["stock-ort", "stock-ov"]
    assert stock["rounds"] == pytest.approx([2.5, 2.0, 1.5])
    assert (stock["median"], stock["min"], stock["max"], stock["n"]) == pytest.approx(
        (2.0, 1.5, 2.5, 3))
    # ÷ the best baseline: round 0 av-p's 80: 1.5; round 1 adms's 50: 2.0; round 2 av-p's
    # 200 served variants below the accuracy SLO (not at equal accuracy): adms's 30: 3.0.
    baseline = ratios["vs_best_baseline"]
    assert baseline["against"] == ["adms", "av-p"]
    assert baseline["rounds"] == pytest.approx([1.5, 2.0, 3.0])
    assert (baseline["median"], baseline["min"], baseline["max"]) == pytest.approx(
        (2.0, 1.5, 3.0))
    # ÷ its own picks on stock ONNX Runtime: 120 / 100, 100 / 80, 90 / 60.
    picks = ratios["vs_picks_on_stock"]
    assert picks["rounds"] == pytest.approx([1.2, 1.25, 1.5])
    assert picks["median"] == pytest.approx(1.25)
    # Every sparseloom policy gets its own: sparseloom-loaded 96 / 48, 75 / 50, 120 / 60.
    by_policy = result["ratios_by_policy"]
    assert set(by_policy) == {"sparseloom", "sparseloom-loaded"}
    assert by_policy["sparseloom"]["vs_best_stock"]["rounds"] == pytest.approx([2.5, 2.0, 1.5])
    loaded = by_policy["sparseloom-loaded"]["vs_best_stock"]
    assert loaded["rounds"] == pytest.approx([2.0, 1.5, 2.0])
    assert loaded["median"] == pytest.approx(2.0)
    # The table: each contender's VALID runs (at equal accuracy or not), median [min-max].
    rows = {row["contender"]: row for row in result["contenders"]}
    assert (rows["sparseloom"]["median"], rows["sparseloom"]["min"],
            rows["sparseloom"]["max"]) == (100.0, 90.0, 120.0)
    ort = rows["stock-ort"]
    assert (ort["median"], ort["min"], ort["max"], ort["n"]) == (35.0, 30.0, 40.0, 2)
    assert ort["rounds"] == [40.0, None, 30.0] and ort["invalid_runs"] == 1
    assert ort["reasons"] == ["a hand-made INVALID run"]
    below = rows["av-p"]
    assert (below["median"], below["min"], below["max"], below["n"]) == (80.0, 40.0, 200.0, 3)
    assert below["figures"]["equal_accuracy"]["min"] == 0.0


def test_invalid_runs_never_enter_a_median(context: ServeContext) -> None:
    from sparseloom.evaluation.serve_scenarios import closed

    contenders = select_contenders(["sparseloom", "stock-ort"])
    recorder = Recorder()
    # 20 queries per task: below the run summary's 100 for a p99, so every run is INVALID.
    result = closed(context, contenders,
                    BenchOptions(rounds=1, closed_queries=20, closed_min_s=None), recorder)
    assert all(not r["valid"] for r in recorder.runs)
    for row in result["contenders"]:
        assert row["n"] == 0 and math.isnan(row["median"]) and row["invalid_runs"] == 1
    assert result["ratios"]["vs_best_stock"]["n"] == 0


def test_cli_writes_the_report(tmp_path: Path, tiny: tuple[Any, Any]) -> None:
    out = tmp_path / "bench"
    completed = subprocess.run(
        [sys.executable, "-m", "sparseloom", "bench", "serve", "tiny", "--quick",
         "--scenario", "closed", "--contender", "sparseloom", "--contender", "stock-ort",
         "--contender", "stock-tuned", "--contender", "picks-tuned", "--tuning-queries", "30",
         "--rounds", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    closed = report["scenarios"]["closed"]
    assert {row["contender"] for row in closed["contenders"]} == {
        "sparseloom", "stock-ort", "stock-tuned", "picks-tuned"}
    # What the tuned runtimes found, and each run's length (--quick: not a headline's).
    assert [t["contender"] for t in report["stock_tuning"]] == ["stock-tuned", "picks-tuned"]
    assert "not a headline" in closed["run_length"]
    markdown = (out / "report.md").read_text()
    assert "`stock-tuned` as found: dense models, batch 1:" in markdown
    assert "`picks-tuned` as found: sparseloom's picks merged" in markdown
    assert "tuning tiny: " in completed.stderr
    # Accuracy judged on held-out rows: dense, and each policy's pick, in f32.
    judged = {(j["model"], j["precision"]) for j in report["judging"]["judged"]}
    assert ("dense", "f32") in judged and all(j["rows"] > 0 for j in report["judging"]["judged"])
    assert "## Accuracy on held-out rows" in markdown
    for row in closed["contenders"]:
        assert {"contender", "median", "min", "max", "rounds"} <= set(row)
    assert {"vs_best_stock", "vs_best_baseline"} <= set(closed["ratios"])
    assert "sparseloom ÷ best stock runtime" in completed.stdout
    assert (out / "report.md").is_file() and (out / "serve_closed.png").is_file()
    # Each task's own rate beside the makespan, from the runs at equal accuracy.
    assert "sparseloom" in closed["task_rates"] and "sparseloom" in closed["worst_task"]
    assert "Each task's rate, requests/s (its requests ÷ the seconds from its first" in markdown


def test_foreign_load_counts_other_processes_not_this_one() -> None:
    import statistics
    import time

    from sparseloom.evaluation.serve_figures import ForeignLoad

    # The same busy work, first in this process, then in a child: only the child's is
    # foreign. Other processes may be busy too (the check must hold on a shared machine):
    # they add to both readings alike on a quiet machine, and on a saturated one they take
    # what the busy work leaves, so the child's reading exceeds this process's by about the
    # share of a core the work got (this process's CPU time over the wall time). Were this
    # process counted, the two readings would match. Three pairs: the median.
    seconds = 0.4
    burn = f"import time\nt = time.time()\nwhile time.time() - t < {seconds}:\n    pass\n"
    gaps, shares, children = [], [], []
    for _ in range(3):
        probe, cpu, wall = ForeignLoad(), time.process_time(), time.perf_counter()
        exec(burn)  # this process busy
        own = probe.cores()
        shares.append((time.process_time() - cpu) / (time.perf_counter() - wall))
        probe = ForeignLoad()
        subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)
        children.append(probe.cores())
        gaps.append(children[-1] - own)
    assert statistics.median(children) >= 0.6, children  # the child kept a core busy
    assert statistics.median(gaps) >= 0.5 * statistics.median(shares), (gaps, shares)


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
    from sparseloom.evaluation.serve_grid import violation_floor
    from sparseloom.evaluation.serve_report import _floor_lines

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


def test_violation_above_the_floor_is_each_round_less_the_floor() -> None:
    from sparseloom.evaluation.serve_grid import above_floor
    from sparseloom.evaluation.serve_report import _above_floor_lines

    contenders = select_contenders(["sparseloom", "stock-ort", "stock-ov"])
    values = {"sparseloom": {0: 0.25, 1: 0.5, 2: 0.25}, "stock-ort": {0: 0.75, 1: 0.5},
              "stock-ov": {0: 0.5, 1: 0.5, 2: 0.5}}
    above = above_floor(values, contenders, 0.25)
    assert above["contenders"]["sparseloom"] == {"median": 0.0, "min": 0.0, "max": 0.25, "n": 3}
    assert above["contenders"]["stock-ort"]["median"] == pytest.approx(0.375)
    assert above["best_stock"] == {"contender": "stock-ov", "median": 0.25}
    assert "the best stock runtime (stock-ov) 0.25" in _above_floor_lines(above)[0]


def test_a_row_without_figures_says_whether_its_runs_failed_or_lost_accuracy() -> None:
    from sparseloom.evaluation.serve_report import _contender_table

    def row(name: str, invalid: int, equal: float) -> dict[str, Any]:
        return {"contender": name, "median": math.nan, "min": math.nan, "max": math.nan,
                "n": 0, "rounds": [None, None], "invalid_runs": invalid,
                "figures": {"equal_accuracy": {"median": equal}}}

    lost, failed = _contender_table([row("lost", 0, 0.0), row("failed", 2, math.nan)],
                                    "stp", 1)[2:]
    assert "| lost | no VALID run at equal accuracy | 0 |" in lost
    assert "| failed | no VALID run | 0 (2 INVALID) |" in failed


def test_a_policy_contender_may_serve_another_policy_with_its_own_runtime_settings(
        context: ServeContext) -> None:
    from sparseloom.core.types import SLO
    from sparseloom.evaluation.contender import Contender
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.runtime.load import LoadSpec
    from sparseloom.runtime.options import RuntimeOptions

    slos = {"tiny": SLO(0.0, 1e6)}
    off = Contender("sparseloom-loaded-window-7", "policy", policy="sparseloom-loaded",
                    options=RuntimeOptions(window=7))
    summary = serve_contender(context, off, LoadSpec("closed", queries=20), slos)
    assert summary.settings["policy"] == "sparseloom-loaded"
    assert summary.settings["window"] == 7 and summary.completed == 20
    plain = serve_contender(context, Contender("sparseloom-loaded", "policy"),
                            LoadSpec("closed", queries=20), slos)
    assert plain.settings["window"] == RuntimeOptions().window == 20


def test_policy_contenders_serve_within_the_benchmarks_memory_budget(
        context: ServeContext) -> None:
    import attrs

    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.runtime.load import LoadSpec

    slos = dense_slos(context, {t: 1e3 for t in context.workload.task_names})
    policy = select_contenders(["sparseloom"])[0]
    whole = serve_contender(context, policy, LoadSpec("closed", queries=20), slos).memory
    half = serve_contender(attrs.evolve(context, memory_budget=0.5), policy,
                           LoadSpec("closed", queries=20), slos).memory
    assert half["budget_bytes"] < whole["budget_bytes"]
    assert 0 < half["loaded_bytes"] <= half["runtime_budget_bytes"]
    with pytest.raises(ValueError, match="memory_budget"):
        BenchOptions(memory_budget=0)


def test_choosing_above_the_slo_tightens_the_picks_not_the_verdict(
        context: ServeContext) -> None:
    import attrs

    from sparseloom.evaluation.serve_figures import dense_slos

    slos = dense_slos(context)
    tight = attrs.evolve(context, choose_above=0.01)
    assert tight.choosing(slos)["tiny"].accuracy == pytest.approx(slos["tiny"].accuracy + 0.01)
    pick = tight.picks(slos, "sparseloom-loaded")["tiny"]
    # chosen at dense − 1 point + 1 point: no worse than dense on the selection rows
    assert tight.selection_accuracy("tiny", pick) >= slos["tiny"].accuracy + 0.01 - 1e-9
    judged = tight.judged("tiny", pick, "f32", slos["tiny"].accuracy)
    assert judged.margin == pytest.approx(0.01)  # judged against the SLO itself
    # Tightened past dense, the margin is none: the dense model still qualifies.
    dense = tight.selection_accuracy("tiny", None)
    assert attrs.evolve(context, choose_above=0.5).choosing(slos)["tiny"].accuracy == dense


def test_a_pick_judged_at_another_slo_reads_as_a_fresh_judgement(
        context: ServeContext) -> None:
    import attrs

    from sparseloom.evaluation.judging import judge
    from sparseloom.evaluation.serve_figures import dense_slos

    slos = dense_slos(context)
    pick = context.picks(slos, "sparseloom-loaded")["tiny"]
    dense = context.selection_accuracy("tiny", None)
    loose = context.judged("tiny", pick, "f32", slos["tiny"].accuracy)
    strict = context.judged("tiny", pick, "f32", dense + 0.02)  # a grid cell above dense
    fresh, _ = judge(context.workload.task("tiny"), context.zoos["tiny"], tuple(pick), "f32",
                     selection_drop=loose.selection_drop, margin=-0.02)
    assert strict.margin == pytest.approx(-0.02) and fresh.margin == pytest.approx(-0.02)
    assert attrs.evolve(strict, margin=fresh.margin) == fresh
    assert attrs.evolve(loose, margin=fresh.margin) == fresh
    assert context.judged("tiny", pick, "f32", dense + 0.02) is strict


def test_a_missing_ratio_says_whether_accuracy_or_validity_kept_it_out() -> None:
    from sparseloom.evaluation.serve_report import headline_lines

    def row(name: str, n: int, equal: float) -> dict[str, Any]:
        return {"contender": name, "n": n,
                "figures": {"equal_accuracy": {"median": equal, "max": equal, "n": n}}}

    empty = {"vs_best_stock": {"n": 0}}
    report = {"load": {"quiet": True}, "scenarios": {"closed": {
        "figure": "throughput_rps", "contenders": [row("sparseloom-loaded", 5, 0.0),
                                                   row("sparseloom", 0, 1.0)],
        "ratios": empty, "ratios_by_policy": {"sparseloom-loaded": empty, "sparseloom": empty}}}}
    lines = headline_lines(report)
    assert "sparseloom-loaded ÷ best stock runtime: none of its VALID runs served at equal " \
           "accuracy as judged on the held-out rows" in lines[0]
    assert "no round in which both had a VALID run" in lines[1]
