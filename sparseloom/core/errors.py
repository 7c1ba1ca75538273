"""Exceptions raised by sparseloom.

Every error says what was wrong, where, and what to do. The CLI prints ``str(error)`` for any
:class:`SparseloomError` and exits non-zero without a traceback.
"""

from __future__ import annotations


class SparseloomError(Exception):
    """Base class of every error sparseloom raises on purpose."""


class PluginError(SparseloomError):
    """A plugin could not be loaded or registered, or a name is unknown or taken twice."""


class UnknownNameError(PluginError, LookupError):
    """A backend, compressor, estimator, policy or workload name is not registered."""


class ConfigError(SparseloomError, ValueError):
    """A workload file, processor spec or option is malformed."""


class BackendError(SparseloomError):
    """A backend failed to compile, load or run a model."""


class DeviceFallbackError(BackendError):
    """A model asked for an accelerator but really runs somewhere else (silent fallback)."""


class ZooError(SparseloomError):
    """The subgraph zoo is misaligned, corrupted or asked for something it does not hold."""


class ProfileError(SparseloomError):
    """Profiling or estimation failed, or was given too little data."""


class CompressionError(SparseloomError, ValueError):
    """A compressor was given a level it does not support, or a subgraph it cannot compress."""
