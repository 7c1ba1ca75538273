"""The OpenVINO backend ``ov``: one processor per device in ``Core().available_devices``.

Processor options (strings) this backend reads: ``on_fallback`` (``error`` by default, or
``warn``); every other key is passed to ``compile_model`` as an OpenVINO property, e.g.
``PERFORMANCE_HINT=LATENCY`` or ``INFERENCE_PRECISION_HINT=f32``.

On CPU, ``threads`` sets ``INFERENCE_NUM_THREADS``, ``streams`` sets ``NUM_STREAMS``, and
``ENABLE_CPU_PINNING`` is off: OpenVINO otherwise pins every 1-thread model to the same core.
``INFERENCE_PRECISION_HINT`` is ``f32`` (OpenVINO would run f32 models in bf16 on CPUs with
AMX/AVX512-BF16); pass ``INFERENCE_PRECISION_HINT=bf16`` to opt in (the default processor
set does on those CPUs, :func:`~sparseloom.core.processors.default_processors`).
``stock=true`` leaves all of these at OpenVINO's own defaults (``bench serve``'s stock
contenders).
The processor's worker thread is pinned to its cores instead, and the model is compiled and run
from that thread so that the threads OpenVINO creates inherit the pinning.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import Processor
from sparseloom.plugins.backends import _worker
from sparseloom.plugins.backends._base import WorkerBackend
from sparseloom.plugins.backends._common import (
    FALLBACK_OPTION,
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
from sparseloom.workload.model_source import resolve_model

if TYPE_CHECKING:
    import onnx

_SKIPPED_TYPES = {"Parameter", "Result", "Constant"}


def _base_device(device: str) -> str:
    """``GPU.1`` → ``GPU``; ``AUTO:GPU,CPU`` → ``GPU`` (the first choice)."""
    head, _, rest = device.partition(":")
    if head in ("AUTO", "MULTI", "HETERO") and rest:
        head = rest.split(",")[0]
    return head.split(".")[0]


def _short(error: BaseException) -> str:
    """OpenVINO's message without its source locations: the lines that say what is wrong."""
    lines = [line.strip(" -") for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '"))
              and " failed at src/" not in line]
    return " ".join(useful or lines) or type(error).__name__


