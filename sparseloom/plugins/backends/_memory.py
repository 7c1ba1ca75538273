"""Measuring the memory a loaded model holds.

The figure is the growth of the process's private memory (the anonymous and shared-memory
parts of its proportional set size, from ``/proc/self/smaps_rollup``; RSS from
``/proc/self/statm`` where there is none) across the load and one warm-up inference, after
freed heap pages were returned to the OS (``malloc_trim``), measured with every other load in
the process held off by a lock. It counts the weights a backend copied or repacked, compiled
kernels and the activation buffers of one request; it does not count memory the runtime
allocated before (thread pools, the first model's one-time state: a one-node model is built
first, unmeasured), nor device memory (see ``docs/backends.md``).

Not RSS because it counts file pages: the runtime's own code paged in by the first model of
each kind (OpenVINO's CPU plugin: 6 MiB of a small CNN's 15), and the weights of a batch-1
copy, which the backends *map* (:mod:`sparseloom.zoo.batch_one`). Those are given back to the
page cache after the load (:func:`drop_mapped_weights`) and come back as requests touch them:
shared by every session of the file and reclaimable, they show in the server's RSS while it
serves, not here. The growth can read low when the allocator reuses freed pages, so the value
is a lower bound; it is never taken from a file size.
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


def private_bytes() -> int:
    """The process's resident private memory in bytes: the anonymous and shared-memory parts
    of its proportional set size (``Pss_Anon + Pss_Shmem`` of ``/proc/self/smaps_rollup``);
    its RSS where the kernel has no ``smaps_rollup``."""
    total, found = 0, False
    try:
        with open("/proc/self/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith((b"Pss_Anon:", b"Pss_Shmem:")):
                    total += int(line.split()[1]) * 1024
                    found = True
    except (OSError, ValueError, IndexError):
        pass
    return total if found else rss_bytes()


def rss_bytes() -> int:
    """The process's current resident set size in bytes (peak RSS where /proc is absent)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: The suffixes of the files whose read-only mappings :func:`drop_mapped_weights` releases:
#: model weights (ONNX files and their external data, OpenVINO IR weights), never libraries.
WEIGHT_SUFFIXES = (".onnx", ".onnx.data", ".data", ".bin")
_MADV_DONTNEED = 4


def drop_mapped_weights() -> int:
    """Give the resident pages of every read-only mapping of a weights file back to the page
    cache (``madvise(MADV_DONTNEED)``); return how many mappings were released.

    A backend maps the weights of a batch-1 copy (:mod:`sparseloom.zoo.batch_one`) and reads
    all of them while it compiles, but then runs on its own repacked copy of most of them: the
    mapped pages would stay resident for nothing. Released, a page the model does use (a row of
    an embedding table) comes back on first touch from the page cache, with the same bytes —
    the mappings are read-only and private, so no page was written and nothing is lost.
    Measured on the dense ``sentiment`` model in OpenVINO (2-vCPU AMD EPYC Zen 4, 2026-12-03):
    a second session of it held 131.8 MiB of PSS before and 45.9 MiB after, and 48.0 MiB after
    100 requests; 0 where ``/proc/self/maps`` or ``madvise`` is absent.
    """
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "w" in fields[1] or not fields[5].rstrip().endswith(WEIGHT_SUFFIXES):
            continue
        start, end = (int(value, 16) for value in fields[0].split("-"))
        if libc.madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += 1
    return released


def release_free_memory() -> None:
    """Collect garbage and hand freed-but-kept heap pages back to the OS (glibc's
    ``malloc_trim``; nothing where it is absent)."""
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _settled_size(tolerance_bytes: int = 256 * 1024, tries: int = 10) -> int:
    # Right after pages are handed back the kernel's RSS count can still move by tens of MB
    # (seen here once in ten loads); read until two readings 2 ms apart agree.
    import time

    previous = private_bytes()
    for _ in range(tries):
        time.sleep(0.002)
        current = private_bytes()
        if abs(current - previous) <= tolerance_bytes:
            return current
        previous = current
    return previous


def measure_rss(fn: Callable[[], T]) -> tuple[T, int]:
    """Run ``fn`` alone among measured loads; return its result and the growth of private
    memory in bytes."""
    with _measure_lock:
        # Freed-but-kept heap pages would be reused by the load without growing RSS: hand
        # them back first, so that the growth counts the model.
        release_free_memory()
        before = _settled_size()
        result = fn()
        grown = _settled_size() - before
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


