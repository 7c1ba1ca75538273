"""The ONNX Runtime backend ``ort``: processors ``ort:CPU``, ``ort:CUDA:<i>``, ``ort:TensorRT:<i>``.

Processor options (strings) this backend reads:

- ``graph_optimization_level``: ``disable``, ``basic``, ``extended`` or ``all`` (default).
- ``cpu_mem_arena``: ``1`` (default) or ``0``: ``SessionOptions.enable_cpu_mem_arena``. The
  arena keeps the largest activations a session ever ran: one batch-256 pass of a ``sentiment``
  subgraph left 422 MiB resident, 33 MiB without it (AMD EPYC, 2026-12-03), so exact
  evaluation over batches turns it off (:func:`sparseloom.zoo.evaluate.evaluation_spec`).
- ``session.<key>``: an ORT session config entry, e.g. ``session.intra_op.allow_spinning=0``.
- ``ep.<key>``: a provider option, e.g. ``ep.trt_fp16_enable=True``, ``ep.gpu_mem_limit=...``.
- ``on_fallback``: ``error`` (default) or ``warn`` when the provider asked for does not run it.
- ``stock``: ``true`` leaves the session's threading at ONNX Runtime's own defaults (intra-op
  threads = the machine's cores, spinning on; ``threads`` is ignored): how a user runs a model
  without sparseloom, for the stock contenders of ``sparseloom bench serve``.

Requests run on the processor's own pinned worker thread (ORT's ``run_async`` needs two or more
intra-op threads, and a 1-thread session runs on the calling thread, which is what pins it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.processors.cores import cpu_name
from sparseloom.core.types import Processor
from sparseloom.plugins.backends import _memory, _worker
from sparseloom.plugins.backends._base import WorkerBackend
from sparseloom.plugins.backends._common import (
    STOCK_OPTION,
    CompiledModel,
    LoadedModel,
    example_inputs,
    handle_fallback,
    notify_and_raise,
    record_devices,
    recorded_devices,
    stock_defaults,
)

if TYPE_CHECKING:
    import onnx

#: sparseloom device kind -> ORT execution provider.
PROVIDERS = {
    "CPU": "CPUExecutionProvider",
    "CUDA": "CUDAExecutionProvider",
    "TensorRT": "TensorrtExecutionProvider",
}
_LEVELS = ("disable", "basic", "extended", "all")


def _kind_and_index(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    if kind not in PROVIDERS or (index and not index.isdigit()):
        from sparseloom.core.errors import ConfigError

        raise ConfigError(f"ort device {device!r} is not one of CPU, CUDA:<index>, "
                          "TensorRT:<index>")
    return kind, int(index) if index else 0


def _probe_model() -> bytes:
    import onnx.helper as helper

    x = helper.make_tensor_value_info("x", 1, [1, 4])
    y = helper.make_tensor_value_info("y", 1, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _cached_providers(record: Path, wanted: str) -> tuple[str, ...]:
    """The providers that ran the model when it was first built (``(wanted,)`` when that was
    not recorded: the load checks it anyway)."""
    return recorded_devices(record) or (wanted,)


class OnnxRuntimeBackend(WorkerBackend):
    """ONNX Runtime on CPU, CUDA and TensorRT, discovered from the providers that answer."""

    name = "ort"

    def __init__(self) -> None:
        self._kernels: dict[str, set[tuple[str, str]]] = {}

    # -- discovery -------------------------------------------------------------------------

    def devices(self) -> list[Processor]:
        """``ort:CPU`` always; CUDA/TensorRT devices when the provider is built in and a device
        answers a probe session (unavailable ones are listed with the reason)."""
        import onnxruntime as ort

        available = ort.get_available_providers()
        found = [Processor("ort:CPU", "ort", "CPU", full_name=cpu_name())]
        gpus = _memory.gpu_count()
        for kind in ("CUDA", "TensorRT"):
            provider = PROVIDERS[kind]
            if provider not in available:
                continue
            for index in range(max(gpus, 1)):
                device = f"{kind}:{index}"
                processor = Processor(f"ort:{device}", "ort", device,
                                      full_name=_memory.gpu_name(index))
                reason = self._probe(processor)
                if reason:
                    processor = Processor(processor.name, "ort", device, available=False,
                                          reason=reason, full_name=processor.full_name)
                found.append(processor)
        return found

    def _probe(self, processor: Processor) -> str:
        """An empty string when the device runs a one-node model, else why not."""
        import onnxruntime as ort

        try:
            session = ort.InferenceSession(_probe_model(), self._session_options(processor),
                                           providers=self._providers(processor, None))
        except Exception as error:
            return f"{PROVIDERS[_kind_and_index(processor.device)[0]]} failed: {error}"
        used = session.get_providers()
        wanted = PROVIDERS[_kind_and_index(processor.device)[0]]
        if wanted not in used:
            return f"{wanted} is built in but no device answered (session ran on {used})"
        return ""

    # -- configuration ---------------------------------------------------------------------

    def check_options(self, processor: Processor) -> None:
        """Refuse option keys this backend does not read (see the module doc) and bad levels.

        :raises ConfigError: naming the key and the keys that are allowed.
        """
        from sparseloom.core.errors import ConfigError

        for key, value in processor.options.items():
            if key == "cpu_mem_arena" and str(value) not in ("0", "1"):
                raise ConfigError(f"processor {processor.name}: cpu_mem_arena={value!r} must "
                                  "be 1 (on, the default) or 0 (off)")
            if key in ("graph_optimization_level", "on_fallback", "cpu_mem_arena",
                       STOCK_OPTION) or key.startswith(("session.", "ep.")):
                continue
            raise ConfigError(
                f"processor {processor.name}: unknown option {key}={value!r}; ONNX Runtime "
                "processors take graph_optimization_level, cpu_mem_arena, on_fallback, stock, "
                "session.<key> (a session config entry) and ep.<key> (a provider option)")
        level = processor.options.get("graph_optimization_level", "all")
        if level not in _LEVELS:
            raise ConfigError(f"processor {processor.name}: graph_optimization_level={level!r} "
                              f"is not one of {', '.join(_LEVELS)}")

    def _session_options(self, processor: Processor, level: str | None = None) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if not stock_defaults(processor):
            options.intra_op_num_threads = processor.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # fallback is detected and reported by sparseloom
        options.enable_cpu_mem_arena = str(processor.options.get("cpu_mem_arena", "1")) != "0"
        level = level or processor.options.get("graph_optimization_level", "all")
        if level not in _LEVELS:
            from sparseloom.core.errors import ConfigError

            raise ConfigError(f"processor {processor.name}: graph_optimization_level={level!r} "
                              f"is not one of {', '.join(_LEVELS)}")
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]
        for key, value in processor.options.items():
            if key.startswith("session."):
                options.add_session_config_entry(key, str(value))
        return options

    def _providers(self, processor: Processor, engine_dir: Path | None) -> list[Any]:
        kind, index = _kind_and_index(processor.device)
        ep_options = {k[3:]: str(v) for k, v in processor.options.items() if k.startswith("ep.")}
        if kind == "CPU":
            return [("CPUExecutionProvider", ep_options)]
        cuda = ("CUDAExecutionProvider", {"device_id": str(index)})
        if kind == "CUDA":
            return [("CUDAExecutionProvider", {"device_id": str(index), **ep_options}),
                    "CPUExecutionProvider"]
        trt = {"device_id": str(index), **ep_options}
        if engine_dir is not None:
            trt |= {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(engine_dir),
                    "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(engine_dir)}
        return [("TensorrtExecutionProvider", trt), cuda, "CPUExecutionProvider"]

    def widened(self, processor: Processor, cores: tuple[int, ...]) -> Processor:
        """``processor`` with one more intra-op thread on each of ``cores``: the caller (the
        processor's own pinned worker) runs one share of every parallel operator and a pool
        thread pinned to each lent core the others (``session.intra_op_thread_affinities``,
        1-based logical processors). Spinning stays on while a run lasts — measured on
        sentiment's pick (6.2 ms on one thread), two threads ran it in 3.7 ms with spinning and
        5.8 ms without, where every parallel section waits for a thread to wake — and stops when
        it ends (``session.force_spinning_stop``), so the pool thread does not keep the lent
        core busy once its owner needs it back (the dense sentiment model: 8.2–9.1 ms on one
        thread, 4.8–5.1 ms on two, with or without the stop)."""
        import attrs

        if not cores:
            return processor
        options = dict(processor.options)
        options["session.intra_op_thread_affinities"] = ";".join(str(c + 1) for c in cores)
        options.setdefault("session.force_spinning_stop", "1")
        return attrs.evolve(processor, threads=processor.threads + len(cores), options=options)

    def runtime_version(self) -> str:
        """``ONNX Runtime <version>``: what the crash guard keys its probe outcomes by."""
        import onnxruntime as ort

        return f"ONNX Runtime {ort.__version__}"

    def effective_settings(self, processor: Processor) -> dict[str, Any]:
        """The session settings for ``processor`` that the crash guard's messages name."""
        settings: dict[str, Any] = {} if stock_defaults(processor) else {
            "intra_op_num_threads": processor.threads}
        settings["graph_optimization_level"] = processor.options.get(
            "graph_optimization_level", "all")
        return settings | {k: v for k, v in processor.options.items()
                           if k != "graph_optimization_level"}

    def safer_processors(self, processor: Processor) -> list[tuple[Processor, str]]:
        """``processor`` at each graph optimization level below its own, highest first: what
        the crash guard tries when a model crashes ONNX Runtime (a float16 transformer encoder
        crashes ``all`` in ORT 1.32 on an AMD EPYC Zen 4 and loads at ``extended``)."""
        import attrs

        level = processor.options.get("graph_optimization_level", "all")
        lower = _LEVELS[:_LEVELS.index(level)] if level in _LEVELS else ()
        return [(attrs.evolve(processor, options={**processor.options,
                                                  "graph_optimization_level": below}),
                 f"graph_optimization_level={below}") for below in reversed(lower)]

    # -- compile / load --------------------------------------------------------------------

    def compile(self, model: onnx.ModelProto | str | os.PathLike[str],
                processor: Processor) -> CompiledModel:
        """Build the model's session for ``processor`` once and record the providers that ran it.

        No optimized copy of the model is kept: the load optimizes the graph (60 ms for the
        dense ``sentiment`` model read from its batch-1 copy on an AMD EPYC Zen 4), because a
        copy would hold the weights a second time on disk and in memory, where the source's
        are mapped (:mod:`sparseloom.zoo.batch_one`). CPU: nothing is built (the CPU provider
        always runs it; a session built here would also leave freed memory in the allocator
        that the load's measurement then reuses). CUDA: the providers that ran it, recorded in
        ``<cache>/ort/<key>.providers.json``. TensorRT: the engine and timing caches under
        ``<cache>/ort/trt/<key>``.
        """
        import onnxruntime as ort

        from sparseloom.core.cache import cache_dir, config_hash

        source = self._source(model, processor)
        kind, _ = _kind_and_index(processor.device)
        key = config_hash({"digest": source.digest, "device": processor.device,
                           "ort": ort.__version__, "options": dict(processor.options)})
        root = cache_dir() / "ort"
        if kind == "CPU":
            return CompiledModel("ort", processor.name, source, None, key)
        engines: Path | None = None
        record = root / f"{key}.providers.json"
        if kind == "TensorRT":
            engines = root / "trt" / key
            engines.mkdir(parents=True, exist_ok=True)
            record = engines / "providers.json"
        level = None if kind == "TensorRT" else "basic"

        def build() -> tuple[str, ...]:
            options = self._session_options(processor, level)
            session = ort.InferenceSession(str(source.path), options,
                                           providers=self._providers(processor, engines))
            return tuple(session.get_providers())

        if kind == "TensorRT" or recorded_devices(record) is None:
            record.parent.mkdir(parents=True, exist_ok=True)
            try:
                used = _worker.run_on(processor, build)
            except Exception as error:
                notify_and_raise(processor, "compile", error,
                                 f"ONNX Runtime could not build {source.path.name} for "
                                 f"{processor.device}: {error}")
            if PROVIDERS[kind] not in used:  # caught here already, before any timing
                handle_fallback(processor, "CPU", used, operation="compile")
            record_devices(record, used)
        elif PROVIDERS[kind] not in _cached_providers(record, PROVIDERS[kind]):
            # Built before (by this process or a probe process): the fallback it saw then is
            # reported again now, as a fresh build would.
            handle_fallback(processor, "CPU", _cached_providers(record, PROVIDERS[kind]),
                            operation="compile")
        return CompiledModel("ort", processor.name, source, engines, key)

    def _warm(self, processor: Processor) -> None:
        import numpy as np
        import onnxruntime as ort

        session = ort.InferenceSession(_probe_model(), self._session_options(processor),
                                       providers=self._providers(processor, None))
        session.run(None, {"x": np.ones((1, 4), dtype=np.float32)})

    def _session(self, path: Path, processor: Processor, engine_dir: Path | None) -> Any:
        import onnxruntime as ort

        return ort.InferenceSession(str(path), self._session_options(processor),
                                    providers=self._providers(processor, engine_dir))

    def load(self, compiled: CompiledModel, processor: Processor) -> LoadedModel:
        """Create the session on the processor's pinned worker and check its providers.

        ``memory_bytes`` is the RSS growth over session creation plus one warm-up request
        (plus, on CUDA/TensorRT, the GPU memory growth NVML reports).
        """
        kind, index = _kind_and_index(processor.device)
        path, engine_dir = compiled.source.path, compiled.artefact_path
        warmup = example_inputs(compiled.inputs)
        session, memory_bytes, executor = self._create_on_worker(
            processor,
            lambda: self._session(path, processor, engine_dir),
            lambda session: session.run(None, warmup),
            (lambda: _memory.gpu_used_bytes(index)) if kind != "CPU" else None,
        )
        used = tuple(session.get_providers())
        actual = processor
        if PROVIDERS[kind] not in used:
            actual = handle_fallback(processor, "CPU", used)
            executor = _worker.executor_for(actual)
        names = [spec.name for spec in compiled.outputs]

        def runner(arrays: Any) -> dict[str, Any]:
            return dict(zip(names, session.run(names, arrays), strict=True))

        return LoadedModel(actual, memory_bytes, compiled.inputs, compiled.outputs, compiled,
                           used, processor, session, executor, runner)

    # -- operator support ------------------------------------------------------------------

    def supports(self, op_type: str, processor: Processor, domain: str = "") -> bool:
        """Whether ORT has a kernel for ``op_type`` (in ``domain``) on the processor's provider.

        Read from ORT's kernel registry (``get_all_opkernel_def``). TensorRT compiles whole
        subgraphs and sends what it cannot parse to CUDA, so it answers as CUDA does.
        """
        kind, _ = _kind_and_index(processor.device)
        provider = PROVIDERS["CUDA" if kind == "TensorRT" else kind]
        if provider not in self._kernels:
            from onnxruntime.capi import onnxruntime_pybind11_state as state

            self._kernels[provider] = {
                (k.op_name, "" if k.domain == "ai.onnx" else k.domain)
                for k in state.get_all_opkernel_def() if k.provider == provider
            }
        return (op_type, "" if domain == "ai.onnx" else domain) in self._kernels[provider]


@hookimpl
def sparseloom_register_backends(register: Any) -> None:
    """Register the ``ort`` backend."""
    register("ort", OnnxRuntimeBackend,
             description="ONNX Runtime: CPU, CUDA and TensorRT execution providers",
             capabilities=("CPU", "CUDA", "TensorRT"))
