"""``bench compressors``: one real ``--quick`` run of the tiny workload checked against its own
zoo, task and a plain ONNX Runtime run; the round order and the front rule on hand-made
inputs worked by hand."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

import attrs
import numpy as np
import pytest

from sparseloom.core.errors import ConfigError, UnknownTaskError
from sparseloom.evaluation.compressor_bench import (
    CompressorRow,
    RoundTimes,
    _time_slots,
    front_summary,
    select_tasks,
)
from sparseloom.profile.pinned import ChainTiming


@pytest.fixture(scope="module")
def tiny() -> Any:
    from sparseloom.workload.load import load_workload

    return load_workload("tiny", progress=False)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str,
                                                                  subprocess.CompletedProcess[str]]:
    """One ``--quick`` run on tiny (2 rounds, 5 calls a slot): its report, Markdown, process."""
    out = tmp_path_factory.mktemp("bench_compressors")
    completed = subprocess.run(
        [sys.executable, "-m", "sparseloom", "bench", "compressors", "tiny", "--quick",
         "--requests", "5", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return (json.loads((out / "report.json").read_text()), (out / "report.md").read_text(),
            completed)


def _zoo(report: dict[str, Any]) -> Any:
    import sparseloom
    from sparseloom.cli.profile import profile_options
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload = sparseloom.load_workload("tiny", progress=False)
    profile = sparseloom.build_profile(workload, options=profile_options(workload),
                                       progress=False)
    return load_zoo(zoo_directory(profile.meta["zoo_hashes"]["tiny"]), verify=False)


def test_every_position_variant_and_processor_has_a_row(quick_run: Any) -> None:
    report, _, completed = quick_run
    zoo = _zoo(report)
    (task,) = report["tasks"]
    processors = report["processors"]
    assert set(processors) == {"ov:CPU", "ort:CPU"}
    names = [v.name for v in zoo.variants]
    got = [(r["position"], r["variant"], r["processor"]) for r in task["rows"]]
    assert sorted(got, key=str) == sorted(
        [(j, v, p) for j in range(zoo.positions) for v in names for p in processors]
        + [(None, v, p) for v in names for p in processors], key=str)
    assert all(r["error"] is None for r in task["rows"])
    # One progress line per measured variant (each position, and the whole model).
    lines = [line for line in completed.stderr.splitlines()
             if line.startswith(("tiny position ", "tiny whole model "))]
    assert len(lines) == (zoo.positions + 1) * len(names)


def test_speedups_are_medians_of_per_round_ratios(quick_run: Any) -> None:
    report, _, _ = quick_run
    (task,) = report["tasks"]
    assert report["rounds"] == 2 and report["requests"] == 5 and report["quick"]
    by_cell: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for row in task["rows"]:
        assert row["rounds"] == 2 == len(row["ratios"]) == len(row["round_variant_ms"])
        for dense, variant, ratio in zip(row["round_dense_ms"], row["round_variant_ms"],
                                         row["ratios"], strict=True):
            assert ratio == pytest.approx(dense / variant)
        assert row["speedup_median"] == pytest.approx(statistics.median(row["ratios"]))
        assert row["speedup_min"] == min(row["ratios"])
        assert row["speedup_max"] == max(row["ratios"])
        assert row["dense_ms"] == pytest.approx(statistics.median(row["round_dense_ms"]))
        by_cell.setdefault((row["position"], row["processor"]), []).append(row)
    for (position, processor), rows in by_cell.items():
        # Every variant of a position is divided by the same dense slot of its round.
        assert len({tuple(r["round_dense_ms"]) for r in rows}) == 1
        if position is None:  # the whole model: the positions' round figures summed
            parts = [by_cell[j, processor] for j in range(2)]
            for row in rows:
                same = [next(r for r in part if r["variant"] == row["variant"])
                        for part in parts]
                for r in range(2):
                    assert row["round_dense_ms"][r] == pytest.approx(
                        sum(s["round_dense_ms"][r] for s in same))
                    assert row["round_variant_ms"][r] == pytest.approx(
                        sum(s["round_variant_ms"][r] for s in same))


def test_accuracy_is_judged_on_the_held_out_rows(quick_run: Any, tiny: Any) -> None:
    import onnxruntime as ort

    report, _, _ = quick_run
    (task,) = report["tasks"]
    held_out = tiny.tasks[0].held_out
    assert task["judging_rows"] == held_out.count > 0
    assert task["judging_rows"] != tiny.tasks[0].num_eval  # not the selection rows
    # Dense accuracy on those rows, from a plain ONNX Runtime run of the dense model.
    session = ort.InferenceSession(str(tiny.tasks[0].model_path),
                                   providers=["CPUExecutionProvider"])
    logits = session.run(None, dict(held_out.inputs))[0]
    expected = float(np.mean(np.argmax(logits, axis=-1) == held_out.labels))
    for row in task["rows"]:
        assert row["judging_rows"] == held_out.count
        assert abs(row["accuracy_dense"] - expected) <= 1.0 / held_out.count
        assert row["drop_points"] == pytest.approx(
            100 * (row["accuracy_dense"] - row["accuracy_variant"]))
        if row["variant"] == "dense":
            assert row["drop_points"] == 0.0 and row["accuracy_variant"] == row["accuracy_dense"]


def test_the_report_names_the_front_and_says_it_is_no_headline(quick_run: Any) -> None:
    report, markdown, completed = quick_run
    (task,) = report["tasks"]
    compressors = {r["compressor"] for r in task["rows"]} - {"dense"}
    assert set(task["on_front"]) | set(task["never"]) == compressors
    assert not set(task["on_front"]) & set(task["never"])
    for name, best in task["on_front"].items():
        row = next(r for r in task["rows"] if r["variant"] == best["variant"]
                   and r["processor"] == best["processor"]
                   and best["where"] == ("whole model" if r["position"] is None
                                         else f"position {r['position']}"))
        dense = next(r for r in task["rows"] if r["variant"] == "dense"
                     and r["position"] == row["position"] and r["processor"] == row["processor"])
        assert row["compressor"] == name and row["drop_points"] <= 1.0
        assert min(row["ratios"]) > max(1.0, *dense["ratios"])
    front = next(line for line in markdown.splitlines() if line.startswith("**tiny: on the"))
    assert all(name in front for name in task["on_front"])
    for name in task["never"]:
        assert f"- {name}: never on the front on this workload." in markdown
    assert "not a headline" in markdown and markdown in completed.stdout
    assert report["machine"]["cpu"] and "load_before_first_round" in report
    assert "tiny: round 2/2" in completed.stderr


def test_a_round_rotates_the_reference_the_control_and_the_variants() -> None:
    calls: list[object] = []

    class Threads:
        """Stands in for PinnedThreads: call n lasts n + 1 ms (one 50 ms outlier a slot)."""

        def run(self, stages: list[object], inputs: Any) -> ChainTiming:
            calls.append(stages[0])
            ms = [len(calls)] * (len(stages) - 1) + [50.0]
            starts = tuple(float(i) for i in range(len(stages)))
            return ChainTiming(starts, tuple(s + m / 1e3 for s, m in zip(starts, ms,
                                                                          strict=True)))

    hot = {(0, 0, v): f"stage {v}" for v in range(3)}
    times = RoundTimes(rounds=2)
    _time_slots(times, hot, Threads(), {}, 0, 0, 3, 0, requests=5)
    # Round 0: reference, control (dense again), variant 1, variant 2.
    assert calls == ["stage 0", "stage 0", "stage 1", "stage 2"]
    _time_slots(times, hot, Threads(), {}, 0, 0, 3, 1, requests=5)
    # Round 1, rotated by one: control, variant 1, variant 2, then the reference.
    assert calls[4:] == ["stage 0", "stage 1", "stage 2", "stage 0"]
    assert times.reference == {(0, 0): pytest.approx([1.0, 8.0])}
    assert times.variants == {(0, 0, 0): pytest.approx([2.0, 5.0]),
                              (0, 0, 1): pytest.approx([3.0, 6.0]),
                              (0, 0, 2): pytest.approx([4.0, 7.0])}


def _row(compressor: str, ratios: tuple[float, ...], drop: float,
         position: int | None = 0, skipped: tuple[str, ...] = ()) -> CompressorRow:
    return CompressorRow("t", position, compressor, compressor, "ort:CPU", 1.0, 1.0,
                         statistics.median(ratios), min(ratios), max(ratios), len(ratios),
                         (1.0,) * len(ratios), (1.0,) * len(ratios), ratios, 0.9,
                         0.9 - drop / 100, drop, 100, skipped=skipped)


def test_the_front_needs_every_round_faster_beyond_noise_and_at_most_one_point() -> None:
    rows = [_row("dense", (0.99, 1.02), 0.0),               # the noise at position 0: 1.02
            _row("dense", (1.0, 1.0), 0.0, None),           # none on the whole model
            _row("int8", (1.5, 1.4, 0.9), 0.0),             # median faster, one round not
            _row("fp16", (1.03, 1.04), 1.0),                # beyond the noise, exactly 1 point
            _row("structured", (2.0, 2.0), 1.5),            # fast, loses too much
            _row("structured", (1.1, 1.2), 0.2, None),      # the whole model makes it
            _row("unstructured", (1.01, 1.015), 0.0),       # faster, but inside the noise
            _row("unstructured", (0.9, 0.8), -0.5),         # more accurate, slower
            # Faster only by noise: the compressor found nothing to prune here.
            _row("unstructured", (1.2, 1.1), 0.0, skipped=("unstructured",))]
    summary = front_summary(rows)
    assert list(summary["on_front"]) == ["fp16", "structured"]
    assert summary["on_front"]["structured"]["where"] == "whole model"
    assert summary["never"] == ["int8", "unstructured"]


def test_a_bad_task_or_one_without_held_out_rows_is_refused(tiny: Any) -> None:
    with pytest.raises(UnknownTaskError, match=r"'nosuch'.*has tasks tiny"):
        select_tasks(tiny, ["nosuch"])
    unheld = attrs.evolve(tiny, tasks=(attrs.evolve(tiny.tasks[0], held_out=None),))
    with pytest.raises(ConfigError, match=r"holds no eval rows out.*held_out = 0\.3"):
        select_tasks(unheld, [])
    assert [t.name for t in select_tasks(tiny, ["tiny", "tiny"])] == ["tiny"]


def test_the_cli_refuses_an_unknown_task_before_profiling(
        tiny: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from sparseloom.cli import main

    assert main(["bench", "compressors", "tiny", "--task", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert "'nosuch'" in err and "has tasks tiny" in err and "round" not in err


def test_a_real_run_times_each_stitched_variant_as_its_whole_model_rows(
        quick_run: Any) -> None:
    report, markdown, _ = quick_run
    (task,) = report["tasks"]
    rows = task["stitched"]
    assert rows and all(any(r["choices"]) for r in rows)
    whole = {(r["variant"], r["processor"]): r for r in task["rows"] if r["position"] is None}
    names = {r["variant"] for r in task["rows"]}
    for row in rows:
        assert set(row["names"]) <= names
        if len(set(row["choices"])) == 1:  # one variant at every position
            same = whole[row["names"][0], row["processor"]]
            assert row["speedup_median"] == pytest.approx(same["speedup_median"])
            assert row["drop_points"] == pytest.approx(same["drop_points"])
    best = task["fastest_within"]
    # Each variant counts on the processor where it runs fastest.
    serving = {}
    for row in rows:
        key = tuple(row["choices"])
        if key not in serving or row["variant_ms"] < serving[key]["variant_ms"]:
            serving[key] = row
    within = [r for r in serving.values() if r["drop_points"] <= 1.0]
    if best is None:
        assert not within and "does not exist" in markdown
    else:
        assert best["drop_points"] <= 1.0 and best in within
        assert best["speedup_median"] == max(r["speedup_median"] for r in within)
        assert "**tiny: the fastest variant within 1 point** is `" in markdown
