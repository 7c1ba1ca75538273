"""Probes: the first compile, load and run of a backend combination, in a child process.

A *combination* is (backend and its runtime version, device, the CPU's model and flags, the
processor's configuration, the model's SHA-256). Native code can crash on some of them (an
OpenVINO f32 one-thread compile of a batch-1 residual MLP on an AMD EPYC Zen 4; an ONNX
Runtime session of a float16 transformer encoder at ``ORT_ENABLE_ALL``) and a crash takes the
whole process with it. :func:`run_probes` runs each new combination's compile, load and first
inference in the probe processes (:mod:`sparseloom.isolation.prober`: a few children side
by side, each probing many combinations; a crash ends only that child, and a new one takes the
rest of its batch) and records every
outcome under ``<cache>/probes/``, so a combination is probed once per machine and
configuration. The serving process loads only what
a probe saw work (:mod:`sparseloom.isolation.guard`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import attrs

from sparseloom.core.cache import cache_dir, config_hash, file_hash
from sparseloom.core.types import Processor
from sparseloom.isolation.prober import (
    PROBERS,
    ChildDied,
    ChildHung,
    ProbeProcess,
    env_number,
    signal_name,
)

log = logging.getLogger("sparseloom.isolation")

#: ``SPARSELOOM_ISOLATION=off`` loads every combination in the calling process, unprobed.
ISOLATION_ENV = "SPARSELOOM_ISOLATION"
#: Seconds a probe may go without finishing one step before it is killed and marked hung.
PROBE_TIMEOUT_ENV = "SPARSELOOM_PROBE_TIMEOUT_S"
_DEFAULT_TIMEOUT_S = 600.0
#: Outcomes a probe can record. ``raised``: the backend raised a Python exception, which the
#: calling process will raise too, safely, when it tries the same; ``unprobed``: no child
#: could run it (the reason says why) and nothing is recorded.
USABLE = ("ok", "raised")


def isolation_enabled() -> bool:
    """Whether new combinations are probed in a child process (unless ``SPARSELOOM_ISOLATION``
    is ``off``, ``0`` or ``false``)."""
    return os.environ.get(ISOLATION_ENV, "on").strip().lower() not in ("off", "0", "false")


@attrs.frozen
class ProbeItem:
    """One combination to probe.

    Attributes:
        key: the combination's digest (:func:`combination_key`).
        factory: builds the backend in the child (a class or module-level function).
        model_path: the ONNX model on disk.
        processor: the processor, with the configuration probed.
        description: backend, version, device, configuration and model, for messages.
    """

    key: str
    factory: Callable[[], Any]
    model_path: str
    processor: Processor
    description: str


@attrs.frozen
class ProbeOutcome:
    """What one probe saw.

    Attributes:
        status: ``ok``, ``raised`` (a Python error, safe to meet again), ``crashed`` (the
            child died of a signal or exit code), ``hung`` (no progress within the timeout) or
            ``unprobed`` (no child could run it; never cached).
        detail: the signal and step (``SIGSEGV in compile``), the error, or why unprobed.
        description: what was probed (:attr:`ProbeItem.description`).
    """

    status: str
    detail: str = ""
    description: str = ""

    @property
    def usable(self) -> bool:
        """Whether the calling process may load the combination."""
        return self.status in USABLE or self.status == "unprobed"


@functools.cache
def cpu_signature() -> str:
    """The CPU's model name and feature flags, as ``/proc/cpuinfo`` lists them (a digest)."""
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "flags", "Features", "CPU part") and name not in fields:
                    fields[name] = value.strip()
    except OSError:
        fields["machine"] = platform.machine() + " " + platform.processor()
    return config_hash(fields)


@functools.lru_cache(maxsize=8192)
def _digest(path: str, _mtime_ns: int, _size: int) -> str:
    return file_hash(path)


