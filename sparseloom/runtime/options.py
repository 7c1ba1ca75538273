"""Settings of a runtime (:class:`RuntimeOptions`); re-exported by
:mod:`sparseloom.runtime.executor`."""

from __future__ import annotations

import attrs

from sparseloom.runtime.monitor import WINDOW
from sparseloom.workload.arguments import instance_field, names_attribute, number_field

#: Consecutive failed stages after which a processor is marked down.
DOWN_AFTER = 5


@attrs.frozen
class RuntimeOptions:
    """Settings of a runtime.

    Attributes:
        window: requests in each task's monitor window.
        down_after: consecutive failures that mark a processor down.
        fault_rate: fraction of model calls failed on purpose (tests and demos; 0 = none).
        fault_seed: seeds the injected faults.
        fault_processors: only these processors get injected faults (all when empty).
        max_queued: a task's unended requests past which ``submit`` raises ``Overloaded``
            (``None``: no bound; the :class:`~sparseloom.Server` sets one).
        keep_requests: ended requests kept in :attr:`Runtime.finished` (the newest).
        batch_one: serve every model with its symbolic batch dimension fixed to 1, as the
            profiler times it (:mod:`sparseloom.zoo.batch_one`); the stock runtimes of ``bench
            serve`` turn it off and serve the model files as they are.
        deadline_queues: order each processor's queue earliest deadline first (submission +
            the task's latency SLO); ``False``: first in, first out (a request waits behind
            every request queued before it). Jobs (loads, switches) go first either way.
        freeze_heap: freeze the heap that exists when serving starts (:func:`gc.freeze`,
            :mod:`sparseloom.runtime.heap`), so a full collection while serving walks only
            what serving made; ``False``: leave the heap as it is (the run still counts as
            serving, so the survivor freeze stays idle; what is not frozen already is walked).
        feedback: give the policy's ``on_feedback`` the monitors' verdicts and the online
            calibration while serving, and apply the plan it returns (docs/runtime.md, *SLO
            monitor and feedback*); ``False``: the first plan serves to the end, but for
            joins, SLO changes and processors marked down, which re-plan as before.
    """

    window: int = attrs.field(default=WINDOW, validator=number_field(low=1, integer=True))
    down_after: int = attrs.field(default=DOWN_AFTER, validator=number_field(low=1, integer=True))
    fault_rate: float = attrs.field(default=0.0, validator=number_field(low=0, high=1))
    fault_seed: int = attrs.field(default=0, validator=number_field(integer=True))
    fault_processors: tuple[str, ...] = names_attribute()
    max_queued: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    keep_requests: int = attrs.field(default=4096, validator=number_field(low=0, integer=True))
    batch_one: bool = attrs.field(default=True, validator=instance_field(bool, "True or False"))
    deadline_queues: bool = attrs.field(default=True,
                                        validator=instance_field(bool, "True or False"))
    freeze_heap: bool = attrs.field(default=True, validator=instance_field(bool, "True or False"))
    feedback: bool = attrs.field(default=True, validator=instance_field(bool, "True or False"))
