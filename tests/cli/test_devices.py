"""``sparseloom devices``, ``infer`` and ``bench backends``, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from sparseloom.cli import cli
from tests.plugins.backends import models

#: What each processor's runtime reports as running a model it was asked to run.
EXECUTED_BY = {"ov:CPU": ["CPU"], "ort:CPU": ["CPUExecutionProvider"]}


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_models")
    corrupt = folder / "corrupt.onnx"
    corrupt.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 4)
    return {
        "folder": folder,
        "conv": models.save(models.conv_net(), folder / "conv.onnx"),
        "transformer": models.save(models.transformer_block(), folder / "transformer.onnx"),
        "contrib": models.save(models.contrib_op_model(), folder / "contrib.onnx"),
        "corrupt": str(corrupt),
    }


def test_devices_json_lists_two_available_processors_on_disjoint_cores():
    result = invoke("devices", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    available = [r for r in rows if r["available"]]
    assert len({r["backend"] for r in available}) >= 2
    for row in rows:
        assert set(row) >= {"name", "backend", "device", "full_name", "threads", "cores",
                            "available", "reason"}
    cpu = [set(r["cores"]) for r in available if r["device"] == "CPU"]
    if len(os.sched_getaffinity(0)) >= 2:
        assert len(cpu) >= 2 and not cpu[0] & cpu[1]


def test_devices_table():
    result = invoke("devices")
    assert result.exit_code == 0 and "ov:CPU" in result.output and "ort:CPU" in result.output


@pytest.mark.parametrize(("name", "input_name", "shape"),
                         [("conv", "image", (2, 3, 16, 16)), ("transformer", "x", (2, 8, 16))])
def test_infer_gives_matching_outputs_on_both_cpu_processors(files, name, input_name, shape):
    folder = files["folder"]
    inputs = folder / f"{name}_in.npz"
    np.savez(inputs, **{input_name: np.random.default_rng(0).standard_normal(shape)
                        .astype(np.float32)})
    outputs = {}
    for processor in ("ov:CPU", "ort:CPU"):
        out = folder / f"{name}_{processor.replace(':', '_')}.npz"
        result = invoke("infer", files[name], "--processor", processor, "--input", str(inputs),
                        "--output", str(out), "--repeat", "3", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["processor"] == processor and report["latency_ms"]["count"] == 3
        # The runtime really ran it where asked (no silent fallback to another device).
        assert report["executed_by"] == EXECUTED_BY[processor]
        assert 0 < report["latency_ms"]["median"] <= report["latency_ms"]["p90"]
        with np.load(out) as archive:
            outputs[processor] = {k: archive[k] for k in archive.files}
    (output_name,) = outputs["ov:CPU"]
    np.testing.assert_allclose(outputs["ov:CPU"][output_name], outputs["ort:CPU"][output_name],
                               rtol=1e-4, atol=1e-4)


def test_infer_with_random_inputs_prints_shapes_and_latency(files):
    result = invoke("infer", files["conv"], "--processor", "ov:CPU", "--repeat", "2")
    assert result.exit_code == 0, result.output
    assert "logits" in result.output and "1x10" in result.output
    assert "median" in result.output and "p90" in result.output


def _bad_inputs(folder, name, **arrays):
    path = folder / name
    np.savez(path, **arrays)
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown processor", "unknown processor 'ort:TPU'; known processors:"),
        ("missing model", "not found"),
        ("corrupt model", "not a readable ONNX model"),
        ("wrong input name", "missing input(s) 'image'; unknown input(s) 'img'"),
        ("wrong input shape", "input 'image' has shape [1, 3, 8, 8], expected float32[N,3,16,16]"),
        ("wrong input dtype", "input 'image' has dtype float64, expected float32"),
        ("not an npz", "is not a readable .npz: File is not a zip file"),
        ("device cannot compile", "compile on ov:CPU failed: OpenVINO cannot read contrib.onnx"),
    ],
)
def test_bad_input_is_one_clear_message(files, case, message):
    folder = files["folder"]
    args = {
        "unknown processor": [files["conv"], "--processor", "ort:TPU"],
        "missing model": [str(folder / "nope.onnx")],
        "corrupt model": [files["corrupt"]],
        "wrong input name": [files["conv"], "--input", _bad_inputs(
            folder, "name.npz", img=np.zeros((1, 3, 16, 16), np.float32))],
        "wrong input shape": [files["conv"], "--input", _bad_inputs(
            folder, "shape.npz", image=np.zeros((1, 3, 8, 8), np.float32))],
        "wrong input dtype": [files["conv"], "--input", _bad_inputs(
            folder, "dtype.npz", image=np.zeros((1, 3, 16, 16)))],
        "not an npz": [files["conv"], "--input", files["corrupt"]],
        "device cannot compile": [files["contrib"], "--processor", "ov:CPU"],
    }[case]
    result = CliRunner().invoke(cli, ["infer", *args])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1


def test_errors_from_a_real_process_have_no_traceback(files):
    env = {**os.environ, "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "sparseloom", "infer", files["contrib"], "--processor", "ov:CPU"],
        capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "com.microsoft.Inverse" in result.stderr


def test_bench_backends_prints_overhead_and_speedup_side_by_side():
    result = invoke("bench", "backends", "--requests", "5", "--channels", "4", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {row["processor"] for row in report["overhead"]} == {"ov:CPU", "ort:CPU"}
    for row in report["overhead"]:
        assert row["bare_ms"] is not None  # both built-in backends expose the bare call
        assert row["overhead_pct"] == pytest.approx(
            100 * (row["async_ms"] - row["bare_ms"]) / row["bare_ms"])
        assert row["infer_overhead_pct"] == pytest.approx(
            100 * (row["infer_ms"] - row["bare_ms"]) / row["bare_ms"])
    parallel = report["parallel"]
    assert parallel["speedup"] == pytest.approx(parallel["serial_s"] / parallel["parallel_s"])
    # serial time is the sum of two processors' times alone, ideal is serial over the longer:
    # between 1 (one processor does all the work) and 2 (both take equally long).
    assert 1.0 <= parallel["ideal_speedup"] <= 2.0
