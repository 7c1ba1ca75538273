"""A request in flight, and the route its stitched variant takes through the processors.

A :class:`Route` is a value: the stitched variant of one task and the processor of each of its
positions. A :class:`Request` is the stateful thing that walks it: the boundary tensors it
carries from one processor's queue to the next, where it is, and how it ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import StitchedVariant
from sparseloom.runtime.lanes import is_spare
from sparseloom.runtime.resident import WHOLE, ModelKey

#: What a finished request's inputs and boundary tensors are replaced by (one shared empty
#: mapping, so ending a request allocates nothing).
RELEASED: Mapping[str, Any] = MappingProxyType({})


def _str_tuple(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def chain_keys(variant: StitchedVariant) -> tuple[ModelKey, ...]:
    """The model key of each subgraph of ``variant``: ``(task, position, source variant)``."""
    return tuple((variant.task, j, choice) for j, choice in enumerate(variant.choices))


def merged_key(variant: StitchedVariant) -> ModelKey:
    """The model key of ``variant`` merged into one model: ``(task, WHOLE, choices)``."""
    return (variant.task, WHOLE, variant.choices)


@attrs.frozen
class Route:
    """A stitched variant and the processor of each position (the plan's route for a task).

    Attributes:
        variant: the stitched variant.
        processors: one processor name per position.
        version: the plan version it came from (0 = the first plan, +1 per switch).
        wide: its stages may run wide (``Plan.wide``: threads on the other processors' cores
            too, while those are idle).
        quiet: and only while those are quiet, idle for a few of their mean idle gaps
            (``Plan.wide_when_quiet``; :meth:`ProcessorWorker.quiet`).
        merged: the whole chain, on one processor, runs as the stitched variant merged into
            one model (``Plan.merged``): a route of one stage.
        replicas: other workers holding a one-stage route's model beside its processor (a
            stock runtime's sessions of one task, one per core): each request runs on the
            least busy of them (:func:`~sparseloom.runtime.replicas.least_busy`), so as many
            run at once as there are replicas; or the task's spare (``Plan.spares``,
            :attr:`spared`), which takes a request only while the processor is busy.
        roams: a lane pinned to its processor's cores may run a call on the cores of another
            processor whose own worker is quiet (``Plan.lanes_borrow``;
            :func:`~sparseloom.runtime.lending.roam`).
    """

    variant: StitchedVariant
    processors: tuple[str, ...] = attrs.field(converter=_str_tuple)
    version: int = 0
    wide: bool = False
    merged: bool = attrs.field(default=False)
    quiet: bool = False
    replicas: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    roams: bool = False
    #: The key a worker finds each stage's model by (:data:`~sparseloom.runtime.worker.
    #: ModelKey`): ``(task, position, variant)`` per position, or the one merged model's;
    #: built once per route so the hot path allocates no key per stage.
    keys: tuple[ModelKey, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        keys = (merged_key(self.variant),) if self.merged else chain_keys(self.variant)
        object.__setattr__(self, "keys", keys)

    @processors.validator
    def _check(self, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        if len(value) != len(self.variant.choices):
            raise ValueError(
                f"route of {self.variant}: {len(value)} processor(s) for "
                f"{len(self.variant.choices)} positions; give one processor per position")

    @merged.validator
    def _check_merged(self, attribute: attrs.Attribute, value: bool) -> None:
        if value and len(set(self.processors)) != 1:
            raise ValueError(f"route of {self.variant} on {'>'.join(self.processors)} cannot "
                             f"run merged: a merged chain runs on one processor")

    @replicas.validator
    def _check_replicas(self, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        if value and (len(set(self.processors)) != 1 or self.processors[0] in value):
            raise ValueError(f"route of {self.variant} on {'>'.join(self.processors)}: "
                             f"replicas {', '.join(value)} serve a route of one processor, "
                             f"beside it, never it again")

    @property
    def task(self) -> str:
        """The task name."""
        return self.variant.task

    @property
    def spared(self) -> bool:
        """Whether its replicas are the task's spare (:mod:`sparseloom.runtime.lanes`)."""
        return bool(self.replicas) and is_spare(self.replicas[0])

    @property
    def positions(self) -> int:
        """S, the number of positions of the stitched variant."""
        return len(self.processors)

    @property
    def stages(self) -> int:
        """The model calls a request makes: S, or 1 for a merged route."""
        return len(self.keys)

    def describe(self) -> str:
        """``tiny[0,3] @ ov:CPU>ort:CPU`` (``... (merged, wide)`` for a merged, wide route)."""
        wide = "wide when quiet" if self.quiet else "wide"
        flags = ", ".join(f for f, on in (("merged", self.merged), (wide, self.wide),
                                          ("spare", self.spared),
                                          ("borrows quiet cores", self.roams)) if on)
        where = "|".join(self.processors[:1] + self.replicas) \
            if self.replicas and not self.spared else ">".join(self.processors)
        return f"{self.variant} @ {where}{f' ({flags})' if flags else ''}"

    def same_path(self, other: Route) -> bool:
        """Whether ``other`` runs the same models on the same processors, as wide, roaming
        as far."""
        return (self.variant == other.variant and self.processors == other.processors
                and self.wide == other.wide and self.merged == other.merged
                and self.quiet == other.quiet and self.replicas == other.replicas
                and self.roams == other.roams)


