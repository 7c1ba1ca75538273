"""One worker pool per processor: its threads are pinned to the processor's cores.

Every request, load and compile for a processor runs on that processor's pool. Pinning happens
in each worker thread (``os.sched_setaffinity(0, cores)`` pins the calling thread on Linux), and
threads a runtime creates from a pinned thread inherit its affinity, so loading a model on the
pool confines the runtime's own threads too.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from sparseloom.core.errors import ConfigError
from sparseloom.core.processors.cores import allowed_cores, pin_current_thread
from sparseloom.core.types import Processor

T = TypeVar("T")

_pools: dict[tuple[str, tuple[int, ...], int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def check_cores(processor: Processor) -> None:
    """Raise :class:`ConfigError` when the processor names cores this process cannot use."""
    bad = sorted(set(processor.cores) - set(allowed_cores()))
    if bad:
        raise ConfigError(
            f"processor {processor.name} is pinned to core(s) {bad} that this process cannot "
            f"use; usable cores: {list(allowed_cores())}"
        )


def executor_for(processor: Processor) -> ThreadPoolExecutor:
    """The process-wide pool of ``processor`` (``streams`` threads pinned to its cores)."""
    key = (processor.name, tuple(processor.cores), processor.streams)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            check_cores(processor)
            pool = ThreadPoolExecutor(
                max_workers=processor.streams,
                thread_name_prefix=f"sparseloom-{processor.name}",
                initializer=pin_current_thread,
                initargs=(tuple(processor.cores),),
            )
            _pools[key] = pool
        return pool


def on_cores(processor: Processor) -> bool:
    """Whether the calling thread is already confined to the processor's (non-empty) cores,
    so that work it runs itself stays pinned without a hop to the processor's pool."""
    cores = processor.cores
    if not cores or not hasattr(os, "sched_getaffinity"):
        return False
    return os.sched_getaffinity(0) <= set(cores)


def run_on(processor: Processor, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` on the processor's pool and wait for it (exceptions are re-raised here)."""
    future: Future[Any] = executor_for(processor).submit(fn, *args, **kwargs)
    return future.result()


def shutdown_pools() -> None:
    """Stop every processor pool (tests and interpreter exit)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=True)
