"""Workload TOML files: a user's own task from files end to end, and every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sparseloom.cli.profile import _workload_defaults
from sparseloom.core.errors import ConfigError, UnknownNameError
from sparseloom.core.types import SLO
from sparseloom.workload.evaluate import evaluate
from sparseloom.workload.load import load_workload, resolve_workload
from sparseloom.workload.task import UnknownTaskError

WEIGHTS = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)


def two_input_model(path: Path, features: int = 4) -> Path:
    """logits = (x + y) @ W + b, with a symbolic batch dimension."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"]),
         helper.make_node("MatMul", ["s", "W"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["logits"])],
        "user_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(WEIGHTS, "W"),
         numpy_helper.from_array(np.zeros(3, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture
def user_files(tmp_path: Path) -> Path:
    """A user workload: model, eval data (3 of 40 labels wrong), calibration, TOML."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 40, 4)).astype(np.float32)
    labels = np.argmax((x + y) @ WEIGHTS, axis=1)
    labels[:3] = (labels[:3] + 1) % 3
    two_input_model(tmp_path / "model.onnx")
    np.savez(tmp_path / "eval.npz", x=x, y=y, labels=labels)
    np.savez(tmp_path / "calib.npz", x=x[:8], y=y[:8])
    (tmp_path / "mine.toml").write_text(
        'processors = ["ort:CPU"]\n'
        "[[task]]\n"
        'name = "mytask"\nmodel = "model.onnx"\ndata = "eval.npz"\n'
        'calibration = "calib.npz"\nmetric = "accuracy"\n'
        "[task.slo]\naccuracy = 0.85\nlatency_ms = 5.0\n"
    )
    return tmp_path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(text)
    return path


def test_user_task_from_files_end_to_end(user_files: Path):
    workload = load_workload(str(user_files / "mine.toml"), progress=False)
    assert workload.name == "mine" and workload.processors == ("ort:CPU",)
    assert workload.source == user_files / "mine.toml"
    task = workload.task("mytask")
    assert task.slo == SLO(accuracy=0.85, latency_ms=5.0)
    assert task.input_names == ("x", "y") and task.output_names == ("logits",)
    assert task.num_eval == 28 and task.held_out.count == 12 and task.num_calibration == 8
    assert task.info["params"] == 15
    # 37 of the 40 rows right: on the selection rows and the held-out ones together
    assert evaluate(task) * 28 + evaluate(task.judging()) * 12 == pytest.approx(37)


def test_calibration_defaults_to_eval_samples_and_dtype_is_cast(user_files: Path):
    data = dict(np.load(user_files / "eval.npz"))
    np.savez(user_files / "eval64.npz", **{k: v.astype(np.float64) if k != "labels" else v
                                           for k, v in data.items()})
    path = write(user_files, '[[task]]\nname = "t"\nmodel = "model.onnx"\ndata = "eval64.npz"\n')
    task = load_workload(path, progress=False).task("t")
    assert task.eval_inputs["x"].dtype == np.float32
    # taken from the eval rows, but from the selection rows only: no compressor sees a row
    # that judges it
    assert task.num_calibration == 28
    np.testing.assert_array_equal(task.calibration_inputs["x"], task.eval_inputs["x"])
    assert evaluate(task) * 28 + evaluate(task.judging()) * 12 == pytest.approx(37)


def test_unknown_workload_and_task_are_clear():
    with pytest.raises(UnknownNameError, match=r"unknown workload 'nope'.*default.*tiny"):
        load_workload("nope")
    with pytest.raises(UnknownTaskError, match=r"no task 'vision'.*tiny"):
        load_workload("tiny", tasks=["vision"], progress=False)
    with pytest.raises(ConfigError, match="not found"):
        load_workload("missing/file.toml")


BAD_TOML = [
    ('name = "x"\n', "no tasks"),
    ("[[task]]\n", "missing 'name'"),
    ('[[task]]\nname = "t"\n', "missing 'model' and 'data'"),
    ('[[task]]\nname = "t"\nmodel = "model.onnx"\n', "missing 'data'"),
    ('[[task]]\nname = 3\nbuilder = "tiny"\n', "'name' must be a string, got int 3"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\nepochs = 2\n', "unknown key 'epochs'"),
    ('colour = "red"\n[[task]]\nname = "t"\nbuilder = "tiny"\n', "unknown key 'colour'"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[task.options]\nepoch = 2\n',
     "unknown option 'epoch' for builder 'tiny'"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[task.options]\nepochs = "2"\n',
     "option 'epochs' must be int"),
    ('[[task]]\nname = "t"\nbuilder = "nosuch"\n', "unknown builder 'nosuch'"),
    ('[[task]]\nname = "t"\nbuilder = "os:path"\n',
     "is not a sparseloom.workload.task.TaskBuilder"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\nmodel = "model.onnx"\n', "takes no model"),
    ('[[task]]\nname = "t"\nmodel = "model.onnx"\ndata = "eval.npz"\nmetric = "f1"\n',
     "unknown metric 'f1'"),
    ('[[task]]\nname = "t"\nmodel = "nothere.onnx"\ndata = "eval.npz"\n',
     "model file 'nothere.onnx' not found"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[task.slo]\naccuracy = 0.9\n',
     r"\[slo\]: missing latency_ms"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[task.slo]\naccuracy = 1.5\nlatency_ms = 2\n',
     "accuracy must lie in"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[task.slo]\naccuracy = 0.5\nlatency_ms = "x"\n',
     "'latency_ms' must be a number"),
    ('[[task]]\nname = "t"\nbuilder = "tiny"\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     "appears twice"),
    ('processors = ["CPU"]\n[[task]]\nname = "t"\nbuilder = "tiny"\n', "processor 'CPU'"),
    ('variants = ["dense", "int8", " int8"]\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     "variants names 'int8' more than once; list each variant once"),
    ('[[task]\nname = "t"\n', "not valid TOML"),
    ('task = "t"\n', "'task' must be an array"),
    ('[profile]\nestimator = "xgboost"\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     r"\[profile\]: unknown key 'estimator'"),
    ('[profile]\nsamples = "many"\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     "'samples' must be a number"),
    ('[profile]\nexecutor = "nope"\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     "executor 'nope' is unknown; use \"local\""),
    ('[profile]\nray_resources = { "ov:NPU" = 1 }\n[[task]]\nname = "t"\nbuilder = "tiny"\n',
     "ray_resources.ov:NPU must name the Ray custom resource"),
]


def test_profile_table_names_the_estimators(user_files: Path):
    text = ('[profile]\naccuracy_estimator = "lightgbm"\nlatency_estimator = "additive"\n'
            'samples = 40\n[[task]]\nname = "t"\nbuilder = "tiny"\n')
    definition = resolve_workload(str(write(user_files, text)))
    assert [task.name for task in definition.tasks] == ["t"]
    # What `sparseloom profile` takes as its defaults for this workload.
    assert _workload_defaults(definition) == {
        "accuracy_estimator": "lightgbm", "latency_estimator": "additive", "samples": 40,
    }
    plain = resolve_workload(str(user_files / "mine.toml"))
    assert _workload_defaults(plain) == {}


@pytest.mark.parametrize(("text", "message"), BAD_TOML)
def test_bad_workload_file_is_one_clear_config_error(user_files: Path, text: str, message: str):
    path = write(user_files, text)
    with pytest.raises(ConfigError, match=message) as caught:
        resolve_workload(str(path))
    assert str(path) in str(caught.value)


def _save(path: Path, **arrays: np.ndarray) -> None:
    np.savez(path, **arrays)


MISMATCHES = [
    ({"x": (40, 4)}, "missing \\['y'\\]"),
    ({"x": (40, 4), "y": (40, 4), "z": (40, 4)}, "unexpected \\['z'\\]"),
    ({"x": (40, 5), "y": (40, 5)}, r"axis 1: 5 != 4"),
    ({"x": (40, 4, 1), "y": (40, 4)}, "wants rank 2"),
    ({"x": (40, 4), "y": (39, 4)}, "different sample counts"),
]


@pytest.mark.parametrize(("shapes", "message"), MISMATCHES)
def test_data_that_does_not_fit_the_model_is_refused(user_files: Path, shapes, message):
    arrays = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    _save(user_files / "bad.npz", labels=np.zeros(40, np.int64), **arrays)
    path = write(user_files, '[[task]]\nname = "t"\nmodel = "model.onnx"\ndata = "bad.npz"\n')
    with pytest.raises(ConfigError, match=message):
        load_workload(path, progress=False)


def test_labels_dtype_and_calibration_mismatches_are_refused(user_files: Path):
    zeros = np.zeros((40, 4), np.float32)
    cases = {
        "nolabels.npz": ({"x": zeros, "y": zeros}, "has no 'labels' array"),
        "fewlabels.npz": ({"x": zeros, "y": zeros, "labels": np.zeros(7)}, "but 7 labels"),
        "ints.npz": ({"x": zeros.astype(np.int64), "y": zeros, "labels": np.zeros(40)},
                     "dtype int64, the model input wants float32"),
    }
    for name, (arrays, message) in cases.items():
        _save(user_files / name, **arrays)
        path = write(user_files, f'[[task]]\nname = "t"\nmodel = "model.onnx"\ndata = "{name}"\n')
        with pytest.raises(ConfigError, match=message):
            load_workload(path, progress=False)
    _save(user_files / "calx.npz", x=zeros)
    path = write(user_files, '[[task]]\nname = "t"\nmodel = "model.onnx"\ndata = "eval.npz"\n'
                 'calibration = "calx.npz"\n')
    with pytest.raises(ConfigError, match=r"calibration .*missing \['y'\]"):
        load_workload(path, progress=False)
    (user_files / "broken.onnx").write_bytes(b"not a model")
    path = write(user_files, '[[task]]\nname = "t"\nmodel = "broken.onnx"\ndata = "eval.npz"\n')
    with pytest.raises(ConfigError, match="not a readable ONNX file"):
        load_workload(path, progress=False)


def test_bundled_default_declares_the_four_paper_tasks():
    definition = resolve_workload("default")
    assert [t.name for t in definition.tasks] == ["vision", "sentiment", "activity", "speech"]
    assert all(t.builder is not None for t in definition.tasks)
