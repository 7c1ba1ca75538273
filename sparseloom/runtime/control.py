"""The runtime's control thread: the slow work that must never block a worker.

Feedback to the policy, re-planning, and compiling and loading subgraphs for a switch or a
retry run here, one job after another, while the workers keep serving.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from sparseloom.core.errors import SparseloomError
from sparseloom.runtime.threads import mark_serving

log = logging.getLogger("sparseloom.runtime")

_STOP = object()


class ControlThread:
    """A single thread that runs submitted jobs in order."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        #: Errors raised by jobs, as text (a job's error never stops the run).
        self.errors: list[str] = []
        #: Wall ms of every job run, in order (the summary notes the longest: a load holds
        #: the GIL while a backend builds its session, and every worker waits meanwhile).
        self.job_ms: list[float] = []

    def start(self) -> None:
        """Start the thread."""
        self._thread = threading.Thread(target=self._loop, name="sparseloom-run-control",
                                        daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread has started and not stopped (the runtime is serving)."""
        return self._thread is not None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the control thread after the jobs already submitted."""
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._queue.put(job)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted job has run; return whether it has."""
        return self._idle.wait(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Run the jobs already submitted, then stop."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        mark_serving("the control thread")
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            started = time.perf_counter()
            try:
                job()  # type: ignore[operator]
            except Exception as error:  # a job's error is reported in the summary; the run goes on
                if not isinstance(error, SparseloomError):  # a bug: keep its traceback
                    log.exception("runtime control job failed")
                self.errors.append(f"{type(error).__name__}: {error}")
            self.job_ms.append((time.perf_counter() - started) * 1e3)
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()
