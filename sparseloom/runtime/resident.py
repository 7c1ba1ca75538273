"""What a worker keeps resident: a loaded model and the direct call the worker makes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sparseloom.core.types import Processor

#: Key of a resident model on a worker: ``(task, position, variant)`` for a subgraph, or
#: ``(task, WHOLE, choices)`` for a stitched variant merged into one model (``Plan.merged``).
ModelKey = tuple[str, int, int | tuple[int, ...]]
#: The position of a merged model's key: the whole chain.
WHOLE = -1


@attrs.define(eq=False)
class ResidentModel:
    """A subgraph loaded on one processor, with the direct call the worker makes.

    Attributes:
        key: (task, position, variant).
        processor: the processor it is loaded on.
        backend: the backend instance that loaded it.
        loaded: the backend's loaded model.
        runner: ``runner(inputs) -> outputs``, called in place on the worker's thread.
        input_names: the boundary tensors it reads.
        memory_bytes: what the backend measured it holds.
        profiled_s: the profile's time of one call (negative until first looked up; 0 when
            the profile has none): what the worker's measured time is calibrated against.
        wide_runner: the wide twin's call (``None`` when there is none); the worker makes it
            instead of ``runner`` only while every other processor is idle.
        wide_loaded: the wide twin's loaded model (unloaded with it).
        wide_processor: the processor the twin was loaded for (its threads and their cores).
        reentrant: ``runner`` may be called from two threads at once (the built-in backends'
            calls: an ONNX Runtime session, an OpenVINO request per thread); only then may
            the overflow thread call it.
        took_s: the worker's own calls of it, smoothed (exponentially, weight 0.2 on the
            newest; negative before the first): what the overflow thread and a spare's
            routing expect a call to take.
    """

    key: ModelKey
    processor: Processor
    backend: Any
    loaded: Any
    runner: Callable[[Mapping[str, Any]], Mapping[str, Any]]
    input_names: tuple[str, ...]
    memory_bytes: int
    profiled_s: float = -1.0
    wide_runner: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    wide_loaded: Any = None
    wide_processor: Processor | None = None
    reentrant: bool = False
    took_s: float = -1.0

    @property
    def wide(self) -> bool:
        """A wide twin is loaded beside it (``Plan.wide``): ``wide_runner`` calls the same
        subgraph with one more thread on each core the other processors lend."""
        return self.wide_runner is not None
