"""Fixtures for the backend tests: tiny ONNX models on disk and the two CPU processors."""

from __future__ import annotations

import pytest

from tests.plugins.backends import models


@pytest.fixture(scope="session")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``conv``, ``transformer``, ``linear`` and ``contrib`` models saved as .onnx files."""
    folder = tmp_path_factory.mktemp("backend_models")
    return {
        "conv": models.save(models.conv_net(), folder / "conv.onnx"),
        "transformer": models.save(models.transformer_block(), folder / "transformer.onnx"),
        "linear": models.save(models.linear_model(), folder / "linear.onnx"),
        "contrib": models.save(models.contrib_op_model(), folder / "contrib.onnx"),
    }


@pytest.fixture
def backend_errors(register_plugin) -> list[tuple[str, str, BaseException]]:
    """Every ``sparseloom_backend_error`` notification in the test: (processor, op, error)."""
    from sparseloom.core.hookspecs import hookimpl

    seen: list[tuple[str, str, BaseException]] = []

    class Observer:
        @hookimpl
        def sparseloom_backend_error(self, processor, operation, error):
            seen.append((processor.name, operation, error))

    register_plugin(Observer(), "backend-error-observer")
    return seen
