"""How busy the machine is: the load average, and the cores other processes keep busy.

A measurement taken while something else computes on the same cores is inflated. ``bench
serve`` records both figures beside every run and flags a busy machine; the profiler records
them beside every latency it times and warns when other processes competed
(:mod:`sparseloom.profile.timing_guard`).
"""

from __future__ import annotations

import math
import os
import time

import attrs


def load_average() -> float:
    """The 1-minute load average (``nan`` where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan


def recorded_load_average() -> float | None:
    """:func:`load_average` as a JSON record holds it: rounded to 0.01, ``None`` where the OS
    has none."""
    value = load_average()
    return round(value, 2) if math.isfinite(value) else None


def _busy_seconds() -> float:
    """CPU seconds every process on the machine has spent busy (``/proc/stat``; nan off
    Linux)."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()[1:]
    except OSError:
        return math.nan
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU seconds of this process and its children: those it has waited for (``os.times``)
    and those still running (the crash guard's probe processes, :mod:`sparseloom.isolation`),
    which work for it, not against it."""
    times = os.times()
    return (times.user + times.system + times.children_user + times.children_system
            + _live_children_seconds())


def _live_children_seconds() -> float:
    """CPU seconds of this process's running children (``/proc/<pid>/stat``; 0 off Linux)."""
    me, total = os.getpid(), 0
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return 0.0
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue  # it ended meanwhile (then os.times counts it once it is waited for)
        # After the name: state, ppid, ..., utime (14th field overall), stime (15th).
        if len(fields) > 12 and fields[1] == str(me):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@attrs.define
class ForeignLoad:
    """Cores other processes kept busy while a run served: the machine's busy CPU time
    (``/proc/stat``) minus this process's own and its children's, over the run's wall time.
    A benchmark's own runs load the machine (the 1-minute load average after a few runs is the
    benchmark's), so this is what says whether anything else competed with it."""

    _busy: float = attrs.field(factory=_busy_seconds)
    _own: float = attrs.field(factory=_own_seconds)
    _wall: float = attrs.field(factory=time.perf_counter)

    def cores(self) -> float:
        """Other processes' busy cores since this record was made (nan off Linux)."""
        wall = time.perf_counter() - self._wall
        if wall <= 0:
            return math.nan
        return max((_busy_seconds() - self._busy) - (_own_seconds() - self._own), 0.0) / wall
