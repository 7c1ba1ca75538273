"""Attrs records shared across sparseloom.

Values are frozen (``@attrs.frozen``); they are safe to hash, cache and pass between threads.
Later stages extend this module with their own records; keep each record small and typed.
"""

from __future__ import annotations

import numbers
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import attrs

from sparseloom.core.errors import ArgumentError, ConfigError

_Named = TypeVar("_Named", str, float)

PluginKind = Literal["backend", "compressor", "estimator", "policy", "workload"]
PLUGIN_KINDS: tuple[str, ...] = ("backend", "compressor", "estimator", "policy", "workload")


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    """Plain ``int`` s from integers of any kind (NumPy's included); :class:`ConfigError` for
    anything else (floats, strings, booleans)."""
    try:
        items = list(values)
    except TypeError:
        raise ConfigError(f"expected a sequence of integers, got {values!r}") from None
    converted = []
    for value in items:
        try:
            if isinstance(value, bool):  # bool is an int to Python, but never an index here
                raise TypeError
            converted.append(operator.index(value))
        except TypeError:
            raise ConfigError(
                f"expected integers, got {value!r} ({type(value).__name__}) in {items!r}"
            ) from None
    return tuple(converted)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def as_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    """An attrs converter: any iterable as a ``tuple`` (``converter=tuple``, in a form type
    checkers read)."""
    return tuple(values)


def as_dict(value: Mapping[Any, Any]) -> dict[Any, Any]:
    """An attrs converter: a mapping as a plain ``dict`` (``converter=dict`` would do the same,
    but its overloads make type checkers reject every mapping passed to the record)."""
    return dict(value)


def repeated(items: Iterable[_Named]) -> list[_Named]:
    """The items ``items`` holds more than once, each once, sorted (empty: none repeats): the
    check every list of names a user gives shares."""
    return sorted(item for item, count in Counter(items).items() if count > 1)


def rotated(items: Sequence[Any], round_index: int) -> list[Any]:
    """``items`` rotated left by ``round_index`` (round r of interleaved rounds starts
    with the r-th)."""
    if not items:
        return []
    shift = round_index % len(items)
    return list(items[shift:]) + list(items[:shift])


def _finite_fraction(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{type(instance).__name__} {attribute.name} must lie in [0, 1], "
                          f"got {value!r}")


#: The longest latency an SLO may allow, in ms (11.6 days): past it a latency SLO means
#: nothing, and sums and ratios of such values lose every digit that matters.
MAX_SLO_LATENCY_MS = 1e9


