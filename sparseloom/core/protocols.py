"""The interfaces plugins implement: Backend, Compressor, estimators and PlacementPolicy.

These are :class:`typing.Protocol` classes: an implementation need not inherit from them, it
only has to provide the methods. A plugin registers a *factory* for one of them through the
registration hooks in :mod:`sparseloom.core.hookspecs`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from sparseloom.core.errors import (
    SparseloomError,
    loaded_model_problem,
    plugin_call_error,
    plugin_result_error,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from sparseloom.core.types import SLO, Plan, Processor, Registration, StitchedVariant

Arrays = Mapping[str, "np.ndarray"]

#: The distribution of the built-in plugins: their calls are not wrapped (a failure is a bug of
#: sparseloom and keeps its traceback; the serving hot path stays a direct call).
BUILTIN_DISTRIBUTION = "sparseloom"


@runtime_checkable
class LoadedModel(Protocol):
    """A model loaded on one processor, ready to run.

    These four members are required; every command reads only them, plus three optional ones
    through the helpers below, which give the documented default when a backend omits them:

    * ``executed_by`` (``tuple[str, ...]``): the devices or providers the runtime reports as
      really running the model; default ``(processor.device,)`` (see :func:`executed_by`).
    * ``inputs`` / ``outputs``: specs with ``name``, ``dtype`` (a numpy dtype name, ``"?"`` if
      unknown) and ``shape`` (ints; ``None`` or a string for a free dimension), in graph order;
      default: read from the ONNX model that was compiled (see
      :func:`sparseloom.core.processors.model_tensors`).
    """

    #: The processor that really runs the model.
    processor: Processor
    #: Memory the loaded model holds, in bytes, as measured by the backend.
    memory_bytes: int
    #: Input tensor names, in the model's graph order.
    input_names: tuple[str, ...]
    #: Output tensor names, in the model's graph order; ``infer`` returns exactly these.
    output_names: tuple[str, ...]


def executed_by(loaded: LoadedModel) -> tuple[str, ...]:
    """What really runs ``loaded``: its ``executed_by`` when the backend reports one, else
    ``(loaded.processor.device,)``."""
    reported = getattr(loaded, "executed_by", None)
    return tuple(str(x) for x in reported) if reported else (loaded.processor.device,)


@runtime_checkable
class Backend(Protocol):
    """An inference runtime (OpenVINO, ONNX Runtime, ...) that owns one or more processors.

    Every method is required. Contract details a backend must honour:

    * ``devices()`` returns :class:`~sparseloom.core.types.Processor` records named
      ``<backend name>:<device>``. A CPU device (``device`` starting with ``CPU``) returned
      without ``cores`` is pinned by sparseloom to one core of its own with ``threads=1``
      (cores handed out in discovery order); return ``cores`` (and ``threads``) to choose.
      Processors of a third-party backend are never in the default set: users name them
      (``--processor``, or ``processors = [...]`` in the workload file).
    * ``compile``/``load``/``infer_async`` failures should be reported to observers by calling
      ``get_registry().notify_backend_error(processor, operation, error)`` before raising;
      sparseloom does not call the ``sparseloom_backend_error`` hook for you.
    * ``infer_async`` never raises: errors are set on the future.
    """

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
    """Turns one dense subgraph into a compressed one with the same boundary tensors.

    The factory is called with the options of the workload file's ``[compressors.<name>]``
    table as keyword arguments (none when there is no table). Optional members:

    * ``level_range`` (a :class:`LevelRange`): which levels ``compress`` accepts. Default: the
      open interval (0, 1) (fractions) when ``default_levels`` is non-empty, else none (the
      compressor is level-less and takes ``0.0``). See :func:`level_range_of`.
    * ``prunable(subgraph) -> bool``: ``False`` when ``compress`` would have nothing to do at
      this position; the zoo then keeps the dense subgraph there and records the skip.
    """

    #: A short kind (``unstructured``, ``structured``, ``int8``, ``fp16`` or your own);
    #: recorded in the zoo manifest and coded into the accuracy features.
    kind: str
    #: The levels a variant named just ``<name>`` expands to; empty for level-less kinds.
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


@attrs.frozen
class LevelRange:
    """The levels a compressor accepts: ``minimum``..``maximum``.

    Attributes:
        minimum: the lowest level.
        maximum: the highest level.
        inclusive: whether the bounds themselves are allowed (``False``: an open interval,
            as for fractions in (0, 1)).
        integer: whether only whole numbers are allowed (bit widths, group sizes).

    A level of ``0`` always means "no level" in variant names, so a range must exclude it.
    """

    minimum: float = attrs.field(converter=float)
    maximum: float = attrs.field(converter=float)
    inclusive: bool = False
    integer: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.minimum < self.maximum:
            raise ValueError(f"LevelRange needs minimum < maximum, got {self.minimum:g} and "
                             f"{self.maximum:g}")
        if self.contains(0.0):
            raise ValueError("a LevelRange must exclude 0, which means 'no level'")

    def contains(self, level: float) -> bool:
        """Whether ``level`` is allowed."""
        if self.integer and float(level) != int(level):
            return False
        if self.inclusive:
            return self.minimum <= level <= self.maximum
        return self.minimum < level < self.maximum

    def describe(self) -> str:
        """``0 < level < 1`` or ``whole numbers 2 <= level <= 8``."""
        sign = "<=" if self.inclusive else "<"
        kind = "whole numbers " if self.integer else ""
        return f"{kind}{self.minimum:g} {sign} level {sign} {self.maximum:g}"


#: The default range of a compressor with default levels: a fraction in (0, 1).
FRACTION_LEVELS = LevelRange(0.0, 1.0)


def level_range_of(compressor: Compressor) -> LevelRange | None:
    """The levels ``compressor`` accepts; ``None`` for a level-less compressor.

    Its ``level_range`` when it declares one, else :data:`FRACTION_LEVELS` when it has
    ``default_levels``, else ``None``.
    """
    declared = getattr(compressor, "level_range", None)
    if declared is not None:
        if not isinstance(declared, LevelRange):
            raise TypeError(f"level_range must be a sparseloom.core.protocols.LevelRange, got "
                            f"{declared!r}")
        return declared
    return FRACTION_LEVELS if tuple(getattr(compressor, "default_levels", ())) else None


#: How a variant name ends in a level: ``unstructured-0.5``, ``rounding-8``, ``x-1e-3``.
LEVEL_SUFFIX = re.compile(r"(.+?)-([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


def compressor_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be selected in a variant list, or ``None`` when it can.

    Variant names join compressors with ``+`` and end a step's level in ``-<number>``, and
    ``dense`` is the uncompressed variant, so none of these can name a compressor.
    """
    if name == "dense":
        return "'dense' names the uncompressed variant"
    if "+" in name or "," in name or any(c.isspace() for c in name):
        return "'+' joins compressors, ',' separates variants and spaces are trimmed"
    if LEVEL_SUFFIX.fullmatch(name):
        return "a name ending in '-<number>' reads as a level"
    return None


