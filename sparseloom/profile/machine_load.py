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
    times = os.times()
    return times.user + times.system


def _probe_seconds() -> dict[int, float]:
    """CPU seconds of each running probe process of the crash guard
    (:mod:`sparseloom.isolation`), by process id (``/proc/<pid>/stat``; empty off Linux)."""
    from sparseloom.isolation.prober import PROBERS

    found = {}
    for pid in PROBERS.pids():
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue  # it ended meanwhile
        # After the name: state, ppid, ..., utime (14th field overall), stime (15th).
        if len(fields) > 12:
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


@attrs.define
class ForeignLoad:
    """Cores other processes kept busy while a run served: the machine's busy CPU time
    (``/proc/stat``) minus this process's own and its probe processes', over the wall time.
    A benchmark's own runs load the machine (the 1-minute load average after a few runs is the
    benchmark's), so this is what says whether anything else competed with it. (A probe
    process that ends meanwhile, after a crash, counts as other for its last moments.)"""

    _busy: float = attrs.field(factory=_busy_seconds)
    _own: float = attrs.field(factory=_own_seconds)
    _probes: dict[int, float] = attrs.field(factory=_probe_seconds)
    _wall: float = attrs.field(factory=time.perf_counter)

    def cores(self) -> float:
        """Other processes' busy cores since this record was made (nan off Linux)."""
        wall = time.perf_counter() - self._wall
        if wall <= 0:
            return math.nan
        probes = sum(now - self._probes.get(pid, 0.0) for pid, now in _probe_seconds().items())
        own = _own_seconds() - self._own + probes
        return max((_busy_seconds() - self._busy) - own, 0.0) / wall
