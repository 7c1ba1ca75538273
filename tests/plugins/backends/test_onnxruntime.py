"""The ONNX Runtime backend on real tiny models: compile cache, load, async, errors, fallback."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import BackendError
from sparseloom.core.processors import get_backend, get_processor
from sparseloom.core.types import Processor
from tests.plugins.backends import models


def _providers() -> list[str]:
    import onnxruntime

    return onnxruntime.get_available_providers()


@pytest.fixture(scope="module")
def ort():
    return get_backend("ort")


@pytest.fixture(scope="module")
def linear_loaded(ort, model_files):
    processor = get_processor("ort:CPU")
    loaded = ort.load(ort.compile(model_files["linear"], processor), processor)
    yield loaded
    ort.unload(loaded)


def test_discovers_cpu_processor(ort):
    cpu = next(p for p in ort.devices() if p.name == "ort:CPU")
    assert cpu.available and cpu.backend == "ort" and cpu.full_name


def test_compile_on_cpu_keeps_no_copy_of_the_model(ort, model_files):
    from sparseloom.core.cache import cache_dir

    processor = get_processor("ort:CPU")
    before = {path.name for path in (cache_dir() / "ort").glob("*")}
    compiled = ort.compile(model_files["conv"], processor)
    assert compiled.artefact_path is None  # the load reads the source: no second copy
    assert {path.name for path in (cache_dir() / "ort").glob("*")} == before
    loaded = ort.load(compiled, processor)
    assert loaded.executed_by == ("CPUExecutionProvider",)
    ort.unload(loaded)


def test_loaded_model_reports_signature_and_memory(ort, linear_loaded):
    assert linear_loaded.input_names == ("x",) and linear_loaded.output_names == ("y",)
    assert linear_loaded.inputs[0].dtype == "float32"
    assert linear_loaded.inputs[0].shape == ("N", 6)
    assert linear_loaded.executed_by[0] == "CPUExecutionProvider"
    assert linear_loaded.memory_bytes < 256 * 2**20  # lower bound: the test below


def test_memory_grows_with_the_weights(tmp_path):
    # 16 MiB of weights: the measured RSS growth must see most of it (in a fresh process, see
    # models.loaded_memory_in_fresh_process).
    path = models.save(models.big_matmul_model(), tmp_path / "big.onnx")
    memory_bytes = models.loaded_memory_in_fresh_process(path, 'ort:CPU')
    assert 8 * 2**20 <= memory_bytes <= 256 * 2**20, memory_bytes


def test_infer_matches_numpy(ort, linear_loaded):
    weight, bias = models.linear_weights()
    x = np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(ort.infer(linear_loaded, {"x": x})["y"], x @ weight + bias,
                               rtol=1e-5, atol=1e-5)


def test_async_futures_from_several_threads(ort, linear_loaded, run_clients):
    weight, bias = models.linear_weights()
    failures: list[str] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        batches = [rng.standard_normal((seed % 3 + 1, 6)).astype(np.float32) for _ in range(15)]
        futures = [ort.infer_async(linear_loaded, {"x": x}) for x in batches]
        for x, future in zip(batches, futures, strict=True):
            if not np.allclose(future.result(timeout=30)["y"], x @ weight + bias, atol=1e-5):
                failures.append(f"client {seed}: wrong result")

    run_clients(client)
    assert not failures


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"x": np.zeros((2, 6), np.float64)}, "input 'x' has dtype float64, expected float32"),
        ({"x": np.zeros((2, 5), np.float32)}, "input 'x' has shape [2, 5], expected float32[N,6]"),
        ({"x": np.zeros((2, 2, 6), np.float32)}, "input 'x' has shape [2, 2, 6]"),
        ({"image": np.zeros((2, 6), np.float32)}, "missing input(s) 'x'; unknown input(s) 'image'"),
    ],
)
def test_bad_inputs_fail_through_the_future(ort, linear_loaded, inputs, expected):
    future = ort.infer_async(linear_loaded, inputs)
    error = future.exception(timeout=30)
    assert isinstance(error, BackendError)
    assert expected in str(error)


def test_unload_then_infer_is_a_clear_error(ort, model_files):
    processor = get_processor("ort:CPU")
    loaded = ort.load(ort.compile(model_files["linear"], processor), processor)
    ort.unload(loaded)
    with pytest.raises(BackendError, match="unloaded"):
        ort.infer(loaded, {"x": np.zeros((1, 6), np.float32)})


def test_corrupt_model_is_reported_to_observers(ort, tmp_path, backend_errors):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x00not an onnx model at all\xff" * 10)
    with pytest.raises(BackendError, match=r"not a readable ONNX model|not an ONNX model"):
        ort.compile(path, get_processor("ort:CPU"))
    assert backend_errors and backend_errors[-1][:2] == ("ort:CPU", "compile")


def test_supports_reads_the_kernel_registry(ort):
    cpu = get_processor("ort:CPU")
    assert ort.supports("Conv", cpu) and ort.supports("LayerNormalization", cpu)
    assert ort.supports("Inverse", cpu, domain="com.microsoft")
    assert not ort.supports("NoSuchOperator", cpu)


@pytest.mark.skipif("CUDAExecutionProvider" in _providers(), reason="CUDA is really present")
@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # ORT's own notice
def test_cuda_request_that_falls_back_to_cpu_is_refused(ort, model_files, tmp_path, monkeypatch,
                                                         check_fallback_refused):
    monkeypatch.setenv("SPARSELOOM_CACHE_DIR", str(tmp_path))  # compile for real, no cache
    cuda = Processor("ort:CUDA:0", "ort", "CUDA:0", cores=get_processor("ort:CPU").cores)
    check_fallback_refused(ort, cuda, model_files["linear"], compile_match="silent fallback",
                           load_match="runs the model on CPUExecutionProvider")


@pytest.mark.skipif("CUDAExecutionProvider" in _providers(), reason="CUDA is really present")
@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # ORT's own notice
def test_tolerated_fallback_is_renamed_to_the_real_device(ort, model_files, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("SPARSELOOM_CACHE_DIR", str(tmp_path))  # compile for real, no cache
    cuda = Processor("ort:CUDA:0", "ort", "CUDA:0", options={"on_fallback": "warn"})
    with pytest.warns(RuntimeWarning, match="silent fallback"):
        compiled = ort.compile(model_files["linear"], cuda)
    with pytest.warns(RuntimeWarning, match="silent fallback"):
        loaded = ort.load(compiled, cuda)
    try:
        assert loaded.fell_back and loaded.processor.name == "ort:CPU"
        assert loaded.requested.name == "ort:CUDA:0"
    finally:
        ort.unload(loaded)


def _gpu_processor(kind: str) -> Processor:
    name = f"ort:{kind}:0"
    found = [p for p in get_backend("ort").devices() if p.name == name]
    if not found or not found[0].available:
        reason = found[0].reason if found else f"{kind} execution provider not built in"
        pytest.skip(f"{name} absent: {reason}")
    return found[0]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["CUDA", "TensorRT"])
def test_gpu_outputs_match_cpu(ort, model_files, kind):
    gpu = _gpu_processor(kind)
    cpu = get_processor("ort:CPU")
    x = {"x": np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)}
    outputs = {}
    for processor in (cpu, gpu):
        loaded = ort.load(ort.compile(model_files["transformer"], processor), processor)
        try:
            assert not loaded.fell_back
            outputs[processor.name] = ort.infer(loaded, x)["hidden"]
        finally:
            ort.unload(loaded)
    np.testing.assert_allclose(outputs[gpu.name], outputs[cpu.name], rtol=1e-2, atol=1e-2)


def test_cpu_mem_arena_option_reaches_the_session_and_bad_values_are_refused(ort):
    from sparseloom.core.errors import ConfigError
    from sparseloom.zoo.evaluate import evaluation_spec

    off = get_processor("ort:CPU?cpu_mem_arena=0")
    assert ort._session_options(off).enable_cpu_mem_arena is False
    assert ort._session_options(get_processor("ort:CPU")).enable_cpu_mem_arena is True
    with pytest.raises(ConfigError, match="cpu_mem_arena='yes'"):
        get_processor("ort:CPU?cpu_mem_arena=yes")
    # Exact evaluation runs batches: its ONNX Runtime CPU sessions keep no arena.
    assert "cpu_mem_arena=0" in evaluation_spec("ort:CPU")
    assert "cpu_mem_arena=1" in evaluation_spec("ort:CPU?cpu_mem_arena=1")
    assert "cpu_mem_arena" not in evaluation_spec("ov:CPU")
