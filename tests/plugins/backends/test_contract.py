"""A backend that implements exactly the documented ``Backend``/``LoadedModel`` contract.

The backend here is what a third-party author writes from ``docs/plugins.md``: ONNX Runtime
called directly, a loaded model with only the four required members (no ``inputs``,
``outputs``, ``executed_by``, ``handle`` or ``runner``). Every command that runs models must
work with it: ``infer``, :func:`run_batched` and ``bench backends``. Its processor must not join
the default set.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from sparseloom.cli import cli
from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.processors import default_processors, discover_processors, get_processor
from sparseloom.core.protocols import Backend, LoadedModel
from sparseloom.core.types import Processor
from sparseloom.workload.inference import run_batched
from sparseloom.zoo.options import default_subgraphs
from tests.plugins.backends.models import linear_model, linear_weights
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend


class MinimalBackend(ProtocolOnlyBackend):
    """Two processors: one without cores (sparseloom pins it), one with the backend's own."""

    processors = (Processor("mini:CPU", "mini", "CPU"),
                  Processor("mini:CPU2", "mini", "CPU2", cores=(0,), threads=1))


PLUGIN = SimpleNamespace(sparseloom_register_backends=hookimpl(
    lambda register: register("mini", MinimalBackend, description="ORT, protocol only")))


@pytest.fixture
def mini(register_plugin) -> None:
    register_plugin(PLUGIN, "minimal-backend")


def test_the_test_backend_is_exactly_the_protocol(mini) -> None:
    backend = MinimalBackend()
    loaded = backend.load(backend.compile(linear_model(), get_processor("mini:CPU")),
                          get_processor("mini:CPU"))
    assert isinstance(backend, Backend) and isinstance(loaded, LoadedModel)
    for extra in ("inputs", "outputs", "executed_by", "handle", "runner", "compiled"):
        assert not hasattr(loaded, extra)


def test_infer_runs_a_protocol_only_backend(mini, tmp_path: Path) -> None:
    path = tmp_path / "linear.onnx"
    onnx.save(linear_model(features=6, outputs=3), path)
    result = CliRunner().invoke(cli, ["infer", str(path), "-p", "mini:CPU", "--repeat", "2",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["processor"] == "mini:CPU"
    assert report["executed_by"] == ["CPU"]  # the documented default: the processor's device
    assert report["outputs"] == {"y": {"shape": [1, 3], "dtype": "float32"}}
    text = CliRunner().invoke(cli, ["infer", str(path), "-p", "mini:CPU", "--repeat", "1"])
    assert text.exit_code == 0 and "runs on CPU" in text.output


@pytest.mark.parametrize("batch", ["N", 1])
def test_run_batched_reads_shapes_from_the_model(mini, batch: int | str) -> None:
    weight, bias = linear_weights(6, 3, 0)
    x = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
    outputs = run_batched(linear_model(batch=batch), {"x": x}, processor="mini:CPU",
                          batch_size=3)
    np.testing.assert_allclose(outputs["y"], x @ weight + bias, rtol=1e-5, atol=1e-5)
    empty = run_batched(linear_model(batch=batch), {"x": x[:0]}, processor="mini:CPU")
    assert empty["y"].shape == (0, 3) and empty["y"].dtype == np.float32


def test_bench_backends_measures_a_protocol_only_backend(mini) -> None:
    result = CliRunner().invoke(cli, ["bench", "backends", "--processors", "mini:CPU,ort:CPU",
                                      "--requests", "5", "--channels", "4", "--json"])
    assert result.exit_code == 0, result.output
    by_name = {r["processor"]: r for r in json.loads(result.stdout)["overhead"]}
    assert by_name["mini:CPU"]["bare_ms"] is None and by_name["mini:CPU"]["async_ms"] > 0
    assert by_name["ort:CPU"]["bare_ms"] > 0  # built-ins keep their bare-call baseline
    table = CliRunner().invoke(cli, ["bench", "backends", "--processors", "mini:CPU,ort:CPU",
                                     "--requests", "5", "--channels", "4"])
    assert table.exit_code == 0 and "not built in" in table.output


def test_a_new_backend_leaves_the_default_set_and_s_unchanged(sparseloom_registry,
                                                             register_plugin) -> None:
    before = [p.name for p in default_processors()]
    subgraphs = default_subgraphs()
    register_plugin(PLUGIN, "minimal-backend")
    assert "mini:CPU" in {p.name for p in discover_processors(refresh=True)}
    assert [p.name for p in default_processors()] == before
    assert default_subgraphs() == subgraphs
    assert get_processor("mini:CPU").backend == "mini"  # opt-in by name still works


def test_cpu_pinning_is_the_documented_default_and_the_backend_may_choose(mini) -> None:
    found = {p.name: p for p in discover_processors()}
    pinned = found["mini:CPU"]
    assert pinned.threads == 1 and len(pinned.cores) == 1  # returned without cores: pinned
    assert found["mini:CPU2"].cores == (0,)  # returned with cores: kept as the backend chose