def model_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a model file (memoised per file version)."""
    stat = os.stat(path)
    return _digest(os.fspath(path), stat.st_mtime_ns, stat.st_size)


def processor_config(processor: Processor) -> dict[str, Any]:
    """What of ``processor`` a native crash may depend on: device, threads, streams, options
    (not its cores: a crash on core 0 is a crash on core 1)."""
    return {"device": processor.device, "threads": processor.threads,
            "streams": processor.streams,
            "options": {str(k): str(v) for k, v in sorted(processor.options.items())}}


def describe(backend_version: str, model: str, processor: Processor,
             settings: Mapping[str, Any] | None = None) -> str:
    """``ov:CPU (OpenVINO 2026.4.1; INFERENCE_NUM_THREADS=1, ...) on mlp.onnx``: the backend,
    its version, the configuration (``settings``, else the processor's threads and options)
    and the model (a file name or a label)."""
    if settings is None:
        settings = {"threads": processor.threads, **processor.options}
    config = ", ".join(f"{k}={v}" for k, v in settings.items())
    return f"{processor.name} ({backend_version}; {config}) on {model}"


def combination_key(backend_version: str, model_path: str, processor: Processor) -> str:
    """The digest that names one combination in the outcome cache."""
    return config_hash({"backend": processor.backend, "version": backend_version,
                        "cpu": cpu_signature(), "config": processor_config(processor),
                        "model": model_digest(model_path)}, length=24)


def _outcome_path(key: str) -> Path:
    return cache_dir() / "probes" / f"{key}.json"


def cached_outcome(key: str) -> ProbeOutcome | None:
    """The recorded outcome of combination ``key``, ``None`` when none is (or it is unreadable:
    the combination is then probed again)."""
    try:
        record = json.loads(_outcome_path(key).read_text())
        return ProbeOutcome(str(record["status"]), str(record.get("detail", "")),
                            str(record.get("description", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(key: str, outcome: ProbeOutcome) -> None:
    path = _outcome_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({**attrs.asdict(outcome), "recorded": time.strftime(
        "%Y-%m-%dT%H:%M:%S%z")}, indent=1))
    os.replace(temporary, path)


def run_probes(items: Sequence[ProbeItem]) -> dict[str, ProbeOutcome]:
    """The outcome of every item, probing those not yet recorded (:func:`start_probes`) and
    waiting for them."""
    return {key: future.result() for key, future in start_probes(items).items()}


def start_probes(items: Sequence[ProbeItem]) -> dict[str, Future[ProbeOutcome]]:
    """The outcome of every item, as a future: done at once when recorded in the cache,
    otherwise resolved by the probe processes as each item finishes, so that a caller can load
    the first models while the probes of the next still run.

    New items are dealt round-robin to the probe processes (:data:`~sparseloom.isolation.
    prober.PROBERS`), one batch each, probed side by side on a background thread; when one
    crashes or hangs, that child is gone and a new one takes the rest of its batch. An item
    already being probed (by an earlier call) is not probed twice. Every outcome but
    ``unprobed`` is recorded in the cache.

    :raises ConfigError: a ``SPARSELOOM_PROBE_*`` setting is not a positive number.
    """
    timeout_s = env_number(PROBE_TIMEOUT_ENV, _DEFAULT_TIMEOUT_S)
    size = PROBERS.size()
    futures: dict[str, Future[ProbeOutcome]] = {}
    pending: list[ProbeItem] = []
    with _FLIGHT_LOCK:
        for item in dict((item.key, item) for item in items).values():
            if item.key in _IN_FLIGHT:
                futures[item.key] = _IN_FLIGHT[item.key]
                continue
            future: Future[ProbeOutcome] = Future()
            known = cached_outcome(item.key)
            if known is not None:
                future.set_result(known)
            else:
                _IN_FLIGHT[item.key] = future
                pending.append(item)
            futures[item.key] = future
    if pending:
        threading.Thread(target=_probe_pending, args=(pending, size, timeout_s),
                         name="sparseloom-probes", daemon=True).start()
    return futures


def wait_for_probes() -> None:
    """Return once no probe runs (the profiler calls it before it times anything)."""
    with _FLIGHT_LOCK:
        running = list(_IN_FLIGHT.values())
    wait(running)


#: Futures of the items the probe processes are on, by key.
_IN_FLIGHT: dict[str, Future[ProbeOutcome]] = {}
_FLIGHT_LOCK = threading.Lock()


def _resolve(key: str, outcome: ProbeOutcome | None, error: BaseException | None = None
             ) -> None:
    """Record ``key``'s outcome (or the error that left it unknown) and wake its waiters."""
    with _FLIGHT_LOCK:
        future = _IN_FLIGHT.pop(key, None)
    if future is None:
        return
    if outcome is None:
        future.set_exception(error or RuntimeError("probe lost"))
        return
    if outcome.status != "unprobed":
        try:
            _record(key, outcome)
        except OSError as failure:  # an unwritable cache must not hide the outcome itself
            print(f"Warning: could not record the probe outcome of {outcome.description}: "
                  f"{failure}", file=sys.stderr, flush=True)
    future.set_result(outcome)


def _probe_pending(pending: list[ProbeItem], size: int, timeout_s: float) -> None:
    """Probe ``pending`` in up to ``size`` probe processes side by side (the background
    thread of :func:`start_probes`); whatever fails, every item's future ends resolved."""
    try:
        with PROBERS.lock:
            processes = PROBERS.share(min(size, len(pending)))
            # A log line, not a print: a command's output stays its own (one error line, JSON).
            log.info("probing %d new backend combination(s) in %d child process(es) (a native "
                     "crash there cannot stop this one; outcomes are cached)", len(pending),
                     len(processes))
            shares = [pending[index::len(processes)] for index in range(len(processes))]
            with ThreadPoolExecutor(len(processes), "sparseloom-probe") as pool:
                for done in [pool.submit(_probe_share, process, share, timeout_s)
                             for process, share in zip(processes, shares, strict=True)]:
                    done.result()
    except BaseException as error:
        for item in pending:  # the waiters meet the error; nothing is left unresolved
            _resolve(item.key, None, error)


def _probe_share(process: ProbeProcess, items: list[ProbeItem], timeout_s: float) -> None:
    """Probe ``items`` in ``process`` (restarted after each crash), resolving each as it ends."""
    while items:
        items = _run_batch(process, items, timeout_s, _resolve)


def _picklable(items: Sequence[ProbeItem]) -> tuple[list[ProbeItem], dict[str, ProbeOutcome]]:
    good, bad = [], {}
    for item in items:
        try:
            pickle.dumps(item)
        except Exception as error:
            bad[item.key] = ProbeOutcome("unprobed", f"its backend cannot be sent to a child "
                                         f"process ({type(error).__name__}: {error})",
                                         item.description)
        else:
            good.append(item)
    return good, bad


def _run_batch(process: ProbeProcess, items: Sequence[ProbeItem], timeout_s: float,
               resolve: Callable[[str, ProbeOutcome], None]) -> list[ProbeItem]:
    """Run ``items`` in ``process``, passing each outcome to ``resolve`` as it arrives; returns
    the items still to probe after a crash or hang."""
    sendable, unsendable = _picklable(items)
    for key, outcome in unsendable.items():
        resolve(key, outcome)
    if not sendable:
        return []
    by_key = {item.key: item for item in sendable}
    started: str | None = None
    step = ""
    finished: set[str] = set()
    try:
        for record in process.run(sendable, timeout_s):
            key = record["key"]
            if record["event"] == "step":
                started, step = key, record["step"]
            elif record["event"] in USABLE:
                finished.add(key)
                resolve(key, ProbeOutcome(record["event"], record.get("detail", ""),
                                          by_key[key].description))
                started = None
        return []
    except (ChildDied, ChildHung) as error:
        if started is None:  # it died before it began an item: nothing can be isolated
            tail = error.stderr_tail if isinstance(error, ChildDied) else ""
            why = f"the probe process failed before probing anything ({error}: {tail})"
            for item in sendable:
                if item.key not in finished:
                    resolve(item.key, ProbeOutcome("unprobed", why, item.description))
            return []
        if isinstance(error, ChildHung):
            outcome = ProbeOutcome("hung", f"no progress in {timeout_s:.0f} s in {step}",
                                   by_key[started].description)
        else:
            outcome = ProbeOutcome("crashed", f"{signal_name(error.returncode)} in {step}",
                                   by_key[started].description)
        finished.add(started)
        resolve(started, outcome)
        index = [item.key for item in sendable].index(started)
        return [item for item in sendable[index + 1:] if item.key not in finished]
