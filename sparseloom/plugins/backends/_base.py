"""The request path both backends share: futures on the processor's pinned worker pool."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from sparseloom.core.errors import BackendError
from sparseloom.plugins.backends import _worker
from sparseloom.plugins.backends._common import (
    LoadedModel,
    notify_and_raise,
    validate_inputs,
)

if TYPE_CHECKING:
    import numpy as np


class WorkerBackend:
    """Runs every request of a loaded model on its processor's worker pool.

    Subclasses build ``LoadedModel.runner`` (a synchronous call into the runtime) and
    implement ``_release``. One request is one :class:`~concurrent.futures.Future`; errors
    (wrong inputs included) are set on the future, never raised by :meth:`infer_async`.
    """

    #: The backend's registered name; prefixes its processors.
    name: str = ""

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
