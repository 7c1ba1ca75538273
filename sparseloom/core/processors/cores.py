"""The CPU this process runs on: its cores (listing them, pinning a thread, parsing a core
list), its model name and what it computes natively (``/proc/cpuinfo``).

A processor's ``cores`` (:mod:`sparseloom.core.processors`) name cores from this list; a
processor's serving thread is pinned to them. Native code behaves differently per CPU (an AMD
EPYC Zen 4 has AVX-512, AVX512-BF16 and VNNI but no AMX; an Intel Xeon may have AMX), so
compressors and reports ask :func:`cpu_flags` rather than assume.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Sequence

from sparseloom.core.errors import ConfigError


def allowed_cores() -> tuple[int, ...]:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def pin_current_thread(cores: Sequence[int]) -> bool:
    """Confine the calling thread to ``cores``; returns whether it was pinned.

    ``os.sched_setaffinity(0, ...)`` acts on the calling thread only (Linux), and threads it
    starts later inherit the affinity. Nothing happens for empty ``cores`` or where the OS has
    no affinity call. This is how a processor's serving thread is pinned to its cores, so that
    the built-in backends run a model *in place* on it (``docs/backends.md``).

    :raises ConfigError: ``cores`` names a core this process cannot use.
    """
    if not cores or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(0, tuple(cores))
    except OSError as error:
        raise ConfigError(
            f"cannot pin a thread to core(s) {list(cores)}: {error}; usable cores: "
            f"{list(allowed_cores())}"
        ) from error
    return True


MAX_CORES = 1024  # core indices a spec may name on any machine (more where it has more)


def parse_cores(value: str | int | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """``"0,2-3"`` → ``(0, 2, 3)``; a list or int passes through. Raises :class:`ConfigError`."""
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    else:
        items = [part.strip() for part in str(value).split(",")]
    if not items or any(not item.strip() for item in items):
        raise ConfigError(f"cores {value!r} has an empty item; give a core list such as "
                          "'0', '0,1' or '0-3' (leave cores out to use any core)")
    cores: list[int] = []
    past = max(os.cpu_count() or 1, MAX_CORES)  # checked before a range is expanded
    try:
        for item in items:
            low, dash, high = item.partition("-")
            if dash and int(high) < int(low):
                raise ConfigError(f"cores {value!r}: the range {item!r} is reversed; write it "
                                  f"low-high, e.g. '{high}-{low}'")
            if int(high if dash else low) >= past:
                raise ConfigError(f"cores {value!r} names core {int(high if dash else low)}, not "
                                  f"usable by this process (this machine has {os.cpu_count()} "
                                  f"cores); usable cores: {list(allowed_cores())}")
            cores.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    except ValueError as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"cores {value!r} is not a core list such as '0', '0,1' or '0-3'"
                          ) from None
    if any(core < 0 for core in cores):
        raise ConfigError(f"cores {value!r} names a negative core")
    return tuple(sorted(set(cores)))


#: ``/proc/cpuinfo`` flags of x86 instructions that add u8×s8 products in int32 (VNNI, AMX):
#: with them int8 kernels do not saturate in int16, so full 8-bit weights are safe.
INT8_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def _cpuinfo_field(name: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (or :func:`platform.processor`)."""
    return (_cpuinfo_field("model name") or platform.processor() or platform.machine()
            or "?")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (empty where it does not)."""
    return frozenset((_cpuinfo_field("flags") or "").split())


def has_int8_dot_product() -> bool:
    """Whether the CPU adds int8 products in int32 natively (VNNI or AMX; see
    :data:`INT8_DOT_FLAGS`). ``False`` where it cannot tell."""
    return bool(cpu_flags() & set(INT8_DOT_FLAGS))
