"""The bundled ``tiny`` workload: real digits data, a trained CNN, exported and cached."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.plugins.workloads.tiny import BUILDER
from sparseloom.workload.build import builder_cache_key
from sparseloom.workload.evaluate import evaluate
from sparseloom.workload.load import load_workload
from sparseloom.workload.task import Task, Workload


@pytest.fixture(scope="module")
def tiny() -> Workload:
    # every eval row: these tests check the build's facts, measured on the whole eval set
    return load_workload("tiny", progress=False, held_out=0)


@pytest.fixture(scope="module")
def task(tiny: Workload) -> Task:
    return tiny.task("tiny")


def test_tiny_workload_has_one_ready_task(tiny: Workload, task: Task):
    assert tiny.name == "tiny"
    assert tiny.task_names == ("tiny",)
    assert tiny.source is not None and tiny.source.name == "tiny.toml"
    assert task.metric == "accuracy"
    assert task.input_names == ("image",) and task.output_names == ("logits",)
    assert task.eval_inputs["image"].shape == (task.num_eval, 1, 8, 8)
    assert task.eval_inputs["image"].dtype == np.float32
    assert task.labels.shape == (task.num_eval,)
    assert set(np.unique(task.labels)) == set(range(10))
    assert task.calibration_inputs["image"].shape[1:] == (1, 8, 8)
    assert 300 <= task.num_eval <= 400 and task.num_calibration == 64


def test_onnx_metric_equals_torch_metric(task: Task):
    onnx_metric = evaluate(task)
    torch_metric = task.info["torch_metric"]
    # Same predictions: at most a float tie may flip one sample.
    assert abs(onnx_metric - torch_metric) <= 1.0 / task.num_eval
    assert onnx_metric == pytest.approx(task.dense_metric)
    assert onnx_metric > 0.9


def test_model_is_one_file_with_dynamic_batch_and_opset_17(task: Task):
    model = onnx.load(str(task.model_path))
    onnx.checker.check_model(model)
    assert not any(
        init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer
    )
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    (image,) = [i for i in model.graph.input if i.name == "image"]
    batch = image.type.tensor_type.shape.dim[0]
    assert batch.dim_param and not batch.HasField("dim_value")
    assert list(task.model_path.parent.iterdir())  # everything beside it is ours
    assert {p.name for p in task.model_path.parent.iterdir()} == {
        "model.onnx", "eval.npz", "calibration.npz", "meta.json"}


def test_batched_and_single_inference_agree(task: Task):
    small = {"image": task.eval_inputs["image"][:5]}
    full = evaluate(task, batch_size=7)
    assert full == pytest.approx(evaluate(task, batch_size=256))
    from sparseloom.workload.inference import run_batched

    batched = run_batched(task.model_path, small)["logits"]
    singles = np.concatenate(
        [run_batched(task.model_path, {"image": small["image"][i : i + 1]})["logits"]
         for i in range(5)]
    )
    np.testing.assert_allclose(batched, singles, rtol=1e-4, atol=1e-5)


def test_second_load_is_a_cache_hit(task: Task):
    # Not timed (a shared machine makes any threshold flaky): a hit rewrites no cached file.
    folder = task.model_path.parent
    before = {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}
    again = load_workload("tiny", progress=False, held_out=0).task("tiny")
    assert {path.name: path.stat().st_mtime_ns for path in folder.iterdir()} == before
    assert again.info["cache_hit"] is True
    assert again.model_path == task.model_path
    np.testing.assert_array_equal(again.labels, task.labels)
    meta = json.loads((task.model_path.parent / "meta.json").read_text())
    assert meta["config"] == {**BUILDER.defaults}
    assert meta["builder"] == "tiny" and meta["params"] > 1000


def test_cache_key_follows_the_config():
    config, folder = builder_cache_key(BUILDER, {})
    assert config == dict(BUILDER.defaults)
    assert builder_cache_key(BUILDER, {})[1] == folder
    assert builder_cache_key(BUILDER, {"epochs": 1})[1] != folder
    assert builder_cache_key(BUILDER, {"epochs": BUILDER.defaults["epochs"]})[1] == folder


def test_changed_option_rebuilds_deterministically(tmp_path, task: Task):
    toml = tmp_path / "w.toml"
    toml.write_text('[[task]]\nname = "quick"\nbuilder = "tiny"\n[task.options]\nepochs = 1\n')
    first = load_workload(toml, progress=False).task("quick")
    assert first.model_path.parent != task.model_path.parent
    assert first.info["config"]["epochs"] == 1
    assert load_workload(toml, progress=False).task("quick").info["cache_hit"] is True
    # Same seed and config → the same training: delete the cache entry and build again.
    folder = first.model_path.parent
    metric, weights = first.dense_metric, onnx.load(str(first.model_path)).graph.initializer
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    rebuilt = load_workload(toml, progress=False).task("quick")
    assert rebuilt.info["cache_hit"] is False
    assert rebuilt.dense_metric == metric
    rebuilt_weights = onnx.load(str(rebuilt.model_path)).graph.initializer
    for a, b in zip(weights, rebuilt_weights, strict=True):
        np.testing.assert_allclose(
            onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b), atol=1e-6
        )


def test_task_data_is_read_only_and_score_checks_shapes(task: Task):
    with pytest.raises(ValueError):
        task.eval_inputs["image"][0, 0, 0, 0] = 1.0
    perfect = np.eye(10, dtype=np.float32)[task.labels]
    assert task.score({"logits": perfect}) == 1.0
    assert task.score({"renamed": perfect}) == 1.0  # falls back to the first output
    with pytest.raises(ConfigError, match="accuracy"):
        task.score({"logits": perfect[:3]})
    batches = task.calibration_batches(batch_size=30)
    assert [b["image"].shape[0] for b in batches] == [30, 30, 4]