@runtime_checkable
class AccuracyEstimator(Protocol):
    """Predicts the metric of stitched variants from per-position features.

    The factory is called with ``seed=<int>`` when its signature takes ``seed`` (or
    ``**kwargs``), else with no arguments. The feature columns are laid out as
    :func:`sparseloom.profile.features.feature_names` says (``docs/plugins.md`` lists them):
    the first S columns are the measured metrics of each position's source variant.
    ``predict`` must return one finite value per row, inside the metric's range [0, 1];
    sparseloom checks this and fails naming the plugin otherwise.
    """

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
        """Return the plan to run.

        ``profile`` is the workload's :class:`~sparseloom.profile.table.ProfileTable` (typed
        ``Any`` here: core does not import the stages built on it).
        ``profile.processors`` names the profiled processors; ``order`` must name one of them
        per position (``profile.task(t).n_positions`` of them, the same S for every task), and
        each task's stitched variant has one choice per position.
        """
        ...

    def on_feedback(self, observations: Any) -> Plan | None:
        """React to runtime observations; return a new plan or ``None`` to keep the current."""
        ...


@runtime_checkable
class Dispatcher(Protocol):
    """Optional: a placement policy that also decides, at run time, where each subgraph runs.

    A policy that has a ``dispatch`` method is asked by the runtime for every subgraph that
    becomes ready (the first stage of a new request, or the next stage of one in flight); the
    runtime then loads the policy's subgraphs on every processor that is up.
    """

    def dispatch(self, task: str, position: int, variant: int, queued_ms: Mapping[str, float],
                 previous: str | None) -> str:
        """Choose the processor that runs subgraph (``position``, ``variant``) of ``task``.

        :param queued_ms: per candidate processor (those up that hold the subgraph), the
            expected work queued there, in ms, from the profile's stage times.
        :param previous: the processor that ran the previous stage (``None`` for stage 0).
        :returns: one of ``queued_ms``'s keys (another name falls back to the plan's choice).
        """
        ...


