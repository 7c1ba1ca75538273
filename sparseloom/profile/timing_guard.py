"""What keeps a profile's latencies honest: one profile of a workload at a time, and a record
of what else ran while it timed.

Two ``sparseloom profile`` runs of one workload at once time their subgraphs on the same
cores, each inflating the other's latencies (2.7× here with two ``profile tiny --no-cache``),
and both cache what they measured: ``plan`` then calls a reachable SLO unreachable.

- :func:`profile_lock`: a profile holds an exclusive lock on
  ``<cache>/profiles/<workload>/.lock`` (``fcntl.flock``) while it builds; a second one says,
  in one line, that it waits for the first (naming its process) and goes on once the first is
  done — reading what the first cached. The lock is re-entrant within a thread.
- :class:`TimingWatch`: around the latency timing of a task, the 1-minute load average before
  and after and the cores other processes kept busy meanwhile
  (:class:`~sparseloom.profile.machine_load.ForeignLoad`, the figure ``bench serve`` records
  beside every run). Above :data:`FOREIGN_CORES_LIMIT` it warns in one line that the latencies
  may be inflated; the record goes into the profile's metadata (``meta["timing_load"]``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparseloom.profile.machine_load import ForeignLoad, load_average

#: Cores other processes may keep busy while latencies are timed before the profile is flagged.
#: The OS, a shell and a monitor keep 0.01–0.05 busy on an idle machine (``bench serve``'s
#: measurement); one competing single-threaded process shows as about 1 core. Half a core is a
#: competitor that ran at least half the time, which inflates a pinned subgraph's latency
#: whenever it shares its core.
FOREIGN_CORES_LIMIT = 0.5

# Locks held by this process, by path: (owning thread, depth), so that a nested build of the
# same workload on the same thread does not wait for itself.
_held: dict[Path, tuple[int, int]] = {}
_held_guard = threading.Lock()


@contextlib.contextmanager
def profile_lock(directory: str | os.PathLike[str], workload: str) -> Iterator[None]:
    """Hold ``directory/.lock`` (the workload's profile folder) while the block runs; wait,
    saying so in one line on stderr, while another profile of ``workload`` holds it."""
    path = Path(directory) / ".lock"
    me = threading.get_ident()
    with _held_guard:
        owner, depth = _held.get(path, (0, 0))
        if owner == me:
            _held[path] = (me, depth + 1)
    if owner == me:
        try:
            yield
        finally:
            with _held_guard:
                _held[path] = (me, _held[path][1] - 1)
        return
    try:
        import fcntl
    except ImportError:  # no advisory locks here: profiles are not serialised
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            print(f"waiting for another profile of {workload} (pid {holder}) to finish: two "
                  f"at once would time each other's load into their latencies", file=sys.stderr,
                  flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        with _held_guard:
            _held[path] = (me, 1)
        try:
            yield
        finally:
            with _held_guard:
                _held.pop(path, None)
            fcntl.flock(handle, fcntl.LOCK_UN)


class TimingWatch:
    """The machine's load around one task's latency timing (see the module doc), for a
    profile of ``workload``."""

    def __init__(self, workload: str) -> None:
        self._workload = workload
        self._before = load_average()
        self._foreign = ForeignLoad()
        self._started = time.perf_counter()

    def finish(self, task: str, executor: str = "local") -> dict[str, Any]:
        """The record (``load_before``, ``load_after``, ``foreign_cores``, ``seconds``,
        ``busy``), and one ``Warning:`` line on stderr when the machine was busy. Only the
        ``local`` executor times in this process: under another (Ray) the busy cores are its
        own workers', and nothing is judged (``busy`` is ``None``)."""
        cores = self._foreign.cores()
        local = executor == "local"
        busy = bool(cores > FOREIGN_CORES_LIMIT) if local else None
        record: dict[str, Any] = {
            "load_before": _rounded(self._before), "load_after": _rounded(load_average()),
            "foreign_cores": _rounded(cores),
            "seconds": round(time.perf_counter() - self._started, 3),
            "busy": busy, "limit": FOREIGN_CORES_LIMIT, "executor": executor}
        if busy:
            print(f"Warning: while the latencies of task {task!r} were timed, other processes "
                  f"kept {cores:.2f} cores busy (load average {_text(self._before)} before, "
                  f"{_text(record['load_after'])} after); the profiled latencies may be "
                  f"inflated: profile again on a quiet machine (sparseloom profile "
                  f"{self._workload} --no-cache)", file=sys.stderr, flush=True)
        return record


def _rounded(value: float) -> float | None:
    return round(value, 2) if math.isfinite(value) else None


def _text(value: float | None) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{value:.2f}"
