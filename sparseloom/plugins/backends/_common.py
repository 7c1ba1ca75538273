"""What the OpenVINO and ONNX Runtime backends share: compiled and loaded records, checks.

Model sources and their signatures are :mod:`sparseloom.workload.model_source`.

Nothing here imports an inference runtime; :mod:`onnx` and :mod:`numpy` are imported inside
functions so that importing a backend module stays light.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs

from sparseloom.core.errors import BackendError, ConfigError, DeviceFallbackError
from sparseloom.core.processors import FALLBACK_CHOICES, FALLBACK_OPTION
from sparseloom.core.types import Processor
from sparseloom.workload.model_source import ModelSource, TensorSpec

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

log = logging.getLogger("sparseloom.backends")

#: The option that leaves a CPU processor at its runtime's own defaults (threads, streams,
#: pinning, precision): how a user runs a model without sparseloom (``bench serve``'s stock
#: contenders). Its value is ``true`` or ``false``.
STOCK_OPTION = "stock"


def recorded_devices(path: Path) -> tuple[str, ...] | None:
    """The devices (or providers) recorded at ``path`` when a model was first compiled, by this
    process or a probe process; ``None`` when nothing readable is recorded there."""
    import json

    try:
        devices = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        return None
    return tuple(devices)


def record_devices(path: Path, devices: tuple[str, ...]) -> None:
    """Record at ``path`` the devices that ran a freshly compiled model (atomically: a reader
    never sees half a record)."""
    import json

    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(list(devices)))
    os.replace(temporary, path)


def stock_defaults(processor: Processor) -> bool:
    """Whether ``processor`` asks for its runtime's own defaults (:data:`STOCK_OPTION`).

    :raises ConfigError: a value other than true/false.
    """
    value = str(processor.options.get(STOCK_OPTION, "false")).strip().lower()
    if value not in ("true", "false", "1", "0"):
        from sparseloom.core.errors import ConfigError

        raise ConfigError(f"processor {processor.name}: {STOCK_OPTION}={value!r} is not true "
                          f"or false")
    return value in ("true", "1")


@attrs.frozen
class CompiledModel:
    """A backend's compile artefact: where it lives on disk and what it was built for.

    Attributes:
        backend: the backend name (``ov``, ``ort``).
        processor: the processor name it was compiled for.
        source: the ONNX model it was compiled from.
        artefact_path: the cached artefact (OpenVINO blob, ORT optimized model or TensorRT
            engine cache folder); ``None`` when the backend keeps nothing beyond the source.
        cache_key: the key of the artefact in the cache (model digest + config hash).
    """

    backend: str
    processor: str
    source: ModelSource
    artefact_path: Path | None
    cache_key: str

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The model's inputs."""
        return self.source.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """The model's outputs."""
        return self.source.outputs


@attrs.define(eq=False)
class LoadedModel:
    """A model loaded on one processor (implements :class:`sparseloom.core.protocols.LoadedModel`).

    Attributes:
        processor: the processor that really runs it. After a tolerated fallback (``warn``) its
            name is the device that runs it, never the one that was asked for.
        memory_bytes: memory the load added, measured (see ``docs/backends.md``).
        inputs: input specs in graph order.
        outputs: output specs in graph order.
        compiled: the artefact it was loaded from.
        executed_by: the devices or providers the runtime reports as running it.
        requested: the processor that was asked for.
        handle: the runtime's own object (OpenVINO ``CompiledModel``, ORT ``InferenceSession``).
        executor: the processor's worker pool that runs its requests.
    """

    processor: Processor
    memory_bytes: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    compiled: CompiledModel
    executed_by: tuple[str, ...]
    requested: Processor
    handle: Any = attrs.field(repr=False)
    executor: ThreadPoolExecutor = attrs.field(repr=False)
    runner: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] = attrs.field(repr=False)
    unloaded: bool = False

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input names in graph order."""
        return tuple(spec.name for spec in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Output names in graph order."""
        return tuple(spec.name for spec in self.outputs)

    @property
    def fell_back(self) -> bool:
        """Whether the runtime runs it somewhere other than the processor asked for."""
        return self.processor.name != self.requested.name


# -- inputs ----------------------------------------------------------------------------------


