"""Chains run as the runtime runs them: one pinned thread per processor, models called in place.

The runtime serves with one thread per processor, pinned to the processor's cores; each stage
of a request runs *in place* on that thread (the loaded model's direct call), and only the
boundary tensors move on, through the next processor's queue (``DESIGN.md``: "The serving hot
path is one pinned thread per processor calling the loaded model in place"). The profiler times
stages, hand-offs and validation chains with the same mechanics, so what it measures is what
the runtime pays:

* :class:`PinnedThreads` starts one thread per processor, pinned to its cores
  (:func:`~sparseloom.core.processors.pin_current_thread`), each serving its own queue;
* :meth:`PinnedThreads.run` sends one chain of :class:`Stage` s along them: a stage runs on its
  processor's thread, the next stage on the same processor runs at once, one on another
  processor is put on that thread's queue. Every stage's start and end are stamped on the
  thread that ran it (:class:`ChainTiming`), never on the caller, whose own wake-ups stay out.

One stage alone is a subgraph's latency; the gap between two stages is a hand-off (a queue put
and the wake-up of the next processor's idle thread, or next to nothing on one processor); S
stages from the first start to the last end are an isolated request's chain.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import ConfigError
from sparseloom.core.processors.cores import pin_current_thread
from sparseloom.core.types import Processor, as_tuple

log = logging.getLogger(__name__)

#: A loaded model's direct call: inputs by name to outputs by name.
ModelCall = Callable[[Mapping[str, Any]], Mapping[str, Any]]


@attrs.frozen
class Stage:
    """One stage of a chain.

    Attributes:
        thread: index of the processor whose pinned thread runs it.
        call: the loaded model's call, made in place on that thread.
        input_names: the tensors it reads from the previous stage's outputs (from the chain's
            inputs for the first stage).
    """

    thread: int
    call: ModelCall = attrs.field(eq=False)
    input_names: tuple[str, ...] = attrs.field(converter=as_tuple)


@attrs.frozen
class ChainTiming:
    """When each stage of one chain run started and ended (``time.perf_counter()`` seconds)."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]

    def stage_ms(self, position: int) -> float:
        """Milliseconds stage ``position`` ran."""
        return (self.ends[position] - self.starts[position]) * 1e3

    def handoff_ms(self, position: int) -> float:
        """Milliseconds from the end of stage ``position`` to the start of the next one."""
        return (self.starts[position + 1] - self.ends[position]) * 1e3

    @property
    def total_ms(self) -> float:
        """Milliseconds from the first stage's start to the last stage's end."""
        return (self.ends[-1] - self.starts[0]) * 1e3


@attrs.define(eq=False)
class _ChainRun:
    """A chain in flight: the stages, what the last stage carried and the stamps so far."""

    stages: Sequence[Stage]
    carried: Mapping[str, Any]
    next_stage: int = 0
    starts: list[float] = attrs.field(factory=list)
    ends: list[float] = attrs.field(factory=list)
    error: BaseException | None = None
    done: threading.Event = attrs.field(factory=threading.Event)


_STOP = object()


class PinnedThreads:
    """One thread per processor, pinned to its cores, each serving its own queue.

    Use it as a context manager (or call :meth:`close`). A processor whose cores cannot be
    pinned keeps an unpinned thread (a warning is logged); its backend refuses to load models
    on it anyway (``_worker.check_cores``), so its cells end up as recorded failures.
    """

    def __init__(self, processors: Sequence[Processor]) -> None:
        self.processors = tuple(processors)
        self._queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in processors]
        self._threads = [
            threading.Thread(target=self._serve, args=(index,), daemon=True,
                             name=f"sparseloom-profile-{processor.name}")
            for index, processor in enumerate(self.processors)]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> PinnedThreads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, stages: Sequence[Stage], inputs: Mapping[str, Any]) -> ChainTiming:
        """Run ``stages`` in order on their threads, fed ``inputs``; wait for the last one.

        :raises BaseException: whatever a stage raised (the chain stops there).
        """
        if not stages:
            raise ValueError("a chain needs at least one stage")
        chain = _ChainRun(stages, inputs)
        self._queues[stages[0].thread].put(chain)
        chain.done.wait()
        if chain.error is not None:
            raise chain.error
        return ChainTiming(tuple(chain.starts), tuple(chain.ends))

    def close(self) -> None:
        """Stop every thread (after what is queued) and wait for them."""
        for pending in self._queues:
            pending.put(_STOP)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _serve(self, index: int) -> None:
        try:
            pin_current_thread(self.processors[index].cores)
        except ConfigError as error:
            log.warning("profiling %s on an unpinned thread: %s",
                        self.processors[index].name, error)
        get = self._queues[index].get
        while True:
            chain = get()
            if chain is _STOP:
                return
            self._advance(chain, index)

    def _advance(self, chain: _ChainRun, index: int) -> None:
        """Run ``chain``'s stages while they are on this thread, then pass it on or finish it."""
        perf_counter = time.perf_counter
        stages = chain.stages
        while True:
            stage = stages[chain.next_stage]
            try:
                carried = chain.carried
                feed = {name: carried[name] for name in stage.input_names}
                start = perf_counter()
                outputs = stage.call(feed)
                end = perf_counter()
            except BaseException as error:  # handed to the caller of run(), which re-raises it
                chain.error = error
                chain.done.set()
                return
            chain.starts.append(start)
            chain.ends.append(end)
            chain.carried = outputs
            chain.next_stage += 1
            if chain.next_stage == len(stages):
                chain.done.set()
                return
            following = stages[chain.next_stage].thread
            if following != index:
                self._queues[following].put(chain)
                return