def _slo_latency(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 < value <= MAX_SLO_LATENCY_MS:
        raise ConfigError(f"SLO {attribute.name} must be a number of milliseconds in (0, "
                          f"{MAX_SLO_LATENCY_MS:g}], got {value!r}")


def _real(value: Any, name: str) -> float:
    """``value`` as a ``float``; :class:`ArgumentError` for what is not a real number (a
    string, a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"SLO {name} must be a number, got {value!r} "
                            f"({type(value).__name__})")
    return float(value)


def _accuracy(value: Any) -> float:
    return _real(value, "accuracy")


def _latency_ms(value: Any) -> float:
    return _real(value, "latency_ms")


@attrs.frozen
class Registration:
    """One plugin-provided implementation, as registered through a ``register`` callback.

    Attributes:
        kind: what it is (``backend``, ``compressor``, ``estimator``, ``policy``, ``workload``).
        name: the name users select it by (unique per kind).
        factory: a callable that builds the implementation (usually its class).
        description: one line for ``sparseloom plugins``.
        capabilities: free-form tags, e.g. ``("accuracy",)`` for an accuracy estimator.
        plugin: the pluggy plugin name that registered it.
        distribution: the installed distribution that provides the plugin.
        version: that distribution's version.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(PLUGIN_KINDS))
    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    factory: Callable[..., Any] = attrs.field(validator=attrs.validators.is_callable())
    description: str = ""
    capabilities: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    plugin: str = ""
    distribution: str = ""
    version: str = ""

    @name.validator
    def _check_name(self, attribute: attrs.Attribute, value: str) -> None:
        if not value or value != value.strip():
            raise ConfigError(f"a {self.kind} name must be a non-empty string, got {value!r}")


@attrs.frozen
class PluginFailure:
    """A plugin that failed to import or register; reported and skipped, never fatal."""

    plugin: str
    distribution: str
    version: str
    error: str


@attrs.frozen
class SLO:
    """A task's service-level objective: a minimum metric and a maximum latency.

    Attributes:
        accuracy: the lowest acceptable task metric, a fraction in [0, 1].
        latency_ms: the highest acceptable end-to-end latency of one request, in ms.
    """

    accuracy: float = attrs.field(converter=_accuracy, validator=_finite_fraction)
    latency_ms: float = attrs.field(converter=_latency_ms, validator=_slo_latency)


@attrs.frozen
class Processor:
    """One backend bound to one device with its own execution config, e.g. ``ov:CPU``.

    Attributes:
        name: unique name, ``<backend>:<device>`` (``ov:CPU``, ``ort:CUDA:0``).
        backend: the backend plugin name (``ov``, ``ort``).
        device: the backend's device string (``CPU``, ``GPU.0``, ``NPU``, ``CUDA:0``).
        threads: intra-op threads for one inference.
        cores: the CPU cores the processor's threads are pinned to; empty means unpinned.
        streams: parallel inference streams/requests.
        full_name: the device's own full name (``Intel(R) Core ...``), when known.
        available: whether the device answered when discovered.
        reason: why it is unavailable, when it is not.
        options: backend-specific options (strings), passed through to the runtime.
    """

    name: str
    backend: str
    device: str
    threads: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    cores: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    streams: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    full_name: str = ""
    available: bool = True
    reason: str = ""
    options: Mapping[str, str] = attrs.field(factory=dict, converter=as_dict, hash=False)


@attrs.frozen
class SubgraphKey:
    """Identifies one subgraph in the zoo: a task, a position (0-based) and a source variant."""

    task: str
    position: int = attrs.field(validator=attrs.validators.ge(0))
    variant: int = attrs.field(validator=attrs.validators.ge(0))


@attrs.frozen
class StitchedVariant:
    """A stitched variant: one source-variant index per subgraph position. Never a file.

    ``choices[j]`` is the index (in the task's zoo) of the variant whose subgraph runs at
    position ``j``. An all-equal tuple is one of the original variants.
    """

    task: str
    choices: tuple[int, ...] = attrs.field(converter=_int_tuple)

    @choices.validator
    def _check_choices(self, attribute: attrs.Attribute, value: tuple[int, ...]) -> None:
        if not value:
            raise ConfigError("a stitched variant needs at least one position")
        if any((not isinstance(v, int)) or v < 0 for v in value):
            raise ConfigError(f"variant indices must be non-negative integers, got {value!r}")

    @property
    def subgraphs(self) -> tuple[SubgraphKey, ...]:
        """The subgraph keys this variant runs, in order."""
        return tuple(SubgraphKey(self.task, j, v) for j, v in enumerate(self.choices))

    def __str__(self) -> str:
        return f"{self.task}[{','.join(map(str, self.choices))}]"


@attrs.frozen
class Plan:
    """The output of a placement policy.

    Attributes:
        policy: the policy name that produced it.
        order: processor names, one per subgraph position (the global placement order).
        variants: the chosen stitched variant per task name.
        estimated_latency_ms: the estimated end-to-end latency per task name.
        estimated_accuracy: the estimated metric per task name.
        feasible: per task, whether the chosen variant meets the task's SLO (estimated).
        infeasible_reason: per infeasible task, why no variant meets its SLO (empty for
            feasible tasks).
        accuracy_measured: per task, whether ``estimated_accuracy`` was measured exactly
            (``True``) or predicted by the accuracy estimator (``False``).
        assignment: per task, the processor of each position (see :meth:`processors_of`).
        slos: the SLO each task was planned against.
        decision_seconds: wall time the policy took to decide, in seconds.
        wide: tasks whose stages may run *wide* while the plan's other processors are idle:
            on their processor's thread plus one thread on each core of the other processors
            (a backend with ``widened``: ONNX Runtime, and OpenVINO on CPU; others run them as
            usual).
        wide_when_quiet: tasks of ``wide`` whose loan would cost another task its latency SLO
            if one of its requests arrived meanwhile: they borrow only from processors idle
            for a few of their mean idle gaps (:meth:`sparseloom.runtime.worker.
            ProcessorWorker.quiet`), as a closed loop's is once its tasks are done.
        merged: tasks whose whole chain is on one processor and is served as its stitched
            variant merged into one model (:func:`sparseloom.zoo.whole.merged_path`): one call
            per request instead of one per position, the same operators, no hand-off.
        overflow: processors whose queue an *overflow thread* on the other processors' cores
            also serves, taking only a request that would miss its latency SLO waiting for
            the processor's running call (:mod:`sparseloom.runtime.overflow`).
        lanes: tasks served each on a *lane* of the processor of its chain: a serving thread
            of its own, free to run on the cores of every processor, time-sliced with the
            other lanes by the kernel (:mod:`sparseloom.runtime.lanes`).
        lanes_pinned: the lanes run on the cores of their own processor only, beside its
            worker, instead of every processor's: the tasks sharing a processor are
            time-sliced by the kernel there instead of taking turns in its queue.
        lanes_borrow: with ``lanes_pinned``, a lane may run a call on the cores of another
            processor whose own worker is quiet (idle for a few of its mean idle gaps, as a
            closed loop's is once its tasks are done), one lane per such processor at a time
            (:func:`sparseloom.runtime.lending.roam`).
        spares: tasks whose merged chain on one processor has a *spare*: a second server of
            the same model on the other processors' cores, one thread, which takes the task's
            request only when its processor is busy with another (``Route.replicas``): where
            requests queue (Poisson arrivals), the task runs on two cores at once; with one
            request in flight, never (:mod:`sparseloom.runtime.lanes`).
    """

    policy: str
    order: tuple[str, ...] = attrs.field(converter=_str_tuple)
    variants: Mapping[str, StitchedVariant] = attrs.field(
        factory=dict, converter=as_dict, hash=False)
    estimated_latency_ms: Mapping[str, float] = attrs.field(
        factory=dict, converter=as_dict, hash=False
    )
    estimated_accuracy: Mapping[str, float] = attrs.field(
        factory=dict, converter=as_dict, hash=False)
    feasible: Mapping[str, bool] = attrs.field(factory=dict, converter=as_dict, hash=False)
    infeasible_reason: Mapping[str, str] = attrs.field(factory=dict, converter=as_dict, hash=False)
    accuracy_measured: Mapping[str, bool] = attrs.field(factory=dict, converter=as_dict, hash=False)
    assignment: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=dict, converter=lambda value: {k: tuple(v) for k, v in dict(value).items()},
        hash=False,
    )
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=as_dict, hash=False)
    decision_seconds: float = attrs.field(default=0.0, converter=float)
    wide: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    wide_when_quiet: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    merged: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    overflow: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    lanes: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    lanes_pinned: bool = attrs.field(default=False, converter=bool)
    lanes_borrow: bool = attrs.field(default=False, converter=bool)
    spares: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    def processors_of(self, task: str) -> tuple[str, ...]:
        """The processor of each position of ``task``'s chain: its assignment, else the order.

        Partitioned policies run every task over the global :attr:`order`; non-partitioned
        ones (the ``*-np`` baselines) put each task's whole chain on one processor, recorded
        in :attr:`assignment`.
        """
        return tuple(self.assignment.get(task, self.order))


@attrs.frozen
class Feedback:
    """What the runtime tells a placement policy's ``on_feedback`` about the running plan.

    Attributes:
        plan: the plan that was running.
        latency_ms: per task, the SLO monitor's window statistic of end-to-end latency (ms).
        violated: per task, whether that statistic misses the task's latency SLO.
        down_processors: processors that failed and must not be planned on.
        processor_slowdown: per processor that ran stages since the last feedback, its
            measured time inside model calls over what the profile says those calls take
            (1: as profiled; 2: twice as slow) — the runtime's online calibration.
    """

    plan: Plan
    latency_ms: Mapping[str, float] = attrs.field(factory=dict, converter=as_dict, hash=False)
    violated: Mapping[str, bool] = attrs.field(factory=dict, converter=as_dict, hash=False)
    down_processors: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    processor_slowdown: Mapping[str, float] = attrs.field(factory=dict, converter=as_dict,
                                                          hash=False)
