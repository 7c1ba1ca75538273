"""The crash guard: a native crash in a backend's compile, load or first inference happens in a
probe process, is named in one line, cached, and answered with an alternative or a skip."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sparseloom.core.errors import ConfigError, NativeCrashError
from sparseloom.core.processors import get_backend, get_processor
from sparseloom.isolation.guard import GuardedBackend, prepare, register_alternative
from sparseloom.isolation.probe import cached_outcome, wait_for_probes
from tests.isolation.repro_models import encoder_pair, residual_mlp
from tests.plugins import crashing
from tests.plugins.backends.models import linear_model


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own: every probe outcome starts unknown."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPARSELOOM_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def crashing_backends(register_plugin: Callable[..., str]) -> Iterator[None]:
    register_plugin(crashing.PLUGIN, "crashing")
    yield


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _plain_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize(("backend_name", "step"), [("crash-compile", "compile"),
                                                    ("crash-infer", "the first inference")])
def test_a_native_crash_is_contained_named_and_cached(
        backend_name: str, step: str, tmp_path: Path, own_cache: Path, crashing_backends: None,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparseloom.isolation")
    model = _save(linear_model(), tmp_path / "crashy.onnx")
    processor = get_processor(f"{backend_name}:CPU")
    backend = get_backend(backend_name)
    assert type(backend) is GuardedBackend
    with pytest.raises(NativeCrashError) as raised:
        backend.compile(str(model), processor)
    message = str(raised.value)
    assert f"{backend_name}:CPU" in message and "crashy.onnx" in message
    assert f"SIGSEGV in {step}" in message and "skipped" in message
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1 and "crashy.onnx" in warnings[0] and backend_name in warnings[0]
    assert "probing" not in err  # a log record (below), not a line in the command's output
    assert any("probing 1 new backend combination" in r.getMessage() for r in caplog.records)
    # The outcome is cached: a second attempt refuses at once, without a probe process.
    caplog.clear()
    with pytest.raises(NativeCrashError):
        backend.compile(str(model), processor)
    assert not any("probing" in r.getMessage() for r in caplog.records)
    assert len(list((own_cache / "probes").glob("*.json"))) == 1


def test_a_model_that_does_not_crash_is_served_after_its_probe(
        tmp_path: Path, own_cache: Path, crashing_backends: None) -> None:
    model = _save(linear_model(), tmp_path / "fine.onnx")
    processor = get_processor("crash-compile:CPU")
    backend = get_backend("crash-compile")
    loaded = backend.load(backend.compile(str(model), processor), processor)
    x = np.random.default_rng(1).standard_normal((1, 6)).astype(np.float32)
    np.testing.assert_allclose(backend.infer(loaded, {"x": x})["y"],
                               _plain_ort(model, {"x": x})[0], rtol=1e-6)
    [outcome] = [cached_outcome(p.stem) for p in (own_cache / "probes").glob("*.json")]
    assert outcome is not None and outcome.status == "ok"


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_probe_processes_go_on_past_a_crash(processes: str, tmp_path: Path,
                                                own_cache: Path, crashing_backends: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARSELOOM_PROBE_PROCESSES", processes)
    names = ("a.onnx", "b_crashy.onnx", "c.onnx", "d.onnx", "e_crashy.onnx", "f.onnx")
    paths = [_save(linear_model(seed=i), tmp_path / name) for i, name in enumerate(names)]
    processor = get_processor("crash-compile:CPU")
    backend = get_backend("crash-compile")
    prepare((backend, path, processor) for path in paths)  # returns at once
    wait_for_probes()
    statuses = {path.name: cached_outcome(backend.item(str(path), processor).key)
                for path in paths}
    assert {name: o.status for name, o in statuses.items() if o} == {
        name: "crashed" if "crashy" in name else "ok" for name in names}


@pytest.mark.parametrize(("name", "value"), [("SPARSELOOM_PROBE_PROCESSES", "0"),
                                             ("SPARSELOOM_PROBE_PROCESSES", "two"),
                                             ("SPARSELOOM_PROBE_TIMEOUT_S", "-1"),
                                             ("SPARSELOOM_PROBE_TIMEOUT_S", "nan")])
def test_a_bad_probe_setting_is_named(name: str, value: str, tmp_path: Path, own_cache: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    model = _save(linear_model(), tmp_path / "fine.onnx")
    with pytest.raises(ConfigError, match=f"{name}='{value}' is not a positive"):
        get_backend("ort").compile(str(model), get_processor("ort:CPU"))


def test_a_hang_is_cut_off_and_named(tmp_path: Path, own_cache: Path, crashing_backends: None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARSELOOM_PROBE_TIMEOUT_S", "3")
    model = _save(linear_model(), tmp_path / "crashy.onnx")
    with pytest.raises(NativeCrashError, match=r"hung in a probe process \(no progress in 3 s "
                                               r"in compile\)"):
        get_backend("hang-compile").compile(str(model), get_processor("hang-compile:CPU"))


def test_a_registered_alternative_serves_when_the_model_crashes(
        tmp_path: Path, own_cache: Path, crashing_backends: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    original = _save(linear_model(seed=3), tmp_path / "original.onnx")
    copy = _save(linear_model(seed=3, batch=1), tmp_path / "copy_crashy.onnx")
    register_alternative(copy, original, "the original model", "the copy of original.onnx")
    processor = get_processor("crash-compile:CPU")
    backend = get_backend("crash-compile")
    loaded = backend.load(backend.compile(str(copy), processor), processor)
    x = np.ones((1, 6), np.float32)
    np.testing.assert_allclose(backend.infer(loaded, {"x": x})["y"],
                               _plain_ort(original, {"x": x})[0], rtol=1e-6)
    [warning] = [line for line in capsys.readouterr().err.splitlines()
                 if line.startswith("Warning:")]
    assert "the copy of original.onnx crashed" in warning
    assert "using the original model instead" in warning


def test_isolation_off_hands_out_the_backend_itself(monkeypatch: pytest.MonkeyPatch,
                                                    sparseloom_registry: object) -> None:
    monkeypatch.setenv("SPARSELOOM_ISOLATION", "off")
    assert type(get_backend("ort")) is not GuardedBackend


def test_openvino_serves_the_batch_one_residual_mlp_on_every_cpu(
        tmp_path: Path, own_cache: Path) -> None:
    """OpenVINO 2026.4 crashes compiling this batch-1 copy at f32 on one thread on an AMD EPYC
    Zen 4; there the guard serves the dynamic-batch model, elsewhere the copy itself."""
    from sparseloom.zoo.batch_one import batch_one_path

    dynamic = _save(residual_mlp("N"), tmp_path / "mlp.onnx")
    copy = batch_one_path(dynamic, ["N"])
    assert copy != dynamic
    processor = get_processor("ov:CPU")  # the default: f32, one thread
    backend = get_backend("ov")
    loaded = backend.load(backend.compile(str(copy), processor), processor)
    x = np.random.default_rng(0).standard_normal((1, 48)).astype(np.float32)
    np.testing.assert_allclose(backend.infer(loaded, {"x": x})["y"],
                               _plain_ort(dynamic, {"x": x})[0], rtol=1e-4, atol=1e-5)
    backend.unload(loaded)


def test_onnx_runtime_serves_the_float16_encoder_on_every_cpu(tmp_path: Path,
                                                              own_cache: Path) -> None:
    """ONNX Runtime 1.32 crashes building this float16 encoder's session at ORT_ENABLE_ALL on
    an AMD EPYC Zen 4; there the guard loads it at a lower level, elsewhere as asked."""
    from sparseloom.workload.inference import load_model

    f32, f16 = encoder_pair(tmp_path)
    backend, loaded = load_model(str(f16), "ort:CPU")
    tokens = np.random.default_rng(0).standard_normal((1, 64, 9)).astype(np.float32)
    out = backend.infer(loaded, {"tokens": tokens})["hidden"]
    np.testing.assert_allclose(out, _plain_ort(f32, {"tokens": tokens})[0], atol=0.05)
    backend.unload(loaded)


@pytest.mark.serial  # another test beside it is foreign load
def test_probe_processes_are_not_foreign_load(tmp_path: Path, own_cache: Path) -> None:
    from sparseloom.profile.machine_load import ForeignLoad

    paths = [_save(linear_model(seed=i), tmp_path / f"m{i}.onnx") for i in range(6)]
    backend, processor = get_backend("ort"), get_processor("ort:CPU")
    watch = ForeignLoad()
    prepare((backend, path, processor) for path in paths)
    wait_for_probes()  # a child started, imported both runtimes and probed six models
    assert watch.cores() < 0.5
