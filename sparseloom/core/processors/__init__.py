"""Processors: parsing their specs, discovering them across backends, the default set.

A processor is one backend on one device with its own execution config. Its spec is a string
``<backend>:<device>[?key=value&...]``::

    ov:CPU
    ort:CUDA:0
    ort:CPU?threads=2&cores=0,1
    ov:CPU?cores=2-3&streams=2&PERFORMANCE_HINT=LATENCY
    ort:TensorRT:0?ep.trt_fp16_enable=True&on_fallback=warn

or a TOML table (see :func:`load_processors`)::

    [processors."ort:CPU"]
    threads = 2
    cores = [0, 1]          # or "0-1"
    streams = 1
    options = { "session.intra_op.allow_spinning" = "0" }

``threads``, ``cores`` and ``streams`` set the :class:`~sparseloom.core.types.Processor` fields;
every other key is a backend option (see ``docs/backends.md``). Processors are discovered,
never assumed: each registered backend's ``devices()`` says what really answers. The cores
this process may use are listed, parsed and pinned in :mod:`sparseloom.core.processors.cores`.

Running a model on a processor (:func:`~sparseloom.workload.inference.load_model`,
:func:`~sparseloom.workload.inference.run_batched`) lives in :mod:`sparseloom.workload.inference`.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import attrs

from sparseloom.core.errors import BackendError, ConfigError, UnknownNameError
from sparseloom.core.processors.cores import allowed_cores, parse_cores
from sparseloom.core.types import Processor, as_dict, repeated

_FIELDS = ("threads", "cores", "streams")
#: The option every backend reads when the device asked for does not run the model.
FALLBACK_OPTION = "on_fallback"
FALLBACK_CHOICES = ("error", "warn")


@attrs.frozen
class ProcessorSpec:
    """A parsed processor spec: which processor, and what to override (``None`` = keep)."""

    backend: str
    device: str
    threads: int | None = None
    cores: tuple[int, ...] | None = None
    streams: int | None = None
    options: Mapping[str, str] = attrs.field(factory=dict, converter=as_dict, hash=False)

    @property
    def name(self) -> str:
        """``<backend>:<device>``."""
        return f"{self.backend}:{self.device}"


#: The most threads (or streams) a processor may ask for: per core this process may use (CPU
#: devices), and in all. A few more than cores is worth measuring; more only time-share them
#: (``ort:CPU?threads=2000`` spent minutes on threads before its first call, saying nothing).
THREADS_PER_CORE, MAX_THREADS = 4, 256


def _positive(key: str, value: Any, where: str, device: str = "") -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = 0
    if number < 1 or str(value).strip() not in (str(number), f"{number}.0"):
        raise ConfigError(f"{where}: {key}={value!r} must be a positive integer")
    cores = len(allowed_cores())
    cpu = device.upper().startswith("CPU")
    limit = min(MAX_THREADS, THREADS_PER_CORE * cores) if cpu else MAX_THREADS
    if number > limit:
        why = (f"{THREADS_PER_CORE} per core for the {cores} core(s) this process may use, at "
               f"most {MAX_THREADS}" if cpu else f"at most {MAX_THREADS} for any processor")
        raise ConfigError(f"{where}: {key}={number} is more than {limit} ({why}); they would "
                          f"only time-share the cores and stall; use {key}="
                          f"{min(cores, limit) if cpu else 1} or a few more")
    return number


def parse_processor_spec(spec: str | Mapping[str, Any]) -> ProcessorSpec:
    """Parse a spec string (``ort:CPU?threads=2``) or a TOML-style table with a ``name`` key.

    :raises ConfigError: the spec is malformed, naming the part that is wrong.
    """
    if isinstance(spec, Mapping):
        table = dict(spec)
        name = str(table.pop("name", ""))
        options = dict(table.pop("options", {}) or {})
        settings = table
    elif isinstance(spec, str):
        name, _, query = spec.strip().partition("?")
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError:
            raise ConfigError(f"processor spec {spec!r}: the part after '?' must be "
                              "key=value pairs joined by '&'") from None
        keys = repeated(key for key, _ in pairs)
        if keys:
            given = [f"{k}={v}" for k, v in pairs if k == keys[0]]
            raise ConfigError(f"processor spec {spec!r} sets {keys[0]!r} more than once "
                              f"({' and '.join(given)}); set each key once (several cores go in "
                              f"one list: cores=0,1 or cores=0-1)")
        settings, options = dict(pairs), {}
    else:
        raise ConfigError(f"a processor spec must be a string or a table, got {type(spec)!r}")
    backend, sep, device = name.partition(":")
    if not sep or not backend or not device:
        raise ConfigError(f"processor spec {spec!r} must start with <backend>:<device>, "
                          "e.g. ov:CPU or ort:CUDA:0")
    where = f"processor spec {name}"
    values: dict[str, Any] = {}
    for key, value in settings.items():
        if key in ("threads", "streams"):
            values[key] = _positive(key, value, where, device)
        elif key == "cores":
            values[key] = parse_cores(value)
        else:
            options[key] = value
    options = {str(k): str(v) for k, v in options.items()}
    fallback = options.get(FALLBACK_OPTION)
    if fallback is not None and fallback.strip().lower() not in FALLBACK_CHOICES:
        raise ConfigError(f"{where}: {FALLBACK_OPTION}={fallback!r} is not one of "
                          f"{', '.join(FALLBACK_CHOICES)}")
    return ProcessorSpec(backend, device, options=options, **values)


def check_distinct(specs: Sequence[str | Mapping[str, Any] | Processor], where: str) -> None:
    """Refuse a processor list that names one processor twice (plans key processors by name).

    :raises ConfigError: naming the processor and ``where`` the list came from.
    """
    names = [spec.name if isinstance(spec, Processor) else parse_processor_spec(spec).name
             for spec in specs]
    twice = repeated(names)
    if twice:
        raise ConfigError(f"{where}: processor {', '.join(twice)} is given more than once; "
                          "name each processor once (set its threads and cores in one spec)")


def format_processor_spec(processor: Processor) -> str:
    """The spec string that rebuilds ``processor`` from its discovered base."""
    query = [f"threads={processor.threads}", f"streams={processor.streams}"]
    if processor.cores:
        query.append("cores=" + ",".join(map(str, processor.cores)))
    query += [f"{k}={v}" for k, v in processor.options.items()]
    return f"{processor.name}?{'&'.join(query)}"


# -- discovery -------------------------------------------------------------------------------

#: ``wrap(backend, factory, described)`` → what :func:`get_backend` hands out for ``backend``.
BackendWrapper = Callable[[Any, Callable[[], Any], str], Any]

_backends: dict[str, Any] = {}
_discovered: list[Processor] | None = None
_seen_registry: object = None
_wrap: BackendWrapper | None = None
_lock = threading.RLock()


def set_backend_wrapper(wrap: BackendWrapper | None) -> None:
    """Hand out every backend as ``wrap(backend, its factory, its runtime described)`` from now
    on (``None``: as it is). ``import sparseloom`` installs the crash guard,
    :func:`sparseloom.isolation.guard.guard`, so core never imports the layer above it."""
    global _wrap
    with _lock:
        _wrap = wrap
        _backends.clear()


def _sync_with_registry() -> Any:
    """The current registry; backends and discovery are rebuilt when it was replaced."""
    global _discovered, _seen_registry
    from sparseloom.core.registry import get_registry

    registry = get_registry()
    if registry is not _seen_registry:
        _backends.clear()
        _discovered = None
        _seen_registry = registry
    return registry


def get_backend(name: str) -> Any:
    """The process-wide instance of the backend registered as ``name``, behind the crash guard
    (:mod:`sparseloom.isolation`, installed by :func:`set_backend_wrapper`: the first compile,
    load and run of each new combination happens in a child process, so a native crash cannot
    end this one)."""
    with _lock:
        registry = _sync_with_registry()
        if name not in _backends:
            registration = registry.get("backend", name)
            backend = registry.build(registration)
            version = getattr(backend, "runtime_version", None)
            described = (str(version()) if callable(version) else
                         f"{registration.distribution} {registration.version}".strip())
            _backends[name] = backend if _wrap is None else _wrap(
                backend, registration.factory, described)
        return _backends[name]


def discover_processors(refresh: bool = False) -> list[Processor]:
    """Every processor of every registered backend, available or not, with default cores.

    This is the backend contract for CPU devices: a processor whose device starts with ``CPU``
    and that the backend returned without ``cores`` gets one thread, pinned to a core of its
    own in discovery order (``ov:CPU`` on the first usable core, ``ort:CPU`` on the second,
    ...). A backend that wants something else returns ``cores`` (and ``threads``) itself. A
    backend whose discovery fails is listed as ``<backend>:*``, unavailable, with the error as
    its reason. Cached per process.
    """
    global _discovered
    with _lock:
        registry = _sync_with_registry()
        if _discovered is not None and not refresh:
            return list(_discovered)
        found: list[Processor] = []
        for registration in registry.backends():
            try:
                found.extend(get_backend(registration.name).devices())
            except Exception as error:
                found.append(Processor(f"{registration.name}:*", registration.name, "*",
                                       available=False,
                                       reason=f"discovery failed: {type(error).__name__}: {error}"))
        cores = allowed_cores()
        cpu_index = 0
        for index, processor in enumerate(found):
            if processor.device.upper().startswith("CPU") and not processor.cores:
                core = cores[cpu_index % len(cores)]
                pinned: dict[str, Any] = {"cores": (core,), "threads": 1}
                found[index] = attrs.evolve(processor, **pinned)
                cpu_index += 1
        _discovered = found
        return list(found)


def builtin_backends() -> set[str]:
    """Names of the backends sparseloom itself ships (distribution ``sparseloom``)."""
    with _lock:
        registry = _sync_with_registry()
    return {r.name for r in registry.backends() if r.distribution == "sparseloom"}


#: The precision the default set asks of OpenVINO's CPU processor where OpenVINO's own default
#: on that CPU is it; on other CPUs (OpenVINO's f32, or f16 on ARM) the backend's f32 stays.
DEFAULT_PRECISION_HINT = "bf16"


def default_processors() -> list[Processor]:
    """The processors used when none are named, by every command and the demo: the available
    processors of the built-in backends, OpenVINO's CPU processor computing in the precision
    OpenVINO itself picks for this CPU (:func:`openvino_cpu_precision`: bf16 on a CPU with AMX
    or AVX512-BF16, where the profile measures its accuracy as served), else f32.

    Installing a third-party backend does not change this set (nor, with it, the default
    number of subgraphs S and the zoos it selects): its processors are opt-in, by naming them
    (``--processor``, or ``processors = [...]`` in the workload file). On a CPU-only machine
    the default set is ``ov:CPU`` (core 0) and ``ort:CPU`` (core 1), one thread each; naming
    ``-p ov:CPU -p ort:CPU`` keeps OpenVINO in f32 on a bf16 CPU.
    """
    builtin = builtin_backends()
    found = [p for p in discover_processors() if p.available and p.backend in builtin]
    hint = {"INFERENCE_PRECISION_HINT": DEFAULT_PRECISION_HINT}
    return [attrs.evolve(p, options={**p.options, **hint}) if _computes_bf16_by_default(p) else p
            for p in found]


def _computes_bf16_by_default(processor: Processor) -> bool:
    """Whether ``processor`` is OpenVINO's CPU, with no precision named, on a CPU where
    OpenVINO computes bf16 by default."""
    return (processor.backend == "ov" and processor.device.upper() == "CPU"
            and "INFERENCE_PRECISION_HINT" not in processor.options
            and openvino_cpu_precision() == DEFAULT_PRECISION_HINT)


@functools.cache
def openvino_cpu_precision() -> str:
    """OpenVINO's default ``INFERENCE_PRECISION_HINT`` on CPU (``bf16``, ``f32``, ...), or ``""``
    when OpenVINO or its CPU device is not there (asked once per process)."""
    try:
        import openvino

        hint = openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    except Exception:  # no OpenVINO, no CPU plugin: the default set says what runs
        return ""
    return str(hint.get_type_name())  # an openvino.Type: "bf16", "f32", "f16"


def get_processor(
    spec: str | Mapping[str, Any] | Processor, *, require_available: bool = True
) -> Processor:
    """The discovered processor named by ``spec``, with the spec's overrides applied.

    :raises UnknownNameError: no discovered processor has that name (the message lists them).
    :raises BackendError: it exists but is unavailable (with the reason), when required.
    :raises ConfigError: the spec is malformed or names cores this process cannot use.
    """
    if isinstance(spec, Processor):
        return spec
    parsed = parse_processor_spec(spec)
    known = discover_processors()
    base = next((p for p in known if p.name == parsed.name), None)
    if base is None:
        base = next((p for p in known if p.name.lower() == parsed.name.lower()), None)
    failed = next((p for p in known if p.name == f"{parsed.backend}:*"), None)
    if base is None and failed is not None:  # its backend's discovery raised
        raise BackendError(f"processor {parsed.name!r}: backend {parsed.backend!r} could not "
                           f"list its devices ({failed.reason})")
    if base is None:
        names = ", ".join(p.name for p in known) or "none"
        raise UnknownNameError(f"unknown processor {parsed.name!r}; known processors: {names}. "
                               "Run `sparseloom devices` to see what this machine has.")
    if require_available and not base.available:
        raise BackendError(f"processor {base.name} is not available: {base.reason}")
    changes: dict[str, Any] = {}
    for field in _FIELDS:
        if getattr(parsed, field) is not None:
            changes[field] = getattr(parsed, field)
    if parsed.options:
        changes["options"] = {**base.options, **parsed.options}
    processor = attrs.evolve(base, **changes) if changes else base
    # A backend that knows its option keys refuses unknown ones here, before any work, rather
    # than ignoring a typo; backends without ``check_options`` pass their options through.
    check_options = getattr(get_backend(processor.backend), "check_options", None)
    if callable(check_options):
        check_options(processor)
    bad = sorted(set(processor.cores) - set(allowed_cores()))
    if bad:
        raise ConfigError(f"processor {processor.name}: core(s) {bad} are not usable by this "
                          f"process; usable cores: {list(allowed_cores())}")
    _warn_oversubscribed(processor)
    return processor


_oversubscribed: set[tuple[str, int, int]] = set()


def _warn_oversubscribed(processor: Processor) -> None:
    """One ``Warning:`` line (once per process) for a CPU processor with more threads than this
    process has cores: the threads time-share the cores and every call waits for the last
    one (``ort:CPU?threads=99`` on 2 cores ran 200x slower here)."""
    if not processor.device.upper().startswith("CPU"):
        return
    cores = len(allowed_cores())
    key = (processor.name, processor.threads, cores)
    if processor.threads <= cores or key in _oversubscribed:
        return
    _oversubscribed.add(key)
    print(f"Warning: processor {processor.name} asks for {processor.threads} threads; this "
          f"process may use {cores} core(s): they time-share the cores and each call waits for the "
          f"slowest, many times slower; use threads={cores} or fewer", file=sys.stderr,
          flush=True)


def load_processors(path: str | os.PathLike[str]) -> list[Processor]:
    """Processors from a TOML file's ``[processors."<name>"]`` tables (see the module doc)."""
    import tomllib

    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read processors from {str(path)!r}: {error}") from None
    tables = document.get("processors")
    if not isinstance(tables, Mapping) or not tables:
        raise ConfigError(f"{str(path)!r} has no [processors.\"<backend>:<device>\"] tables")
    return [get_processor({"name": name, **dict(table)}) for name, table in tables.items()]


def openvino_precision(processors: Sequence[Processor]) -> str:
    """The inference precision of the (first) OpenVINO CPU processor among ``processors``:
    its ``INFERENCE_PRECISION_HINT``, else f32 (what sparseloom's OpenVINO backend sets)."""
    for processor in processors:
        if processor.backend == "ov" and processor.device.startswith("CPU"):
            return str(processor.options.get("INFERENCE_PRECISION_HINT", "f32"))
    return "f32"
