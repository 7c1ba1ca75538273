"""The process heap while a runtime serves: CPython's full collections kept short.

A full (generation-2) collection walks every object the process holds, holding the GIL while
it does. With the libraries, models and records of a long benchmark or application loaded, one
took 59–117 ms here (about 100 full collections in a few minutes of ``sparseloom bench
serve``'s capacity search, counted with ``gc.callbacks``), and every serving thread that needed
the GIL stalled with it: tens of requests over their SLO at once, a capacity probe lost to a
pause (docs/runtime.md).

While any runtime serves, the objects that existed when the first one started are frozen
(:func:`gc.freeze`: moved to a permanent generation the collector does not walk), so a full
collection walks only what was made since. When the last runtime stops they are unfrozen and
collected as usual: garbage made before a run is collected after it, nothing is lost.
"""

from __future__ import annotations

import gc
import threading


class _ServingHeap:
    """How many runtimes serve in this process; the heap is frozen while any does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serving = 0

    def enter(self) -> None:
        """A runtime starts serving: freeze the heap if it is the first."""
        with self._lock:
            if self._serving == 0:
                gc.freeze()
            self._serving += 1

    def leave(self) -> None:
        """A runtime stopped: unfreeze the heap if it was the last."""
        with self._lock:
            if self._serving == 0:
                return
            self._serving -= 1
            if self._serving == 0:
                gc.unfreeze()

    @property
    def serving(self) -> int:
        """Runtimes serving now."""
        return self._serving


#: The process's one account of serving runtimes.
SERVING_HEAP = _ServingHeap()