# -- the plugin boundary ------------------------------------------------------------------


def devices_problem(devices: Any) -> str | None:
    """What is wrong with a backend's ``devices()`` result (a list of ``Processor``), or
    ``None``."""
    from sparseloom.core.types import Processor

    if not isinstance(devices, list | tuple):
        return f"a value of type {type(devices).__name__!r}, not a list of Processor records"
    wrong = [d for d in devices if not isinstance(d, Processor)]
    return f"{wrong[0]!r}, not a Processor record" if wrong else None


#: Checks of what a third-party plugin returns, by (kind, method): each gives the problem with
#: a result, or ``None``. Only calls off the serving hot path are checked.
RESULT_CHECKS: dict[tuple[str, str], Callable[[Any], str | None]] = {
    ("backend", "load"): loaded_model_problem, ("backend", "devices"): devices_problem,
}


def guarded(function: Callable[..., Any], registration: Registration, call: str,
            check: Callable[[Any], str | None] | None = None) -> Callable[..., Any]:
    """``function`` (plugin code) behind the boundary: see :func:`plugin_call_error`; with
    ``check``, a result it finds a problem with is refused (:func:`plugin_result_error`)."""
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except SparseloomError:  # raised on purpose: its message is the plugin's own
            raise
        except Exception as error:
            raise plugin_call_error(registration, call, error) from error
        problem = check(result) if check is not None else None
        if problem is not None:
            raise plugin_result_error(registration, call, problem)
        return result

    return guarded


class ContainedPlugin:
    """A third-party implementation seen through the plugin boundary.

    Attribute reads and writes go to the implementation (``isinstance`` sees its class); a
    public method is called through a guard that turns any exception other than a
    :class:`SparseloomError` into a :class:`PluginCallError` naming the plugin, and refuses a
    result that breaks the contract where :data:`RESULT_CHECKS` has a check for it (a
    backend's ``load()``).
    """

    __slots__ = ("_contained", "_registration")

    def __init__(self, implementation: Any, registration: Registration) -> None:
        object.__setattr__(self, "_contained", implementation)
        object.__setattr__(self, "_registration", registration)

    @property  # type: ignore[misc]  # isinstance() and type checks see the plugin's own class
    def __class__(self) -> type:
        return type(self._contained)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._contained, name)
        if name.startswith("_") or isinstance(value, type) or not callable(value):
            return value
        return guarded(value, self._registration, f"{name}()",
                       RESULT_CHECKS.get((self._registration.kind, name)))

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._contained, name, value)

    def __eq__(self, other: object) -> bool:
        return bool(self._contained == other)

    def __hash__(self) -> int:
        return hash(self._contained)

    def __repr__(self) -> str:
        return repr(self._contained)


def contain(registration: Registration, implementation: Any) -> Any:
    """``implementation`` behind the plugin boundary, unless a built-in made it."""
    if registration.distribution == BUILTIN_DISTRIBUTION or implementation is None or isinstance(
            implementation, str | bytes | int | float | os.PathLike | ContainedPlugin):
        return implementation
    return ContainedPlugin(implementation, registration)
