"""The interfaces plugins implement: Backend, Compressor, estimators and PlacementPolicy.

These are :class:`typing.Protocol` classes: an implementation need not inherit from them, it
only has to provide the methods. A plugin registers a *factory* for one of them through the
registration hooks in :mod:`sparseloom.core.hookspecs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from sparseloom.core.types import SLO, Plan, Processor, StitchedVariant

Arrays = Mapping[str, "np.ndarray"]


@runtime_checkable
class LoadedModel(Protocol):
    """A model loaded on one processor, ready to run."""

    processor: Processor
    #: Memory the loaded model holds, in bytes, as measured by the backend.
    memory_bytes: int
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


@runtime_checkable
class Backend(Protocol):
    """An inference runtime (OpenVINO, ONNX Runtime, ...) that owns one or more processors."""

    def devices(self) -> list[Processor]:
        """Discover the processors this backend can really run on (never assumed)."""
        ...

    def compile(self, model: onnx.ModelProto | str, processor: Processor) -> Any:
        """Compile ``model`` for ``processor``; the artefact may be cached on disk."""
        ...

    def load(self, compiled: Any, processor: Processor) -> LoadedModel:
        """Load a compiled artefact; the result reports its memory in bytes."""
        ...

    def infer_async(self, loaded: LoadedModel, inputs: Arrays) -> Future[dict[str, np.ndarray]]:
        """Start one inference; the future resolves to outputs by name or to the exception."""
        ...

    def infer(self, loaded: LoadedModel, inputs: Arrays) -> dict[str, np.ndarray]:
        """Run one inference synchronously."""
        ...

    def unload(self, loaded: LoadedModel) -> None:
        """Release the memory a loaded model holds."""
        ...

    def supports(self, op_type: str, processor: Processor) -> bool:
        """Whether ``processor`` can run ONNX operator ``op_type`` natively."""
        ...


@runtime_checkable
class Compressor(Protocol):
    """Turns one dense subgraph into a compressed one with the same boundary tensors."""

    #: ``unstructured``, ``structured``, ``int8`` or ``fp16``; recorded in the zoo manifest.
    kind: str
    #: The levels built by default (e.g. sparsity fractions); empty for level-less kinds.
    default_levels: tuple[float, ...]

    def compress(
        self,
        subgraph: onnx.ModelProto,
        level: float,
        calibration: Sequence[Arrays],
    ) -> onnx.ModelProto:
        """Compress ``subgraph`` at ``level``.

        ``calibration`` holds inputs of this subgraph computed by the dense prefix. The result
        keeps the boundary input/output names, shapes and dtypes of ``subgraph``.
        """
        ...


@runtime_checkable
class AccuracyEstimator(Protocol):
    """Predicts the metric of stitched variants from per-position features."""

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Train on ``features`` (n_variants × n_features) and measured metrics (n_variants)."""
        ...

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predict the metric of each row of ``features``."""
        ...


@runtime_checkable
class LatencyEstimator(Protocol):
    """Predicts the end-to-end latency of a stitched variant under a processor order."""

    def predict(self, stitched: StitchedVariant, order: Sequence[str], profile: Any) -> float:
        """Return the estimated latency in milliseconds."""
        ...


@runtime_checkable
class PlacementPolicy(Protocol):
    """Chooses a processor order and a stitched variant per task under the SLOs."""

    def plan(
        self,
        tasks: Sequence[str],
        profile: Any,
        processors: Sequence[Processor],
        slos: Mapping[str, SLO],
    ) -> Plan:
        """Return the plan to run."""
        ...

    def on_feedback(self, observations: Any) -> Plan | None:
        """React to runtime observations; return a new plan or ``None`` to keep the current."""
        ...
