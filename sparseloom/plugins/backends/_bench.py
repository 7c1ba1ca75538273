"""The backends benchmark behind ``sparseloom bench backends`` and ``benchmarks/bench_backends.py``.

Two numbers, measured in one run on one model:

- per-call overhead: the median latency of ``backend.infer_async(...).result()`` and of
  ``backend.infer(...)`` versus the bare runtime call (``InferenceSession.run`` /
  ``InferRequest.infer``), all three from one thread pinned to the processor's cores (as the
  processor's worker is) and interleaved request by request so that machine noise hits them
  alike; and the throughput overhead: N requests in flight at once through ``infer_async``
  versus N bare calls back to back (median over interleaved rounds);
- parallel speed-up: the time to run N requests on each processor one processor after the
  other, divided by the time with all processors' requests in flight at once.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


def conv_model(channels: int = 32, size: int = 32, layers: int = 6, seed: int = 0) -> Any:
    """A plain conv net (Conv 3x3 + Relu, ``layers`` times) with random weights, as ONNX."""
    import numpy as np
    import onnx
    import onnx.helper as helper
    import onnx.numpy_helper as numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, current = [], [], "x"
    for layer in range(layers):
        weight = (rng.standard_normal((channels, channels, 3, 3)) / (3 * channels ** 0.5))
        inits.append(numpy_helper.from_array(weight.astype(np.float32), f"w{layer}"))
        inits.append(numpy_helper.from_array(np.zeros(channels, np.float32), f"b{layer}"))
        nodes.append(helper.make_node("Conv", [current, f"w{layer}", f"b{layer}"],
                                      [f"c{layer}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{layer}"], [f"r{layer}"]))
        current = f"r{layer}"
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "bench_conv",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _bare_call(loaded: Any, inputs: dict[str, Any]) -> Callable[[], Any] | None:
    """The runtime's own call for a built-in backend's model; ``None`` for any other backend.

    The :class:`~sparseloom.core.protocols.LoadedModel` contract has no bare runtime call, so
    a third-party backend is measured through ``infer_async`` and ``infer`` only.
    """
    from sparseloom.plugins.backends._common import LoadedModel

    if not isinstance(loaded, LoadedModel):
        return None
    if loaded.compiled.backend == "ort":
        session = loaded.handle
        return lambda: session.run(None, inputs)
    if loaded.compiled.backend == "ov":
        request = loaded.handle.create_infer_request()
        return lambda: request.infer(inputs)
    return lambda: loaded.runner(inputs)


def _median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e3


def _on_pinned_thread(cores: Sequence[int], fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a fresh thread pinned to ``cores``, so the bare call shares the
    processor's core with the worker, as the caller of ``infer_async`` does."""
    result: list[Any] = []

    def target() -> None:
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, tuple(cores))
        result.append(fn())

    thread = threading.Thread(target=target, name="sparseloom-bench")
    thread.start()
    thread.join()
    if not result:
        raise RuntimeError("the benchmark thread failed; see the error printed above")
    return result[0]


def _overhead(backend: Any, loaded: Any, inputs: dict[str, Any], requests: int
              ) -> dict[str, Any]:
    """Latency (one request at a time) and throughput (``requests`` in flight at once) of
    the backend's calls versus the bare runtime call, all made from the calling thread.

    Without a bare call (a third-party backend) the bare figures and overheads are ``None``.
    """
    bare = _bare_call(loaded, inputs)
    calls: dict[str, Callable[[], Any]] = {
        "async": lambda: backend.infer_async(loaded, inputs).result(),
        "infer": lambda: backend.infer(loaded, inputs),
    }
    if bare is not None:
        calls = {"bare": bare, **calls}
    for _ in range(10):
        for call in calls.values():
            call()
    latency: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(requests):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            latency[name].append(time.perf_counter() - start)

    def back_to_back() -> None:
        assert bare is not None  # only scheduled when there is a bare call
        for _ in range(requests):
            bare()

    def in_flight() -> None:
        for future in [backend.infer_async(loaded, inputs) for _ in range(requests)]:
            future.result()

    runs = (("bare", back_to_back), ("async", in_flight)) if bare else (("async", in_flight),)
    batch: dict[str, list[float]] = {name: [] for name, _ in runs}
    for _ in range(_BATCH_ROUNDS):
        for name, run in runs:
            start = time.perf_counter()
            run()
            batch[name].append((time.perf_counter() - start) / requests)
    ms = {name: _median_ms(samples) for name, samples in latency.items()}
    per_request = {name: _median_ms(samples) for name, samples in batch.items()}

    def pct(value: float, base: float | None) -> float | None:
        return None if base is None else 100.0 * (value - base) / base

    return {"processor": loaded.processor.name, "cores": list(loaded.processor.cores),
            "bare_ms": ms.get("bare"), "async_ms": ms["async"],
            "overhead_pct": pct(ms["async"], ms.get("bare")),
            "infer_ms": ms["infer"], "infer_overhead_pct": pct(ms["infer"], ms.get("bare")),
            "throughput": {"bare_ms_per_request": per_request.get("bare"),
                           "async_ms_per_request": per_request["async"],
                           "overhead_pct": pct(per_request["async"], per_request.get("bare"))}}


#: Interleaved rounds of the throughput measurement (``requests`` requests each).
_BATCH_ROUNDS = 5


def benchmark_backends(specs: Sequence[str], requests: int = 200, channels: int = 32
                       ) -> dict[str, Any]:
    """Measure per-call overhead and parallel speed-up of ``specs`` (see the module doc)."""
    from sparseloom.plugins.backends._common import example_inputs
    from sparseloom.workload.inference import load_model, model_tensors

    model = conv_model(channels)
    loaded_models = [load_model(model, spec) for spec in specs]
    inputs = example_inputs(model_tensors(loaded_models[0][1], model)[0])
    overhead = []
    try:
        for backend, loaded in loaded_models:
            overhead.append(_on_pinned_thread(
                loaded.processor.cores,
                functools.partial(_overhead, backend, loaded, inputs, requests)))

        def run(selected: Sequence[tuple[Any, Any]]) -> float:
            start = time.perf_counter()
            futures = [b.infer_async(m, inputs) for b, m in selected for _ in range(requests)]
            for future in futures:
                future.result()
            return time.perf_counter() - start

        alone = [run([pair]) for pair in loaded_models]
        parallel_s = run(loaded_models)
    finally:
        for backend, loaded in loaded_models:
            backend.unload(loaded)
    serial_s = sum(alone)
    return {
        "model": f"conv net, 6 x Conv3x3({channels}) + Relu, input 1x{channels}x32x32",
        "requests": requests,
        "overhead": overhead,
        "parallel": {"processors": [m.processor.name for _, m in loaded_models],
                     "serial_s": serial_s, "parallel_s": parallel_s,
                     "speedup": serial_s / parallel_s,
                     "ideal_speedup": serial_s / max(alone)},
    }


