"""Run a model on one processor: load it, or run a whole data set through it in batches.

This is the helper every stage uses to evaluate models (workloads, zoo, profile)::

    from sparseloom.workload.inference import run_batched

    outputs = run_batched("model.onnx", {"x": images}, processor="ov:CPU", batch_size=128)
    logits = outputs["logits"]          # rows in the order of ``images``

It reads only what the ``Backend``/``LoadedModel`` protocols declare, so a third-party backend
works here as the built-ins do. No inference runtime is imported; the backend imports its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from sparseloom.core.errors import BackendError, ConfigError
from sparseloom.core.processors import get_backend, get_processor
from sparseloom.core.types import Processor
from sparseloom.workload.model_source import resolve_model

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["load_model", "model_tensors", "run_batched"]


def load_model(
    model: onnx.ModelProto | str | os.PathLike[str], processor: str | Processor = "ort:CPU"
) -> tuple[Any, Any]:
    """Compile (cached on disk) and load ``model`` on ``processor``; returns (backend, loaded).

    Call ``backend.unload(loaded)`` when done.
    """
    resolved = get_processor(processor)
    backend = get_backend(resolved.backend)
    compiled = backend.compile(model, resolved)
    return backend, backend.load(compiled, resolved)


def model_tensors(loaded: Any, model: onnx.ModelProto | str | os.PathLike[str]
                  ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The input and output specs (``name``, ``dtype``, ``shape``) of a loaded model.

    The loaded model's own ``inputs``/``outputs`` when its backend provides them (optional in
    the :class:`~sparseloom.core.protocols.LoadedModel` contract), else read from ``model``,
    the ONNX model it was compiled from, in the order of ``input_names``/``output_names``.
    """
    inputs, outputs = getattr(loaded, "inputs", None), getattr(loaded, "outputs", None)
    if inputs is not None and outputs is not None:
        return tuple(inputs), tuple(outputs)
    source = resolve_model(model)
    by_name = {spec.name: spec for spec in (*source.inputs, *source.outputs)}
    try:
        return (tuple(by_name[n] for n in loaded.input_names),
                tuple(by_name[n] for n in loaded.output_names))
    except KeyError as error:
        raise BackendError(
            f"the model loaded on {loaded.processor.name} names tensor {error.args[0]!r}, "
            f"which {source.path.name} does not have; its backend's input_names/output_names "
            f"must be the model's own"
        ) from None


def _batch_rows(input_specs: tuple[Any, ...], batch_size: int) -> tuple[int, bool]:
    """The batch size to run, and whether the model's batch dim is fixed (so pad the tail)."""
    first_dims = {spec.shape[0] for spec in input_specs if spec.shape}
    fixed = [d for d in first_dims if isinstance(d, int)]
    if fixed and len(first_dims) == 1:
        return fixed[0], True
    return batch_size, False


def run_batched(
    model: onnx.ModelProto | str | os.PathLike[str],
    inputs: Mapping[str, np.ndarray],
    processor: str | Processor = "ort:CPU",
    batch_size: int = 256,
) -> dict[str, np.ndarray]:
    """Run ``inputs`` through ``model`` on ``processor`` in batches and concatenate the outputs.

    The model is compiled and loaded once per call (compile artefacts are cached on disk) and
    unloaded at the end. Every input array must have the same first-axis length ``n``; they are
    cut into batches of ``batch_size`` rows. A model whose batch dimension is fixed (e.g. 1)
    runs batches of exactly that size, the last one padded and trimmed back.

    :param model: an ONNX ModelProto or a path to a ``.onnx`` file.
    :param inputs: one array per model input name, dtypes as the model declares them.
    :param processor: a processor name or spec (``"ov:CPU"``, ``"ort:CPU?threads=2"``) or a
        :class:`Processor`.
    :param batch_size: rows per request when the batch dimension is free.
    :returns: one array per model output name, ``n`` rows each, in input order.
    :raises BackendError: the model, inputs or device are wrong (the message says which).
    """
    import numpy as np

    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    arrays = {name: np.asarray(value) for name, value in inputs.items()}
    lengths = {name: (a.shape[0] if a.ndim else None) for name, a in arrays.items()}
    if not arrays:
        raise BackendError("run_batched needs at least one input array")
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise BackendError(
            "every input of run_batched must have the same first-axis length (the rows); got "
            + ", ".join(f"{name!r}: {list(a.shape)}" for name, a in arrays.items())
        )
    rows = int(next(iter(arrays.values())).shape[0])
    backend, loaded = load_model(model, processor)
    try:
        input_specs, output_specs = model_tensors(loaded, model)
        step, fixed = _batch_rows(input_specs, batch_size)
        futures: list[tuple[Future[dict[str, np.ndarray]], int]] = []
        for start in range(0, rows, step):
            batch = {name: a[start:start + step] for name, a in arrays.items()}
            real = next(iter(batch.values())).shape[0]
            if fixed and real < step:
                batch = {name: np.concatenate([a, np.repeat(a[-1:], step - real, axis=0)])
                         for name, a in batch.items()}
            futures.append((backend.infer_async(loaded, batch), real))
        results = [(future.result(), real) for future, real in futures]
    finally:
        backend.unload(loaded)
    if not results:
        return {spec.name: np.empty([0, *(d if isinstance(d, int) else 0 for d in spec.shape[1:])],
                                    dtype="float32" if spec.dtype == "?" else spec.dtype)
                for spec in output_specs}
    return {
        name: np.concatenate([outputs[name][:real] for outputs, real in results], axis=0)
        for name in loaded.output_names
    }
