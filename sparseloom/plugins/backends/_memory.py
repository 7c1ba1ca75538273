"""Measuring the memory a loaded model holds.

The figure is the growth of the process's resident set size (RSS, from ``/proc/self/statm``)
across the load and one warm-up inference, after freed heap pages were returned to the OS
(``malloc_trim``), measured with every other load in the process held
off by a lock. It counts weights, compiled kernels and the activation buffers of one request;
it does not count memory the runtime allocated before (library code, thread pools), nor device
memory (see ``docs/backends.md``). RSS growth can read low when the allocator reuses freed
pages, so the value is a lower bound; it is never taken from a file size.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_measure_lock = threading.Lock()
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """The process's current resident set size in bytes (peak RSS where /proc is absent)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _release_free_memory() -> None:
    # Freed-but-kept heap pages would be reused by the load without growing RSS: hand them
    # back to the OS first (glibc's malloc_trim), so that the growth counts the model.
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _settled_rss(tolerance_bytes: int = 256 * 1024, tries: int = 10) -> int:
    # Right after pages are handed back the kernel's RSS count can still move by tens of MB
    # (seen here once in ten loads); read until two readings 2 ms apart agree.
    import time

    previous = rss_bytes()
    for _ in range(tries):
        time.sleep(0.002)
        current = rss_bytes()
        if abs(current - previous) <= tolerance_bytes:
            return current
        previous = current
    return previous


def measure_rss(fn: Callable[[], T]) -> tuple[T, int]:
    """Run ``fn`` alone among measured loads; return its result and the RSS growth in bytes."""
    with _measure_lock:
        _release_free_memory()
        before = _settled_rss()
        result = fn()
        grown = _settled_rss() - before
    return result, max(grown, 0)


def gpu_used_bytes(index: int) -> int | None:
    """Memory in use on NVIDIA GPU ``index`` (all processes), from NVML; ``None`` without NVML.

    Used as a before/after delta around a CUDA or TensorRT load; another process allocating at
    the same time would be counted too.
    """
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None

    class _Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    handle = ctypes.c_void_p()
    memory = _Memory()
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
            return None
        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return None
        return int(memory.used)
    finally:
        nvml.nvmlShutdown()


def gpu_name(index: int) -> str:
    """The NVIDIA GPU's name from NVML, or ``""`` when NVML is absent."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return ""
    if nvml.nvmlInit_v2() != 0:
        return ""
    try:
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
            return ""
        buffer = ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetName(handle, buffer, ctypes.c_uint(96)) != 0:
            return ""
        return buffer.value.decode(errors="replace")
    finally:
        nvml.nvmlShutdown()


def gpu_count() -> int:
    """How many NVIDIA GPUs NVML sees (0 without NVML)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    if nvml.nvmlInit_v2() != 0:
        return 0
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return 0
        return int(count.value)
    finally:
        nvml.nvmlShutdown()


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (or :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()