class OpenVinoBackend(WorkerBackend):
    """OpenVINO on CPU, GPU and NPU, discovered from ``Core().available_devices``."""

    name = "ov"

    def __init__(self) -> None:
        self._core: Any = None
        self._core_lock = threading.Lock()
        self._op_support: dict[tuple[str, str], bool] = {}

    @property
    def core(self) -> Any:
        """The shared ``openvino.Core`` (created on first use)."""
        with self._core_lock:
            if self._core is None:
                import openvino as ov

                self._core = ov.Core()
            return self._core

    # -- discovery -------------------------------------------------------------------------

    def devices(self) -> list[Processor]:
        """Every device OpenVINO lists; an accelerator must also compile a one-node model."""
        found = []
        for device in self.core.available_devices:
            try:
                full_name = str(self.core.get_property(device, "FULL_DEVICE_NAME"))
            except Exception:
                full_name = ""
            reason = "" if device == "CPU" else self._probe(device)
            found.append(Processor(f"ov:{device}", "ov", device, full_name=full_name,
                                   available=not reason, reason=reason))
        return found

    def _probe(self, device: str) -> str:
        import openvino as ov
        import openvino.opset13 as ops

        x = ops.parameter([1, 4], ov.Type.f32, name="x")
        try:
            self.core.compile_model(ov.Model([ops.relu(x)], [x], "probe"), device)
        except Exception as error:
            return f"listed by OpenVINO but cannot compile a one-node model: {error}"
        return ""

    def runtime_version(self) -> str:
        """``OpenVINO <version>``: what the crash guard keys its probe outcomes by."""
        import openvino as ov

        return f"OpenVINO {ov.__version__.split('-')[0]}"

    def effective_settings(self, processor: Processor) -> dict[str, Any]:
        """The properties ``compile_model`` gets for ``processor`` (its cache folder aside):
        what the crash guard's messages name."""
        return {k: v for k, v in self._config(processor).items()
                if k not in ("CACHE_DIR", "CACHE_MODE")}

    # -- compile / load --------------------------------------------------------------------

    def _config(self, processor: Processor) -> dict[str, Any]:
        from sparseloom.core.cache import cache_dir

        config: dict[str, Any] = {"CACHE_DIR": str(cache_dir() / "ov")}
        if _base_device(processor.device) == "CPU" and not processor.device.startswith("AUTO"):
            # A weightless blob: the weights are read from the model file again (mapped,
            # sparseloom.zoo.batch_one) instead of being kept a second time in the cache. The
            # dense sentiment model's blob: 0.5 MiB instead of 86 MiB, imported in 0.24 s
            # instead of 0.09 s (compiled cold in 0.56 s; AMD EPYC Zen 4, 2026-12-03).
            config["CACHE_MODE"] = "OPTIMIZE_SIZE"
        if (_base_device(processor.device) == "CPU" and not processor.device.startswith("AUTO")
                and not stock_defaults(processor)):
            # On CPUs with AMX or AVX512-BF16 OpenVINO runs f32 models in bf16 by default: on
            # this machine (Xeon, amx_bf16) tiny's logits moved by up to 1.1% against ONNX
            # Runtime. A zoo variant named "dense" must compute in f32; the fp16 and int8
            # variants carry their precision in the graph. A processor option overrides it.
            config |= {"INFERENCE_NUM_THREADS": processor.threads,
                       "NUM_STREAMS": processor.streams, "ENABLE_CPU_PINNING": False,
                       "INFERENCE_PRECISION_HINT": "f32"}
        config |= {k: v for k, v in processor.options.items()
                   if k not in (FALLBACK_OPTION, STOCK_OPTION)}
        return config

    def _warm(self, processor: Processor) -> None:
        import numpy as np
        import openvino as ov
        import openvino.opset13 as ops

        x = ops.parameter([1, 4], ov.Type.f32, name="x")
        config = {k: v for k, v in self._config(processor).items()
                  if k not in ("CACHE_DIR", "CACHE_MODE")}
        compiled = self.core.compile_model(ov.Model([ops.relu(x)], [x], "warm"),
                                           processor.device, config)
        compiled.create_infer_request().infer({"x": np.ones((1, 4), dtype=np.float32)})

    def _compile_model(self, path: str, processor: Processor) -> Any:
        try:
            model = self.core.read_model(path)
        except Exception as error:
            notify_and_raise(processor, "compile", error,
                             f"OpenVINO cannot read {os.path.basename(path)}: {_short(error)}")
        try:
            return self.core.compile_model(model, processor.device, self._config(processor))
        except Exception as error:
            notify_and_raise(processor, "compile", error,
                             f"device {processor.device} cannot compile "
                             f"{os.path.basename(path)}: {_short(error)}")

    def compile(self, model: onnx.ModelProto | str | os.PathLike[str],
                processor: Processor) -> CompiledModel:
        """Compile ``model`` for the device once; OpenVINO caches the blob in ``CACHE_DIR``
        (``<cache>/ov``), so loading it again imports the blob instead of recompiling.

        The devices that ran the first compile are recorded beside the blob
        (``<cache>/ov/<key>.devices.json``): a later compile of the same model, configuration
        and OpenVINO version (by this process or after a probe process compiled it) reads them
        instead of compiling again, and reports a fallback they show as a fresh compile would.
        """
        import openvino as ov

        from sparseloom.core.cache import cache_dir, config_hash

        source = self._source(model, processor)
        key = config_hash({"digest": source.digest, "device": processor.device,
                           "config": {k: str(v) for k, v in self._config(processor).items()}})
        version = config_hash({"key": key, "openvino": ov.__version__})
        record = cache_dir() / "ov" / f"{version}.devices.json"
        executed = recorded_devices(record)
        if executed is None:
            handle = _worker.run_on(processor, self._compile_model, str(source.path), processor)
            executed = self._executed(processor, handle)
            del handle
            self._judge_devices(processor, executed, "compile")  # a fallback is refused early
            record.parent.mkdir(parents=True, exist_ok=True)
            record_devices(record, executed)
        else:
            self._judge_devices(processor, executed, "compile")
        return CompiledModel("ov", processor.name, source, cache_dir() / "ov", key)

    def load(self, compiled: CompiledModel, processor: Processor) -> LoadedModel:
        """Compile (from the cache) on the processor's pinned worker and check where it runs.

        ``memory_bytes`` is the RSS growth over compile_model plus one warm-up request, plus on
        GPU the growth of ``GPU_MEMORY_STATISTICS``.
        """
        warmup = example_inputs(compiled.inputs)

        def gpu_bytes() -> int | None:
            try:
                stats = self.core.get_property(processor.device, "GPU_MEMORY_STATISTICS")
                return int(sum(stats.values()))
            except Exception:
                return 0

        handle, memory_bytes, executor = self._create_on_worker(
            processor,
            lambda: self._compile_model(str(compiled.source.path), processor),
            lambda handle: handle.create_infer_request().infer(warmup),
            gpu_bytes if _base_device(processor.device) == "GPU" else None,
        )
        executed, actual = self._check_devices(processor, handle, "load")
        if actual is not processor:
            executor = _worker.executor_for(actual)
        ports = [handle.output(spec.name) for spec in compiled.outputs]
        names = [spec.name for spec in compiled.outputs]
        # One infer request per worker thread: a request is not safe to share between threads.
        local = threading.local()

        def runner(arrays: Any) -> dict[str, Any]:
            request = getattr(local, "request", None)
            if request is None:
                request = local.request = handle.create_infer_request()
            results = request.infer(arrays)
            return {name: results[port] for name, port in zip(names, ports, strict=True)}

        return LoadedModel(actual, memory_bytes, compiled.inputs, compiled.outputs, compiled,
                           executed, processor, handle, executor, runner)

    def widened(self, processor: Processor, cores: tuple[int, ...]) -> Processor:
        """``processor`` with one more inference thread for each of ``cores`` (a CPU one; any
        other device is returned as it is). The twin is compiled on a worker pinned to the
        processor's cores and the lent ones, so the threads OpenVINO creates for it inherit
        both (``ENABLE_CPU_PINNING`` stays off); the caller — the processor's own pinned worker
        — runs its share of each parallel section. Measured in ``benchmarks/sentiment_precision.py``
        (AMD EPYC): the dense sentiment model 8.09 ms on one f32 thread, 4.62 ms on two."""
        import attrs

        if not cores or _base_device(processor.device) != "CPU":
            return processor
        joined = tuple(dict.fromkeys((*processor.cores, *cores)))
        return attrs.evolve(processor, threads=processor.threads + len(cores), cores=joined)

    @staticmethod
    def _executed(processor: Processor, handle: Any) -> tuple[str, ...]:
        """What ``EXECUTION_DEVICES`` says runs ``handle`` (the requested device if unsaid)."""
        try:
            return tuple(str(d) for d in handle.get_property("EXECUTION_DEVICES"))
        except Exception:
            return (processor.device,)

    @staticmethod
    def _judge_devices(processor: Processor, executed: tuple[str, ...], operation: str
                       ) -> Processor:
        """The processor to report for a model run by ``executed``: the requested one, or
        after a tolerated fallback the device that really runs it."""
        wanted = _base_device(processor.device)
        if processor.device == "AUTO" or any(_base_device(d) == wanted for d in executed):
            return processor
        actual_device = executed[0] if executed else "?"
        return handle_fallback(processor, actual_device, executed, operation)

    def _check_devices(self, processor: Processor, handle: Any, operation: str
                       ) -> tuple[tuple[str, ...], Processor]:
        """What ``EXECUTION_DEVICES`` says runs ``handle``, and the processor to report
        (:meth:`_judge_devices`)."""
        executed = self._executed(processor, handle)
        return executed, self._judge_devices(processor, executed, operation)

    # -- operator support ------------------------------------------------------------------

    def supports(self, op_type: str, processor: Processor, domain: str = "") -> bool:
        """Whether OpenVINO converts ONNX ``op_type`` and ``processor``'s device runs it.

        A one-node probe model (float inputs of shape [1,1,4,4]) goes through the ONNX
        frontend's ``convert_partially``: an op without a converter is unsupported; otherwise
        ``query_model`` on the device decides. When the probe shapes do not fit the op, the
        converter's existence decides. Only the default ONNX domain is answered (``False``
        for others). For whole models use :meth:`supported_nodes`.
        """
        if domain not in ("", "ai.onnx"):
            return False
        key = (op_type, processor.device)
        if key not in self._op_support:
            self._op_support[key] = self._probe_op(op_type, processor.device)
        return self._op_support[key]

    def _probe_op(self, op_type: str, device: str) -> bool:
        import onnx
        import onnx.helper as helper
        from openvino.frontend import FrontEndManager

        try:
            schema = onnx.defs.get_schema(op_type)
        except Exception:
            return False  # not an ONNX operator at all
        ins = [f"i{k}" for k in range(max(schema.min_input, 1))]
        outs = [f"o{k}" for k in range(max(schema.min_output, 1))]
        graph = helper.make_graph(
            [helper.make_node(op_type, ins, outs)], "probe",
            [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 1, 4, 4]) for n in ins],
            [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in outs])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        proto.ir_version = 10
        frontend = FrontEndManager().load_by_framework("onnx")
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "probe.onnx")
            onnx.save(proto, path)
            try:
                model = frontend.convert_partially(frontend.load(path))
            except Exception:
                return True  # a converter exists but rejected the probe's inputs
        types = {node.get_type_name() for node in model.get_ops()}
        if "ONNXFrameworkNode" in types:
            return False
        if "NotSupportedONNXNode" in types:
            return True
        try:
            supported = self.core.query_model(model, device)
        except Exception:
            return False
        return all(node.get_friendly_name() in supported for node in model.get_ops()
                   if node.get_type_name() not in _SKIPPED_TYPES)

    def supported_nodes(self, model: onnx.ModelProto | str, processor: Processor) -> set[str]:
        """The names of the OpenVINO nodes ``processor``'s device supports (``query_model``)."""
        source = resolve_model(model)
        return set(self.core.query_model(self.core.read_model(str(source.path)),
                                         processor.device))

    def _release(self, handle: Any) -> None:
        del handle


@hookimpl
def sparseloom_register_backends(register: Any) -> None:
    """Register the ``ov`` backend."""
    register("ov", OpenVinoBackend, description="OpenVINO: CPU, GPU and NPU devices",
             capabilities=("CPU", "GPU", "NPU"))