@attrs.define(eq=False)
class Request:
    """One request of one task, batch size 1, walking its route stage by stage.

    Attributes:
        request_id: unique in the run, in submission order.
        task: the task name.
        sample: the eval-set row it carries (-1 for inputs from outside).
        inputs: the first stage's inputs by name.
        submitted_s: ``time.perf_counter()`` at submission.
        route: the route it takes (fixed at admission, so a switch never changes it midway).
        stage: the stage it runs next: a position, or 0 on a merged route
            (``route.stages`` once done).
        carried: the boundary tensors the next stage reads.
        ran_on: the processor that ran each finished position (dispatch or retry may differ
            from the route's).
        retries: stages retried on another processor.
        output_batch: the last stage's scored output as the backend returned it (batch 1),
            once completed; :attr:`output` is its row, sliced only when read (not on the
            hot path).
        finished_s: ``time.perf_counter()`` when it completed or failed.
        status: ``pending``, ``completed`` or ``failed``.
        reason: why it failed.
        failed_on: the processor it failed on (or held its stage when it was failed).
        error: the backend's exception behind a failure, when there was one.
        suspect: while a failed stage is retried, the worker that failed it (blamed once the
            retry succeeds elsewhere; not when it fails too: then the request is at fault).
        future: resolved when it ends (:class:`sparseloom.Server` requests), then dropped.
    """

    request_id: int
    task: str
    sample: int
    inputs: Mapping[str, Any]
    submitted_s: float
    route: Route | None = None
    stage: int = 0
    carried: Mapping[str, Any] = attrs.field(factory=dict)
    ran_on: list[str] = attrs.field(factory=list)
    retries: int = 0
    output_batch: Any = None
    finished_s: float = 0.0
    status: str = "pending"
    reason: str = ""
    failed_on: str = ""
    error: BaseException | None = None
    future: Any = None
    suspect: Any = None

    @property
    def output(self) -> Any:
        """The scored output's row (``None`` until completed)."""
        batch = self.output_batch
        return None if batch is None else np.asarray(batch)[0]

    @property
    def routed(self) -> Route:
        """The route of an admitted request (it is admitted with one; ``route`` is ``None``
        only while it waits)."""
        route = self.route
        if route is None:
            raise RuntimeError(f"request {self.request_id} of task {self.task!r} has no route "
                               "yet: it was not admitted")
        return route

    @property
    def latency_ms(self) -> float:
        """End-to-end latency, once finished."""
        return (self.finished_s - self.submitted_s) * 1e3
