"""Fixtures for the backend tests: tiny ONNX models on disk and the two CPU processors."""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs
import pytest

from sparseloom.core.errors import DeviceFallbackError
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


@pytest.fixture
def check_fallback_refused(backend_errors) -> Callable[..., None]:
    """A check that ``backend`` refuses ``requested`` (a processor whose model really runs on
    another device): at compile, and again at load for an artefact compiled while tolerating
    the fallback; observers hear of both."""

    def check(backend, requested, path: str, *, compile_match: str, load_match: str) -> None:
        with pytest.raises(DeviceFallbackError, match=compile_match):
            backend.compile(path, requested)
        assert backend_errors[-1][:2] == (requested.name, "compile")
        # Caught again at load, for an artefact compiled while tolerating the fallback.
        tolerant = attrs.evolve(requested, options={"on_fallback": "warn"})
        with pytest.warns(RuntimeWarning):
            compiled = backend.compile(path, tolerant)
        with pytest.raises(DeviceFallbackError, match=load_match):
            backend.load(compiled, requested)
        assert backend_errors[-1][:2] == (requested.name, "load")

    return check


@pytest.fixture
def run_clients() -> Callable[[Callable[[int], None]], None]:
    """Run ``client(seed)`` for seeds 0..3, each on its own thread, and wait for all four."""

    def run(client: Callable[[int], None]) -> None:
        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    return run
