"""A backend written from the documented ``Backend``/``LoadedModel`` protocols alone.

ONNX Runtime under another name, as a third-party author would write it from
``docs/plugins.md``: its loaded model has only the four required members (no ``inputs``,
``outputs``, ``executed_by``, ``handle`` or ``runner``, which the built-ins add). Tests subclass
it to name their processors and register it through a test plugin.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, ClassVar

import attrs
import numpy as np
import onnx

from sparseloom.core.types import Processor


@attrs.define(eq=False)
class ProtocolOnlyLoaded:
    """Exactly the LoadedModel protocol, plus the backend's private session."""

    processor: Processor
    memory_bytes: int
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    _session: Any = attrs.field(alias="_session", repr=False)


class ProtocolOnlyBackend:
    """ONNX Runtime called directly; subclasses set :attr:`processors`."""

    #: What ``devices()`` returns.
    processors: ClassVar[tuple[Processor, ...]] = ()
    #: ``infer`` calls since the last reset (per subclass).
    calls: ClassVar[int] = 0

    def devices(self) -> list[Processor]:
        return list(self.processors)

    def compile(self, model: onnx.ModelProto | str, processor: Processor) -> bytes:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
        return proto.SerializeToString()

    def load(self, compiled: bytes, processor: Processor) -> ProtocolOnlyLoaded:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(compiled, options, providers=["CPUExecutionProvider"])
        return ProtocolOnlyLoaded(processor, len(compiled),
                                  tuple(i.name for i in session.get_inputs()),
                                  tuple(o.name for o in session.get_outputs()), session)

    def infer(self, loaded: ProtocolOnlyLoaded, inputs: Any) -> dict[str, np.ndarray]:
        type(self).calls += 1
        outputs = loaded._session.run(list(loaded.output_names), dict(inputs))
        return dict(zip(loaded.output_names, outputs, strict=True))

    def infer_async(self, loaded: ProtocolOnlyLoaded, inputs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(self.infer(loaded, inputs))
        except Exception as error:
            future.set_exception(error)
        return future

    def unload(self, loaded: ProtocolOnlyLoaded) -> None:
        loaded._session = None

    def supports(self, op_type: str, processor: Processor) -> bool:
        return True
