"""The process heap: CPython's full collections kept short, while serving and in long commands.

A full (generation-2) collection walks every object the process holds, holding the GIL while
it does. With the libraries, models and records of a long benchmark or application loaded, one
took 59–117 ms here (about 100 full collections in a few minutes of ``sparseloom bench
serve``'s capacity search, counted with ``gc.callbacks``), and every serving thread that needed
the GIL stalled with it: tens of requests over their SLO at once, a capacity probe lost to a
pause (docs/runtime.md).

While any runtime serves, the objects that existed when the first one started are frozen
(:func:`gc.freeze`: moved to a permanent generation the collector does not walk), so a full
collection walks only what was made since (``RuntimeOptions(freeze_heap=False)`` leaves the
heap as it is, to measure what this buys). When the last runtime stops they are unfrozen and
collected as usual: garbage made before a run is collected after it, nothing is lost. An
application that froze its heap itself before the first runtime started (as CPython's
documentation suggests after start-up) keeps it frozen: the last runtime to stop leaves the
heap as frozen as it found it, and more.

Outside serving, a long command (``sparseloom demo``, ``profile``, ``zoo build``) pays the same
walk on every full collection: ``sparseloom demo --workload tiny`` spent 5.8 s of its 12.0 s in
84 of them (counted with ``gc.callbacks``, AMD EPYC, nothing else running), each walking the
quarter-million objects that importing torch, OpenVINO and ONNX Runtime leaves. With
:data:`SURVIVOR_FREEZE` installed (the console script installs it, and the test suite), the
objects that survive a full collection are frozen after it, so the next one walks only what
was made since: the same demo took 7.3 s against 11.4 s (medians of 3 rounds side by side,
2026-12-01, AMD EPYC; ``benchmarks/mechanisms.py --mechanism survivor_freeze`` measures it
again). When the frozen heap has doubled since it was last
walked, it is unfrozen and the next full collection walks and frees it all once, so garbage
cycles among frozen objects are freed too and memory stays within twice what is alive. While a
runtime serves it does nothing: the serving freeze above holds, and what serving makes (requests,
futures, records) stays young and is collected as usual.
"""

from __future__ import annotations

import gc
import threading


class _ServingHeap:
    """How many runtimes serve in this process; the heap is frozen from the first that
    freezes it (``RuntimeOptions.freeze_heap``, on by default) until the last stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serving = 0
        self._frozen = False
        self._unfreeze_after = False

    def enter(self, freeze: bool = True) -> None:
        """A runtime starts serving: freeze the heap unless it is frozen already
        (``freeze=False``: count it as serving, so the survivor freeze stays idle, and freeze
        nothing)."""
        with self._lock:
            if freeze and not self._frozen:
                self._unfreeze_after = gc.get_freeze_count() == 0
                gc.freeze()
                self._frozen = True
            self._serving += 1

    def leave(self) -> None:
        """A runtime stopped: unfreeze the heap if it was the last and the heap was unfrozen
        before it was frozen for serving."""
        with self._lock:
            if self._serving == 0:
                return
            self._serving -= 1
            if self._serving == 0:
                if self._frozen and self._unfreeze_after:
                    gc.unfreeze()
                self._frozen = False

    @property
    def serving(self) -> int:
        """Runtimes serving now."""
        return self._serving


#: The process's one account of serving runtimes.
SERVING_HEAP = _ServingHeap()


class SurvivorFreeze:
    """Freeze what survives each full collection; walk it all again once it has doubled.

    :param floor: frozen objects below which the frozen heap is never unfrozen to be walked
        again (about what importing the ML libraries leaves).
    """

    def __init__(self, floor: int = 200_000) -> None:
        self._installed = False
        self._limit = floor
        #: Times the frozen heap was unfrozen to be walked again.
        self.compactions = 0

    def install(self) -> None:
        """Freeze after every full collection from now on (idempotent).

        A Ctrl-C handled as the callback starts would be raised inside it, where Python drops
        it: the interrupt is delivered again once the callback returns
        (:mod:`sparseloom.runtime.interrupts`)."""
        from sparseloom.runtime.interrupts import redeliver_lost_interrupts

        redeliver_lost_interrupts()
        if not self._installed:
            gc.callbacks.append(self._after_collection)
            self._installed = True

    def remove(self) -> None:
        """Stop freezing after full collections; what is frozen stays frozen."""
        if self._installed:
            gc.callbacks.remove(self._after_collection)
            self._installed = False

    @property
    def installed(self) -> bool:
        """Whether full collections are followed by a freeze."""
        return self._installed

    def _after_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase != "stop" or info["generation"] != 2 or SERVING_HEAP.serving:
            return  # while a runtime serves, its own freeze rules: what serving makes stays young
        frozen = gc.get_freeze_count()
        if frozen > self._limit:
            gc.unfreeze()  # the next full collection walks, and frees, everything once
            self._limit = 2 * frozen
            self.compactions += 1
        else:
            gc.freeze()


#: The process's survivor freeze: installed by the console script and the test suite, never on
#: import (an application embedding :class:`sparseloom.Server` keeps its own collector policy).
SURVIVOR_FREEZE = SurvivorFreeze()
