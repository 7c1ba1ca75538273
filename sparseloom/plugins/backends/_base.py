"""The request path both backends share: futures on the processor's pinned worker pool."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from sparseloom.core.errors import BackendError
from sparseloom.plugins.backends import _memory, _worker
from sparseloom.plugins.backends._common import LoadedModel, notify_and_raise, validate_inputs
from sparseloom.workload.model_source import ModelSource, resolve_model

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnx

    from sparseloom.core.types import Processor


#: (backend, device, threads) a model was built on in this process (:meth:`WorkerBackend.
#: _create_on_worker` builds the first one twice).
_WARMED: set[tuple[str, str, int]] = set()


class WorkerBackend:
    """Runs every request of a loaded model on its processor's worker pool.

    Subclasses build ``LoadedModel.runner`` (a synchronous call into the runtime) and
    implement ``_release``. One request is one :class:`~concurrent.futures.Future`; errors
    (wrong inputs included) are set on the future, never raised by :meth:`infer_async`.
    """

    #: The backend's registered name; prefixes its processors.
    name: str = ""

    def _warm(self, processor: Processor) -> None:
        """Build and run a one-node model on ``processor`` (the runtime's code and one-time
        state paged in before the first measured load); a backend without one does nothing."""

    def _source(self, model: onnx.ModelProto | str | os.PathLike[str],
                processor: Processor) -> ModelSource:
        """``model`` on disk with its signature; a failure notifies observers, then raises."""
        try:
            return resolve_model(model)
        except Exception as error:
            notify_and_raise(processor, "compile", error)

    def _create_on_worker(
        self,
        processor: Processor,
        create: Callable[[], Any],
        warm_up: Callable[[Any], Any],
        device_bytes: Callable[[], int | None] | None = None,
    ) -> tuple[Any, int, ThreadPoolExecutor]:
        """Create a runtime model on the processor's pinned worker and measure its memory.

        ``create()`` builds the runtime object, ``warm_up(handle)`` runs one request (a model
        whose free dimensions do not fit the example inputs just reads lower), and
        ``device_bytes()`` reads device memory in use (``None``: not available). Returns the
        handle, the growth of private memory (:mod:`._memory`) plus the device memory growth,
        and the worker's executor.
        """

        def created() -> Any:
            handle = create()
            with contextlib.suppress(Exception):
                warm_up(handle)
            _memory.drop_mapped_weights()  # what it read to compile and runs without
            return handle

        def measured() -> tuple[Any, int]:
            warm = (self.name, processor.device, processor.threads)
            if warm not in _WARMED:
                # The first model a runtime builds on a device pages in the runtime's own
                # code and one-time state (OpenVINO's CPU plugin: 40 MiB before the 2 MiB of
                # a small CNN; 13 MiB after a one-node model; AMD EPYC, 2026-12-03): a
                # one-node model goes first, unmeasured.
                with contextlib.suppress(Exception):
                    self._warm(processor)
                _WARMED.add(warm)
            before = device_bytes() if device_bytes else None
            handle, host_bytes = _memory.measure_rss(created)
            after = device_bytes() if before is not None and device_bytes else None
            grown = max(after - before, 0) if after is not None and before is not None else 0
            return handle, host_bytes + grown

        executor = _worker.executor_for(processor)
        try:
            handle, memory_bytes = executor.submit(measured).result()
        except Exception as error:
            notify_and_raise(processor, "load", error)
        return handle, memory_bytes, executor

    def infer_async(
        self, loaded: LoadedModel, inputs: Mapping[str, Any]
    ) -> Future[dict[str, np.ndarray]]:
        """Start one inference on the processor's worker; the future holds outputs by name.

        Inputs are validated on the worker: a wrong name, dtype or shape resolves the future
        to a :class:`BackendError` naming the input.
        """
        if loaded.unloaded:
            future: Future[dict[str, np.ndarray]] = Future()
            future.set_exception(BackendError(
                f"the model on {loaded.processor.name} was unloaded; load it again"))
            return future
        return loaded.executor.submit(self._run, loaded, inputs)

    def infer(self, loaded: LoadedModel, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run one inference and wait for its outputs (by output name).

        When the calling thread is already pinned to (a subset of) the processor's cores, the
        request runs on it, without the two thread hand-offs of the worker; otherwise it runs on
        the worker. (Not for an unpinned caller: OpenVINO's ``infer`` and ``start_async`` both
        compute on threads that are not confined to the processor's cores then, measured.)
        """
        if not loaded.unloaded and _worker.on_cores(loaded.processor):
            return self._run(loaded, inputs)
        return self.infer_async(loaded, inputs).result()

    def _run(self, loaded: LoadedModel, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = validate_inputs(loaded, inputs)
        try:
            return loaded.runner(arrays)
        except Exception as error:
            notify_and_raise(loaded.processor, "infer", error)

    def unload(self, loaded: LoadedModel) -> None:
        """Release the runtime objects of ``loaded``; later requests fail with a clear error.

        Requests already queued on the processor run first.
        """
        if not loaded.unloaded:
            loaded.executor.submit(self._unload_on_worker, loaded).result()

    def _unload_on_worker(self, loaded: LoadedModel) -> None:
        loaded.unloaded = True
        handle, loaded.handle = loaded.handle, None
        loaded.runner = _unloaded_runner
        self._release(handle)

    def _release(self, handle: Any) -> None:
        """Free what the runtime holds for one model (subclasses free device memory here)."""
        del handle


def _unloaded_runner(inputs: Mapping[str, Any]) -> dict[str, Any]:
    raise BackendError("the model was unloaded; load it again")
