"""``sparseloom zoo``: build, show, eval and pareto on the tiny workload; one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sparseloom.cli import cli
from sparseloom.zoo.variants import DEFAULT_VARIANTS
from tests.zoo.zoo_support import require_real_compressors, tiny_task, tiny_zoo


@pytest.fixture(scope="module", autouse=True)
def _compressors() -> None:
    require_real_compressors()
    tiny_zoo(2)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_build_json_lists_the_zoo() -> None:
    result = invoke("zoo", "build", "tiny", "--subgraphs", "2", "--json")
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert summary["task"] == "tiny" and summary["subgraphs"] == 2
    assert summary["cached"] is True and summary["directory"] == str(tiny_zoo(2).directory)
    assert len(summary["variants"]) >= 10


def test_show_prints_directory_and_variants() -> None:
    result = invoke("zoo", "show", "tiny", "-S", "2")
    assert result.exit_code == 0, result.output
    assert str(tiny_zoo(2).directory) in result.output
    for name in ("dense", "unstructured-0.5", "structured-0.25", "int8", "fp16"):
        assert name in result.output
    as_json = json.loads(invoke("zoo", "show", "tiny", "-S", "2", "--json").stdout)
    assert as_json[0]["built"] is True and as_json[0]["metric"] == "accuracy"
    variant = as_json[0]["variants"][1]
    assert set(variant) >= {"id", "name", "compressor", "level", "metric", "size_bytes"}


def test_show_reports_an_unbuilt_zoo() -> None:
    result = invoke("zoo", "show", "tiny", "-S", "2", "--variants", "dense,unstructured-0.7")
    assert result.exit_code == 0
    assert "tiny: not built" in result.output


def test_eval_of_the_dense_stitch_is_the_dense_metric() -> None:
    from sparseloom.workload.evaluate import evaluate

    result = invoke("zoo", "eval", "tiny", "--task", "tiny", "--stitch", "0,0", "-S", "2",
                    "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["value"] == evaluate(tiny_task())
    assert payload["variants"] == ["dense", "dense"]
    text = invoke("zoo", "eval", "tiny", "--task", "tiny", "--stitch", "0,7", "-S", "2")
    assert text.exit_code == 0 and "tiny[0,7] (dense | int8): accuracy = " in text.output


@pytest.mark.parametrize(
    ("stitch", "fragments"),
    [
        ("0,3,5", ("has 3 choice(s) but the zoo has 2 positions",)),
        ("0,12", ("position 1 has unknown variant id 12", "ids are 0..10")),
        ("0,x", ("--stitch takes comma-separated variant ids",)),
    ],
)
def test_eval_refuses_bad_stitch_tuples(stitch: str, fragments: tuple[str, ...]) -> None:
    result = invoke("zoo", "eval", "tiny", "--task", "tiny", "--stitch", stitch, "-S", "2")
    assert_one_line_error(result, *fragments)


def test_eval_unknown_task() -> None:
    result = invoke("zoo", "eval", "tiny", "--task", "nope", "--stitch", "0,0")
    assert_one_line_error(result, "nope")


def test_build_refuses_impossible_requests() -> None:
    assert_one_line_error(invoke("zoo", "build", "tiny", "-S", "40"), "at most")
    assert_one_line_error(
        invoke("zoo", "build", "tiny", "-S", "2", "--variants", "dense,unstructured-1.5"),
        "level 1.5 of compressor 'unstructured' is out of range",
    )


def test_corrupted_zoo_is_a_one_line_error_until_rebuilt() -> None:
    args = ("tiny", "-S", "2", "--variants", "dense,fp16")
    # --rebuild: a run stopped after the corruption below must not fail the next one.
    built = invoke("zoo", "build", *args, "--rebuild", "--json")
    assert built.exit_code == 0, built.output
    directory = Path(json.loads(built.stdout)[0]["directory"])
    target = directory / "p1" / "v1-fp16.onnx"
    target.write_bytes(target.read_bytes()[:-7] + b"garbage")
    assert_one_line_error(invoke("zoo", "show", *args), "p1/v1-fp16.onnx", "is corrupted")
    assert_one_line_error(invoke("zoo", "build", *args), "is corrupted", "--rebuild")
    assert invoke("zoo", "build", *args, "--rebuild").exit_code == 0
    assert invoke("zoo", "show", *args).exit_code == 0


def test_pareto_writes_png_and_csv(tmp_path: Path) -> None:
    result = invoke("zoo", "pareto", "tiny", "--task", "tiny", "-S", "2", "--out", str(tmp_path),
                    "--sample", "20", "--runs", "1", "--order", "ort:CPU,ov:CPU", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    variants = len(DEFAULT_VARIANTS)
    assert summary["originals"] == variants and summary["stitched_sampled"] == 20
    assert summary["stitched_total"] == variants * (variants - 1)
    png = Path(summary["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Path(summary["csv"]).open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == variants + 20
    assert [r["kind"] for r in rows] == ["original"] * variants + ["stitched"] * 20
    assert all(float(r["latency_ms"]) > 0 for r in rows)
    # The headline counts, recounted from the CSV's points. The CSV rounds latencies to
    # 1e-4 ms, so a stitched variant that close to an original may count either way.
    originals = [(float(r["accuracy"]), float(r["latency_ms"])) for r in rows[:10]]
    stitched = [(float(r["accuracy"]), float(r["latency_ms"])) for r in rows[10:]]
    best = max(a for a, _ in originals)
    fastest = min(t for _, t in originals)
    assert summary["above_best_accuracy"] == sum(a > best for a, _ in stitched)
    slack = 1e-4
    assert (sum(t < fastest - slack for _, t in stitched)
            <= summary["below_fastest_latency"]
            <= sum(t < fastest + slack for _, t in stitched))

    def dominated(point: tuple[float, float], slack: float) -> bool:
        return any(a >= point[0] and t <= point[1] + slack for a, t in originals)

    assert (sum(not dominated(p, slack) for p in stitched)
            <= summary["beyond_front"]
            <= sum(not dominated(p, -slack) for p in stitched))
    assert invoke("zoo", "pareto", "tiny", "--task", "tiny", "-S", "2", "--out",
                  str(tmp_path), "--order", "ort:CPU").exit_code == 1
