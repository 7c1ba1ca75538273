"""Fault injection for tests and demos: ``sparseloom run --inject-faults RATE``.

A :class:`FaultInjector` makes a fraction of model calls fail *before* they reach the backend,
with an :class:`InjectedFault` (a :class:`~sparseloom.core.errors.BackendError`), so that the
runtime's retry, fail and mark-down paths run on real requests and the run's invariant
(submitted = completed + failed) is tested under faults, not just asserted.
"""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING

import attrs

from sparseloom.core.errors import InjectedFault
from sparseloom.core.types import as_tuple

if TYPE_CHECKING:
    from sparseloom.core.types import Processor
    from sparseloom.runtime.request import Request


def _rate(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"a fault rate must lie in [0, 1], got {value!r}")


@attrs.define(eq=False)
class FaultInjector:
    """Fails each model call with probability ``rate`` (per processor when ``processors``).

    Attributes:
        rate: the probability that one model call fails.
        seed: seeds the draws (one generator, shared by the workers under a lock).
        processors: only these processors fail (all when empty); a test that wants one
            processor to go down names it here with ``rate=1``.
        injected: how many calls were failed.
    """

    rate: float = attrs.field(converter=float, validator=_rate)
    seed: int = 0
    processors: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    injected: int = 0
    _random: random.Random = attrs.field(init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def maybe_fail(self, processor: Processor, request: Request, position: int) -> None:
        """Raise :class:`InjectedFault` for this call with probability ``rate``."""
        if self.processors and processor.name not in self.processors:
            return
        with self._lock:
            hit = self._random.random() < self.rate
            if hit:
                self.injected += 1
        if hit:
            raise InjectedFault(
                f"injected fault on {processor.name}: request {request.request_id} of task "
                f"{request.task!r}, position {position} (--inject-faults {self.rate:g})")