def validate_inputs(loaded: LoadedModel, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Check names, dtypes and shapes of ``inputs`` against the model; return them as arrays.

    :raises BackendError: naming the input and what was expected versus what was given.
    """
    import numpy as np

    where = f"model on {loaded.processor.name}"
    expected = {spec.name: spec for spec in loaded.inputs}
    unknown = sorted(set(inputs) - set(expected))
    missing = [name for name in expected if name not in inputs]
    if unknown or missing:
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
        described = ", ".join(f"{s.name!r}: {s.describe()}" for s in loaded.inputs)
        raise BackendError(f"{where}: {'; '.join(parts)}; the model's inputs are {described}")
    arrays: dict[str, np.ndarray] = {}
    for name, spec in expected.items():
        array = np.asarray(inputs[name])
        if spec.dtype != "?" and array.dtype.name != spec.dtype:
            raise BackendError(
                f"{where}: input {name!r} has dtype {array.dtype.name}, expected {spec.dtype} "
                f"({spec.describe()}); convert it with .astype(np.{spec.dtype})"
            )
        if spec.shape or array.ndim == 0:
            wrong_rank = len(spec.shape) != array.ndim
            wrong_dim = not wrong_rank and any(
                isinstance(want, int) and want != got
                for want, got in zip(spec.shape, array.shape, strict=True)
            )
            if wrong_rank or wrong_dim:
                raise BackendError(
                    f"{where}: input {name!r} has shape {list(array.shape)}, expected "
                    f"{spec.describe()} ('?' and names are free dimensions)"
                )
        arrays[name] = np.ascontiguousarray(array)
    return arrays


def example_inputs(
    specs: tuple[TensorSpec, ...], free_dim: int = 1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random inputs of the declared shapes and dtypes (free dimensions set to ``free_dim``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = tuple(d if isinstance(d, int) else free_dim for d in spec.shape)
        dtype = np.dtype("float32" if spec.dtype == "?" else spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            arrays[spec.name] = rng.integers(0, 8, shape).astype(dtype)
    return arrays


# -- failures and fallback -------------------------------------------------------------------


def notify_and_raise(
    processor: Processor, operation: str, error: BaseException, message: str | None = None
) -> NoReturn:
    """Tell observers about a backend failure, then raise it as a :class:`BackendError`."""
    from sparseloom.core.registry import get_registry

    if not isinstance(error, BackendError):
        detail = message or f"{type(error).__name__}: {error}"
        wrapped: BackendError = BackendError(f"{operation} on {processor.name} failed: {detail}")
        wrapped.__cause__ = error
        error = wrapped
    get_registry().notify_backend_error(processor, operation, error)
    raise error


def fallback_policy(processor: Processor) -> str:
    """The processor's ``on_fallback`` option: ``error`` (default) or ``warn``."""
    policy = str(processor.options.get(FALLBACK_OPTION, "error")).strip().lower()
    if policy not in FALLBACK_CHOICES:
        raise ConfigError(
            f"processor {processor.name}: {FALLBACK_OPTION}={policy!r} is not one of "
            f"{', '.join(FALLBACK_CHOICES)}"
        )
    return policy


def handle_fallback(
    requested: Processor, actual_device: str, executed_by: tuple[str, ...],
    operation: str = "load",
) -> Processor:
    """Apply the fallback policy when ``requested`` really runs on ``actual_device``.

    With ``on_fallback=error`` raise :class:`DeviceFallbackError`; with ``warn`` warn loudly and
    return a processor renamed to the device that runs the model, so that its timings are never
    reported under the accelerator's name.
    """
    message = (
        f"processor {requested.name} asked for device {requested.device!r} but the runtime "
        f"runs the model on {', '.join(executed_by) or 'nothing'}: a silent fallback. Check "
        f"that the device and its drivers answer (`sparseloom devices`), or set "
        f"{FALLBACK_OPTION}=warn to accept it under the name {requested.backend}:{actual_device}"
    )
    if fallback_policy(requested) == "error":
        notify_and_raise(requested, operation, DeviceFallbackError(message))
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)
    return attrs.evolve(
        requested,
        name=f"{requested.backend}:{actual_device}",
        device=actual_device,
        reason=f"fell back from {requested.name}",
    )
