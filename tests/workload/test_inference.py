"""``run_batched``: batching along the first axis, fixed batch dims, both CPU processors."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import BackendError, ConfigError
from sparseloom.workload.inference import run_batched
from tests.plugins.backends import models


@pytest.mark.parametrize("processor", ["ort:CPU", "ov:CPU"])
@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_matches_numpy_for_any_batch_size(processor, batch_size):
    weight, bias = models.linear_weights()
    x = np.random.default_rng(0).standard_normal((23, 6)).astype(np.float32)
    outputs = run_batched(models.linear_model(), {"x": x}, processor, batch_size=batch_size)
    np.testing.assert_allclose(outputs["y"], x @ weight + bias, rtol=1e-5, atol=1e-4)


def test_fixed_batch_dimension_is_padded_and_trimmed(tmp_path):
    weight, bias = models.linear_weights()
    path = models.save(models.linear_model(batch=4), tmp_path / "fixed.onnx")
    x = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    outputs = run_batched(path, {"x": x}, "ort:CPU", batch_size=256)
    assert outputs["y"].shape == (10, 3)
    np.testing.assert_allclose(outputs["y"], x @ weight + bias, rtol=1e-5, atol=1e-4)


def test_conv_net_on_both_processors_agree():
    images = np.random.default_rng(2).standard_normal((9, 3, 16, 16)).astype(np.float32)
    model = models.conv_net()
    ov = run_batched(model, {"image": images}, "ov:CPU", batch_size=4)["logits"]
    ort = run_batched(model, {"image": images}, "ort:CPU", batch_size=5)["logits"]
    assert ov.shape == (9, 10)
    np.testing.assert_allclose(ov, ort, rtol=1e-4, atol=1e-4)


def test_zero_rows_give_empty_outputs():
    outputs = run_batched(models.linear_model(), {"x": np.zeros((0, 6), np.float32)})
    assert outputs["y"].shape == (0, 3)


def test_rows_must_agree_across_inputs():
    with pytest.raises(BackendError, match="same first-axis length"):
        run_batched(models.linear_model(), {"x": np.zeros((3, 6), np.float32),
                                            "other": np.zeros((4, 6), np.float32)})


def test_wrong_dtype_names_the_input():
    with pytest.raises(BackendError, match="input 'x' has dtype float64, expected float32"):
        run_batched(models.linear_model(), {"x": np.zeros((3, 6))})


def test_batch_size_must_be_positive():
    with pytest.raises(ConfigError, match="batch_size"):
        run_batched(models.linear_model(), {"x": np.zeros((3, 6), np.float32)}, batch_size=0)
