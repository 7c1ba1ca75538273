"""``ortx``: ONNX Runtime on the CPU, written against sparseloom's ``Backend`` protocol only.

It shows the whole contract (``sparseloom.core.protocols.Backend`` and ``LoadedModel``):
discovery, compile, load with memory, synchronous and asynchronous inference, unload, operator
support, and reporting failures to observers through ``notify_backend_error``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import BackendError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import Processor


@attrs.define(eq=False)
class OrtxModel:
    """A model loaded by ``ortx``: the four members the ``LoadedModel`` protocol requires,
    plus what it reports optionally (``executed_by``) and its own session and thread."""

    processor: Processor
    memory_bytes: int
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    executed_by: tuple[str, ...]
    session: Any = attrs.field(repr=False)
    executor: ThreadPoolExecutor = attrs.field(repr=False)


def _failed(processor: Processor, operation: str, error: Exception) -> BackendError:
    """Tell sparseloom's observers (the ``sparseloom_backend_error`` hook), then wrap."""
    wrapped = error if isinstance(error, BackendError) else BackendError(
        f"ortx: {operation} on {processor.name} failed: {type(error).__name__}: {error}")
    get_registry().notify_backend_error(processor, operation, wrapped)
    return wrapped


class OrtxBackend:
    """ONNX Runtime's CPU execution provider under the name ``ortx``."""

    def devices(self) -> list[Processor]:
        """One processor, ``ortx:CPU``. Returned without ``cores``, sparseloom pins it to one
        core of its own with ``threads=1`` (the documented default for CPU devices)."""
        import onnxruntime

        if "CPUExecutionProvider" not in onnxruntime.get_available_providers():
            return [Processor("ortx:CPU", "ortx", "CPU", available=False,
                              reason="onnxruntime has no CPUExecutionProvider")]
        return [Processor("ortx:CPU", "ortx", "CPU", full_name="ONNX Runtime CPU (ortx)")]

    def compile(self, model: Any, processor: Processor) -> bytes:
        """The serialized model: ONNX Runtime optimizes it when the session is created."""
        import onnx

        try:
            if isinstance(model, onnx.ModelProto):
                return model.SerializeToString()
            with open(os.fspath(model), "rb") as handle:
                return handle.read()
        except Exception as error:
            raise _failed(processor, "compile", error) from error

    def load(self, compiled: bytes, processor: Processor) -> OrtxModel:
        """Create the session with the processor's thread count.

        ``memory_bytes`` here is the serialized model's size: a lower bound, since this example
        does not measure the process's memory growth (the built-in backends do).
        """
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = processor.threads
        options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(compiled, options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as error:
            raise _failed(processor, "load", error) from error
        return OrtxModel(
            processor, len(compiled), tuple(i.name for i in session.get_inputs()),
            tuple(o.name for o in session.get_outputs()), tuple(session.get_providers()),
            session, ThreadPoolExecutor(max_workers=1, thread_name_prefix="ortx"))

    def infer(self, loaded: OrtxModel, inputs: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
        """Run one request; outputs by name, exactly ``loaded.output_names``."""
        if loaded.session is None:
            raise BackendError("ortx: the model was unloaded; load it again")
        try:
            outputs = loaded.session.run(list(loaded.output_names),
                                         {name: np.asarray(inputs[name])
                                          for name in loaded.input_names})
        except Exception as error:
            raise _failed(loaded.processor, "infer", error) from error
        return dict(zip(loaded.output_names, outputs, strict=True))

    def infer_async(self, loaded: OrtxModel, inputs: Mapping[str, np.ndarray]
                    ) -> Future[dict[str, np.ndarray]]:
        """Queue one request on the model's own thread; errors land on the future."""
        return loaded.executor.submit(self.infer, loaded, dict(inputs))

    def unload(self, loaded: OrtxModel) -> None:
        """Finish queued requests, then drop the session."""
        loaded.executor.shutdown(wait=True)
        loaded.session = None

    def supports(self, op_type: str, processor: Processor) -> bool:
        """ONNX Runtime's CPU provider runs every standard ONNX operator."""
        import onnx.defs

        return onnx.defs.has(op_type)
